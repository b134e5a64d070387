"""One run at a time per host: the host_lock module and the stack_run lookup.

The module runs in this process (tests/fixtures/module_run.py: its main() with patched arguments,
exit_json and fail_json), the way a task runs it on the host, minus the transport; test_through_ansible
and the flock test run it as a task and in a Python of its own."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible import context
from ansible.errors import AnsibleError
from conftest import run_module
from module_run import in_process

import host_lock
import stack_run

REPO = Path(__file__).resolve().parents[2]


def lock(args: dict, check: bool = False) -> dict:
    """host_lock's result for `args`, run in this process (in check mode with `check`); _rc is 0
    (exit_json) or 1 (fail_json)."""
    return in_process(host_lock, args, check=check)


def run(name: str, **extra) -> dict:
    return dict(
        {"id": name, "controller": "ctl", "pid": 4242, "user": "alice", "started": "2026-12-01T00:00:00Z"}, **extra
    )


def holder(path: Path) -> dict:
    return json.loads(path.read_text())


def test_second_run_is_refused_with_the_holder(tmp_path):
    path = tmp_path / "run.lock"
    first = lock({"path": str(path), "run": run("run-a")})
    assert first["_rc"] == 0 and not first["changed"] and first["holder"]["id"] == "run-a"
    assert lock({"path": str(path), "run": run("run-a")})["_rc"] == 0  # a later stage of the same run
    second = lock({"path": str(path), "run": run("run-b")})
    assert second["_rc"] != 0
    assert "Another run of the stack holds this host: run run-a of alice@ctl (controller pid 4242)" in second["msg"]
    assert "rerun with -e break_lock=run-a" in second["msg"]
    assert holder(path)["id"] == "run-a"


def test_break_lock_must_name_the_holder_exactly(tmp_path):
    path = tmp_path / "run.lock"
    lock({"path": str(path), "run": run("run-a")})
    for wrong in ("run-x", "run-", "run-a ", "unreadable"):
        refused = lock({"path": str(path), "run": run("run-b"), "break_lock": wrong})
        assert refused["_rc"] != 0, wrong
        assert "-e break_lock=%s does not name it" % wrong in refused["msg"]
        assert holder(path)["id"] == "run-a"
    taken = lock({"path": str(path), "run": run("run-b"), "break_lock": "run-a"})
    assert taken["_rc"] == 0 and taken["taken_over"]["id"] == "run-a"
    assert taken["taken_over"]["reason"] == "broken with -e break_lock=run-a"
    assert holder(path)["id"] == "run-b"
    # Only the holder releases.
    lock({"path": str(path), "run": run("run-a"), "state": "released"})
    assert holder(path)["id"] == "run-b"
    lock({"path": str(path), "run": run("run-b"), "state": "released"})
    assert not path.exists()


def test_a_holder_found_gone_is_taken_over(tmp_path):
    path = tmp_path / "run.lock"
    lock({"path": str(path), "run": run("run-a")})
    assert lock({"path": str(path), "run": run("run-b"), "takeover": "run-x"})["_rc"] != 0
    taken = lock({"path": str(path), "run": run("run-b"), "takeover": "run-a"})
    assert taken["_rc"] == 0
    assert taken["taken_over"]["reason"] == "its ansible-playbook process is gone from its controller"


def test_a_dead_runs_steps_keep_its_lock_even_from_break_lock(tmp_path):
    """The controller of run-a is gone, but a step of it still runs on the host: no takeover, whoever asks."""
    path = tmp_path / "run.lock"
    lock({"path": str(path), "run": run("run-a")})
    step = subprocess.Popen(["sleep", "60"], env=dict(os.environ, VERL_P40_RUN="run-a"))
    other = subprocess.Popen(["sleep", "60"], env=dict(os.environ, VERL_P40_RUN="run-ab"))
    try:
        for how in ({"takeover": "run-a"}, {"break_lock": "run-a"}):
            refused = lock(dict({"path": str(path), "run": run("run-b")}, **how))
            assert refused["_rc"] != 0
            assert (
                "its steps still run on this host: pid %d (uid %d: sleep 60)" % (step.pid, os.getuid())
                in (refused["msg"])
            )
            assert "kill %d" % step.pid in refused["msg"] and str(other.pid) not in refused["msg"]
            assert holder(path)["id"] == "run-a"
    finally:
        step.kill()
        step.wait()
    taken = lock({"path": str(path), "run": run("run-b"), "break_lock": "run-a"})
    other.kill()
    other.wait()
    assert taken["_rc"] == 0 and taken["taken_over"]["id"] == "run-a"


def test_lock_from_before_a_reboot_is_stale(tmp_path):
    path = tmp_path / "run.lock"
    path.write_text(json.dumps(run("run-a", boot_id="an-earlier-boot")))
    taken = lock({"path": str(path), "run": run("run-b")})
    assert taken["_rc"] == 0 and taken["taken_over"]["reason"] == "the host rebooted since it was taken"


@pytest.mark.parametrize("content", ["{not json", "[]", '{"pid": 1}', '{"id": ""}', ""])
def test_an_unreadable_lock_stops_the_run_with_what_to_do(tmp_path, content, monkeypatch):
    # Only this test's processes count: another test's containers on this machine run steps of runs too.
    ours: set[int] = set()
    every = host_lock.jobs_of
    monkeypatch.setattr(host_lock, "jobs_of", lambda *a, **k: [job for job in every(*a, **k) if job[0] in ours])
    path = tmp_path / "run.lock"
    path.write_text(content)
    refused = lock({"path": str(path), "run": run("run-b")})
    assert refused["_rc"] != 0 and refused["holder"]["unreadable"]
    assert "The host's run lock %s cannot be read" % path in refused["msg"]
    assert "rm %s" % path in refused["msg"] and "-e break_lock=unreadable" in refused["msg"]
    # Not taken over by a run id (there is none to name), nor by the controller's liveness check.
    assert lock({"path": str(path), "run": run("run-b"), "break_lock": ""})["_rc"] != 0
    assert lock({"path": str(path), "run": run("run-b"), "takeover": ""})["_rc"] != 0
    assert path.read_text() == content
    # A step of some run still on the host: not even break_lock=unreadable takes it.
    step = subprocess.Popen(["sleep", "60"], env=dict(os.environ, VERL_P40_RUN="run-q"))
    ours.add(step.pid)
    try:
        busy = lock({"path": str(path), "run": run("run-b"), "break_lock": "unreadable"})
        assert busy["_rc"] != 0 and "pid %d" % step.pid in busy["msg"]
    finally:
        step.kill()
        step.wait()
    taken = lock({"path": str(path), "run": run("run-b"), "break_lock": "unreadable"})
    assert taken["_rc"] == 0 and taken["taken_over"]["unreadable"] and holder(path)["id"] == "run-b"


def test_check_mode_takes_nothing(tmp_path):
    path = tmp_path / "run.lock"
    looked = lock({"path": str(path), "run": run("run-a")}, check=True)
    assert looked["_rc"] == 0 and looked["holder"]["id"] == "run-a" and not path.exists()
    lock({"path": str(path), "run": run("run-a")})
    other = lock({"path": str(path), "run": run("run-b"), "break_lock": "run-a"}, check=True)
    assert other["_rc"] == 0 and other["holder"]["id"] == "run-a" and "taken_over" not in other


def test_the_decision_is_made_under_a_flock_of_the_directory(tmp_path):
    """Two runs that find the same stale lock cannot both take it over: each decides alone."""
    path = tmp_path / "run.lock"
    path.write_text(json.dumps(run("run-a", boot_id="an-earlier-boot")))
    # The module in a Python of its own, library/ on its PYTHONPATH (pytest.ini's pythonpath is this one's).
    script = (
        "import ansible.module_utils; ansible.module_utils.__path__.append(%r); "
        "import host_lock; from ansible.module_utils.testing import patch_module_args\n"
        "with patch_module_args(%r): host_lock.main()"
        % (str(REPO / "module_utils"), {"path": str(path), "run": run("run-b")})
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "library"), os.environ.get("PYTHONPATH")]))
    )
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        waiting = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
        time.sleep(1.5)
        assert waiting.poll() is None, "decided without the directory's flock"
        assert holder(path)["id"] == "run-a"
    finally:
        os.close(fd)
    out, _ = waiting.communicate(timeout=60)
    assert waiting.returncode == 0 and json.loads(out)["taken_over"]["id"] == "run-a"


def test_through_ansible(tmp_path):
    """The same module as a task runs it (argument spec, transport)."""
    path = str(tmp_path / "run.lock")
    assert run_module("host_lock", {"path": path, "run": run("run-a")})["_rc"] == 0
    refused = run_module("host_lock", {"path": path, "run": run("run-b"), "break_lock": "run-x"})
    assert refused["_rc"] != 0 and "-e break_lock=run-a" in refused["msg"]


# -- the stack_run lookup -----------------------------------------------------------------------


def test_run_identity():
    me = stack_run.identity()
    host, pid, nonce = me["id"].rsplit("-", 2)
    assert host == socket.gethostname() == me["controller"] and int(pid) == me["pid"] == os.getpid()
    assert len(nonce) == 16 and me["ticks"] == stack_run.start_ticks(os.getpid())
    assert me["instance"] == stack_run.instance() != ""
    assert stack_run.identity()["id"] == me["id"]  # the same for the whole run


def _id_in_a_worker(queue) -> None:
    queue.put(stack_run.identity()["id"])


def test_every_forked_worker_gets_the_same_id():
    """Ansible templates a task's arguments in a worker forked from ansible-playbook: one id for all."""
    fork = multiprocessing.get_context("fork")
    queue = fork.Queue()
    workers = [fork.Process(target=_id_in_a_worker, args=(queue,)) for _ in range(2)]
    for worker in workers:
        worker.start()
    ids = {queue.get(timeout=30) for _ in workers}
    for worker in workers:
        worker.join()
    assert ids == {stack_run.identity()["id"]}


