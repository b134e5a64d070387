"""Lookup: this run's identity on the controller, for the host lock (library/host_lock.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: stack_run
author:
  - verl-p40 maintainers
short_description: The identity of this ansible-playbook run, or whether a recorded run is still alive
description:
  - Without terms, returns this run's identity for the host_lock module of this project. Its C(id) is
    C(<controller>-<pid>-<nonce>) (the controller's host name and the process id of ansible-playbook, for people, and
    a nonce that makes it unique across machines, boots and reused process ids). The nonce is a digest of the
    controller's machine id, its boot id, the process's id and start time, and 32 random bytes that
    ansible-playbook's main process draws once when it starts (Python's C(multiprocessing) authentication key,
    which every forked worker inherits, so every task of the run gets the same id; the key itself never leaves
    the process).
  - Without terms it also refuses a run that skips the host lock (C(--start-at-task), or C(--skip-tags always),
    which skips the stage playbooks' lock tasks) unless it is a check-mode run (C(--check)). Every stage playbook
    puts this run's id into the environment of every task, so such a run stops at its first task, before it
    changes anything.
  - With the terms V(alive) and a holder (the lock's content, as the host_lock module returns it), returns whether
    that run's ansible-playbook process may still run. Only a holder of this very controller (the same machine id,
    boot id and process-id namespace, RV(_raw.instance)) can be checked here, in C(/proc); it is gone when its
    process id is absent or belongs to a process started at another time. Any other holder (another machine,
    even one with this host name; a container; a lock of an older version) cannot be checked and counts as alive.
options:
  _terms:
    description:
      - None for this run's identity; V(alive) and a holder (a dict) for that run's liveness.
    type: list
    elements: raw
    required: false
notes:
  - Runs on the controller; it reads C(/etc/machine-id) (or C(/var/lib/dbus/machine-id)), the boot id and
    C(/proc) there (Linux). Without a machine id no holder can be checked, and each is taken over only with
    C(-e break_lock=<its id>).
"""

EXAMPLES = r"""
- name: Know this run
  ansible.builtin.set_fact:
    stack_run: "{{ lookup('stack_run') }}"

- name: Whether the run that holds the lock is still running
  ansible.builtin.debug:
    msg: "{{ lookup('stack_run', 'alive', lock.holder) }}"
"""

RETURN = r"""
_raw:
  description:
    - Without terms, one dict, this run's identity.
    - With V(alive) and a holder, one bool, V(true) while that run may still be running.
  type: list
  elements: raw
  contains:
    id:
      description: The run id, C(<controller>-<pid>-<nonce>).
      type: str
      sample: ctl-4242-5f0c9a1e3b7d2c68
    controller:
      description: The controller's host name.
      type: str
      sample: ctl
    pid:
      description: The process id of ansible-playbook on the controller.
      type: int
      sample: 4242
    ticks:
      description: When that process started, in clock ticks since the controller booted (C(/proc/<pid>/stat)).
      type: str
      sample: "123456"
    instance:
      description:
        - A digest of the controller's machine id, boot id and process-id namespace; empty where the controller has
          no machine id. Liveness is judged in C(/proc) only for a holder with this same value.
      type: str
      sample: 9d2f6b1c1f0a2e7d0b5e6f3c3a4e4d0e
    user:
      description: The user running ansible-playbook.
      type: str
      sample: alice
    started:
      description: When this lookup ran (UTC, ISO 8601).
      type: str
      sample: "2026-12-01T00:00:00Z"
"""

import datetime
import getpass
import hashlib
import multiprocessing
import os
import socket
from typing import Any, Optional

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

MACHINE_IDS = ("/etc/machine-id", "/var/lib/dbus/machine-id")
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def main_pid() -> int:
    # Task arguments are templated in a worker forked from the ansible-playbook process.
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid else os.getpid()


def start_ticks(pid: int) -> Optional[str]:
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError, ValueError):
        return None


def read_first(*paths: str) -> str:
    for path in paths:
        try:
            with open(path, encoding="ascii") as handle:
                text = handle.read().strip()
        except (OSError, ValueError):
            continue
        if text:
            return text
    return ""


def instance() -> str:
    """Where /proc shows the same processes: this machine, this boot, this process-id namespace.
    Empty without a machine id (nothing can be judged then). The machine id is kept secret (a digest)."""
    machine = read_first(*MACHINE_IDS)
    boot = read_first(BOOT_ID)
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    if not machine or not boot or not namespace:
        return ""
    return hashlib.sha256(("verl-p40 controller\0%s\0%s\0%s" % (machine, boot, namespace)).encode()).hexdigest()[:32]


def nonce(pid: int, ticks: str, where: str) -> str:
    # 32 random bytes drawn once by the main process, the same in every worker forked from it.
    secret = bytes(multiprocessing.current_process().authkey)
    seed = b"\0".join([b"verl-p40 run", secret, where.encode(), str(pid).encode(), ticks.encode()])
    return hashlib.sha256(seed).hexdigest()[:16]


def identity() -> dict[str, Any]:
    pid = main_pid()
    ticks = start_ticks(pid) or "0"
    where = instance()
    controller = socket.gethostname()
    return {
        "id": "%s-%d-%s" % (controller, pid, nonce(pid, ticks, where)),
        "controller": controller,
        "pid": pid,
        "ticks": ticks,
        "instance": where,
        "user": getpass.getuser(),
        "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def alive(holder: Any) -> bool:
    """False only when the holder provably ran here (same machine, boot and pid namespace) and its
    ansible-playbook process is gone (the pid absent, or another process's)."""
    if not isinstance(holder, dict):
        return True
    mine = instance()
    pid, ticks = holder.get("pid"), holder.get("ticks")
    if not mine or holder.get("instance") != mine or not isinstance(pid, int) or isinstance(pid, bool):
        return True
    if pid <= 0 or not isinstance(ticks, str) or not ticks:
        return True
    return start_ticks(pid) == ticks


def lock_skipped() -> Optional[str]:
    """What in this run's command line skips the stage playbooks' lock tasks, or None."""
    try:
        from ansible import context

        args = context.CLIARGS
    except ImportError:  # pragma: no cover - every supported ansible-core has it
        return None
    if args.get("check"):
        return None
    if args.get("start_at_task"):
        return "--start-at-task"
    skipped = set(args.get("skip_tags") or ())
    for what in ("always", "all"):
        if what in skipped:
            return "--skip-tags %s" % what
    return None


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: Optional[dict[str, Any]] = None, **kwargs: Any) -> list[Any]:
        if not terms:
            skipped = lock_skipped()
            if skipped:
                raise AnsibleError(
                    "This run skips the host lock (%s skips the stage playbooks' lock tasks, which are tagged "
                    "always), so it would change a host without holding it. Rerun without %s: pick layers with "
                    "--tags <layer> (the lock still runs) and redo one with -e rebuild=<layer>; or add --check to "
                    "only look." % (skipped, skipped.split()[0])
                )
            return [identity()]
        if terms[0] == "alive" and len(terms) == 2:
            return [alive(terms[1])]
        raise AnsibleError("stack_run: use lookup('stack_run') or lookup('stack_run', 'alive', HOLDER)")
