"""Long steps show progress: every command of a role that installs, downloads or trains runs in the background.

A command task of roles/*/tasks that runs pip (install, wheel, download), creates or fills a conda
env, fetches (the model tool) or runs the launcher (the smoke run) can take minutes to hours. Each
is an `async` job with `poll: 0` in the stage's job environment (stack_job_environment), and the
next task of its list is `stack_wait` on that job: its id, `every: "{{ stack_progress_every }}"`, a
`log` or `size_of` to show, and the job's become settings and tags (a log the training user writes
is read as that user; `--tags smoke` runs both). A few commands that match are known to take
seconds; they are listed with the reason, and the list may not go stale.

The checks are plain functions of a project root, so the broken cases (a long step added as a
plain command, an async job polled by Ansible, a job with no wait, a wait as another user) are
shown to fail below, on copies of the roles.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from conftest import REPO, run_play

COMMANDS = {
    f"{prefix}{name}" for prefix in ("", "ansible.builtin.", "ansible.legacy.") for name in ("command", "shell")
}
WAITS = {"stack_wait", "ansible.legacy.stack_wait"}
TASK_LISTS = ("block", "rescue", "always")
# What makes a command long, in the text of its argv or command line (quotes and brackets dropped).
LONG = {
    "pip": re.compile(r"pip\s+(?:install|wheel|download)\b"),
    "conda": re.compile(r"\b(?:conda|mamba|micromamba)\s+(?:create|install|update)\b"),
    "a download": re.compile(r"\bfetch\b"),
    "a training run": re.compile(r"train\.sh\b"),
}
# Commands that name train.sh without running it: its syntax check and the override validator.
NOT_A_RUN = re.compile(r"(?:-n|--script)\s+(?:\{\{[^}]*\}\})?\S*train\.sh\b")
# (task file, task name): why the command is short although it matches.
QUICK = {
    ("roles/verl/tasks/install.yml", "Verl | Install verl editable, without dependencies"): (
        "links the checkout into the env: no dependencies, no build isolation, no download"
    ),
    ("roles/apex/tasks/compile.yml", "Apex | Install the build tools into the env"): (
        "four small hash-locked build tools (setuptools, wheel, packaging, ninja)"
    ),
    ("roles/apex/tasks/install.yml", "Apex | Install the wheel into the env"): (
        "one cached wheel of a few megabytes, --no-deps"
    ),
}


def _flat(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(_flat(value[key]) for key in ("argv", "cmd", "_raw_params") if key in value)
    if isinstance(value, list):
        return " ".join(map(_flat, value))
    return str(value)


def command_text(task: dict) -> str | None:
    """The task's command line as text, quotes, commas and brackets dropped; None for other modules."""
    for module in COMMANDS & task.keys():
        return re.sub(r"[\"',\[\]]", " ", _flat(task[module]))
    return None


def why_long(text: str) -> str | None:
    for what, pattern in LONG.items():
        if pattern.search(NOT_A_RUN.sub(" ", text) if what == "a training run" else text):
            return what
    return None


def task_lists(items: Any) -> Iterator[list[dict]]:
    """A task file's list and every block's, rescue's and always' list in it (the lists themselves)."""
    if not isinstance(items, list):
        return
    yield items
    for task in items:
        for key in TASK_LISTS:
            if isinstance(task, dict) and key in task:
                yield from task_lists(task[key])


def long_steps(root: Path) -> list[tuple[str, dict, dict | None, str]]:
    """(task file, long command task, the task after it or None, why it is long) for every long command."""
    found = []
    for task_file in sorted(root.glob("roles/*/tasks/*.yml")):
        for tasks in task_lists(yaml.safe_load(task_file.read_text())):
            for index, task in enumerate(tasks):
                text = command_text(task) if isinstance(task, dict) else None
                what = why_long(text) if text is not None else None
                if what:
                    after = tasks[index + 1] if index + 1 < len(tasks) else None
                    found.append((str(task_file.relative_to(root)), task, after, what))
    return found


def _same(job: dict, wait: dict, key: str) -> bool:
    return job.get(key) == wait.get(key)


