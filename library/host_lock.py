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
    summary releases it; the layer_state module of this project refuses to read or change a layer
    unless the lock names its run, so a run that skipped the lock tasks changes nothing.
  - The lock is a JSON file (O(path)) naming the run that holds it (O(run)), its controller, the
    controller's process id, the user, the start time and the host's boot id. It is created
    atomically (a hard link that fails when the file exists), mode 0644, owned by root. Every
    decision to take it, take it over or give it back is made under an exclusive C(flock) of its
    directory, so two runs that find the same stale lock cannot both take it over.
  - A lock held by the same run is taken again (stages of one run). A lock is taken over only when
    its holder is provably gone, or when the user names it. Provably gone means the host rebooted
    since the lock was taken, or the controller found the holder's ansible-playbook process gone
    (O(takeover); the stack_run lookup of this project can tell only for a holder of the same
    controller machine, boot and process-id namespace). Named means O(break_lock) is the holder's
    run id, exactly. Any other lock fails the run at once, with the holder in the message.
  - A lock file that cannot be read as a lock (not JSON, or no run id; damage, or another program's
    file) fails the run with its path; it is taken over only with O(break_lock=unreadable).
  - The long steps of a run (the CUDA installer, pip, the Apex build, downloads) go on in the
    background on the host when the controller dies, and any step may outlive a killed controller,
    so a run whose controller is gone may still be at work there. Every task of a stage carries
    C(VERL_P40_RUN=<run id>) in its environment; a lock whose holder still has such a process on
    the host is not taken over, not even with O(break_lock) (a reboot ends them), and the message
    names the processes to wait for or stop. O(break_lock=unreadable) is refused while any run's
    process is on the host.
  - Run bookkeeping, not a change of the host, so the module reports C(changed=false).
options:
  path:
    description: The lock file.
    type: path
    required: true
  run:
    description:
      - This run's identity, as the stack_run lookup of this project returns it; C(id) is required,
        C(controller), C(pid), C(user) and C(started) name the holder in messages, C(ticks) and
        C(instance) let a later run of the same controller find out whether this one is gone.
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
    description:
      - The run id of a holder the controller found gone (its ansible-playbook process no longer runs
        there). Taken over when it is the holder's id and none of its steps runs on the host.
    type: str
    default: ""
  break_lock:
    description:
      - The user's C(-e break_lock=<run id>), to take over a lock whose holder cannot be checked from
        this controller (another machine, or a lock of an older version) and is known to be gone.
        Taken over only when it is exactly the holder's id and none of its steps runs on the host.
      - V(unreadable) takes over a lock file that cannot be read, when no process of any run is on the host.
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
    break_lock: "{{ break_lock | default('') }}"
"""

RETURN = r"""
holder:
  description:
    - The lock's content after the module ran; V({}) when nobody holds it.
    - A lock file that cannot be read as a lock gives RV(holder.unreadable=true), an empty RV(holder.id)
      and the reason in RV(holder.error).
  type: dict
  returned: always
  contains:
    id:
      description: The holder's run id.
      type: str
      sample: ctl-4242-5f0c9a1e3b7d2c68
    controller:
      description: The host name of the holder's controller.
      type: str
      sample: ctl
    pid:
      description: The process id of the holder's ansible-playbook on its controller.
      type: int
      sample: 4242
    ticks:
      description: That process's start time on its controller (clock ticks since boot).
      type: str
      sample: "123456"
    instance:
      description: A digest of the holder's controller machine id, boot id and process-id namespace.
      type: str
      sample: 9d2f6b1c1f0a2e7d0b5e6f3c3a4e4d0e
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
      description: Present and true when the lock file could not be read as a lock.
      type: bool
      sample: true
    error:
      description: Why the lock file could not be read (with RV(holder.unreadable)).
      type: str
      sample: "not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
