#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: one run of the stack at a time on a host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_lock
short_description: Take, release or inspect the host's run lock of the stack
description:
  - Two runs against one host could delete a prefix under each other and record a broken tree
    as complete. Every stage playbook takes this lock before its first layer and the end-of-run
    summary releases it.
  - The lock is a JSON file (O(path)) naming the run that holds it (O(run)), its controller, the
    controller's process id, the user, the start time and the host's boot id. It is created
    atomically (a hard link that fails when the file exists), mode 0644, owned by root.
  - A lock held by the same run is taken again (stages of one run). A lock from before the host's
    last reboot is stale and taken over. A lock whose holder the controller found dead is taken
    over when its run id is given in O(takeover). Any other lock fails the run at once, with the
    holder in the message.
  - The long steps of a run (the CUDA installer, pip, the Apex build, downloads) go on in the
    background on the host when the controller dies, so a run whose controller is gone may still be
    at work there. Those steps carry C(VERL_P40_RUN=<run id>) in their environment; a lock whose
    holder still has such a process on the host is not taken over (a reboot ends them), and the
    message names the processes to wait for or stop.
  - Run bookkeeping, not a change of the host, so the module reports C(changed=false).
options:
  path:
    description: The lock file.
    type: path
    required: true
  run:
    description:
      - This run's identity, as the stack_run lookup of this project returns it; C(id) is required,
        C(controller), C(pid), C(user) and C(started) name the holder in messages.
    type: dict
    required: true
  state:
    description:
      - V(acquired) takes the lock.
      - V(released) gives it back, only when O(run) holds it.
      - V(query) reads it.
    type: str
    choices: [acquired, released, query]
    default: acquired
  takeover:
    description: The run id of a lock the caller found stale (its controller process is gone).
    type: str
    default: ""
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: partial
    details:
      - Writes and deletes nothing. O(state=query) returns what a normal run returns.
      - O(state=acquired) returns the current holder, or O(run) when the lock is free, and does not
        fail when another run holds the lock; it does not take a stale lock over either, so
        RV(taken_over) is never returned.
      - O(state=released) returns the holder as it is, the lock not removed.
  diff_mode:
    support: none
    details: The lock is run bookkeeping that the module reports as unchanged, so it shows no diff.
  platform:
    platforms: posix
    details: Reads the boot id from C(/proc/sys/kernel/random/boot_id) (Linux); without it a reboot is not detected.
author:
  - verl-p40 maintainers
"""

EXAMPLES = r"""
- name: Take the host's run lock
  host_lock:
    path: /var/lib/verl-p40/run.lock
    run: "{{ stack_run }}"
"""

RETURN = r"""
holder:
  description:
    - The lock's content after the module ran; V({}) when nobody holds it.
    - A lock file that cannot be read as a JSON object gives RV(holder.unreadable=true) and an empty RV(holder.id).
  type: dict
  returned: always
  contains:
    id:
      description: The holder's run id.
      type: str
      sample: ctl-4242-123456
    controller:
      description: The host name of the holder's controller.
      type: str
      sample: ctl
    pid:
      description: The process id of the holder's ansible-playbook on its controller.
      type: int
      sample: 4242
    user:
      description: The user who started the holding run.
      type: str
      sample: alice
    started:
      description: When the holding run started (UTC, ISO 8601).
      type: str
      sample: "2026-12-01T00:00:00Z"
    boot_id:
      description: The host's boot id when the lock was taken; empty where the host has none.
      type: str
      sample: 0b5e6f3c-3a4e-4d0e-9d2f-6b1c1f0a2e7d
    unreadable:
      description: Present and true when the lock file could not be read as a JSON object.
      type: bool
      sample: true
taken_over:
  description: The stale lock that was replaced, its content as in RV(holder) and why it was stale.
  type: dict
  returned: when O(state=acquired) took over a stale lock
  contains:
    id:
      description: The stale holder's run id.
      type: str
    controller:
      description: The host name of its controller.
      type: str
    pid:
      description: The process id of its ansible-playbook.
      type: int
    user:
      description: The user who started it.
      type: str
    started:
      description: When it started (UTC, ISO 8601).
      type: str
    boot_id:
      description: The host's boot id when it took the lock.
      type: str
    reason:
      description: Why the lock was stale.
      type: str
      sample: the host rebooted since it was taken
  sample:
    id: ctl-4242-123456
    controller: ctl
    pid: 4242
    user: alice
    started: "2026-12-01T00:00:00Z"
    boot_id: an-earlier-boot
    reason: the host rebooted since it was taken
