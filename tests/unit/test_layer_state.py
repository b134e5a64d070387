"""The layer_state module: when a layer builds, and what it records."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import play_results, run_module
from repo import load_file

import layer_state as ls

REPO = Path(__file__).resolve().parents[2]

LAYERS = ["preflight", "cuda", "cudnn", "apex"]


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


def test_a_record_that_keeps_the_state_file_is_answered_from_the_snapshot(tmp_path: Path):
    """Preflight records itself on every run with built=false: when the module would keep the record
    as it is, the answer comes from the snapshot, key for key the module's; anything that would change
    the record goes to the host."""
    marker = tmp_path / "toolkit" / "version.json"
    marker.parent.mkdir()
    marker.write_text("{}")
    cuda = {"name": "cuda", "inputs": {"v": 1}, "version": "11.8.89", "files": [str(marker)]}
    keep = {"layer_state": dict(cuda, state="present", built=False)}
    snapshot = {"layer_state": {"state": "snapshot"}}
    playbook_results(tmp_path, [{"layer_state": dict(cuda, state="present")}])
    record = tmp_path / "layers" / "cuda.json"
    before = record.read_text()
    results = playbook_results(
        tmp_path,
        [
            snapshot,
            keep,  # 1: from the snapshot
            {"layer_state": dict(cuda, state="present", built=False, update_details=True)},  # 2: the host
            {"layer_state": dict(cuda, state="present", built=False, inputs={"v": 2})},  # 3: the host records
            snapshot,
            {"layer_state": dict(cuda, state="present", built=False, inputs={"v": 2}, version="12")},  # 5: snapshot
            {"layer_state": dict(cuda, state="present", built=False, inputs={"v": 2}, files=[])},  # 6: fewer files
        ],
    )
    assert [bool(results[i].get("from_snapshot")) for i in (1, 2, 3, 5, 6)] == [True, False, False, True, False]
    assert not results[1]["changed"] and results[3]["changed"]
    assert results[1]["ansible_facts"]["stack_layer_cuda"]["outcome"] == "unchanged"
    assert results[5]["ansible_facts"]["stack_layer_cuda"]["version"] == "12" and results[6]["changed"]
    # The same record asked of the host, in a run without a snapshot: the same answer, the file kept.
    playbook_results(tmp_path, [{"layer_state": dict(cuda, state="present")}])
    before = record.read_text()
    local, remote = playbook_results(tmp_path, [snapshot, keep])[1], playbook_results(tmp_path, [keep])[0]
    assert local["from_snapshot"] and "from_snapshot" not in remote
    assert record.read_text() == before
    skip = {"from_snapshot", "ansible_facts", "invocation", "action", "diff"} | PATH_INFO
    assert {k: v for k, v in local.items() if k not in skip and not k.startswith("_ansible")} == {
        k: v for k, v in remote.items() if k not in skip and not k.startswith("_ansible")
    }
    local_facts, remote_facts = local["ansible_facts"]["stack_layer_cuda"], remote["ansible_facts"]["stack_layer_cuda"]
    assert {k: v for k, v in local_facts.items() if k != "finished"} == {
        k: v for k, v in remote_facts.items() if k != "finished"
    }
    # A file the record names changed since the snapshot was taken: the host records its new stat.
    marker.write_text('{"touched": 1}')
    touched = playbook_results(tmp_path, [snapshot, keep])[1]
    assert "from_snapshot" not in touched and touched["changed"]


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


def test_a_snapshot_with_os_facts_brings_the_setup_modules_distribution_facts(tmp_path):
    """The run's first snapshot stands in for the setup call (playbooks/tasks/setup.yml): the OS release
    facts the layers read, as gather_subset=distribution gathers them. This runs through Ansible, so what
    the module imports must travel with it. Broken cases: a fact missing or other than setup's; the facts on
    a snapshot that did not ask (every stage's); the whole fact collector in the module's payload."""
    results = playbook_results(
        tmp_path,
        [
            {"ansible.builtin.setup": {"gather_subset": ["!all", "!min", "distribution"]}},
            {"layer_state": {"state": "snapshot", "os_facts": True}},
            {"layer_state": {"state": "snapshot"}},
        ],
    )
    facts = dict(results[1]["ansible_facts"])
    assert facts.pop("stack_layer_snapshot")["run"] == "run-a"
    names = [
        "ansible_distribution",
        "ansible_distribution_major_version",
        "ansible_distribution_release",
        "ansible_distribution_version",
    ]
    assert sorted(facts) == names
    assert facts == {name: results[0]["ansible_facts"][name] for name in names}
    assert facts["ansible_distribution_major_version"] not in ("", "NA")
    assert list(results[2]["ansible_facts"]) == ["stack_layer_snapshot"]
    # setup's collector imports every collector of its package: the module does without it.
    source = (REPO / "library" / "layer_state.py").read_text(encoding="utf-8")
    assert "module_utils.facts" not in source


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


# -- the action plugin (action_plugins/layer_state.py), in this process: the controller's answer -----

ACTION = load_file(REPO / "action_plugins" / "layer_state.py", "layer_state_action")


def built_stack(tmp_path: Path) -> Path:
    """cuda (with a recorded file) and cudnn on top of it, recorded by run-a; the file's path."""
    marker = tmp_path / "toolkit" / "version.json"
    marker.parent.mkdir()
    marker.write_text("{}")
    state(tmp_path, name="cuda", state="present", run="run-a", version="11.8.89", inputs={"v": 1}, files=[str(marker)])
    state(tmp_path, name="cudnn", state="present", run="run-a", version="8.9", inputs={"v": 2}, requires=["cuda"])
    return marker


def snap_of(tmp_path: Path, run: str = "run-a") -> dict:
    """The stage's snapshot, as the module takes it on the host."""
    return state(tmp_path, state="snapshot", run=run)["ansible_facts"]["stack_layer_snapshot"]


def cudnn_query(tmp_path: Path, **args) -> dict:
    return dict(dict(name="cudnn", inputs={"v": 2}, requires=["cuda"], run="run-a", **dirs(tmp_path)), **args)


def test_the_controller_answers_a_clean_rerun_as_the_host_would(tmp_path):
    marker = built_stack(tmp_path)
    snap = snap_of(tmp_path)
    for args in (
        cudnn_query(tmp_path),
        dict(cudnn_query(tmp_path), name="cuda", requires=[], inputs={"v": 1}, files=[str(marker)]),
    ):
        local = ACTION.unchanged(args, snap)
        host = state(tmp_path, **args)
        assert local["from_snapshot"] is True and local["changed"] is False and local["changed_files"] == []
        skip = {"from_snapshot", "ansible_facts", "invocation", "_rc"} | PATH_INFO
        assert {k: v for k, v in local.items() if k not in skip} == {k: v for k, v in host.items() if k not in skip}
        name = args["name"]
        assert local["ansible_facts"]["stack_layer_" + name] == host["ansible_facts"]["stack_layer_" + name]
    # The request a stage passes by default asks for nothing; neither does a verify of false or no.
    for request in (dict(rebuild=""), dict(rebuild=None), dict(rebuild=[]), dict(verify=False), dict(verify="no")):
        assert ACTION.unchanged(cudnn_query(tmp_path, **request), snap) is not None, request


def test_the_start_the_controller_reports_is_on_the_host_s_clock(tmp_path, monkeypatch):
    """The summary subtracts the start from the host's finish time: the snapshot's offset (host minus
    controller) moves the controller's clock onto the host's, rounded as the module rounds it."""
    built_stack(tmp_path)
    snap = snap_of(tmp_path)
    monkeypatch.setattr(ACTION.time, "time", lambda: 1796191815.84567)
    started = ACTION.unchanged(cudnn_query(tmp_path), dict(snap, offset=-12.5))["ansible_facts"]
    assert started["stack_layer_cudnn_started"] == 1796191803.35
    snap.pop("offset", None)
    assert ACTION.unchanged(cudnn_query(tmp_path), snap)["ansible_facts"]["stack_layer_cudnn_started"] == 1796191815.85


def _not_json() -> dict:
    loop: dict = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    "change",
    [
        "no name",
        "no snapshot",
        "another state_dir",
        "no run id",
        "another run",
        "rebuild all",
        "rebuild named",
        "rebuild list",
        "verify all",
        "verify true",
        "other inputs",
        "inputs not JSON (a set)",
        "inputs not JSON (a loop)",
        "no record",
        "record without files",
        "record building",
        "no stat of the record",
        "a file the record does not name",
        "a recorded file changed",
        "a required layer without a record",
        "a required layer building",
        "a required layer rebuilt",
    ],
)
def test_the_controller_leaves_every_other_query_to_the_host(tmp_path, change):
    """Only "nothing changed" is answered from the snapshot; anything else, or anything the snapshot
    cannot tell, is the module's to decide (or refuse) on the host."""
    marker = built_stack(tmp_path)
    args = cudnn_query(tmp_path)
    if change == "record without files":
        cudnn = record(tmp_path, "cudnn")
        del cudnn["files"]  # as an older version wrote it
        (tmp_path / "layers" / "cudnn.json").write_text(json.dumps(cudnn))
    elif change == "record building":
        state(tmp_path, name="cudnn", state="building", run="run-a")
    elif change == "a recorded file changed":
        marker.write_text('{"cuda": 1}')
        args = dict(args, name="cuda", requires=[], inputs={"v": 1}, files=[str(marker)])
    elif change == "a required layer building":
        state(tmp_path, name="cuda", state="building", run="run-a")
    elif change == "a required layer rebuilt":
        state(tmp_path, name="cuda", state="present", run="run-a", version="11.8.90", inputs={"v": 1, "update": 1})
    snap = snap_of(tmp_path, run="" if change == "no run id" else "run-a")
    args = {
        "no name": dict(args, name=""),
        "no run id": dict(args, run=""),
        "another run": dict(args, run="run-b"),
        "another state_dir": dict(args, state_dir=str(tmp_path / "elsewhere")),
        "rebuild all": dict(args, rebuild=True),
        "rebuild named": dict(args, rebuild="cudnn"),
        "rebuild list": dict(args, rebuild=["cuda"]),
        "verify all": dict(args, verify="all"),
        "verify true": dict(args, verify=True),
        "other inputs": dict(args, inputs={"v": 3}),
        "inputs not JSON (a set)": dict(args, inputs={"v": {1, 2}}),
        "inputs not JSON (a loop)": dict(args, inputs=_not_json()),
        "no record": dict(args, name="apex", requires=[]),
        "a file the record does not name": dict(args, files=[str(marker)]),
        "a required layer without a record": dict(args, requires=["cuda", "preflight"]),
    }.get(change, args)
    if change == "no snapshot":
        snap = {}
    elif change == "no stat of the record":
        snap["stale"].pop("cudnn")
    assert ACTION.unchanged(args, snap) is None


