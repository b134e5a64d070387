# -*- coding: utf-8 -*-
"""Action plugin: wait for a long async task and show its progress while it runs.

Its documentation is library/stack_wait.py's (the Ansible convention for an action with no module code)."""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

# When the job's status file is read: FIRST seconds after the start (a job just started is not done),
# then twice as long after each look up to POLL (never longer than `every`): 0.5, 1.5, 3.5, 7.5 s,
# then every 5 s. A job of a second or two (pip on a host that has what it asks for) is seen done
# a second or two after it ends, not up to 5 s later. Progress lines come every `every` seconds.
FIRST = 0.5
POLL = 5
ARGS = {
    "jid": {"type": "str", "required": True},
    "label": {"type": "str", "default": ""},
    "every": {"type": "int", "default": 30},
    "timeout": {"type": "int", "default": 0},
    "log": {"type": "path"},
    "size_of": {"type": "path"},
}
# The keys of the job's result that this task returns, and no others: the status file of a job
# that runs as the training user is that user's to write, so nothing else of it (ansible_facts,
# which would become host facts, or Ansible's own _ansible_* keys) may reach the play.
RESULT_KEYS = ("rc", "cmd", "stdout", "stdout_lines", "stderr", "stderr_lines", "start", "end", "delta", "msg")


def human_seconds(seconds: float) -> str:
    """12s, 4m05s, 1h02m."""
    seconds = int(seconds)
    if seconds < 60:
        return "%ds" % seconds
    if seconds < 3600:
        return "%dm%02ds" % divmod(seconds, 60)
    return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)


def human_bytes(size: int) -> str:
    """812 B, 3.4 MB, 2.9 GB (powers of 1000, as download tools print them)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (value, unit)
        value /= 1000
    raise AssertionError("unreachable")


def progress_line(label: str, elapsed: float, size: int | None, last: str) -> str:
    """One progress line: the label, the time so far, then what the host shows, if anything."""
    parts = ["%s: %s" % (label, human_seconds(elapsed))]
    if size is not None:
        parts.append(human_bytes(size))
    if last:
        parts.append(last if len(last) <= 120 else last[:117] + "...")
    return ", ".join(parts)


# Ends the finished job's async_wrapper processes (`async_wrapper.py <jid prefix> ...`, $1): their
# job is over, and what is left of them only sleeps out async_wrapper's 5-s poll. Exits 0 once none
# runs, else after 60 looks 0.25 s apart. `wrappers` is the one look: their pids, one a line (a
# process that ends while it reads is skipped).
WRAPPER_GONE = """
wrappers() {
  for f in /proc/[0-9]*/cmdline; do
    case "$(tr '\\0' ' ' < "$f")" in *"async_wrapper.py $1 "*) p=${f#/proc/}; echo "${p%/cmdline}" ;; esac
  done 2>/dev/null
}
pids=$(wrappers "$1")
[ -z "$pids" ] || kill $pids 2>/dev/null
i=0
while [ "$i" -lt 60 ]; do
  [ -n "$(wrappers "$1")" ] || exit 0
  sleep 0.25
  i=$((i + 1))
done
exit 1
"""


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # Check mode: the async job was skipped, so there is nothing to wait for (the task reports skipped).
    _supports_check_mode = True
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGS)
        if not args["jid"]:
            result.update(skipped=True, msg="no job to wait for (it was skipped)")
            return result
        if args["every"] < 1 or args["timeout"] < 0:
            raise AnsibleActionFail("stack_wait: every must be 1 or more and timeout 0 or more")
        label = args["label"] or self._task.get_name()
        host = (task_vars or {}).get("inventory_hostname", "")
        started = time.monotonic()
        shown = started
        lines: list[str] = []
        pause = FIRST
        while True:
            time.sleep(min(pause, POLL, args["every"]))
            pause *= 2
            status = self._status(args["jid"], task_vars)
            if status.get("finished") or status.get("failed"):
                break
            now = time.monotonic()
            if args["timeout"] and now - started > args["timeout"]:
                raise AnsibleActionFail(
                    "%s: still running after %s (stack_wait timeout %d s); the job %s goes on on the host"
                    % (label, human_seconds(now - started), args["timeout"], args["jid"])
                )
            if now - shown >= args["every"]:
                shown = now
                line = progress_line(
                    label, now - started, self._size(args["size_of"], task_vars), self._last(args["log"], task_vars)
                )
                lines.append(line)
                # On stderr: a terminal shows it, and stdout stays what the callback prints (json).
                display.display("  %s | %s" % (host, line) if host else "  " + line, stderr=True)
        self._status(args["jid"], task_vars, mode="cleanup")
        self._wrapper_gone(args["jid"], task_vars)
        result.update({key: status[key] for key in RESULT_KEYS if key in status})
        result["changed"] = bool(status.get("changed", False))
        if status.get("skipped"):
            result["skipped"] = True
        if status.get("failed") or status.get("rc", 0) not in (0, None):
            result["failed"] = True
            result.setdefault("msg", "the job failed")
        result["seconds"] = round(time.monotonic() - started, 1)
        result["progress"] = lines
        return result

    def _status(self, jid: str, task_vars, mode: str = "status") -> dict:
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._execute_module(
            module_name="ansible.legacy.async_status",
            module_args={"jid": jid, "mode": mode, "_async_dir": async_dir},
            task_vars=task_vars,
        )

    def _wrapper_gone(self, jid: str, task_vars) -> None:
        """End the finished job's async_wrapper and wait (15 s at most) until it is gone. It outlives
        the job by up to 5 s (it looks at the job every 5 s, the first time 5 s after the start) and
        carries the run's VERL_P40_RUN: a run that ended on this job (a failed download, say) would
        leave the host lock held, "its steps still run", for the user's immediate rerun, and waiting
        for it to go by itself added those seconds to every wait."""
        self._run(["sh", "-c", WRAPPER_GONE, "stack_wait", jid.split(".")[0]], task_vars)

    def _run(self, argv: list[str], task_vars) -> str:
        done = self._execute_module(
            module_name="ansible.legacy.command", module_args={"argv": argv}, task_vars=task_vars
        )
        return done.get("stdout", "") if done.get("rc") == 0 else ""

    def _size(self, path: str | None, task_vars) -> int | None:
        if not path:
            return None
        out = self._run(["du", "-s", "-B1", "--", path], task_vars).split()
        return int(out[0]) if out and out[0].isdigit() else 0

    def _last(self, path: str | None, task_vars) -> str:
        if not path:
            return ""
        lines = [line.strip() for line in self._run(["tail", "-n", "3", "--", path], task_vars).splitlines()]
        lines = [line for line in lines if line]
        return lines[-1] if lines else ""
