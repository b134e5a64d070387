"""The layer_state module: when a layer builds, and what it records."""

from __future__ import annotations

import json
import time
import sys
from pathlib import Path

import pytest
from conftest import play_results, run_module

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "library"))
import layer_state as ls  # noqa: E402

LAYERS = ["preflight", "cuda", "cudnn", "apex"]


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("", set()),
        (None, set()),
        ("cuda", {"cuda"}),
        ("cuda, cudnn", {"cuda", "cudnn"}),
        (["cudnn"], {"cudnn"}),
        ("all", set(LAYERS)),
    ],
)
def test_parse_rebuild(raw, expected):
    assert ls.parse_rebuild(raw, LAYERS) == expected


def test_parse_rebuild_refuses_unknown_layers():
    with pytest.raises(ValueError, match="unknown layer.*cdua.*valid names are preflight, cuda"):
        ls.parse_rebuild("cuda,cdua", LAYERS)


@pytest.mark.parametrize(
    "previous, requested, inputs, deps, expected",
    [
        ({}, False, {"v": 1}, {}, (True, "absent")),
        ({"status": "building"}, False, {"v": 1}, {}, (True, "incomplete")),
        ({"status": "unreadable"}, False, {"v": 1}, {}, (True, "incomplete")),
        ({"status": "complete", "inputs": {"v": 1}, "requires": {}}, True, {"v": 1}, {}, (True, "requested")),
        ({"status": "complete", "inputs": {"v": 1}, "requires": {}}, False, {"v": 2}, {}, (True, "inputs_changed")),
        (
            {"status": "complete", "inputs": {"v": 1}, "requires": {"cuda": "a"}},
            False,
            {"v": 1},
            {"cuda": "b"},
            (True, "dependency_changed"),
        ),
        (
            {"status": "complete", "inputs": {"v": 1}, "requires": {"cuda": "a"}},
            False,
            {"v": 1},
            {"cuda": "a"},
            (False, "unchanged"),
        ),
    ],
)
def test_decide(previous, requested, inputs, deps, expected):
    assert ls.decide(previous, inputs, deps, requested) == expected


def test_outcome():
    assert ls.outcome({}, True) == "built"
    assert ls.outcome({"fingerprint": "x"}, True) == "rebuilt"
    assert ls.outcome({"fingerprint": "x"}, False) == "unchanged"


def test_read_state_treats_garbage_as_incomplete(tmp_path):
    path = tmp_path / "cuda.json"
    path.write_text("{not json")
    assert ls.read_state(str(path)) == {"status": "unreadable"}
    assert ls.read_state(str(tmp_path / "none.json")) == {}


def module(tmp_path: Path, check: bool = False, **args) -> dict:
    """Run the module through Ansible, as a playbook would."""
    args.setdefault("state_dir", str(tmp_path / "layers"))
    args.setdefault("layers", LAYERS)
    return run_module("layer_state", args, check)


def test_lifecycle_through_ansible(tmp_path):
    inputs = {"version": "11.8.0", "sha256": "ab" * 32}
    first = module(tmp_path, name="cuda", inputs=inputs)
    assert first["build"] and first["reason"] == "absent" and not first["changed"]

    assert module(tmp_path, name="cuda", state="building")["changed"]
    assert json.loads((tmp_path / "layers/cuda.json").read_text())["status"] == "building"
    assert module(tmp_path, name="cuda", inputs=inputs)["reason"] == "incomplete"

    done = module(tmp_path, name="cuda", state="present", inputs=inputs, version="11.8.89")
    assert done["changed"]
    fact = done["ansible_facts"]["stack_layer_cuda"]
    assert {key: fact[key] for key in ("version", "outcome")} == {"version": "11.8.89", "outcome": "built"}
    # The summary's seconds: the query's start before, the record's end after (the host's clock).
    assert first["ansible_facts"]["stack_layer_cuda_started"] <= fact["finished"] <= time.time() + 1
    cuda_print = done["fingerprint"]

    again = module(tmp_path, name="cuda", inputs=inputs)
    assert not again["build"] and again["reason"] == "unchanged" and not again["probe"]
    same = module(tmp_path, name="cuda", state="present", inputs=inputs, version="11.8.89", built=False)
    assert not same["changed"] and same["fingerprint"] == cuda_print
    assert same["ansible_facts"]["stack_layer_cuda"]["outcome"] == "unchanged"

    # cudnn builds on cuda: a rebuilt cuda gets a new fingerprint, and cudnn follows.
    module(tmp_path, name="cudnn", state="present", requires=["cuda"], inputs={"v": 1})
    assert module(tmp_path, name="cudnn", requires=["cuda"], inputs={"v": 1})["reason"] == "unchanged"
    assert module(tmp_path, name="cuda", inputs=inputs, rebuild="cuda")["reason"] == "requested"
    rebuilt = module(tmp_path, name="cuda", state="present", inputs=inputs, version="11.8.89")
    assert rebuilt["fingerprint"] != cuda_print
    assert rebuilt["ansible_facts"]["stack_layer_cuda"]["outcome"] == "rebuilt"
    assert module(tmp_path, name="cudnn", requires=["cuda"], inputs={"v": 1})["reason"] == "dependency_changed"

    assert module(tmp_path, name="cuda", inputs={"version": "12.1"})["reason"] == "inputs_changed"


