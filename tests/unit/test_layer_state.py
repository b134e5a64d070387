"""The layer_state module: when a layer builds, and what it records."""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import play_results, run_module

import layer_state as ls

REPO = Path(__file__).resolve().parents[2]

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


def through_ansible(tmp_path: Path, check: bool = False, **args) -> dict:
    """Run the module through Ansible, as a playbook would."""
    args.setdefault("state_dir", str(tmp_path / "layers"))
    args.setdefault("layers", LAYERS)
    return run_module("layer_state", args, check)


def module(tmp_path: Path, check: bool = False, **args) -> dict:
    """Run the module in this process (see state() below)."""
    return state(tmp_path, _ansible_check_mode=check, **args)


def state(tmp_path: Path, **args) -> dict:
    """The module's result for `args`, run in this process (a fraction of a second, where Ansible
    takes seconds: the mutation runs of tools/mutate.py repeat it); _rc is 0 (exit_json) or 1."""
    args.setdefault("state_dir", str(tmp_path / "layers"))
    args.setdefault("layers", LAYERS)
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        ls.main()
    return dict(json.loads(out.getvalue()), _rc=done.value.code)


def record(tmp_path: Path, name: str = "cuda") -> dict:
    return json.loads((tmp_path / "layers" / (name + ".json")).read_text())


def test_a_rebuild_does_not_keep_the_step_of_the_build_before(tmp_path):
    # A pip layer marks itself building at step pip; killed there, the next run reinstalls. A later
    # mark that names no step (a rebuild that has not reached pip) must not carry the stale one.
    assert state(tmp_path, name="cuda", state="building", run="run-a", step="pip")["changed"]
    assert record(tmp_path)["step"] == "pip"
    assert state(tmp_path, name="cuda", inputs={"v": 1})["previous"]["step"] == "pip"
    again = state(tmp_path, name="cuda", state="building", run="run-b")
    assert again["changed"] and "step" not in record(tmp_path)
    assert record(tmp_path)["run"] == "run-b"
    state(tmp_path, name="cuda", state="building", run="run-b", step="pip")
    done = state(tmp_path, name="cuda", state="present", run="run-b", inputs={"v": 1}, version="1")
    assert done["_rc"] == 0 and "step" not in record(tmp_path) and record(tmp_path)["status"] == "complete"


def test_lifecycle_through_ansible(tmp_path):
    inputs = {"version": "11.8.0", "sha256": "ab" * 32}
    first = through_ansible(tmp_path, name="cuda", inputs=inputs)
    assert first["build"] and first["reason"] == "absent" and not first["changed"]

    assert through_ansible(tmp_path, name="cuda", state="building")["changed"]
    assert json.loads((tmp_path / "layers/cuda.json").read_text())["status"] == "building"
    assert through_ansible(tmp_path, name="cuda", inputs=inputs)["reason"] == "incomplete"

    done = through_ansible(tmp_path, name="cuda", state="present", inputs=inputs, version="11.8.89")
    assert done["changed"]
    fact = done["ansible_facts"]["stack_layer_cuda"]
    assert {key: fact[key] for key in ("version", "outcome")} == {"version": "11.8.89", "outcome": "built"}
    # The summary's seconds: the query's start before, the record's end after (the host's clock).
    assert first["ansible_facts"]["stack_layer_cuda_started"] <= fact["finished"] <= time.time() + 1
    cuda_print = done["fingerprint"]

    again = through_ansible(tmp_path, name="cuda", inputs=inputs)
    assert not again["build"] and again["reason"] == "unchanged" and not again["probe"]
    same = through_ansible(tmp_path, name="cuda", state="present", inputs=inputs, version="11.8.89", built=False)
    assert not same["changed"] and same["fingerprint"] == cuda_print
    assert same["ansible_facts"]["stack_layer_cuda"]["outcome"] == "unchanged"

    # cudnn builds on cuda: a rebuilt cuda gets a new fingerprint, and cudnn follows.
    through_ansible(tmp_path, name="cudnn", state="present", requires=["cuda"], inputs={"v": 1})
    assert through_ansible(tmp_path, name="cudnn", requires=["cuda"], inputs={"v": 1})["reason"] == "unchanged"
    assert through_ansible(tmp_path, name="cuda", inputs=inputs, rebuild="cuda")["reason"] == "requested"
    rebuilt = through_ansible(tmp_path, name="cuda", state="present", inputs=inputs, version="11.8.89")
    assert rebuilt["fingerprint"] != cuda_print
    assert rebuilt["ansible_facts"]["stack_layer_cuda"]["outcome"] == "rebuilt"
    assert through_ansible(tmp_path, name="cudnn", requires=["cuda"], inputs={"v": 1})["reason"] == "dependency_changed"

    assert through_ansible(tmp_path, name="cuda", inputs={"version": "12.1"})["reason"] == "inputs_changed"


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
    # What a layer found, not built (the driver layer keeping a driver changed by hand): its version too.
    found = module(
        tmp_path, state="present", version="24.12", built=False, details={"config": "b"}, update_details=True, **args
    )
    assert found["changed"] and found["fingerprint"] == built["fingerprint"]
    assert module(tmp_path, **args)["previous"]["version"] == "24.12"
    module(tmp_path, state="present", version="24.13", built=False, details={"config": "b"}, **args)
    assert module(tmp_path, **args)["previous"]["version"] == "24.12"


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
    assert state(tmp_path, **dict(args, state="building", run="run-a"))["_rc"] == 0
    other = state(tmp_path, **dict(args, state="present", run="run-b", version="1"))
    assert other["_rc"] != 0 and "marked building by run run-a, not by this run (run-b)" in other["msg"]
    assert json.loads((tmp_path / "cuda.json").read_text())["status"] == "building"
    assert state(tmp_path, **dict(args, state="present", run="run-a", version="1"))["_rc"] == 0
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