class Task:
    """What ActionBase.run reads of a task."""

    def __init__(self, args: dict, async_val: int = 0, check_mode: bool = False):
        self.args, self.async_val, self.check_mode, self.action = args, async_val, check_mode, "layer_state"


def plugin(tmp_path: Path, args: dict, answers: list | None = None, **task) -> tuple:
    """The action plugin for one task, with the module run in this process (or the `answers` given,
    in order); (plugin, the module arguments it sent to the host, one list per call)."""
    action = ACTION.ActionModule.__new__(ACTION.ActionModule)
    action._task = Task(args, **task)
    action._connection = type("Connection", (), {"_shell": type("Shell", (), {"tmpdir": str(tmp_path)})()})()
    sent: list = []

    def execute(module_name, module_args, task_vars):
        assert module_name == "layer_state"
        sent.append(module_args)
        if answers is not None:
            return answers.pop(0)
        return {k: v for k, v in state(tmp_path, **module_args).items() if k != "_rc"}

    action._execute_module = execute
    return action, sent


def test_the_plugin_answers_from_the_task_s_snapshot_fact_and_asks_the_host_otherwise(tmp_path):
    built_stack(tmp_path)
    facts = {"ansible_facts": {"stack_layer_snapshot": snap_of(tmp_path)}}
    action, sent = plugin(tmp_path, cudnn_query(tmp_path))
    local = action.run(task_vars=facts)
    assert local["from_snapshot"] is True and local["reason"] == "unchanged" and sent == []
    for task_vars in ({}, None, {"ansible_facts": {}}):
        action, sent = plugin(tmp_path, cudnn_query(tmp_path))
        host = action.run(task_vars=task_vars)
        assert "from_snapshot" not in host and host["reason"] == "unchanged" and len(sent) == 1
        assert sorted(host["ansible_facts"]) == ["stack_layer_cudnn", "stack_layer_cudnn_started"]
    # Only a query: marking a layer building goes to the host however unchanged the layer is.
    action, sent = plugin(tmp_path, cudnn_query(tmp_path, state="building"))
    assert action.run(task_vars=facts)["changed"] and len(sent) == 1