def test_check_mode_writes_nothing(tmp_path):
    result = module(tmp_path, check=True, name="cuda", state="present", inputs={"v": 1})
    assert result["changed"]
    assert not (tmp_path / "layers").exists()


def test_bad_arguments_fail_clearly(tmp_path):
    unknown = module(tmp_path, name="cdua")
    assert unknown["_rc"] != 0 and "unknown layer(s) cdua" in unknown["msg"]
    bad = module(tmp_path, name="cuda", rebuild="cuda,nope")
    assert bad["_rc"] != 0 and "rebuild names unknown layer(s) nope" in bad["msg"]


@pytest.mark.parametrize(
    "build, reason, stale, verify, expected",
    [
        (True, "absent", [], False, (False, True, "absent")),  # may adopt what the host has
        (True, "incomplete", [], False, (True, False, "incomplete")),
        (True, "requested", [], True, (True, True, "requested")),
        (False, "unchanged", [], False, (False, False, "unchanged")),  # a clean rerun looks at nothing
        (False, "unchanged", [], True, (False, True, "unchanged")),
        (False, "unchanged", ["/opt/x"], False, (False, True, "files_changed")),
    ],
)
def test_verdict(build, reason, stale, verify, expected):
    assert ls.verdict(build, reason, stale, verify) == expected


def test_changed_files(tmp_path):
    kept, touched, gone = (tmp_path / name for name in ("kept", "touched", "gone"))
    for path in (kept, touched, gone):
        path.write_text("x")
    recorded = ls.file_facts([str(kept), str(touched), str(gone)])
    assert ls.changed_files(recorded, sorted(recorded)) == []
    touched.write_text("xy")
    gone.unlink()
    unrecorded = str(tmp_path / "new")
    assert ls.changed_files(recorded, [*sorted(recorded), unrecorded]) == sorted([str(touched), str(gone), unrecorded])


def test_recorded_files_decide_a_rerun(tmp_path):
    marker = tmp_path / "toolkit" / "version.json"
    marker.parent.mkdir()
    marker.write_text("{}")
    args = dict(name="cuda", inputs={"v": 1}, files=[str(marker)])
    done = module(tmp_path, state="present", version="11.8.89", **args)
    assert json.loads((tmp_path / "layers/cuda.json").read_text())["files"][str(marker)][0] == "file"

    clean = module(tmp_path, **args)
    assert (clean["build"], clean["rebuild"], clean["probe"], clean["reason"]) == (False, False, False, "unchanged")
    assert clean["ansible_facts"]["stack_layer_cuda"] == {"version": "11.8.89", "outcome": "unchanged"}
    assert isinstance(clean["ansible_facts"]["stack_layer_cuda_started"], float)

    marker.write_text('{"cuda": {}}')
    stale = module(tmp_path, **args)
    assert (stale["build"], stale["rebuild"], stale["probe"]) == (False, False, True)
    assert stale["reason"] == "files_changed" and stale["changed_files"] == [str(marker)]

    # Looked at and found sound: the stat is refreshed, the fingerprint (what dependents see) is not.
    kept = module(tmp_path, state="present", version="11.8.89", built=False, **args)
    assert kept["changed"] and kept["fingerprint"] == done["fingerprint"]
    assert module(tmp_path, **args)["reason"] == "unchanged"

    marker.unlink()
    assert module(tmp_path, **args)["changed_files"] == [str(marker)]