"""

import json
import os
from typing import Any, Optional

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.stack_files import atomic_write

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str:
    try:
        with open(BOOT_ID, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def read_lock(path: str) -> Optional[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"id": "", "unreadable": True}
    return data if isinstance(data, dict) else {"id": "", "unreadable": True}


def write_new(path: str, data: dict[str, Any], replace: bool) -> bool:
    """Write the lock; without `replace`, only when no lock exists (atomic). False when one does."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    return atomic_write(path, text, 0o644, exclusive=not replace)


def describe(holder: dict[str, Any]) -> str:
    if holder.get("unreadable"):
        return "an unreadable lock"
    return "run %s of %s@%s (controller pid %s), started %s" % (
        holder.get("id", "?"),
        holder.get("user", "?"),
        holder.get("controller", "?"),
        holder.get("pid", "?"),
        holder.get("started", "?"),
    )


# The environment variable that marks a run's background steps (roles/stack/defaults/main/stack.yml,
# stack_job_environment, sets it on each).
RUN_ENV = "VERL_P40_RUN"


def jobs_of(run_id: str, proc: str = "/proc") -> list[tuple[int, str]]:
    """The processes on this host whose environment names the run: (pid, command line)."""
    wanted = ("%s=%s" % (RUN_ENV, run_id)).encode()
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, entry, "environ"), "rb") as handle:
                if wanted not in handle.read().split(b"\0"):
                    continue
            with open(os.path.join(proc, entry, "cmdline"), "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        found.append((int(entry), command[:120]))
    return sorted(found)


def stale_reason(holder: dict[str, Any], takeover: str, current_boot: str) -> Optional[str]:
    """Why an existing lock may be taken over, or None."""
    if holder.get("boot_id") and current_boot and holder["boot_id"] != current_boot:
        return "the host rebooted since it was taken"
    if takeover and takeover == holder.get("id"):
        return "its controller process is gone"
    return None


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            run=dict(type="dict", required=True),
            state=dict(type="str", choices=["acquired", "released", "query"], default="acquired"),
            takeover=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path, run = p["path"], p["run"]
    if not run.get("id"):
        module.fail_json(msg="host_lock: run.id is empty.")
    holder = read_lock(path)
    if p["state"] == "query":
        module.exit_json(changed=False, holder=holder or {})
    if p["state"] == "released":
        if holder and holder.get("id") == run["id"] and not module.check_mode:
            os.unlink(path)
            holder = None
        module.exit_json(changed=False, holder=holder or {})

    mine = dict(run, boot_id=boot_id())
    if holder and holder.get("id") == run["id"]:
        module.exit_json(changed=False, holder=holder)
    if module.check_mode:
        module.exit_json(changed=False, holder=holder or mine)
    if holder is None and write_new(path, mine, replace=False):
        module.exit_json(changed=False, holder=mine)
    holder = read_lock(path) or {}
    why = stale_reason(holder, p["takeover"], mine["boot_id"])
    jobs = jobs_of(str(holder.get("id", ""))) if why and holder.get("id") else []
    if jobs:
        module.fail_json(
            msg="The run %s is gone from its controller, but its background steps still run on this host: %s. "
            "Wait for them to end (or stop them: kill %s), then rerun; taking the lock now would let this run "
            "rebuild a layer under them."
            % (
                holder.get("id"),
                "; ".join("pid %d (%s)" % job for job in jobs),
                " ".join(str(pid) for pid, _ in jobs),
            ),
            holder=holder,
        )
    if why:
        write_new(path, mine, replace=True)
        module.exit_json(changed=False, holder=mine, taken_over=dict(holder, reason=why))
    module.fail_json(
        msg="Another run of the stack holds this host: %s (lock %s). Wait for it to finish. If it is no longer "
        "running (killed, or its controller is gone), rerun with -e stack_lock_takeover=%s."
        % (describe(holder), path, holder.get("id", "")),
        holder=holder,
    )


if __name__ == "__main__":
    main()