def test_a_change_to_a_record_empties_the_snapshot_and_nothing_else_does(tmp_path):
    """A later layer of the same run then asks the host: its required layer's record is new."""
    built_stack(tmp_path)
    facts = {"ansible_facts": {"stack_layer_snapshot": snap_of(tmp_path)}}
    for args in (
        dict(name="cuda", state="present", run="run-a", inputs={"v": 1}, **dirs(tmp_path)),
        dict(name="cuda", state="building", run="run-a", **dirs(tmp_path)),
    ):
        action, _ = plugin(tmp_path, args)
        done = action.run(task_vars=facts)
        assert done["changed"] and done["ansible_facts"]["stack_layer_snapshot"] == {}, args["state"]
    # Marked building again by the same run: nothing changed, no fact at all (the snapshot stays).
    action, _ = plugin(tmp_path, dict(name="cuda", state="building", run="run-a", **dirs(tmp_path)))
    unchanged = action.run(task_vars=facts)
    assert unchanged["changed"] is False and "ansible_facts" not in unchanged


def test_the_snapshot_carries_the_host_s_clock_offset(tmp_path, monkeypatch):
    monkeypatch.setattr(ACTION.time, "time", lambda: 1796191815.84567)
    snap = {"run": "run-a", "state_dir": "/x", "host_time": 1796191803.5, "records": {}, "stale": {}}
    action, _ = plugin(tmp_path, {"state": "snapshot"}, answers=[{"ansible_facts": {"stack_layer_snapshot": snap}}])
    assert action.run(task_vars={})["ansible_facts"]["stack_layer_snapshot"]["offset"] == -12.346
    # A module that failed returns no snapshot: nothing to add to, and no empty fact either.
    action, _ = plugin(tmp_path, {"state": "snapshot"}, answers=[{"failed": True, "msg": "locked"}])
    assert action.run(task_vars={}) == {"failed": True, "msg": "locked"}