def test_the_id_is_random_per_run(monkeypatch):
    """Same host name, pid and start time (a cloned VM, a container) but another run: another id."""
    me = stack_run.identity()["id"]
    monkeypatch.setattr(multiprocessing.current_process(), "authkey", os.urandom(32))
    assert stack_run.identity()["id"] != me
    assert stack_run.identity()["id"].startswith(me.rsplit("-", 1)[0] + "-")


def test_liveness_is_judged_only_for_a_holder_of_this_controller():
    me = stack_run.identity()
    assert stack_run.alive(me)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = dict(me, id="x", pid=dead.pid)
    assert not stack_run.alive(gone)
    # A reused pid is another process: its start time differs.
    assert not stack_run.alive(dict(me, id="x", ticks="1"))
    # Another machine with this host name (a clone, a container, a CI runner): cannot be checked here.
    assert stack_run.alive(dict(gone, instance="0" * 32))
    # A lock of an older version (host name, pid and start ticks in the id, no instance).
    assert stack_run.alive({"id": "%s-%d-1" % (socket.gethostname(), dead.pid), "pid": dead.pid})
    assert stack_run.alive({"id": "unreadable", "unreadable": True}) and stack_run.alive("a-1-2")
    assert stack_run.alive(dict(gone, pid="%d" % dead.pid)) and stack_run.alive(dict(gone, pid=True))