def test_a_confirm_keeps_the_details_unless_told_to_update_them(tmp_path):
    args = dict(name="cuda", inputs={"v": 1})
    built = module(tmp_path, state="present", version="24.11", details={"config": "a"}, **args)
    kept = module(tmp_path, state="present", version="24.11", built=False, details={"config": "b"}, **args)
    assert not kept["changed"] and kept["fingerprint"] == built["fingerprint"]
    assert module(tmp_path, **args)["previous"]["details"] == {"config": "a"}
    updated = module(
        tmp_path, state="present", version="24.11", built=False, details={"config": "b"}, update_details=True, **args
    )
    assert updated["changed"] and updated["fingerprint"] == built["fingerprint"]
    record = module(tmp_path, **args)["previous"]
    assert record["details"] == {"config": "b"} and record["built_at"]
    again = module(
        tmp_path, state="present", version="24.11", built=False, details={"config": "b"}, update_details=True, **args
    )
    assert not again["changed"]


def test_a_record_without_files_is_probed_once(tmp_path):
    module(tmp_path, state="present", name="cuda", inputs={"v": 1})
    record = json.loads((tmp_path / "layers/cuda.json").read_text())
    assert record["files"] == {}
    del record["files"]  # as an older version wrote it
    (tmp_path / "layers/cuda.json").write_text(json.dumps(record))
    old = module(tmp_path, name="cuda", inputs={"v": 1})
    assert old["probe"] and not old["rebuild"] and old["reason"] == "unchanged"
    assert module(tmp_path, state="present", name="cuda", inputs={"v": 1}, built=False)["changed"]
    assert not module(tmp_path, name="cuda", inputs={"v": 1})["probe"]


def test_verify_request(tmp_path):
    module(tmp_path, state="present", name="cuda", inputs={"v": 1})
    assert not module(tmp_path, name="cuda", inputs={"v": 1})["probe"]
    for request in ("cuda", "all", True, "yes", ["cudnn", "cuda"]):
        assert module(tmp_path, name="cuda", inputs={"v": 1}, verify=request)["probe"], request
    assert not module(tmp_path, name="cuda", inputs={"v": 1}, verify="cudnn")["probe"]
    bad = module(tmp_path, name="cuda", verify="cdua")
    assert bad["_rc"] != 0 and "verify names unknown layer(s) cdua" in bad["msg"]


def test_required_layers(tmp_path):
    missing = module(tmp_path, name="cudnn", requires=["cuda"])
    assert missing["_rc"] != 0
    assert "needs the cuda layer(s)" in missing["msg"] and "--tags cuda,cudnn" in missing["msg"]
    # check mode on a new host reports the build instead of stopping
    assert module(tmp_path, check=True, name="cudnn", requires=["cuda"])["build"]

    module(tmp_path, state="present", name="cuda", version="11.8.89", details={"host_compiler": "/usr/bin/g++-11"})
    found = module(tmp_path, name="cudnn", requires=["cuda"])
    assert found["_rc"] == 0
    assert found["required"]["cuda"]["version"] == "11.8.89"
    assert found["required"]["cuda"]["details"] == {"host_compiler": "/usr/bin/g++-11"}
    # a layer marked building is not complete either
    module(tmp_path, state="building", name="cuda")
    assert module(tmp_path, name="cudnn", requires=["cuda"])["_rc"] != 0


def dirs(tmp_path: Path) -> dict:
    return {"state_dir": str(tmp_path / "layers"), "layers": LAYERS}


def test_diff_mode_shows_the_state_file(tmp_path):
    state = tmp_path / "layers" / "cuda.json"
    plain = module(tmp_path, name="cuda", state="building", run="run-a")
    assert plain["changed"] and "diff" not in plain  # no diff unless asked for
    state.unlink()

    marking = run_module("layer_state", dict(name="cuda", state="building", run="run-a", **dirs(tmp_path)), diff=True)
    assert marking["diff"]["before"] == "{}\n" and marking["diff"]["before_header"] == str(state)
    assert json.loads(marking["diff"]["after"]) == {"name": "cuda", "status": "building", "run": "run-a"}
    assert marking["diff"]["after"] == state.read_text()  # the diff is the file's own change

    args = dict(name="cuda", state="present", run="run-a", version="11.8.89", inputs={"v": 1}, **dirs(tmp_path))
    preview = run_module("layer_state", args, check=True, diff=True)
    assert json.loads(preview["diff"]["before"])["status"] == "building"
    assert json.loads(preview["diff"]["after"])["status"] == "complete"
    assert json.loads(state.read_text())["status"] == "building"  # check mode wrote nothing
    done = run_module("layer_state", args, diff=True)
    assert done["diff"]["after"] == state.read_text()


