"""One run at a time per host: the host_lock module, the stack_run lookup, and layer_state's run check."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "lookup_plugins"))
import stack_run  # noqa: E402
from conftest import run_module  # noqa: E402


def ansible(module: str, args: dict) -> dict:
    return run_module(module, args)


def run(name: str) -> dict:
    return {"id": name, "controller": "ctl", "pid": 4242, "user": "alice", "started": "2026-12-01T00:00:00Z"}


def test_second_run_is_refused_with_the_holder(tmp_path):
    lock = str(tmp_path / "run.lock")
    first = ansible("host_lock", {"path": lock, "run": run("run-a")})
    assert first["_rc"] == 0 and not first["changed"] and first["holder"]["id"] == "run-a"
    again = ansible("host_lock", {"path": lock, "run": run("run-a")})  # a later stage of the same run
    assert again["_rc"] == 0
    second = ansible("host_lock", {"path": lock, "run": run("run-b")})
    assert second["_rc"] != 0
    assert "Another run of the stack holds this host: run run-a of alice@ctl (controller pid 4242)" in second["msg"]
    assert "-e stack_lock_takeover=run-a" in second["msg"]
    assert json.loads(Path(lock).read_text())["id"] == "run-a"


def test_takeover_and_release(tmp_path):
    lock = str(tmp_path / "run.lock")
    ansible("host_lock", {"path": lock, "run": run("run-a")})
    wrong = ansible("host_lock", {"path": lock, "run": run("run-b"), "takeover": "run-x"})
    assert wrong["_rc"] != 0
    taken = ansible("host_lock", {"path": lock, "run": run("run-b"), "takeover": "run-a"})
    assert taken["_rc"] == 0 and taken["taken_over"]["id"] == "run-a"
    # Only the holder releases.
    ansible("host_lock", {"path": lock, "run": run("run-a"), "state": "released"})
    assert json.loads(Path(lock).read_text())["id"] == "run-b"
    ansible("host_lock", {"path": lock, "run": run("run-b"), "state": "released"})
    assert not Path(lock).exists()


def test_a_dead_runs_background_steps_keep_its_lock(tmp_path):
    """The controller of run-a is gone, but its installer still runs in the background: no takeover."""
    lock = str(tmp_path / "run.lock")
    ansible("host_lock", {"path": lock, "run": run("run-a")})
    step = subprocess.Popen(["sleep", "60"], env=dict(os.environ, VERL_P40_RUN="run-a"))
    other = subprocess.Popen(["sleep", "60"], env=dict(os.environ, VERL_P40_RUN="run-ab"))
    try:
        refused = ansible("host_lock", {"path": lock, "run": run("run-b"), "takeover": "run-a"})
        assert refused["_rc"] != 0
        assert "its background steps still run on this host: pid %d (sleep 60)" % step.pid in refused["msg"]
        assert "kill %d" % step.pid in refused["msg"] and str(other.pid) not in refused["msg"]
        assert json.loads(Path(lock).read_text())["id"] == "run-a"
    finally:
        step.kill()
        step.wait()
    taken = ansible("host_lock", {"path": lock, "run": run("run-b"), "takeover": "run-a"})
    other.kill()
    other.wait()
    assert taken["_rc"] == 0 and taken["taken_over"]["id"] == "run-a"


def test_lock_from_before_a_reboot_is_stale(tmp_path):
    lock = tmp_path / "run.lock"
    lock.write_text(json.dumps(dict(run("run-a"), boot_id="an-earlier-boot")))
    taken = ansible("host_lock", {"path": str(lock), "run": run("run-b")})
    assert taken["_rc"] == 0 and taken["taken_over"]["reason"] == "the host rebooted since it was taken"


def test_run_identity_and_liveness():
    me = stack_run.identity()
    assert me["id"].startswith(socket.gethostname() + "-%d-" % me["pid"])
    assert stack_run.alive(me["id"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not stack_run.alive("%s-%d-%s" % (socket.gethostname(), dead.pid, "1"))
    # A reused pid is another process: its start time differs.
    assert not stack_run.alive("%s-%d-%s" % (socket.gethostname(), os.getpid(), "1"))
    assert stack_run.alive("another-controller-123-456")  # cannot be checked from here: assumed alive


def test_only_the_run_that_marked_a_layer_completes_it(tmp_path):
    args = {"name": "cuda", "state_dir": str(tmp_path), "layers": ["preflight", "cuda"]}
    assert ansible("layer_state", dict(args, state="building", run="run-a"))["_rc"] == 0
    other = ansible("layer_state", dict(args, state="present", run="run-b", version="1"))
    assert other["_rc"] != 0 and "marked building by run run-a, not by this run (run-b)" in other["msg"]
    assert json.loads((tmp_path / "cuda.json").read_text())["status"] == "building"
    assert ansible("layer_state", dict(args, state="present", run="run-a", version="1"))["_rc"] == 0
    assert json.loads((tmp_path / "cuda.json").read_text())["status"] == "complete"
