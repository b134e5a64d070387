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
import threading
import time
from pathlib import Path

import pytest
from ansible import context
from ansible.errors import AnsibleError
from conftest import run_module
from module_run import in_process

import host_lock
import stack_run
from ansible.module_utils import stack_lock

REPO = Path(__file__).resolve().parents[2]


def lock(args: dict, check: bool = False) -> dict:
    """host_lock's result for `args`, run in this process (in check mode with `check`); _rc is 0
    (exit_json) or 1 (fail_json)."""
    return in_process(host_lock, args, check=check)


def step_of(run_id: str) -> subprocess.Popen:
    """A process of run `run_id` on this host (`sleep 60` with the run's variable), returned once it has
    exec'd: until then /proc shows the environment of the forked pytest, without the variable, and the
    module would not see the step (a race seen once)."""
    step = subprocess.Popen(["sleep", "60"], env=dict(os.environ, VERL_P40_RUN=run_id))
    wanted = ("VERL_P40_RUN=%s" % run_id).encode()
    deadline = time.monotonic() + 10
    while wanted not in Path("/proc/%d/environ" % step.pid).read_bytes().split(b"\0"):
        assert time.monotonic() < deadline, "the step never exec'd"
        time.sleep(0.01)
    return step


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
    step = step_of("run-a")
    other = step_of("run-ab")
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
    step = step_of("run-q")
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


def test_a_run_without_an_id_is_refused(tmp_path):
    """Every run that takes the lock is named by it; an empty id would match no holder, or every one."""
    for run_without_id in ({"controller": "ctl"}, run("")):
        refused = lock({"path": str(tmp_path / "run.lock"), "run": run_without_id})
        assert refused["_rc"] == 1 and refused["msg"] == "host_lock: run.id is empty."
    assert not (tmp_path / "run.lock").exists()


def test_the_lock_is_made_where_everyone_can_read_who_holds_the_host(tmp_path):
    """Its directory is made when missing; a user who cannot run the stack can still read the holder."""
    old = os.umask(0o022)
    try:
        path = tmp_path / "lib" / "verl-p40" / "run.lock"
        taken = lock({"path": str(path), "run": run("run-a")})
    finally:
        os.umask(old)
    current_boot = Path(host_lock.BOOT_ID).read_text().strip()
    assert taken["_rc"] == 0 and taken["holder"] == dict(run("run-a"), boot_id=current_boot)
    assert holder(path) == taken["holder"]
    assert path.stat().st_mode & 0o7777 == 0o644 and path.parent.stat().st_mode & 0o7777 == 0o755


def test_query_reads_the_holder_and_changes_nothing(tmp_path):
    path = tmp_path / "lock" / "run.lock"
    nobody = lock({"path": str(path), "run": run("run-a"), "state": "query"})
    assert nobody["_rc"] == 0 and nobody["holder"] == {} and not nobody["changed"]
    assert not path.parent.exists()
    lock({"path": str(path), "run": run("run-a")})
    seen = lock({"path": str(path), "run": run("run-b"), "state": "query"})
    assert seen["_rc"] == 0 and seen["holder"]["id"] == "run-a" and holder(path)["id"] == "run-a"


def test_releasing_is_the_holders_alone_and_needs_no_lock(tmp_path):
    """Another run's release leaves the lock and says whose it is; with no lock (or no directory for
    it) a release has nothing to do, and makes nothing."""
    path = tmp_path / "lock" / "run.lock"
    gone = lock({"path": str(path), "run": run("run-a"), "state": "released"})
    assert gone["_rc"] == 0 and gone["holder"] == {} and not path.parent.exists()
    lock({"path": str(path), "run": run("run-a")})
    kept = lock({"path": str(path), "run": run("run-b"), "state": "released"})
    assert kept["_rc"] == 0 and kept["holder"]["id"] == "run-a" and path.exists()
    released = lock({"path": str(path), "run": run("run-a"), "state": "released"})
    assert released["_rc"] == 0 and released["holder"] == {} and not path.exists()
    again = lock({"path": str(path), "run": run("run-a"), "state": "released"})
    assert again["_rc"] == 0 and again["holder"] == {}