def test_the_plugin_runs_in_check_mode_but_not_async(tmp_path):
    """Check mode previews a layer (the module supports it); an async layer_state task would record a
    layer nobody waits for, so Ansible refuses it."""
    action, sent = plugin(tmp_path, dict(name="cuda", inputs={"v": 1}, **dirs(tmp_path)), check_mode=True)
    assert action.run(task_vars={})["reason"] == "absent" and len(sent) == 1
    action, sent = plugin(tmp_path, dict(name="cuda", **dirs(tmp_path)), async_val=60)
    with pytest.raises(ACTION.AnsibleActionFail, match="does not support async"):
        action.run(task_vars={})
    assert sent == []


def test_the_shared_decision_is_the_module_s_own_or_loaded_from_the_module_utils_path(tmp_path, monkeypatch):
    """On the controller the decision comes from sys.modules when the module's copy is loaded (the
    same functions), else from the module_utils directories ansible.cfg names; none: a clear stop."""
    loaded = sys.modules[ACTION.SHARED]
    assert ACTION.shared() is loaded
    monkeypatch.delitem(sys.modules, ACTION.SHARED)
    monkeypatch.setattr(ACTION.C, "DEFAULT_MODULE_UTILS_PATH", [str(tmp_path), str(REPO / "module_utils")])
    found = ACTION.shared()
    assert found is not loaded and found.decide({}, {}, {}, False) == (True, "absent")
    assert sys.modules[ACTION.SHARED] is found  # loaded once per run
    monkeypatch.delitem(sys.modules, ACTION.SHARED)
    monkeypatch.setattr(ACTION.C, "DEFAULT_MODULE_UTILS_PATH", [str(tmp_path)])
    with pytest.raises(ACTION.AnsibleActionFail, match="not in the module_utils path \\(%s\\)" % tmp_path):
        ACTION.shared()
    monkeypatch.setattr(ACTION.C, "DEFAULT_MODULE_UTILS_PATH", None)
    with pytest.raises(ACTION.AnsibleActionFail, match=r"module_utils path \(\); run from the project root"):
        ACTION.shared()