# -- the module in this process: each branch of main() and its helpers, in milliseconds ------------


def test_parse_rebuild_takes_false_blanks_and_all_among_others():
    assert ls.parse_rebuild(False, LAYERS) == set()
    assert ls.parse_rebuild([" cuda ", "", "  "], LAYERS) == {"cuda"}
    assert ls.parse_rebuild("cudnn,all", LAYERS) == set(LAYERS)
    with pytest.raises(
        ValueError, match=r"unknown layer\(s\) a, b; valid names are preflight, cuda, cudnn, apex, or 'all'"
    ):
        ls.parse_rebuild("b,a,cuda", LAYERS)


def test_read_state_refuses_what_is_not_a_record(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    assert ls.read_state(str(tmp_path / "list.json")) == {"status": "unreadable"}
    assert ls.read_state(str(tmp_path)) == {"status": "unreadable"}  # a directory: OSError
    (tmp_path / "ok.json").write_text('{"status": "complete"}')
    assert ls.read_state(str(tmp_path / "ok.json")) == {"status": "complete"}


def test_file_facts_stat_links_and_directories_themselves(tmp_path):
    (tmp_path / "file").write_text("abc")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "file")
    paths = [str(tmp_path / name) for name in ("file", "dir", "link", "gone")]
    facts = ls.file_facts(paths)
    assert facts[paths[0]][:2] == ["file", 3]
    assert facts[paths[1]][0] == "dir"
    assert facts[paths[2]][0] == "link" and facts[paths[2]][1] == len(str(tmp_path / "file"))
    assert facts[paths[3]] is None
    assert facts[paths[0]][2] == (tmp_path / "file").lstat().st_mtime_ns


def test_the_fingerprint_changes_with_every_input():
    base = ls.new_fingerprint("cuda", {"v": 1}, {"a": "x"}, "2026-12-01T00:00:00Z")
    assert len(base) == 16 and int(base, 16) >= 0
    assert base == ls.new_fingerprint("cuda", {"v": 1}, {"a": "x"}, "2026-12-01T00:00:00Z")
    for other in (
        ("cudnn", {"v": 1}, {"a": "x"}, "2026-12-01T00:00:00Z"),
        ("cuda", {"v": 2}, {"a": "x"}, "2026-12-01T00:00:00Z"),
        ("cuda", {"v": 1}, {"a": "y"}, "2026-12-01T00:00:00Z"),
        ("cuda", {"v": 1}, {"a": "x"}, "2026-12-01T00:00:01Z"),
    ):
        assert ls.new_fingerprint(*other) != base, other