def step_problems(job: dict, wait: dict | None) -> list[str]:
    """What keeps a long command from showing progress, in words; empty when it does."""
    problems = []
    if not job.get("async") or str(job.get("async")) == "0":
        problems.append("it is not async")
    if str(job.get("poll", "")) != "0":
        problems.append("poll is %r, not 0 (Ansible would wait in silence)" % job.get("poll"))
    if "stack_job_environment" not in str(job.get("environment", "")):
        problems.append("its environment lacks stack_job_environment")
    register = job.get("register")
    if not register:
        return problems + ["it registers no job"]
    module = next(iter(WAITS & (wait or {}).keys()), None)
    if module is None:
        return problems + ["the task after it is not stack_wait"]
    args = wait[module] if isinstance(wait[module], dict) else {}
    if not re.search(r"\b%s\.ansible_job_id\b" % re.escape(register), str(args.get("jid", ""))):
        problems.append("the wait's jid is not %s.ansible_job_id" % register)
    if "stack_progress_every" not in str(args.get("every", "")):
        problems.append("the wait's every is not stack_progress_every")
    if not (args.get("log") or args.get("size_of")):
        problems.append("the wait shows no log and no size_of")
    for key in ("become", "become_user", "tags"):
        if not _same(job, wait, key):
            problems.append("the wait's %s (%r) is not the job's (%r)" % (key, wait.get(key), job.get(key)))
    return problems


def silent_long_steps(root: Path) -> list[str]:
    """Every long command that shows no progress, and every stale QUICK entry, as messages."""
    messages, quick_seen = [], set()
    for task_file, job, wait, what in long_steps(root):
        key = (task_file, job.get("name", ""))
        if key in QUICK:
            quick_seen.add(key)
            continue
        problems = step_problems(job, wait)
        if problems:
            messages.append("%s: %r (%s): %s" % (task_file, job.get("name"), what, "; ".join(problems)))
    for task_file, name in sorted(QUICK.keys() - quick_seen):
        if (root / task_file).exists():
            messages.append("%s: %r is listed as quick but is no long command there" % (task_file, name))
    return messages


def test_every_long_step_shows_progress():
    assert silent_long_steps(REPO) == []


def test_the_long_steps_are_found():
    """The test looks at what it should: each step the issue named, and those already in the background."""
    named = {(task_file, job.get("name")) for task_file, job, _, _ in long_steps(REPO)}
    for expected in [
        ("roles/model/tasks/build.yml", "Model | Fetch the model unless it is complete already"),
        ("roles/verl/tasks/install.yml", "Verl | Install verl's pinned requirements"),
        ("roles/vllm/tasks/build.yml", "Vllm | Install with pip"),
        ("roles/conda/tasks/env.yml", "Conda | Create the env with Python {{ conda_python_version }}"),
        ("roles/train/tasks/smoke.yml", "Train | Train 12 steps"),
        ("roles/torch/tasks/install.yml", "Torch | Install with pip from the torch index"),
        ("roles/apex/tasks/compile.yml", "Apex | Compile (log in {{ apex_build_log }})"),
    ]:
        assert expected in named, (expected, sorted(named))


@pytest.mark.parametrize(
    "text",
    ["bash -n {{ train_work_dir }}/train.sh", "validate_overrides.py --script {{ train_work_dir }}/train.sh"],
)
def test_reading_the_launcher_is_not_a_run(text: str):
    assert why_long(text) is None


def _roles_copy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "roles", tmp_path / "roles", ignore=shutil.ignore_patterns("files", "templates"))
    return tmp_path


def _edit(root: Path, task_file: str, name: str, change) -> None:
    """Apply change(task list, index) to the task called name in root's copy of task_file."""
    path = root / task_file
    data = yaml.safe_load(path.read_text())
    for tasks in task_lists(data):
        for index, task in enumerate(tasks):
            if task.get("name") == name:
                change(tasks, index)
                path.write_text(yaml.safe_dump(data, sort_keys=False))
                return
    raise AssertionError("no task %r in %s" % (name, task_file))


def _plain_command(tasks: list[dict], index: int) -> None:
    """The step as it was before: a plain command, and no wait after it."""
    for key in ("async", "poll"):
        tasks[index].pop(key)
    del tasks[index + 1]


def _polled(tasks: list[dict], index: int) -> None:
    """The smoke run as it was: async, but Ansible polls it (poll: 30) and prints nothing."""
    tasks[index]["poll"] = 30
    del tasks[index + 1]


def _no_wait(tasks: list[dict], index: int) -> None:
    del tasks[index + 1]


def _wait_as_root(tasks: list[dict], index: int) -> None:
    tasks[index + 1].pop("become_user")


def _wait_shows_nothing(tasks: list[dict], index: int) -> None:
    tasks[index + 1]["stack_wait"].pop("size_of")


def _no_job_environment(tasks: list[dict], index: int) -> None:
    tasks[index].pop("environment")


