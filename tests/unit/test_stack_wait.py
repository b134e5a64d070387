"""stack_wait: a long async job of a layer shows progress while it runs, and its result is the job's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import run_play

from repo import REPO, load_file

# The action plugin: `import stack_wait` is library/'s module of that name.
stack_wait = load_file(REPO / "action_plugins" / "stack_wait.py", "stack_wait_action")


def play(tmp_path: Path, tasks: list[dict]) -> subprocess.CompletedProcess:
    """ansible-playbook with the project's ansible.cfg and the default callback, on localhost."""
    return run_play(tmp_path, tasks, callback="default")


def job(command: str, register: str = "job") -> dict:
    return {"ansible.builtin.shell": command, "async": 60, "poll": 0, "register": register}


def test_progress_lines_show_time_size_and_the_logs_last_line(tmp_path: Path):
    log, blob = tmp_path / "build.log", tmp_path / "download.part"
    steps = "for i in 1 2 3 4 5 6; do echo compiling $i >> %s; head -c 200000 /dev/zero >> %s; sleep 1; done" % (
        log,
        blob,
    )
    wait = {"jid": "{{ job.ansible_job_id }}", "every": 1, "log": str(log), "size_of": str(blob), "label": "Build"}
    done = play(tmp_path, [job(steps), {"stack_wait": wait, "register": "waited"}, {"debug": {"var": "waited.rc"}}])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.strip() for line in done.stderr.splitlines() if "| Build:" in line]
    # About one line a second while the six-second job runs: the host, the label, the time, the size, the log.
    assert len(lines) >= 2, done.stderr
    assert lines[0].startswith("localhost | Build: "), lines
    assert any("kB" in line and "compiling" in line for line in lines), lines
    # The task's result is the job's own.
    assert "waited.rc: 0" in done.stdout, done.stdout


def test_a_failed_job_fails_the_task_with_its_result(tmp_path: Path):
    tasks = [job("echo broken >&2; exit 3"), {"stack_wait": {"jid": "{{ job.ansible_job_id }}"}}]
    done = play(tmp_path, tasks)
    assert done.returncode != 0
    assert "rc: 3" in done.stdout and "broken" in done.stdout, done.stdout


def test_nothing_but_the_jobs_result_reaches_the_play(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A job that runs as the training user can rewrite its own status file: facts it plants there
    must not become host facts of root's play."""
    async_dir = tmp_path / "async"
    monkeypatch.setenv("ANSIBLE_ASYNC_DIR", str(async_dir))
    forged = '{"finished": 1, "rc": 0, "stdout": "forged", "ansible_facts": {"stack_user": "root"}}'
    steps = "sleep 1; for f in %s/*; do echo '%s' > $f; done; sleep 4" % (async_dir, forged)
    tasks = [
        job(steps),
        {"stack_wait": {"jid": "{{ job.ansible_job_id }}", "every": 1}, "register": "waited"},
        {"debug": {"msg": "user=[{{ stack_user | default('unset') }}] out=[{{ waited.stdout }}]"}},
    ]
    done = play(tmp_path, tasks)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "user=[unset] out=[forged]" in done.stdout, done.stdout


def test_the_timeout_fails_and_says_the_job_goes_on(tmp_path: Path):
    tasks = [job("sleep 20"), {"stack_wait": {"jid": "{{ job.ansible_job_id }}", "timeout": 1, "label": "Install"}}]
    done = play(tmp_path, tasks)
    assert done.returncode != 0
    assert "Install: still running after" in done.stdout and "goes on on the host" in done.stdout, done.stdout


def test_a_skipped_job_skips_the_wait(tmp_path: Path):
    tasks = [
        dict(job("true"), when=False),
        {"stack_wait": {"jid": "{{ job.ansible_job_id | default('') }}"}, "register": "waited"},
        {"assert": {"that": ["waited is skipped"]}},
    ]
    done = play(tmp_path, tasks)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_long_log_line_is_cut():
    line = stack_wait.progress_line("Apex | Build", 30, None, "x" * 300)
    assert line.startswith("Apex | Build: 30s, ") and line.endswith("...") and len(line) < 150


def test_the_jobs_async_wrapper_is_gone_when_the_wait_ends(tmp_path: Path):
    """async_wrapper outlives its job by up to 5 s and carries the run's VERL_P40_RUN: a run ending on
    a failed job would leave the host lock "held by steps still running" for an immediate rerun."""
    # The pattern's [.] keeps this look's own command lines from matching it.
    look = (
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
        " | grep -c 'async_wrapper[.]py {{ job.ansible_job_id.split(\".\")[0] }} ' || true"
    )
    tasks = [
        job("echo broken >&2; exit 3"),
        {"stack_wait": {"jid": "{{ job.ansible_job_id }}"}, "ignore_errors": True},
        {"ansible.builtin.shell": look, "register": "left"},
        {"debug": {"msg": "wrappers left: {{ left.stdout }}"}},
    ]
    done = play(tmp_path, tasks)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wrappers left: 0" in done.stdout, done.stdout


def test_a_finished_jobs_wrapper_is_ended_not_waited_for(tmp_path: Path):
    """What is left of a finished job's async_wrapper only sleeps out its 5-s poll: the wait ends it
    (every async step used to cost those seconds more). A process whose command line is such a
    wrapper's, for job 4242, is gone when the script exits 0; one of another job is left alone.
    (Only waiting, as before, the script gives up after 15 s with status 1.)"""
    fake = "exec -a 'python3 /root/.ansible/tmp/async_wrapper.py %s 60 /tmp/m' sleep 60"
    ours = subprocess.Popen(["bash", "-c", fake % "4242"])
    other = subprocess.Popen(["bash", "-c", fake % "4243"])
    try:
        done = subprocess.run(["sh", "-c", stack_wait.WRAPPER_GONE, "stack_wait", "4242"], timeout=30, check=False)
        assert done.returncode == 0
        assert ours.wait(timeout=5) != 0, "the wrapper of job 4242 is still there"
        assert other.poll() is None, "the wrapper of another job was ended"
    finally:
        for process in (ours, other):
            process.kill()
            process.wait()
