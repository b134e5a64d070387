"""Lookup: this run's identity on the controller, for the host lock (library/host_lock.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: stack_run
author:
  - verl-p40 maintainers
short_description: The identity of this ansible-playbook run, or whether a recorded run is still alive
description:
  - Without terms, returns this run's identity for the host_lock module of this project; its C(id) joins the
    controller's host name, the process id of ansible-playbook and that process's start time, so
    a reused process id is a different run.
  - With the terms V(alive) and a run id, returns whether that run's ansible-playbook process still
    runs on this controller. A run of another controller cannot be checked from here and counts as alive.
options:
  _terms:
    description:
      - None for this run's identity; V(alive) and a run id for that run's liveness.
    type: list
    elements: str
    required: false
notes:
  - Runs on the controller; it reads C(/proc) there (Linux).
"""

EXAMPLES = r"""
- name: Know this run
  ansible.builtin.set_fact:
    stack_run: "{{ lookup('stack_run') }}"

- name: Whether the run that holds the lock is still running
  ansible.builtin.debug:
    msg: "{{ lookup('stack_run', 'alive', lock.holder.id) }}"
"""

RETURN = r"""
_raw:
  description:
    - Without terms, one dict, this run's identity.
    - With V(alive) and a run id, one bool, V(true) while that run may still be running.
  type: list
  elements: raw
  contains:
    id:
      description: The run id, C(<controller>-<pid>-<start ticks>).
      type: str
      sample: ctl-4242-123456
    controller:
      description: The controller's host name.
      type: str
      sample: ctl
    pid:
      description: The process id of ansible-playbook on the controller.
      type: int
      sample: 4242
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
import multiprocessing
import os
import socket
from typing import Any, Optional

from ansible.plugins.lookup import LookupBase


def main_pid() -> int:
    # Task arguments are templated in a worker forked from the ansible-playbook process.
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid else os.getpid()


def start_ticks(pid: int) -> Optional[str]:
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def identity() -> dict[str, Any]:
    pid = main_pid()
    controller = socket.gethostname()
    return {
        "id": "%s-%d-%s" % (controller, pid, start_ticks(pid) or "0"),
        "controller": controller,
        "pid": pid,
        "user": getpass.getuser(),
        "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def alive(run_id: str) -> bool:
    try:
        head, pid, ticks = run_id.rsplit("-", 2)
    except ValueError:
        return True
    if head != socket.gethostname() or not pid.isdigit():
        return True
    return start_ticks(int(pid)) == ticks


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: Optional[dict[str, Any]] = None, **kwargs: Any) -> list[Any]:
        if not terms:
            return [identity()]
        if terms[0] == "alive" and len(terms) == 2:
            return [alive(str(terms[1]))]
        raise ValueError("stack_run: use lookup('stack_run') or lookup('stack_run', 'alive', RUN_ID)")