def test_state_is_written_durably_and_whole(tmp_path, monkeypatch):
    """Through module_utils/stack_files.atomic_write: file and directory fsynced, mode 0644 whatever
    the umask, and a write that fails half way leaves the previous record and no temporary file."""
    import os

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink("/proc/self/fd/%d" % fd)) or real_fsync(fd))
    path = tmp_path / "layers" / "cuda.json"
    old_umask = os.umask(0o077)
    try:
        ls.write_state(str(path), {"status": "complete", "name": "cuda"})
    finally:
        os.umask(old_umask)
    assert json.loads(path.read_text()) == {"status": "complete", "name": "cuda"}
    assert path.stat().st_mode & 0o777 == 0o644
    assert str(tmp_path / "layers") in synced and any(name.startswith(str(path.parent) + "/.") for name in synced)

    def broken_replace(src, dst, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        ls.write_state(str(path), {"status": "building", "name": "cuda"})
    assert json.loads(path.read_text())["status"] == "complete"
    assert sorted(p.name for p in path.parent.iterdir()) == ["cuda.json"]


# -- the snapshot: one call per stage, a no-op query answered on the controller -----------------


def playbook_results(tmp_path: Path, tasks: list[dict], run: str = "run-a") -> list[dict]:
    """Every task's result, in order, of one play on localhost with the stage playbooks' module_defaults."""
    defaults = {"layer_state": {"state_dir": str(tmp_path / "layers"), "layers": LAYERS, "run": run}}
    return play_results(tmp_path, tasks, module_defaults=defaults)


# Keys Ansible adds to a result that names an existing file (the state file), on the host only.
PATH_INFO = {"uid", "gid", "owner", "group", "mode", "size", "state", "secontext"}


def test_a_noop_query_is_answered_from_the_snapshot_and_only_then(tmp_path: Path):
    marker = tmp_path / "toolkit" / "version.json"
    marker.parent.mkdir()
    marker.write_text("{}")
    cuda = {"name": "cuda", "inputs": {"v": 1}}
    cudnn = {"name": "cudnn", "inputs": {"v": 2}, "requires": ["cuda"]}
    query_cuda = {"layer_state": dict(cuda, files=[str(marker)])}
    query_cudnn = {"layer_state": cudnn}
    snapshot = {"layer_state": {"state": "snapshot"}}
    first = playbook_results(
        tmp_path,
        [
            {"layer_state": dict(cuda, state="present", version="11.8.89", files=[str(marker)])},
            {"layer_state": dict(cudnn, state="present", version="8.9.7")},
            snapshot,
            query_cuda,
            query_cudnn,
        ],
    )
    local_cuda, local_cudnn = first[3], first[4]
    assert local_cuda["from_snapshot"] and local_cudnn["from_snapshot"]
    # The answer from the snapshot is the module's own, key for key: the same query asked of the
    # host in a run without a snapshot.
    (remote,) = playbook_results(tmp_path, [query_cuda])
    assert "from_snapshot" not in remote
    skip = {"from_snapshot", "ansible_facts", "invocation", "action"} | PATH_INFO
    assert {k: v for k, v in local_cuda.items() if k not in skip and not k.startswith("_ansible")} == {
        k: v for k, v in remote.items() if k not in skip and not k.startswith("_ansible")
    }
    assert local_cuda["ansible_facts"]["stack_layer_cuda"] == remote["ansible_facts"]["stack_layer_cuda"]
    assert set(local_cudnn["required"]["cuda"]) == {"version", "details", "fingerprint", "built_at"}

    later = playbook_results(
        tmp_path,
        [
            snapshot,
            {"layer_state": dict(cuda, inputs={"v": 9})},  # 1: other inputs: the host decides
            {"layer_state": dict(cuda, rebuild="cuda")},  # 2: a request: the host decides
            {"layer_state": dict(cuda, verify="all")},  # 3: the same
            {"file": {"path": str(marker), "state": "touch", "modification_time": "202001010000.00"}},
            # 5: the snapshot's stat predates the touch (only a layer's own record, which empties the
            # snapshot, changes files during a stage): it still says unchanged
            query_cuda,
            snapshot,
            query_cuda,  # 7: a new snapshot sees the touched file: the host looks again
            {"layer_state": dict(cuda, state="present", version="11.8.89", files=[str(marker)])},
            query_cudnn,  # 9: a record changed in this run: the host decides (cuda's new fingerprint)
        ],
    )
    assert [bool(later[i].get("from_snapshot")) for i in (1, 2, 3, 5, 7, 9)] == [False] * 3 + [True] + [False] * 2
    assert [later[i]["reason"] for i in (1, 2, 3)] == ["inputs_changed", "requested", "unchanged"]
    assert later[3]["probe"]
    assert (later[7]["reason"], later[7]["probe"]) == ("files_changed", True)
    assert later[8]["ansible_facts"]["stack_layer_snapshot"] == {}
    assert later[9]["reason"] == "dependency_changed"

    # Another run never takes this run's snapshot for its own (a fact cache would keep it).
    again = playbook_results(tmp_path, [snapshot, query_cuda, query_cuda], run="run-b")
    assert again[1]["from_snapshot"]
    stale = {"layer_state": dict(query_cuda["layer_state"], run="run-c")}
    assert "from_snapshot" not in playbook_results(tmp_path, [snapshot, stale], run="run-b")[1]


# -- the host lock: a run that does not hold it reads and changes no layer ---------------------


def test_only_the_run_that_marked_a_layer_completes_it(tmp_path):
    args = {"name": "cuda", "state_dir": str(tmp_path), "layers": ["preflight", "cuda"]}
    assert run_module("layer_state", dict(args, state="building", run="run-a"))["_rc"] == 0
    other = run_module("layer_state", dict(args, state="present", run="run-b", version="1"))
    assert other["_rc"] != 0 and "marked building by run run-a, not by this run (run-b)" in other["msg"]
    assert json.loads((tmp_path / "cuda.json").read_text())["status"] == "building"
    assert run_module("layer_state", dict(args, state="present", run="run-a", version="1"))["_rc"] == 0
    assert json.loads((tmp_path / "cuda.json").read_text())["status"] == "complete"


@pytest.mark.parametrize(
    "content, held",
    [
        (None, "nobody holds it"),
        ('{"id": "run-b"}', "run run-b holds it"),
        ("{not json", "it cannot be read"),
        ('{"pid": 1}', "it names no run"),
        ('{"id": "run-a"}', None),
    ],
)
def test_lock_refusal(tmp_path, content, held):
    lock = tmp_path / "run.lock"
    if content is not None:
        lock.write_text(content)
    refusal = ls.lock_refusal(str(lock), "run-a")
    if held is None:
        assert refusal is None
    else:
        assert "this run (run-a) does not hold the host's run lock %s (%s" % (lock, held) in refusal
        assert "--skip-tags always, --start-at-task" in refusal
    assert ls.lock_refusal(str(lock), "") is not None  # no run id never holds a lock


def test_a_run_without_the_lock_changes_no_layer(tmp_path):
    """--skip-tags always or --start-at-task skipped the stage's lock tasks: every call that could lead
    to a change refuses, and nothing is written; check mode, which takes no lock, still answers."""
    lock = tmp_path / "run.lock"
    args = {"name": "cuda", "run": "run-a", "lock_file": str(lock), "inputs": {"v": 1}}
    for state in ("building", "present", "query", "snapshot"):
        refused = module(tmp_path, **dict(args, state=state))
        assert refused["_rc"] != 0, state
        assert "does not hold the host's run lock %s (nobody holds it)" % lock in refused["msg"]
    assert not (tmp_path / "layers").exists()
    looked = module(tmp_path, check=True, **dict(args, state="building"))
    assert looked["_rc"] == 0 and looked["changed"] and not (tmp_path / "layers").exists()
    # Another run took the lock over (-e break_lock) while this one ran: it stops at its next layer call.
    lock.write_text(json.dumps({"id": "run-b"}))
    assert "(run run-b holds it)" in module(tmp_path, **dict(args, state="building"))["msg"]
    lock.write_text(json.dumps({"id": "run-a"}))
    assert module(tmp_path, **dict(args, state="building"))["_rc"] == 0
    assert json.loads((tmp_path / "layers/cuda.json").read_text())["run"] == "run-a"
