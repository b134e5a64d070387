"""The action plugin action_plugins/stack_wait.py in this process: the progress lines a user sees while
an async job runs, the result the task returns, the failures and the clean-up, with the host and the
clock made up (a fraction of a second, where test_stack_wait.py's real plays take a minute: the
mutation runs of tools/mutate.py repeat these)."""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import pytest
from repo import REPO, load_file

ACTION = load_file(REPO / "action_plugins" / "stack_wait.py", "stack_wait_action")

JID = "j601154488796.25862"
RUNNING = {"started": 1, "finished": 0, "ansible_job_id": JID}


def done(**result: Any) -> dict:
    """A finished job's status, as async_status returns it: the module's result and async's own keys."""
    return dict(
        {"started": 1, "finished": 1, "ansible_job_id": JID, "results_file": "/root/.ansible_async/" + JID}, **result
    )


class Clock:
    """time.monotonic and time.sleep: the time moves only when the plugin sleeps (or the host answers)."""

    def __init__(self) -> None:
        self.now = 5000.0
        self.sleeps: List[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Screen:
    """The plugin's Display: what it printed, and whether to stderr."""

    def __init__(self) -> None:
        self.lines: List[str] = []

    def display(self, msg: str, stderr: bool = False) -> None:
        assert stderr, "a progress line went to stdout: %s" % msg
        self.lines.append(msg)


class Task:
    """What ActionBase.run and the plugin read of a task."""

    def __init__(self, args: dict, check_mode: bool = False, name: str = "cuda : Wait for the installer"):
        self.args, self.check_mode, self.name = args, check_mode, name
        self.async_val, self.action = 0, "stack_wait"

    def get_name(self) -> str:
        return self.name


class Wait:
    """One stack_wait task, run in this process against a made-up host: `statuses` are what successive
    looks at the job's status file find (the last one finished), `answer` what a command returns
    (argv -> the command module's result); each look at the job costs `lag` seconds."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        args: dict,
        statuses: List[dict],
        answer: Optional[Callable[[List[str]], dict]] = None,
        lag: float = 0.0,
        async_dir: Optional[str] = None,
        **task: Any,
    ):
        self.clock, self.screen = Clock(), Screen()
        monkeypatch.setattr(ACTION, "time", self.clock)
        monkeypatch.setattr(ACTION, "display", self.screen)
        self.statuses, self.answer, self.lag = list(statuses), answer or (lambda argv: {"rc": 0, "stdout": ""}), lag
        self.looks: List[dict] = []  # the async_status calls' arguments
        self.commands: List[List[str]] = []  # the command calls' argv
        self.calls: List[str] = []  # both, in order: "status", "cleanup", or the command's name
        self.tmp_paths = 0
        action = ACTION.ActionModule.__new__(ACTION.ActionModule)
        action._task = Task(args, **task)
        action._load_name = "stack_wait"
        action._connection = type("Connection", (), {"_shell": type("Shell", (), {"tmpdir": None})()})()
        action._execute_module = self.execute
        action.get_shell_option = lambda option, default=None: (
            async_dir if option == "async_dir" and async_dir else default
        )
        action._remote_expand_user = lambda path: path.replace("~", "/root", 1)
        action._make_tmp_path = self.make_tmp_path
        self.action = action

    def make_tmp_path(self) -> str:
        self.tmp_paths += 1
        return "/root/.ansible/tmp/x"

    def execute(self, module_name: str, module_args: dict, task_vars: Any) -> dict:
        if module_name == "ansible.legacy.async_status":
            self.looks.append(module_args)
            self.calls.append(module_args["mode"])
            if module_args["mode"] == "cleanup":
                return {"erased": module_args["_async_dir"] + "/" + module_args["jid"]}
            assert self.statuses, "the job's status was read again after it ended"
            self.clock.now += self.lag
            return self.statuses.pop(0)
        assert module_name == "ansible.legacy.command", module_name
        self.commands.append(module_args["argv"])
        self.calls.append(module_args["argv"][0])
        return self.answer(module_args["argv"])

    def run(self, task_vars: Any = None) -> dict:
        return self.action.run(task_vars={"inventory_hostname": "apex"} if task_vars is None else task_vars)

    def elapsed(self) -> float:
        return self.clock.now - 5000.0


def wait(monkeypatch: pytest.MonkeyPatch, args: dict, statuses: List[dict], **kwargs: Any) -> Wait:
    return Wait(monkeypatch, dict({"jid": JID}, **args), statuses, **kwargs)


# -- the progress lines ------------------------------------------------------------------------------


def test_a_line_every_every_seconds_on_stderr_with_the_host_label_time_size_and_log(monkeypatch):
    sizes = iter([812, 3_400_000, 2_900_000_000])

    def host(argv: List[str]) -> dict:
        if argv[0] == "du":
            return {"rc": 0, "stdout": "%d\t%s\n" % (next(sizes), argv[-1])}
        if argv[0] == "tail":
            return {"rc": 0, "stdout": "checking\nunpacking\n  extracting lib%d.so  \n" % len(w.commands)}
        return {"rc": 0, "stdout": ""}

    args = {"label": "CUDA", "every": 10, "size_of": "/srv/cuda.run.part", "log": "/var/log/cuda.log"}
    w = wait(monkeypatch, args, [RUNNING] * 9 + [done(rc=0)], answer=host)
    result = w.run()
    # Looks at 0.5, 1.5, 3.5 and 7.5 s, then every 5 s (every is longer); a line at the first look once
    # 10 s have passed since the last one: at 12.5, 22.5 and 32.5 s.
    assert w.clock.sleeps == [0.5, 1, 2, 4] + [5] * 6
    assert w.screen.lines == [
        "  apex | CUDA: 12s, 812 B, extracting lib2.so",
        "  apex | CUDA: 22s, 3.4 MB, extracting lib4.so",
        "  apex | CUDA: 32s, 2.9 GB, extracting lib6.so",
    ]
    assert result["progress"] == [line.split(" | ", 1)[1] for line in w.screen.lines]
    # The size and the log are read for a line only, with du in bytes and tail's last three lines.
    assert w.commands[:2] == [
        ["du", "-s", "-B1", "--", "/srv/cuda.run.part"],
        ["tail", "-n", "3", "--", "/var/log/cuda.log"],
    ]
    assert [c for c in w.calls if c != "status"] == ["du", "tail"] * 3 + ["cleanup", "sh"]


def test_an_every_shorter_than_the_poll_caps_the_poll(monkeypatch):
    w = wait(monkeypatch, {"label": "Apex", "every": 3}, [RUNNING] * 5 + [done(rc=0)])
    assert w.run()["progress"] == ["Apex: 3s", "Apex: 6s", "Apex: 9s"]
    assert w.clock.sleeps == [0.5, 1, 2, 3, 3, 3]


def test_every_one_second_is_allowed(monkeypatch):
    w = wait(monkeypatch, {"label": "Apex", "every": 1}, [RUNNING] * 3 + [done(rc=0)])
    assert w.run()["progress"] == ["Apex: 1s", "Apex: 2s"]
    assert w.clock.sleeps == [0.5, 1, 1, 1]


@pytest.mark.parametrize(
    "lag, looks, lines", [(0, 15, ["Apex: 32s", "Apex: 1m02s"]), (0.8, 14, ["Apex: 33s", "Apex: 1m08s"])]
)
def test_by_default_a_line_every_30_seconds_and_no_timeout(monkeypatch, lag, looks, lines):
    """Looks at 0.5, 1.5, 3.5, 7.5 s, then 5 s apart: a line at 32.5 s and at 62.5 s. A look at the job
    that takes 0.8 s: the looks come 5.8 s apart, and a line only once 30 s have passed since the
    last (at 62.9 s, 29 s after the line at 33.9 s, is not yet)."""
    w = wait(monkeypatch, {"label": "Apex"}, [RUNNING] * looks + [done(rc=0)], lag=lag)
    assert w.run()["progress"] == lines
    assert w.clock.sleeps == [0.5, 1, 2, 4] + [5] * (looks - 3)


def test_a_short_job_is_seen_done_within_a_second_or_two(monkeypatch):
    """pip with nothing to fetch, a small unpack: the first looks come at 0.5, 1.5 and 3.5 s, so a job
    of two seconds is seen done at 3.5 s (a look every 5 s saw it at 5 s, one of 5.5 s at 10 s)."""
    w = wait(monkeypatch, {"label": "Pip"}, [RUNNING] * 2 + [done(rc=0)])
    assert w.run()["seconds"] == 3.5
    assert w.clock.sleeps == [0.5, 1, 2]


def test_a_long_wait_without_a_timeout_goes_on(monkeypatch):
    w = wait(monkeypatch, {"label": "Apex", "every": 3600}, [RUNNING] * 1500 + [done(rc=0)])
    result = w.run()
    assert "failed" not in result and result["progress"] == ["Apex: 1h00m", "Apex: 2h00m"]


def test_the_label_is_the_task_s_name_when_empty_and_no_host_no_host_part(monkeypatch):
    # Looks at 0.5, 1.5, 3.5 and 7.5 s: a line at 7.5 s.
    w = wait(monkeypatch, {"every": 5}, [RUNNING] * 4 + [done(rc=0)], name="apex : Build Apex")
    assert w.run(task_vars={})["progress"] == ["apex : Build Apex: 7s"]
    assert w.screen.lines == ["  apex : Build Apex: 7s"]
    w = wait(monkeypatch, {"every": 5, "label": "Apex"}, [RUNNING] * 4 + [done(rc=0)], name="apex : Build Apex")
    assert w.action.run(task_vars=None)["progress"] == ["Apex: 7s"]
    assert w.screen.lines == ["  Apex: 7s"]


def test_a_size_or_log_the_host_cannot_read_yet_shows_0_b_and_no_line(monkeypatch):
    """Before the download starts there is no file to measure, and before the build writes its log
    there is no log: du and tail fail, and the line says 0 B and nothing of the log."""
    w = wait(
        monkeypatch,
        {"label": "Torch", "every": 5, "size_of": "/srv/torch.whl", "log": "/var/log/pip.log"},
        [RUNNING] * 4 + [done(rc=0)],
        answer=lambda argv: {"rc": 1, "stdout": "12345\tpartial\n", "stderr": "No such file"},
    )
    assert w.run()["progress"] == ["Torch: 7s, 0 B"]


def test_an_empty_size_and_a_log_of_blank_lines(monkeypatch):
    w = wait(
        monkeypatch,
        {"label": "Torch", "every": 5, "size_of": "/srv/torch.whl", "log": "/var/log/pip.log"},
        [RUNNING] * 4 + [done(rc=0)],
        answer=lambda argv: {"rc": 0, "stdout": "\n  \n\n"},
    )
    assert w.run()["progress"] == ["Torch: 7s, 0 B"]


def test_no_size_of_and_no_log_runs_nothing_on_the_host_for_a_line(monkeypatch):
    w = wait(monkeypatch, {"label": "Apex", "every": 5}, [RUNNING] * 4 + [done(rc=0)])
    assert w.run()["progress"] == ["Apex: 7s"]
    assert [argv[0] for argv in w.commands] == ["sh"]


@pytest.mark.parametrize(
    "size, last, line",
    [
        (None, "", "Apex: 1m05s"),
        (0, "", "Apex: 1m05s, 0 B"),
        (None, "x" * 120, "Apex: 1m05s, " + "x" * 120),
        (1000, "y" * 121, "Apex: 1m05s, 1.0 kB, " + "y" * 117 + "..."),
        (5, "z" * 300, "Apex: 1m05s, 5 B, " + "z" * 117 + "..."),
    ],
)
def test_a_progress_line_and_the_cut_of_a_long_log_line(size, last, line):
    assert ACTION.progress_line("Apex", 65.7, size, last) == line


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0s"),
        (59.9, "59s"),
        (60, "1m00s"),
        (245, "4m05s"),
        (3599, "59m59s"),
        (3600, "1h00m"),
        (3725, "1h02m"),
        (7140, "1h59m"),
        (7199, "1h59m"),
        (90061, "25h01m"),
    ],
)
def test_human_seconds(seconds, text):
    assert ACTION.human_seconds(seconds) == text


@pytest.mark.parametrize(
    "size, text",
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (999_949, "999.9 kB"),
        (1_000_000, "1.0 MB"),
        (3_400_000, "3.4 MB"),
        (4_300_000_000, "4.3 GB"),
        (4_300_000_000_000, "4300.0 GB"),
    ],
)
def test_human_bytes(size, text):
    assert ACTION.human_bytes(size) == text


# -- the result --------------------------------------------------------------------------------------


def test_the_result_is_the_job_s_own_and_nothing_else_of_its_status_file(monkeypatch):
    """A job that runs as the training user can rewrite its status file: nothing but the result keys
    reach the play (no ansible_facts, no _ansible_* keys, none of async's own)."""
    job = {
        "rc": 0,
        "cmd": ["/srv/cuda.run", "--silent"],
        "stdout": "done",
        "stdout_lines": ["done"],
        "stderr": "",
        "stderr_lines": [],
        "start": "2026-12-04 10:00:00.000001",
        "end": "2026-12-04 10:20:00.000001",
        "delta": "0:20:00.000000",
        "msg": "",
    }
    forged = {"ansible_facts": {"stack_user": "root"}, "_ansible_no_log": False, "invocation": {}, "changed": True}
    w = wait(monkeypatch, {"label": "Apex", "every": 5}, [RUNNING] * 4 + [done(**job, **forged)], lag=0.04)
    result = w.run()
    assert result == dict(job, changed=True, seconds=12.7, progress=["Apex: 7s"])


def test_the_seconds_are_the_whole_wait_to_a_tenth(monkeypatch):
    # Sleeps of 0.5 and 1 s and two looks of 0.04 s: 1.58 s.
    w = wait(monkeypatch, {"every": 30}, [RUNNING, done(rc=0, changed=False)], lag=0.04)
    result = w.run()
    assert result["seconds"] == 1.6 and result["changed"] is False and result["progress"] == []


def test_a_job_result_without_changed_is_unchanged(monkeypatch):
    assert wait(monkeypatch, {}, [done(rc=0)]).run()["changed"] is False


@pytest.mark.parametrize(
    "job, msg",
    [
        ({"rc": 3, "stderr": "broken", "failed": True, "msg": "non-zero return code"}, "non-zero return code"),
        ({"rc": 3, "stderr": "broken"}, "the job failed"),
        ({"failed": True}, "the job failed"),
    ],
)
def test_a_failed_job_fails_the_task_with_its_result(monkeypatch, job, msg):
    w = wait(monkeypatch, {}, [RUNNING, done(**job)])
    result = w.run()
    assert result["failed"] is True and result["msg"] == msg
    assert result.get("rc") == job.get("rc") and result.get("stderr") == job.get("stderr")
    # Its status file and its wrapper are gone all the same.
    assert w.calls == ["status", "status", "cleanup", "sh"]


def test_a_status_that_says_failed_before_finished_ends_the_wait(monkeypatch):
    """async_status fails for a job whose status file is gone or unreadable."""
    w = wait(monkeypatch, {}, [{"failed": True, "msg": "could not find job", "ansible_job_id": JID}])
    result = w.run()
    assert result["failed"] is True and result["msg"] == "could not find job"
    assert w.calls == ["status", "cleanup", "sh"]


@pytest.mark.parametrize("job", [{"rc": 0}, {"rc": None}, {}])
def test_a_job_with_rc_0_or_none_is_not_failed(monkeypatch, job):
    result = wait(monkeypatch, {}, [done(**job)]).run()
    assert "failed" not in result and "msg" not in result


def test_a_job_skipped_in_check_mode_skips_the_task(monkeypatch):
    """In check mode the async command module runs in check mode and reports itself skipped."""
    status = done(skipped=True, changed=False, msg="Command would have run if not in check mode")
    w = wait(monkeypatch, {}, [status], check_mode=True)
    result = w.run()
    assert result["skipped"] is True and "failed" not in result
    assert result["msg"] == "Command would have run if not in check mode"
    assert "skipped" not in wait(monkeypatch, {}, [done(rc=0)]).run()


def test_an_empty_jid_skips_the_wait_without_a_look_at_the_host(monkeypatch):
    w = wait(monkeypatch, {"jid": ""}, [])
    assert w.run() == {"skipped": True, "msg": "no job to wait for (it was skipped)"}
    assert w.calls == []


def test_the_wait_makes_no_temporary_directory_on_the_host(monkeypatch):
    w = wait(monkeypatch, {}, [done(rc=0)])
    w.run()
    assert w.tmp_paths == 0


# -- the timeout --------------------------------------------------------------------------------------


def test_the_timeout_fails_once_passed_and_says_the_job_goes_on(monkeypatch):
    """Timeout 10: the look at 7.5 s still waits, the one at 12.5 s fails; the job is left to run, its
    status file and wrapper untouched."""
    w = wait(monkeypatch, {"label": "Install", "timeout": 10}, [RUNNING] * 10)
    with pytest.raises(ACTION.AnsibleActionFail) as failed:
        w.run()
    assert str(failed.value) == (
        "Install: still running after 12s (stack_wait timeout 10 s); the job %s goes on on the host" % JID
    )
    assert w.calls == ["status"] * 5


def test_a_look_exactly_at_the_timeout_still_waits(monkeypatch):
    """Looks that take 0.5 s each come at 1, 2.5, 5 and 9.5 s: timeout 5 fails at the look after 5 s,
    not at the one that finds exactly 5 s gone."""
    w = wait(monkeypatch, {"label": "Install", "timeout": 5}, [RUNNING] * 10, lag=0.5)
    with pytest.raises(ACTION.AnsibleActionFail) as failed:
        w.run()
    assert "still running after 9s (stack_wait timeout 5 s)" in str(failed.value)
    assert w.calls == ["status"] * 4


def test_a_job_that_ends_within_the_timeout_is_its_result(monkeypatch):
    w = wait(monkeypatch, {"label": "Install", "timeout": 10}, [RUNNING, RUNNING, done(rc=0)])
    assert w.run()["rc"] == 0


# -- the clean-up -------------------------------------------------------------------------------------


@pytest.mark.parametrize("async_dir, expanded", [(None, "/root/.ansible_async"), ("/var/tmp/async", "/var/tmp/async")])
def test_the_status_file_is_read_then_removed_in_the_shell_s_async_dir(monkeypatch, async_dir, expanded):
    w = wait(monkeypatch, {}, [RUNNING, done(rc=0)], async_dir=async_dir)
    w.run()
    status = {"jid": JID, "mode": "status", "_async_dir": expanded}
    assert w.looks == [status, status, dict(status, mode="cleanup")]


def test_the_job_s_async_wrapper_is_ended_last_by_its_jid_prefix(monkeypatch):
    w = wait(monkeypatch, {}, [done(rc=0)])
    w.run()
    assert w.calls[-1] == "sh"
    assert w.commands == [["sh", "-c", ACTION.WRAPPER_GONE, "stack_wait", "j601154488796"]]


# -- the arguments ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        ({"every": 0}, "every must be 1 or more and timeout 0 or more"),
        ({"every": -5}, "every must be 1 or more and timeout 0 or more"),
        ({"timeout": -1}, "every must be 1 or more and timeout 0 or more"),
        ({"every": "soon"}, "every"),
        ({"jid": None}, "jid"),
        ({"wait": 5}, "wait"),
    ],
)
def test_bad_arguments_fail_before_any_look_at_the_job(monkeypatch, args, message):
    task_args = dict({"jid": JID}, **args)
    if task_args["jid"] is None:
        del task_args["jid"]
    w = Wait(monkeypatch, task_args, [done(rc=0)])
    with pytest.raises(ACTION.AnsibleActionFail, match=message):
        w.run()
    assert w.calls == []


def test_timeout_0_is_allowed(monkeypatch):
    assert wait(monkeypatch, {"timeout": 0}, [done(rc=0)]).run()["rc"] == 0
