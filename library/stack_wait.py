#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module documentation: stack_wait. Its code is the action plugin action_plugins/stack_wait.py."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stack_wait
short_description: Wait for a long background task of a layer, printing its progress
description:
  - The long steps of the stack (the CUDA runfile and its installer, the cuDNN archive, the torch
    wheels, the Apex build) run as C(async) tasks with C(poll=0); this action waits for one of them
    and prints a line every O(every) seconds, with the elapsed time, the size of O(size_of) (bytes
    downloaded or unpacked so far) and the last line of O(log), so a user does not wait through an
    hour of silence. The lines reach a plain terminal and ansible-runner's event stream alike.
  - The action's result is the job's own RV(rc), RV(stdout), RV(stderr), RV(cmd), RV(start), RV(end),
    RV(delta) and C(msg), as the task would have returned without C(async), and it fails when the job
    failed. Nothing else of the job's status file is taken (no C(ansible_facts)), since a job that runs as
    the training user writes that file as that user. The job's status file is removed, and the wait
    ends only once the job's C(async_wrapper) has exited too (15 s at most; it outlives the job by up to
    5 s and carries the run's C(VERL_P40_RUN), so a run ending on the job would leave the host lock held
    for an immediate rerun).
  - Everything it runs on the host (the job status, C(du), C(tail)) runs with the task's connection
    and C(become) settings. Give it the same C(become_user) as the job, so a log the training user
    writes is read as that user.
extends_documentation_fragment:
  - action_common_attributes
options:
  jid:
    description:
      - The job id the async task returned (C(ansible_job_id)). Empty (the job was skipped, for
        example in check mode) skips this task too.
    type: str
    required: true
  label:
    description: What the progress lines call the job; the task's name when empty.
    type: str
    default: ""
  every:
    description: >-
      Seconds between two progress lines (the job is looked at 0.5, 1.5, 3.5 and 7.5 seconds after the
      start, then every 5 seconds or less).
    type: int
    default: 30
  timeout:
    description:
      - Seconds to wait at most before the task fails (the job keeps its own C(async) limit); 0 waits
        as long as the job runs.
    type: int
    default: 0
  log:
    description: A file whose last line each progress line shows (a build or installer log).
    type: path
  size_of:
    description: A file or directory whose size each progress line shows (a download, an unpack).
    type: path
attributes:
  action:
    support: full
  async:
    support: none
  check_mode:
    support: full
    details:
      - The wait itself changes nothing. In check mode an async task still starts its module, in
        check mode (a command module reports itself skipped); the wait returns that result. An empty
        O(jid) (the job's task was skipped) skips the wait.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Cuda | Run the installer
  ansible.builtin.command:
    argv: ["{{ runfile }}", --silent, --toolkit]
  async: 7200
  poll: 0
  register: __cuda_job

- name: Cuda | Wait for the installer
  stack_wait:
    jid: "{{ __cuda_job.ansible_job_id | default('') }}"
    log: /var/log/cuda-installer.log
  register: __cuda_installed
"""

RETURN = r"""
rc:
  description: The job's exit status (a command job).
  returned: when the job ran a command
  type: int
  sample: 0
cmd:
  description: The command the job ran, as the command module returns it.
  returned: when the job ran a command
  type: raw
  sample: [/var/cache/verl-p40/cuda_11.8.0_520.61.05_linux.run, --silent, --toolkit]
stdout:
  description: The job's standard output.
  returned: when the job ran a command
  type: str
stdout_lines:
  description: RV(stdout), split into lines.
  returned: when the job ran a command
  type: list
  elements: str
stderr:
  description: The job's standard error.
  returned: when the job ran a command
  type: str
stderr_lines:
  description: RV(stderr), split into lines.
  returned: when the job ran a command
  type: list
  elements: str
start:
  description: When the job's command started, on the host.
  returned: when the job ran a command
  type: str
  sample: "2026-12-02 06:05:56.969656"
end:
  description: When the job's command ended, on the host.
  returned: when the job ran a command
  type: str
  sample: "2026-12-02 06:24:11.120333"
delta:
  description: How long the job's command ran.
  returned: when the job ran a command
  type: str
  sample: "0:18:14.150677"
seconds:
  description: How long this task waited for the job.
  returned: when the job was waited for
  type: float
  sample: 1093.4
progress:
  description: The progress lines printed while waiting, in order.
  returned: when the job was waited for
  type: list
  elements: str
  sample: ["Apex | Build the wheel: 30s, 2 MB, [3/12] nvcc -gencode arch=compute_61,code=sm_61 ..."]
"""
