"""lookup_plugins/stack_run.py: the edges of the run's identity and of a holder's liveness.

test_host_lock runs the lookup as the lock uses it; this file holds what decides a takeover at its
edges: which holders can be judged at all (a wrong "gone" lets two runs build one host), where the
controller's identity comes from, and what the lookup refuses."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import stack_run
from ansible import context
from ansible.errors import AnsibleError


@pytest.fixture
def sleeper():
    """A process of this controller that runs for the test's length."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_start_ticks_are_the_process_s_start_since_boot(sleeper):
    """What tells a reused pid from the run that held the lock: the start time in clock ticks."""
    with open("/proc/uptime", encoding="ascii") as handle:
        uptime = float(handle.read().split()[0])
    ticks = stack_run.start_ticks(sleeper.pid)
    assert ticks.isdigit()
    assert abs(int(ticks) / os.sysconf("SC_CLK_TCK") - uptime) < 5
    assert stack_run.start_ticks(sleeper.pid) == ticks  # the same at every look
    assert stack_run.start_ticks(2**22 + 1) is None  # above pid_max: no such process


def test_the_controller_s_instance_needs_a_machine_id_a_boot_id_and_a_pid_namespace(monkeypatch, tmp_path):
    mine, machine_ids = stack_run.instance(), stack_run.MACHINE_IDS
    assert len(mine) == 32 and int(mine, 16) >= 0
    # /etc/machine-id missing (a minimal container): dbus's copy is read instead.
    (tmp_path / "dbus").write_text("0123456789abcdef\n")
    monkeypatch.setattr(stack_run, "MACHINE_IDS", (str(tmp_path / "none"), str(tmp_path / "dbus")))
    from_dbus = stack_run.instance()
    assert len(from_dbus) == 32 and from_dbus != mine
    # A machine id that is not text is no machine id.
    (tmp_path / "dbus").write_bytes(b"\xff\xfe\n")
    assert stack_run.instance() == ""
    monkeypatch.setattr(stack_run, "MACHINE_IDS", (str(tmp_path / "none"), str(tmp_path / "binary"), *machine_ids))
    (tmp_path / "binary").write_bytes(b"\xff\xfe\n")
    assert stack_run.instance() == mine  # skipped, the next one read
    # No boot id, or no pid namespace to read: nothing this controller sees can be judged.
    monkeypatch.setattr(stack_run, "BOOT_ID", str(tmp_path / "no-boot-id"))
    assert stack_run.instance() == ""
    monkeypatch.undo()

    def no_namespace(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(stack_run.os, "readlink", no_namespace)
    assert stack_run.instance() == ""


def test_a_holder_is_gone_only_when_its_start_time_says_so(sleeper):
    me = stack_run.identity()
    holder = dict(me, pid=sleeper.pid, ticks=stack_run.start_ticks(sleeper.pid))
    assert stack_run.alive(holder)
    # What cannot be a process of this controller, or a lock without a start time: never gone.
    for odd in (dict(pid=0), dict(pid=-1), dict(ticks=None), dict(ticks=""), dict(ticks=12)):
        assert stack_run.alive(dict(holder, **odd)), odd
    assert not stack_run.alive(dict(holder, ticks="1"))  # a reused pid: another process


@pytest.mark.parametrize("tag", ["always", "all"])
def test_skipping_the_lock_s_tags_is_refused_and_says_what_to_drop(monkeypatch, tag):
    monkeypatch.setattr(context, "CLIARGS", {"skip_tags": ("preflight", tag)})
    with pytest.raises(AnsibleError) as refused:
        stack_run.LookupModule().run([])
    assert "This run skips the host lock (--skip-tags %s skips" % tag in str(refused.value)
    assert "Rerun without --skip-tags: pick layers with --tags <layer>" in str(refused.value)
    monkeypatch.setattr(context, "CLIARGS", {"start_at_task": "Cuda | Install"})
    with pytest.raises(AnsibleError, match="Rerun without --start-at-task: pick layers"):
        stack_run.LookupModule().run([])


def test_the_lookup_answers_alive_for_the_holder_it_is_given(monkeypatch):
    monkeypatch.setattr(context, "CLIARGS", {})
    me = stack_run.identity()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lookup = stack_run.LookupModule()
    assert lookup.run(["alive", dict(me, pid=dead.pid)]) == [False]
    assert lookup.run(["alive", me]) == [True]
    for wrong in (["alive"], ["alive", me, me], ["dead", me], ["identity"]):
        with pytest.raises(AnsibleError, match=r"use lookup\('stack_run'\) or lookup\('stack_run', 'alive', HOLDER\)"):
            lookup.run(wrong)
    assert lookup.run([])[0]["id"] == me["id"]


def test_a_process_name_with_parentheses_does_not_shift_the_fields():
    """/proc/<pid>/stat puts the process's name in parentheses, unescaped: the fields are counted from
    the last ")", so a name such as "run) (x) y" still gives the start time."""
    code = "import ctypes, time; ctypes.CDLL(None).prctl(15, b'run) (x) y', 0, 0, 0); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        for _ in range(100):
            with open("/proc/%d/comm" % proc.pid, encoding="ascii") as handle:
                if handle.read().startswith("run) (x) y"):
                    break
            time.sleep(0.05)
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
        ticks = stack_run.start_ticks(proc.pid)
        assert ticks is not None and abs(int(ticks) / os.sysconf("SC_CLK_TCK") - uptime) < 5
    finally:
        proc.kill()
        proc.wait()


def test_a_run_that_is_pid_1_is_judged_like_any_other():
    """ansible-playbook as a container's first process has pid 1: its start time still tells it apart."""
    me = stack_run.identity()
    ticks = stack_run.start_ticks(1)
    assert stack_run.alive(dict(me, pid=1, ticks=ticks))
    assert not stack_run.alive(dict(me, pid=1, ticks=str(int(ticks) + 1)))