def test_a_snapshot_holds_each_record_and_the_stale_files_of_complete_ones(tmp_path):
    marker = tmp_path / "marker"
    marker.write_text("x")
    state(tmp_path, name="cuda", state="present", inputs={"v": 1}, files=[str(marker)])
    state(tmp_path, name="cudnn", state="building", run="run-a")
    (tmp_path / "layers" / "apex.json").write_text('{"status": "complete", "files": ["not", "a", "dict"]}')
    marker.write_text("xyz")
    before = time.time()
    snap = ls.snapshot(str(tmp_path / "layers"), LAYERS, "run-a")
    assert snap["run"] == "run-a" and snap["state_dir"] == str(tmp_path / "layers")
    assert before - 1 <= snap["host_time"] <= time.time() + 1
    assert sorted(snap["records"]) == ["apex", "cuda", "cudnn"]
    assert snap["stale"] == {"cuda": [str(marker)]}
    result = state(tmp_path, state="snapshot", run="run-a")
    assert result["changed"] is False and result["ansible_facts"]["stack_layer_snapshot"]["stale"] == snap["stale"]


def test_a_query_answers_from_the_record(tmp_path):
    first = state(tmp_path, name="cuda", inputs={"v": 1})
    assert (first["build"], first["rebuild"], first["probe"], first["reason"]) == (True, False, True, "absent")
    assert first["changed"] is False and first["previous"] == {} and first["fingerprint"] == ""
    assert first["path"] == str(tmp_path / "layers" / "cuda.json")
    assert sorted(first["ansible_facts"]) == ["stack_layer_cuda_started"]
    state(tmp_path, name="cuda", state="building", run="run-a")
    marked = state(tmp_path, name="cuda", inputs={"v": 1})
    assert (marked["build"], marked["rebuild"], marked["reason"]) == (True, True, "incomplete")
    assert sorted(marked["ansible_facts"]) == ["stack_layer_cuda_started"]  # building is not complete
    done = state(tmp_path, name="cuda", state="present", run="run-a", inputs={"v": 1}, version="11.8")
    again = state(tmp_path, name="cuda", inputs={"v": 1})
    assert again["fingerprint"] == done["fingerprint"] and len(done["fingerprint"]) == 16
    assert again["ansible_facts"]["stack_layer_cuda"] == {"version": "11.8", "outcome": "unchanged"}
    assert again["changed_files"] == [] and not again["probe"]


def test_a_rebuild_request_and_a_required_layer_s_record(tmp_path):
    state(tmp_path, name="cuda", state="present", version="11.8", details={"k": "v"}, inputs={"v": 1})
    cuda = record(tmp_path)
    state(tmp_path, name="cudnn", state="present", requires=["cuda"], inputs={"v": 1})
    found = state(tmp_path, name="cudnn", requires=["cuda"], inputs={"v": 1}, rebuild="cuda")
    assert found["reason"] == "unchanged"
    assert found["required"] == {"cuda": {key: cuda[key] for key in ("version", "details", "fingerprint", "built_at")}}
    asked = state(tmp_path, name="cudnn", requires=["cuda"], inputs={"v": 1}, rebuild=["cudnn"])
    assert (asked["build"], asked["rebuild"], asked["reason"]) == (True, True, "requested")
    assert record(tmp_path, "cudnn")["requires"] == {"cuda": cuda["fingerprint"]}


def test_bad_requests_fail_naming_what_is_wrong(tmp_path):
    unknown = state(tmp_path, name="cuda", requires=["cdua", "apex"])
    assert unknown["_rc"] == 1
    assert unknown["msg"] == "layer_state: unknown layer(s) cdua; known layers: preflight, cuda, cudnn, apex"
    bad = state(tmp_path, name="cuda", rebuild="nope")
    assert bad["_rc"] == 1 and bad["msg"].endswith("or 'all'. Example: -e rebuild=cuda,cudnn")
    verify = state(tmp_path, name="cuda", verify="nope")
    assert verify["_rc"] == 1 and verify["msg"].startswith("verify names unknown layer(s) nope")
    assert verify["msg"].endswith("Example: -e verify=all")
    missing = state(tmp_path, name="cudnn", requires=["cuda", "preflight"], state="present")
    assert missing["_rc"] == 1
    assert missing["msg"] == (
        "the cudnn layer needs the cuda, preflight layer(s), which this host has not completed (no complete "
        "record in %s). Build them first, for example: --tags cuda,preflight,cudnn" % (tmp_path / "layers")
    )
    # Marking a layer building needs nothing below it yet.
    assert state(tmp_path, name="cudnn", requires=["cuda"], state="building")["_rc"] == 0