def test_a_release_waits_for_the_directorys_flock(tmp_path):
    """A release is a read-decide-delete as well: it must not delete a lock another run is replacing."""
    path = tmp_path / "run.lock"
    lock({"path": str(path), "run": run("run-a")})
    results: list[dict] = []
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        releasing = threading.Thread(
            target=lambda: results.append(lock({"path": str(path), "run": run("run-a"), "state": "released"}))
        )
        releasing.start()
        releasing.join(1.0)
        assert releasing.is_alive(), "released without the directory's flock"
        assert path.exists()
    finally:
        os.close(fd)
    releasing.join(30)
    assert results[0]["_rc"] == 0 and not path.exists()


def test_a_host_without_a_boot_id_judges_no_lock_stale_by_a_reboot(tmp_path, monkeypatch):
    """Without /proc/sys/kernel/random/boot_id there is nothing to compare: a lock is no older than
    this boot as far as the module can tell, so it is refused, not taken."""
    monkeypatch.setattr(host_lock, "BOOT_ID", str(tmp_path / "no-boot-id"))
    path = tmp_path / "run.lock"
    path.write_text(json.dumps(run("run-a", boot_id="an-earlier-boot")))
    refused = lock({"path": str(path), "run": run("run-b")})
    assert refused["_rc"] == 1 and "Another run of the stack holds this host: run run-a" in refused["msg"]
    path.unlink()
    taken = lock({"path": str(path), "run": run("run-b")})
    assert taken["_rc"] == 0 and holder(path)["boot_id"] == ""
    # A lock without a boot id (an older version's) is not stale by a reboot either.
    monkeypatch.undo()
    path.write_text(json.dumps(run("run-a")))
    assert lock({"path": str(path), "run": run("run-b")})["_rc"] == 1


def test_a_lock_that_appears_after_the_read_is_not_overwritten(tmp_path, monkeypatch):
    """The lock is created exclusively: a lock another run made since this one looked (a run that
    does not take the directory's flock, an older version) stays, and its holder is named."""
    path = tmp_path / "run.lock"
    lock({"path": str(path), "run": run("run-a")})
    reads = []

    def read_late(where):
        reads.append(where)
        return None if len(reads) == 1 else stack_lock.read_lock(where)

    monkeypatch.setattr(host_lock, "read_lock", read_late)
    refused = lock({"path": str(path), "run": run("run-b")})
    assert refused["_rc"] == 1 and "holds this host: run run-a of alice@ctl" in refused["msg"]
    assert holder(path)["id"] == "run-a"


def test_a_live_holder_with_steps_running_is_simply_another_run(tmp_path):
    """Without a takeover or break_lock, the holder's running steps change nothing in the refusal: the
    run is not called gone."""
    path = tmp_path / "run.lock"
    lock({"path": str(path), "run": run("run-a")})
    step = step_of("run-a")
    try:
        refused = lock({"path": str(path), "run": run("run-b")})
    finally:
        step.kill()
        step.wait()
    assert refused["_rc"] == 1 and refused["holder"]["id"] == "run-a"
    assert refused["msg"] == (
        "Another run of the stack holds this host: run run-a of alice@ctl (controller pid 4242), started "
        "2026-12-01T00:00:00Z (lock %s). Wait for it to finish. A run of this controller that is gone is taken "
        "over by itself; this one cannot be checked from here (another machine, perhaps with the same host name, "
        "or a lock of an older version), or is still running. If you know it is no longer running (killed, or its "
        "controller is gone), rerun with -e break_lock=run-a." % path
    )


def test_breaking_an_unreadable_lock_ignores_the_asking_runs_own_steps(tmp_path, monkeypatch):
    """A step of the run that asks (an earlier stage of it) is no reason to keep the damaged lock."""
    ours: set[int] = set()
    every = host_lock.jobs_of
    monkeypatch.setattr(host_lock, "jobs_of", lambda *a, **k: [job for job in every(*a, **k) if job[0] in ours])
    path = tmp_path / "run.lock"
    path.write_text("{not json")
    own = step_of("run-b")
    ours.add(own.pid)
    try:
        taken = lock({"path": str(path), "run": run("run-b"), "break_lock": "unreadable"})
    finally:
        own.kill()
        own.wait()
    assert taken["_rc"] == 0 and taken["taken_over"]["unreadable"] and holder(path)["id"] == "run-b"
    assert taken["taken_over"]["reason"] == "unreadable, broken with -e break_lock"