def _wait_without_the_tags(tasks: list[dict], index: int) -> None:
    tasks[index + 1].pop("tags")


def _new_silent_step(tasks: list[dict], index: int) -> None:
    """A new long step, added the plain way."""
    tasks.insert(index, {"name": "Verl | Install an extra", "ansible.builtin.command": "pip install extra"})


@pytest.mark.parametrize(
    "task_file, name, change, expected",
    [
        ("roles/model/tasks/build.yml", "Model | Fetch the model unless it is complete already", _plain_command,
         "it is not async; poll is None"),
        ("roles/train/tasks/smoke.yml", "Train | Train 12 steps", _polled, "poll is 30"),
        ("roles/verl/tasks/install.yml", "Verl | Install verl's pinned requirements", _no_wait,
         "the task after it is not stack_wait"),
        ("roles/verl/tasks/install.yml", "Verl | Install verl's pinned requirements", _wait_as_root,
         "the wait's become_user (None)"),
        ("roles/conda/tasks/env.yml", "Conda | Create the env with Python {{ conda_python_version }}",
         _wait_shows_nothing, "no log and no size_of"),
        ("roles/conda/tasks/env.yml", "Conda | Create the env with Python {{ conda_python_version }}",
         _no_job_environment, "lacks stack_job_environment"),
        ("roles/train/tasks/smoke.yml", "Train | Train 12 steps", _wait_without_the_tags, "the wait's tags (None)"),
        ("roles/verl/tasks/install.yml", "Verl | Install verl editable, without dependencies", _new_silent_step,
         "'Verl | Install an extra' (pip): it is not async"),
    ],
)  # fmt: skip
def test_a_silent_long_step_fails(tmp_path: Path, task_file: str, name: str, change, expected: str):
    root = _roles_copy(tmp_path)
    assert silent_long_steps(root) == []
    _edit(root, task_file, name, change)
    problems = silent_long_steps(root)
    assert len(problems) == 1 and task_file in problems[0] and expected in problems[0], problems


def test_a_stale_quick_entry_fails(tmp_path: Path):
    root = _roles_copy(tmp_path)
    _edit(root, "roles/apex/tasks/install.yml", "Apex | Install the wheel into the env", lambda tasks, i: tasks.pop(i))
    assert silent_long_steps(root) == [
        "roles/apex/tasks/install.yml: 'Apex | Install the wheel into the env' is listed as quick but is no long"
        " command there"
    ]


def test_the_smoke_run_shows_its_log_and_keeps_the_launchers_status(tmp_path: Path):
    """The smoke run's wrapper: train.sh's output reaches the result and the smoke log, whose last line the
    progress lines show; a launcher that fails after logging step 12 fails the run (pipefail)."""
    work = tmp_path / "work"
    work.mkdir()
    launcher = work / "train.sh"
    launcher.write_text(
        '#!/bin/bash\necho "args: $*"\nfor i in $(seq 1 12); do echo "step:$i - loss"; sleep 0.25; done\n'
        "echo 'train.sh: done' >&2\nexit \"${EXIT:-0}\"\n"
    )
    launcher.chmod(0o755)
    variables = {
        "train_work_dir": str(work),
        "train_log_dir": str(work / "logs"),
        "stack_user": "nobody",
        # Nobody to become here: every task runs as the one running the test.
        "ansible_become": False,
        "stack_progress_every": 1,
        "stack_job_environment": {"VERL_P40_RUN": "unit-run"},
        "preflight_gpus": [{"index": 0}],
    }
    smoke = {
        "name": "The smoke run",
        "ansible.builtin.include_role": {"name": "train", "tasks_from": "smoke"},
        "tags": ["smoke"],
    }
    done = run_play(tmp_path, [smoke], "--tags", "smoke", "-e", json.dumps(variables), callback="default")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line.strip() for line in done.stderr.splitlines() if "Train | Wait for the 12 steps: " in line]
    assert lines and any("step:" in line for line in lines), done.stderr
    log = (work / "logs" / "smoke.log").read_text()
    assert "args: trainer.total_training_steps=12" in log and "step:12 - loss" in log

    # The launcher fails after logging step 12: the run fails with its status.
    launcher.write_text(launcher.read_text().replace('"${EXIT:-0}"', "3"))
    done = run_play(tmp_path, [smoke], "--tags", "smoke", "-e", json.dumps(variables), callback="default")
    assert done.returncode != 0
    assert "rc: 3" in done.stdout or '"rc": 3' in done.stdout, done.stdout[-3000:]
