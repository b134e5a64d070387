"""module_utils/stack_layer.py: the one decision behind every query of a layer's record.

The module on the host and its action plugin on the controller both answer with these functions,
so what is held here is what a rerun does: build, adopt, look again, or leave a layer alone."""

from __future__ import annotations

import pytest
from ansible.module_utils.stack_layer import decide, outcome, parse_rebuild, query_facts, required_view, verdict

LAYERS = ["preflight", "cuda", "cudnn", "apex"]


# -- the user's rebuild (and verify) request -------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("", set()),
        (None, set()),
        (False, set()),  # what `-e rebuild=` leaves after a default(false)
        ("cuda", {"cuda"}),
        ("cuda, cudnn", {"cuda", "cudnn"}),
        (["cudnn"], {"cudnn"}),
        ([" cuda ", "", "  "], {"cuda"}),  # blanks from a trailing comma or a YAML list are nothing
        ("cuda,,", {"cuda"}),
        ("all", set(LAYERS)),
        ("cudnn,all", set(LAYERS)),  # all among others is still all
    ],
)
def test_parse_rebuild(raw, expected):
    assert parse_rebuild(raw, LAYERS) == expected


def test_parse_rebuild_refuses_unknown_layers_naming_them_and_the_valid_ones():
    with pytest.raises(ValueError) as refused:
        parse_rebuild("b,a,cuda", LAYERS)
    assert (
        str(refused.value)
        == "rebuild names unknown layer(s) a, b; valid names are preflight, cuda, cudnn, apex, or 'all'"
    )
    with pytest.raises(ValueError, match=r"unknown layer\(s\) cdua;"):
        parse_rebuild(["cdua"], LAYERS)


# -- decide: build or not, and the most specific reason -----------------------------------------

COMPLETE = {"status": "complete", "inputs": {"v": 1}, "requires": {"cuda": "a"}}


@pytest.mark.parametrize(
    "previous, requested, inputs, deps, expected",
    [
        ({}, False, {"v": 1}, {}, (True, "absent")),
        ({}, True, {"v": 1}, {}, (True, "absent")),  # nothing recorded: a request changes nothing
        ({"status": "building"}, False, {"v": 1}, {}, (True, "incomplete")),
        ({"status": "unreadable"}, True, {"v": 1}, {}, (True, "incomplete")),
        (COMPLETE, True, {"v": 1}, {"cuda": "a"}, (True, "requested")),
        (COMPLETE, True, {"v": 2}, {"cuda": "b"}, (True, "requested")),  # the request comes first
        (COMPLETE, False, {"v": 2}, {"cuda": "b"}, (True, "inputs_changed")),  # then the inputs
        (COMPLETE, False, {"v": 1}, {"cuda": "b"}, (True, "dependency_changed")),
        (COMPLETE, False, {"v": 1}, {}, (True, "dependency_changed")),  # a requirement dropped
        (COMPLETE, False, {"v": 1}, {"cuda": "a"}, (False, "unchanged")),
        # A record of a layer that requires nothing may omit requires.
        ({"status": "complete", "inputs": {"v": 1}}, False, {"v": 1}, {}, (False, "unchanged")),
    ],
)
def test_decide(previous, requested, inputs, deps, expected):
    assert decide(previous, inputs, deps, requested) == expected


# -- verdict: must the layer be built whatever the host has, must it look ----------------------


@pytest.mark.parametrize(
    "build, reason, stale, verify, expected",
    [
        (True, "absent", [], False, (False, True, "absent")),  # may adopt what the host has
        (True, "absent", ["/opt/x"], True, (False, True, "absent")),
        (True, "incomplete", [], False, (True, False, "incomplete")),
        (True, "incomplete", ["/opt/x"], False, (True, False, "incomplete")),  # built anyway, no look first
        (True, "requested", [], True, (True, True, "requested")),
        (True, "inputs_changed", [], False, (True, False, "inputs_changed")),
        (False, "unchanged", [], False, (False, False, "unchanged")),  # a clean rerun looks at nothing
        (False, "unchanged", [], True, (False, True, "unchanged")),
        (False, "unchanged", ["/opt/x"], False, (False, True, "files_changed")),
        (False, "unchanged", ["/opt/x"], True, (False, True, "files_changed")),
    ],
)
def test_verdict(build, reason, stale, verify, expected):
    assert verdict(build, reason, stale, verify) == expected


# -- what the summary and later layers read --------------------------------------------------------


def test_outcome_says_built_the_first_time_rebuilt_after_that_unchanged_when_nothing_was_built():
    assert outcome({}, True) == "built"
    assert outcome({"status": "building"}, True) == "built"  # a first build that was interrupted
    assert outcome({"fingerprint": "x"}, True) == "rebuilt"
    assert outcome({"fingerprint": "x"}, False) == "unchanged"
    assert outcome({}, False) == "unchanged"


def test_required_view_gives_later_layers_what_they_may_read_and_nothing_else():
    records = {
        "cuda": {
            "status": "complete",
            "version": "11.8.89",
            "details": {"host_compiler": "/usr/bin/g++-11"},
            "fingerprint": "77a8",
            "built_at": "2026-12-01T10:00:00Z",
            "inputs": {"v": 1},
            "files": {},
        },
        "preflight": {"status": "complete"},
    }
    assert required_view(records) == {
        "cuda": {
            "version": "11.8.89",
            "details": {"host_compiler": "/usr/bin/g++-11"},
            "fingerprint": "77a8",
            "built_at": "2026-12-01T10:00:00Z",
        },
        "preflight": {"version": None, "details": None, "fingerprint": None, "built_at": None},
    }
    assert required_view({}) == {}


def test_query_facts_start_the_summary_s_clock_and_call_a_complete_layer_unchanged():
    complete = query_facts("cuda", {"status": "complete", "version": "11.8.89"}, 1796191815.84)
    assert complete == {
        "stack_layer_cuda_started": 1796191815.84,
        "stack_layer_cuda": {"version": "11.8.89", "outcome": "unchanged"},
    }
    # A record without a version (or with a number) gives the summary a string all the same.
    assert query_facts("apex", {"status": "complete"}, 1.0)["stack_layer_apex"] == {
        "version": "",
        "outcome": "unchanged",
    }
    assert query_facts("apex", {"status": "complete", "version": 2}, 1.0)["stack_layer_apex"]["version"] == "2"
    # Nothing recorded, or a layer still building: only the start, the layer has yet to say how it ended.
    assert query_facts("cuda", {}, 2.0) == {"stack_layer_cuda_started": 2.0}
    assert query_facts("cuda", {"status": "building", "version": "1"}, 2.0) == {"stack_layer_cuda_started": 2.0}