def test_every_outcome_reports_no_change(tmp_path, monkeypatch):
    """The lock is run bookkeeping, not a change of the host (the module's documentation): a taken,
    kept, taken-over or released lock leaves the play's changed count to the layers."""
    monkeypatch.setattr(host_lock, "jobs_of", lambda *a, **k: [])  # other tests' steps are none of these runs'
    path = tmp_path / "run.lock"
    results = [lock({"path": str(path), "run": run("run-a")}, check=True)]
    results.append(lock({"path": str(path), "run": run("run-a")}))
    results.append(lock({"path": str(path), "run": run("run-a")}))  # a later stage of the same run
    results.append(lock({"path": str(path), "run": run("run-b"), "state": "query"}))
    results.append(lock({"path": str(path), "run": run("run-b"), "takeover": "run-a"}))
    path.write_text("{not json")
    results.append(lock({"path": str(path), "run": run("run-c"), "break_lock": "unreadable"}))
    results.append(lock({"path": str(path), "run": run("run-c"), "state": "released"}))
    assert [(result["_rc"], result["changed"]) for result in results] == [(0, False)] * len(results)
    assert [result.get("taken_over", {}).get("id") for result in results[4:6]] == ["run-a", ""]


def test_a_link_at_the_locks_directory_is_not_followed(tmp_path):
    """Root takes the directory's flock and writes or removes the lock only in a directory it opened
    without following a link: a link another user put there does not lead it elsewhere (the module
    stops on it, before it reads the lock)."""
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / "run.lock").write_text(json.dumps(run("run-a")))
    (tmp_path / "lock").symlink_to(real)
    for state in ("acquired", "released"):
        with pytest.raises(OSError, match=str(tmp_path / "lock")):
            lock({"path": str(tmp_path / "lock" / "run.lock"), "run": run("run-a"), "state": state})
    assert holder(real / "run.lock")["id"] == "run-a"


def fake_process(proc: Path, pid: str, environ: list[str] | None, cmdline: bytes = b"sleep\x0060\x00", uid: int = 0):
    """An entry of a /proc stand-in: its environ (None: the process ended while it was read) and cmdline."""
    entry = proc / pid
    entry.mkdir()
    if environ is not None:
        (entry / "environ").write_bytes(b"".join(var.encode() + b"\0" for var in environ))
        (entry / "cmdline").write_bytes(cmdline)
    os.chown(entry, uid, 0)


@pytest.mark.parametrize("listed", ["as made", "reversed"])
def test_the_steps_of_a_run_are_the_processes_whose_environment_names_it(tmp_path, monkeypatch, listed):
    """jobs_of reads VERL_P40_RUN from each process's environment: that exact run (or any run but one
    for an unreadable lock), never the module itself, and a process that ended meanwhile is no step;
    in pid order, whatever order /proc lists them in."""
    proc = tmp_path / "proc"
    proc.mkdir()
    fake_process(proc, "self", ["VERL_P40_RUN=run-a"])
    fake_process(proc, str(os.getpid()), ["VERL_P40_RUN=run-a"])
    fake_process(proc, "105", None)
    fake_process(proc, "101", ["PATH=/bin", "VERL_P40_RUN=run-a"], uid=1234)
    fake_process(proc, "9", ["VERL_P40_RUN=run-a"], cmdline=b"python3\x00" + b"x" * 200 + b"\x00")
    fake_process(proc, "102", ["VERL_P40_RUN=run-ab"])
    fake_process(proc, "103", ["PATH=/bin", "NOT_VERL_P40_RUN=run-a"])
    fake_process(proc, "104", ["VERL_P40_RUN=run-b"])
    made = ["self", str(os.getpid()), "105", "101", "9", "102", "103", "104"]
    real = os.listdir
    order = made if listed == "as made" else made[::-1]
    monkeypatch.setattr(os, "listdir", lambda where: list(order) if where == str(proc) else real(where))
    long_line = "uid 0: " + ("python3 " + "x" * 200)[:120]
    assert host_lock.jobs_of("run-a", str(proc)) == [(9, long_line), (101, "uid 1234: sleep 60")]
    assert [pid for pid, _ in host_lock.jobs_of(None, str(proc), but="run-b")] == [9, 101, 102]
    assert [pid for pid, _ in host_lock.jobs_of(None, str(proc), but="run-a")] == [102, 104]
    assert host_lock.jobs_of("run-c", str(proc)) == []


@pytest.mark.parametrize("missing", ["path", "run"])
def test_a_task_without_its_lock_path_or_run_is_refused(tmp_path, missing):
    args = {"path": str(tmp_path / "run.lock"), "run": run("run-a")}
    del args[missing]
    refused = lock(args)
    assert refused["_rc"] == 1 and refused["msg"] == "missing required arguments: " + missing


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