@pytest.mark.parametrize(
    "request_, probed", [(False, False), ("no", False), ("false", False), ("TRUE", True), ("yes", True)]
)
def test_verify_as_a_boolean(tmp_path, request_, probed):
    state(tmp_path, name="cuda", state="present", inputs={"v": 1})
    assert state(tmp_path, name="cuda", inputs={"v": 1}, verify=request_)["probe"] is probed


def test_marking_building_twice_changes_nothing_and_check_mode_writes_nothing(tmp_path):
    looked = state(tmp_path, name="cuda", state="building", run="run-a", _ansible_check_mode=True)
    assert looked["changed"] and not (tmp_path / "layers").exists()
    assert state(tmp_path, name="cuda", state="building", run="run-a")["changed"]
    assert record(tmp_path) == {"name": "cuda", "status": "building", "run": "run-a"}
    assert state(tmp_path, name="cuda", state="building", run="run-a")["changed"] is False
    # No run id: the record keeps the one it had.
    assert state(tmp_path, name="cuda", state="building")["changed"] is False
    assert record(tmp_path)["run"] == "run-a"
    shown = state(tmp_path, name="cuda", state="building", run="run-b", _ansible_diff=True)
    assert shown["diff"]["after"] == (tmp_path / "layers" / "cuda.json").read_text()
    assert shown["diff"]["before_header"] == shown["diff"]["after_header"] == str(tmp_path / "layers" / "cuda.json")
    assert "diff" not in state(tmp_path, name="cuda", state="building", run="run-c")


def test_the_record_a_build_writes(tmp_path):
    marker = tmp_path / "marker"
    marker.write_text("x")
    state(tmp_path, name="cuda", state="building", run="run-a", step="pip")
    done = state(
        tmp_path,
        name="cuda",
        state="present",
        run="run-a",
        version="11.8.89",
        inputs={"v": 1},
        details={"b": [1, 2], "a": "x"},
        files=[str(marker), str(marker)],
    )
    written = record(tmp_path)
    assert sorted(written) == [
        "built_at",
        "details",
        "files",
        "fingerprint",
        "format",
        "inputs",
        "name",
        "requires",
        "status",
        "version",
    ]
    assert (written["format"], written["name"], written["status"], written["version"]) == (
        1,
        "cuda",
        "complete",
        "11.8.89",
    )
    assert written["inputs"] == {"v": 1} and written["requires"] == {} and written["details"] == {"a": "x", "b": [1, 2]}
    assert written["files"] == {str(marker): ["file", 1, marker.lstat().st_mtime_ns]}
    assert len(written["built_at"]) == 20 and written["built_at"].endswith("Z")
    assert done["fingerprint"] == written["fingerprint"]
    assert (tmp_path / "layers" / "cuda.json").read_text() == json.dumps(written, indent=2, sort_keys=True) + "\n"
    assert ((tmp_path / "layers" / "cuda.json").stat().st_mode & 0o777) == 0o644
    fact = done["ansible_facts"]["stack_layer_cuda"]
    assert fact["outcome"] == "built" and fact["version"] == "11.8.89" and fact["finished"] <= time.time() + 1
    # The same inputs, nothing built: unchanged, and the fact says so; a rebuild says rebuilt.
    same = state(
        tmp_path, name="cuda", state="present", version="11.8.89", inputs={"v": 1}, built=False, files=[str(marker)]
    )
    assert same["changed"] is False and same["ansible_facts"]["stack_layer_cuda"]["outcome"] == "unchanged"
    rebuilt = state(tmp_path, name="cuda", state="present", version="11.8.89", inputs={"v": 1}, files=[str(marker)])
    assert rebuilt["ansible_facts"]["stack_layer_cuda"]["outcome"] == "rebuilt"
    # Not built, but from other inputs: a new record all the same (nothing to keep from the old one).
    other = state(tmp_path, name="cuda", state="present", version="12", inputs={"v": 2}, built=False)
    assert other["changed"] and record(tmp_path)["inputs"] == {"v": 2} and record(tmp_path)["version"] == "12"
    assert other["ansible_facts"]["stack_layer_cuda"]["outcome"] == "unchanged"


