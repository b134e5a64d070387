#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: check the free space the install paths need, filesystem by filesystem."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: disk_space
short_description: Check that the filesystems holding some paths have enough free space
description:
  - For each item of O(requirements) (a path, which need not exist yet, and the GiB it needs)
    finds the filesystem that will hold it (that of its nearest existing ancestor).
    Requirements on one filesystem add up.
  - Each shortfall names the paths on that filesystem, the GiB each needs, and what each
    requirement says about itself (O(requirements[].why), the variables that move the path or
    change its size), so that a refusal says what to change.
  - Never changes anything and never fails for lack of space; the caller judges RV(shortfalls).
  - Also measures the host's memory and the CPUs this process may run on (RV(memory_mb), RV(cpus)),
    which the caller's memory check and a build's parallel jobs read, so that a play needs no
    hardware fact gathering.
options:
  requirements:
    description: The paths to check and the free space each needs.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: An absolute path. It need not exist yet; its nearest existing ancestor is measured.
        type: str
        required: true
      min_free_gb:
        description: GiB of free space O(requirements[].path) needs.
        type: float
        required: true
      why:
        description: What sets this requirement (the variables behind the path and the size), quoted in a shortfall.
        type: str
        default: ""
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; check mode returns the same result as a normal run.
  diff_mode:
    support: none
    details: The module changes nothing, so there is nothing to show.
  platform:
    platforms: posix
author:
  - verl-p40 maintainers
"""

EXAMPLES = r"""
- name: Check free disk space
  disk_space:
    requirements:
      - {path: /usr/local/cuda-11.8, min_free_gb: 8, why: "cuda_prefix; preflight_disk_cuda_gb"}
      - {path: /var/cache/verl-p40, min_free_gb: 6}
  register: space
"""

RETURN = r"""
filesystems:
  description: One entry per filesystem holding a required path, sorted by mount point.
  type: list
  elements: dict
  returned: always
  contains:
    mount:
      description: The filesystem's mount point.
      type: str
      sample: /
    free_gb:
      description: GiB free for an unprivileged user, rounded to one decimal.
      type: float
      sample: 71.0
    needed_gb:
      description: The sum of O(requirements[].min_free_gb) of the paths on this filesystem.
      type: float
      sample: 14.0
    paths:
      description: The required paths this filesystem holds, as given.
      type: list
      elements: str
      sample: [/usr/local/cuda-11.8, /var/cache/verl-p40]
  sample:
    - {mount: /, free_gb: 71.0, needed_gb: 14.0, paths: [/usr/local/cuda-11.8, /var/cache/verl-p40]}
memory_mb:
  description: The host's memory in MiB (MemTotal of /proc/meminfo); null where that cannot be read.
  type: int
  returned: always
  sample: 257611
cpus:
  description: The CPUs this process may run on (its affinity mask; the CPU count where there is none).
  type: int
  returned: always
  sample: 32
shortfalls:
  description: A sentence for each filesystem with less free space than needed; empty when all have enough.
  type: list
  elements: str
  returned: always
  sample:
    - "/ has 9.5 GiB free, needs 14.0 GiB for /usr/local/cuda-11.8 8.0 GiB (cuda_prefix; preflight_disk_cuda_gb),
      /var/cache/verl-p40 6.0 GiB"
"""

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule

GIB = 1024**3


def existing_ancestor(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def mount_point(path: str) -> str:
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def check(requirements: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    by_device: dict[int, dict[str, Any]] = {}
    # Per filesystem: each path with its size and what sets it, for the shortfall's sentence.
    parts: dict[int, list[str]] = {}
    for req in requirements:
        anchor = existing_ancestor(str(req["path"]))
        stat = os.statvfs(anchor)
        slot = by_device.setdefault(
            os.stat(anchor).st_dev,
            {
                "mount": mount_point(anchor),
                "free_gb": round(stat.f_bavail * stat.f_frsize / GIB, 1),
                "needed_gb": 0.0,
                "paths": [],
            },
        )
        slot["needed_gb"] += float(req["min_free_gb"])
        slot["paths"].append(str(req["path"]))
        why = str(req.get("why") or "")
        parts.setdefault(id(slot), []).append(
            "%s %.1f GiB%s" % (req["path"], float(req["min_free_gb"]), " (%s)" % why if why else "")
        )
    filesystems = sorted(by_device.values(), key=lambda fs: fs["mount"])
    shortfalls = [
        "%s has %.1f GiB free, needs %.1f GiB for %s"
        % (fs["mount"], fs["free_gb"], fs["needed_gb"], ", ".join(parts[id(fs)]))
        for fs in filesystems
        if fs["free_gb"] < fs["needed_gb"]
    ]
    return filesystems, shortfalls


def memory_mb(meminfo: str = "/proc/meminfo") -> int | None:
    """MemTotal in MiB, as Ansible's memtotal_mb fact has it (kB // 1024); None when unreadable."""
    try:
        with open(meminfo, encoding="ascii") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key == "MemTotal":
                    return int(value.split()[0]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            requirements=dict(
                type="list",
                elements="dict",
                required=True,
                options=dict(
                    path=dict(type="str", required=True),
                    min_free_gb=dict(type="float", required=True),
                    why=dict(type="str", default=""),
                ),
            )
        ),
        supports_check_mode=True,
    )
    for req in module.params["requirements"]:
        if not str(req["path"]).startswith("/"):
            module.fail_json(msg="requirement path %r must be absolute" % (req["path"],))
    filesystems, shortfalls = check(module.params["requirements"])
    module.exit_json(changed=False, filesystems=filesystems, shortfalls=shortfalls, memory_mb=memory_mb(), cpus=cpus())


if __name__ == "__main__":
    main()