taken_over:
  description: The stale lock that was replaced, its content as in RV(holder) and why it was stale.
  type: dict
  returned: when O(state=acquired) took over a stale lock
  contains:
    id:
      description: The stale holder's run id (empty for an unreadable lock).
      type: str
    controller:
      description: The host name of its controller.
      type: str
    pid:
      description: The process id of its ansible-playbook.
      type: int
    ticks:
      description: That process's start time on its controller.
      type: str
    instance:
      description: Its controller's digest (machine, boot, process-id namespace).
      type: str
    user:
      description: The user who started it.
      type: str
    started:
      description: When it started (UTC, ISO 8601).
      type: str
    boot_id:
      description: The host's boot id when it took the lock.
      type: str
    unreadable:
      description: Present and true when the lock file could not be read (taken over with O(break_lock=unreadable)).
      type: bool
    error:
      description: Why it could not be read.
      type: str
    reason:
      description: Why the lock was taken over.
      type: str
      sample: the host rebooted since it was taken
  sample:
    id: ctl-4242-5f0c9a1e3b7d2c68
    controller: ctl
    pid: 4242
    user: alice
    started: "2026-12-01T00:00:00Z"
    boot_id: an-earlier-boot
    reason: the host rebooted since it was taken
"""

import contextlib
import fcntl
import json
import os
from typing import Any, Iterator, Optional

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.stack_files import atomic_write
from ansible.module_utils.stack_lock import read_lock

BOOT_ID = "/proc/sys/kernel/random/boot_id"
# The value of break_lock that takes over a lock file that cannot be read.
UNREADABLE = "unreadable"
# The environment variable that marks every step of a run on the host (the stage playbooks set
# stack_job_environment, roles/stack/defaults/main/stack.yml, as each play's environment).
RUN_ENV = "VERL_P40_RUN"
# Why a lock from before the host's last reboot is stale (a reboot also ended every step of its run).
REBOOTED = "the host rebooted since it was taken"


def boot_id() -> str:
    try:
        with open(BOOT_ID, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def write_new(path: str, data: dict[str, Any], replace: bool) -> bool:
    """Write the lock; without `replace`, only when no lock exists (atomic). False when one does."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    return atomic_write(path, text, 0o644, exclusive=not replace)


@contextlib.contextmanager
def guarded(path: str, create: bool) -> Iterator[None]:
    """An exclusive flock of the lock's directory (made when missing, with `create`) for the read-decide-write
    of the lock."""
    directory = os.path.dirname(path) or "."
    if create:
        os.makedirs(directory, 0o755, exist_ok=True)
    elif not os.path.isdir(directory):
        yield
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def describe(holder: dict[str, Any]) -> str:
    return "run %s of %s@%s (controller pid %s), started %s" % (
        holder.get("id", "?"),
        holder.get("user", "?"),
        holder.get("controller", "?"),
        holder.get("pid", "?"),
        holder.get("started", "?"),
    )