def test_completing_a_layer_another_run_marked_fails_and_a_run_without_an_id_may(tmp_path):
    state(tmp_path, name="cuda", state="building", run="run-a")
    other = state(tmp_path, name="cuda", state="present", run="run-b", inputs={"v": 1})
    assert other["_rc"] == 1 and other["msg"].startswith("layer cuda was marked building by run run-a, not by this run")
    assert record(tmp_path)["status"] == "building"
    assert state(tmp_path, name="cuda", state="present", inputs={"v": 1})["_rc"] == 0
    assert record(tmp_path)["status"] == "complete"
    # A complete record names no run: any run may record the layer again.
    assert state(tmp_path, name="cuda", state="present", run="run-b", inputs={"v": 1})["_rc"] == 0


def test_check_mode_present_reports_and_writes_nothing(tmp_path):
    looked = state(tmp_path, name="cuda", state="present", inputs={"v": 1}, _ansible_check_mode=True)
    assert looked["changed"] and not (tmp_path / "layers").exists()
    shown = state(tmp_path, name="cuda", state="present", inputs={"v": 1}, _ansible_check_mode=True, _ansible_diff=True)
    assert shown["diff"]["before"] == "{}\n" and json.loads(shown["diff"]["after"])["status"] == "complete"
    assert not (tmp_path / "layers").exists()


def test_the_times_the_summary_reads_are_rounded_to_what_it_prints(tmp_path, monkeypatch):
    monkeypatch.setattr(ls.time, "time", lambda: 1796191815.84567)
    assert state(tmp_path, name="cuda")["ansible_facts"]["stack_layer_cuda_started"] == 1796191815.85
    done = state(tmp_path, name="cuda", state="present", inputs={"v": 1}, version="1")
    assert done["ansible_facts"]["stack_layer_cuda"]["finished"] == 1796191815.85
    assert ls.snapshot(str(tmp_path / "layers"), LAYERS, "run-a")["host_time"] == 1796191815.846


def test_the_fingerprint_does_not_depend_on_key_order():
    one = ls.new_fingerprint("cuda", {"a": 1, "b": {"c": 2, "d": 3}}, {"x": "1", "y": "2"}, "t")
    other = ls.new_fingerprint("cuda", {"b": {"d": 3, "c": 2}, "a": 1}, {"y": "2", "x": "1"}, "t")
    assert one == other


def test_the_state_directory_and_the_layer_list_are_required(tmp_path):
    for missing in ("state_dir", "layers"):
        args = {"name": "cuda", "state_dir": str(tmp_path), "layers": LAYERS}
        del args[missing]
        out = io.StringIO()
        with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
            ls.main()
        assert done.value.code == 1
        assert json.loads(out.getvalue())["msg"] == "missing required arguments: %s" % missing


def test_a_lock_refusal_names_the_layer_or_the_records(tmp_path):
    lock = str(tmp_path / "run.lock")
    named = state(tmp_path, name="cuda", run="run-a", lock_file=lock)
    assert named["_rc"] == 1 and named["msg"].startswith("layer cuda: this run (run-a) does not hold")
    snap = state(tmp_path, state="snapshot", run="run-a", lock_file=lock)
    assert snap["_rc"] == 1 and snap["msg"].startswith("layer records: this run (run-a) does not hold")


def test_an_unknown_verify_name_is_said_in_verify_s_words_only(tmp_path):
    layers = ["prebuild", "cuda"]
    bad = state(tmp_path, name="cuda", layers=layers, verify="nope")
    assert (
        bad["msg"]
        == "verify names unknown layer(s) nope; valid names are prebuild, cuda, or 'all'. Example: -e verify=all"
    )


def test_a_query_looks_at_the_recorded_files_and_at_the_ones_it_names_now(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_text("x")
    new.write_text("y")
    state(tmp_path, name="cuda", state="present", inputs={"v": 1}, files=[str(old)])
    # A file the layer names now but never recorded: looked at.
    assert state(tmp_path, name="cuda", inputs={"v": 1}, files=[str(old), str(new)])["changed_files"] == [str(new)]
    # A recorded file the call no longer names: still looked at.
    old.write_text("changed")
    stale = state(tmp_path, name="cuda", inputs={"v": 1})
    assert stale["changed_files"] == [str(old)] and stale["reason"] == "files_changed"