def test_without_a_machine_id_nothing_is_judged(monkeypatch, tmp_path):
    me = stack_run.identity()
    monkeypatch.setattr(stack_run, "MACHINE_IDS", (str(tmp_path / "none"), str(tmp_path / "empty")))
    (tmp_path / "empty").write_text("\n")
    assert stack_run.instance() == ""
    assert stack_run.alive(dict(me, ticks="1", instance=""))


@pytest.mark.parametrize(
    "cli, refused",
    [
        ({"start_at_task": "Cuda | Run the installer"}, "--start-at-task"),
        ({"skip_tags": ("always",)}, "--skip-tags always"),
        ({"skip_tags": ("preflight",)}, None),
        ({"skip_tags": ("always",), "check": True}, None),
        ({}, None),
    ],
)
def test_a_run_that_skips_the_lock_gets_no_id(monkeypatch, cli, refused):
    monkeypatch.setattr(context, "CLIARGS", cli)
    lookup = stack_run.LookupModule()
    if refused is None:
        assert lookup.run([])[0]["id"] == stack_run.identity()["id"]
        return
    with pytest.raises(AnsibleError, match="This run skips the host lock \\(%s" % refused):
        lookup.run([])
    assert lookup.run(["alive", {}]) == [True]  # the liveness check is no step of a layer