def jobs_of(run_id: Optional[str], proc: str = "/proc", but: str = "") -> list[tuple[int, str]]:
    """The processes on this host whose environment names the run (any run when `run_id` is None, but
    not `but`): (pid, who and what)."""
    wanted = ("%s=%s" % (RUN_ENV, run_id)).encode() if run_id is not None else None
    prefix, skip = ("%s=" % RUN_ENV).encode(), ("%s=%s" % (RUN_ENV, but)).encode()
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, entry, "environ"), "rb") as handle:
                names = handle.read().split(b"\0")
            if wanted is not None and wanted not in names:
                continue
            if wanted is None and not any(n.startswith(prefix) and n != skip for n in names):
                continue
            with open(os.path.join(proc, entry, "cmdline"), "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            uid = os.stat(os.path.join(proc, entry)).st_uid
        except OSError:
            continue
        found.append((int(entry), "uid %d: %s" % (uid, command[:120])))
    return sorted(found)


def stale_reason(holder: dict[str, Any], takeover: str, break_lock: str, current_boot: str) -> Optional[str]:
    """Why an existing, readable lock may be taken over, or None."""
    if holder.get("boot_id") and current_boot and holder["boot_id"] != current_boot:
        return REBOOTED
    if takeover and takeover == holder.get("id"):
        return "its ansible-playbook process is gone from its controller"
    if break_lock and break_lock == holder.get("id"):
        return "broken with -e break_lock=%s" % break_lock
    return None


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            run=dict(type="dict", required=True),
            state=dict(type="str", choices=["acquired", "released", "query"], default="acquired"),
            takeover=dict(type="str", default=""),
            break_lock=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path, run = p["path"], p["run"]
    if not run.get("id"):
        module.fail_json(msg="host_lock: run.id is empty.")
    if p["state"] == "query" or module.check_mode:
        holder = read_lock(path)
        if p["state"] == "acquired" and not holder:
            holder = dict(run, boot_id=boot_id())
        module.exit_json(changed=False, holder=holder or {})
    with guarded(path, create=p["state"] == "acquired"):
        holder = read_lock(path)
        if p["state"] == "released":
            if holder and holder.get("id") == run["id"]:
                os.unlink(path)
                holder = None
            module.exit_json(changed=False, holder=holder or {})
        acquire(module, path, run, holder)


def acquire(module: AnsibleModule, path: str, run: dict[str, Any], holder: Optional[dict[str, Any]]) -> None:
    p = module.params
    mine = dict(run, boot_id=boot_id())
    if holder and holder.get("id") == run["id"]:
        module.exit_json(changed=False, holder=holder)
    if holder is None:
        if write_new(path, mine, replace=False):
            module.exit_json(changed=False, holder=mine)
        holder = read_lock(path) or {}
    if holder.get("unreadable"):
        if p["break_lock"] != UNREADABLE:
            module.fail_json(
                msg="The host's run lock %s cannot be read (%s). It may be a lock of another version of this "
                "project, or a damaged file. Make sure no run of the stack is at work on this host (no "
                "ansible-playbook of it on any controller; on the host, no process with %s= in its environment: "
                "grep -l %s= /proc/[0-9]*/environ), then remove the file (rm %s) or rerun with -e break_lock=%s."
                % (path, holder.get("error", "?"), RUN_ENV, RUN_ENV, path, UNREADABLE),
                holder=holder,
            )
        jobs = jobs_of(None, but=run["id"])
        if jobs:
            module.fail_json(
                msg="-e break_lock=%s: the host's run lock %s cannot be read, and steps of a run of the stack still "
                "run on this host: %s. Wait for them to end (or stop them: kill %s), then rerun."
                % (UNREADABLE, path, "; ".join("pid %d (%s)" % job for job in jobs), " ".join(str(j) for j, _ in jobs)),
                holder=holder,
            )
        write_new(path, mine, replace=True)
        module.exit_json(
            changed=False, holder=mine, taken_over=dict(holder, reason="unreadable, broken with -e break_lock")
        )
    why = stale_reason(holder, p["takeover"], p["break_lock"], mine["boot_id"])
    # A reboot ended every step of the holder; otherwise one may still run here.
    jobs = jobs_of(str(holder.get("id"))) if why and why != REBOOTED else []
    if jobs:
        module.fail_json(
            msg="The run %s is gone from its controller (or you broke its lock), but its steps still run on this host: "
            "%s. Wait for them to end (or stop them: kill %s), then rerun; taking the lock now would let this run "
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
    wrong = (
        " (-e break_lock=%s does not name it: give the holder's run id exactly)" % p["break_lock"]
        if p["break_lock"]
        else ""
    )
    module.fail_json(
        msg="Another run of the stack holds this host: %s (lock %s)%s. Wait for it to finish. A run of this "
        "controller that is gone is taken over by itself; this one cannot be checked from here (another machine, "
        "perhaps with the same host name, or a lock of an older version), or is still running. If you know it is "
        "no longer running (killed, or its controller is gone), rerun with -e break_lock=%s."
        % (describe(holder), path, wrong, holder.get("id", "")),
        holder=holder,
    )


if __name__ == "__main__":
    main()
