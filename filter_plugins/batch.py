"""Check the launcher's batch sizes against the GPUs it trains on, at render time.

verl 0.4.1 checks these only once its workers exist (ray_trainer's config check,
fsdp_workers' normalization of the mini- and micro-batches), minutes into a run and
in its own key names. train.sh.j2 calls ``gpu_batch_check`` before anything is
written, so a batch that cannot divide among the GPUs stops the render with the
Ansible variable to change. The rules (verl 0.4.1):

- ``train_batch_size * rollout.n`` divides among the world size
  (``n_gpus_per_node * nnodes``);
- ``train_batch_size >= ppo_mini_batch_size``;
- for the actor, and the critic under GAE: the per-GPU mini-batch
  ``ppo_mini_batch_size * rollout.n // world_size`` is at least 1 and a multiple of
  the role's ``ppo_micro_batch_size_per_gpu`` (the profile's micro-batch; with the HF
  rollout filter_plugins/memory.py picks divisors, so only a knob pinned in
  train_memory_fixed can break it).

``roles/train/files/validate_overrides.py`` checks the same on the host against the
composed config, overrides on train.sh's command line included.
"""

from __future__ import annotations

from math import gcd
from typing import Any

from ansible.errors import AnsibleFilterError

GPUS = "train_n_gpus_per_node x train_nnodes"


def gpu_batch_problems(
    train_batch_size: int,
    ppo_mini_batch_size: int,
    rollout_n: int,
    n_gpus: int,
    micro_batch_size_per_gpu: dict[str, int],
    critic: bool = True,
    profile: str = "",
    micro_source: str = "",
) -> list[str]:
    """What verl would refuse about these batch sizes on ``n_gpus`` GPUs, naming the variable to change.

    ``micro_source`` names where the micro-batches were set (e.g. train_memory_fixed, whose
    pinned knobs the memory plan keeps) when not the profile's micro_batch_size_per_gpu.
    """
    batch, mini, n, gpus = int(train_batch_size), int(ppo_mini_batch_size), int(rollout_n), int(n_gpus)
    if gpus < 1:
        return [f"{GPUS} is {gpus}; it must be at least 1"]
    problems = []
    if (batch * n) % gpus:
        step = gpus // gcd(n, gpus)
        problems.append(
            f"train_batch_size {batch} x train_rollout_n {n} = {batch * n} sequences do not divide among "
            f"{gpus} GPUs ({GPUS}): set train_batch_size to a multiple of {step}"
        )
    if batch < mini:
        problems.append(f"train_ppo_mini_batch_size {mini} is larger than train_batch_size {batch}: lower it")
    roles = ["actor"] + (["critic"] if critic else [])
    for role in roles:
        micro = int(micro_batch_size_per_gpu.get(role) or 1)
        per_gpu = mini * n // gpus
        # The smallest mini-batch that gives every GPU a whole number of micro-batches.
        step = gpus * micro // gcd(n, gpus * micro)
        where = (
            f"{micro_source}.{role}"
            if micro_source
            else f"stack_gpu_profiles.{profile}.micro_batch_size_per_gpu.{role}"
            if profile
            else f"the {role} micro-batch"
        )
        if per_gpu < 1:
            problems.append(
                f"train_ppo_mini_batch_size {mini} x train_rollout_n {n} gives the {gpus} GPUs less than one "
                f"sequence each per {role} update: set train_ppo_mini_batch_size to a multiple of {step}"
            )
        elif per_gpu % micro:
            problems.append(
                f"train_ppo_mini_batch_size {mini}: each of the {gpus} GPUs gets {per_gpu} sequences per "
                f"{role} update, not a multiple of its micro-batch {micro} ({where}): set "
                f"train_ppo_mini_batch_size to a multiple of {step}"
            )
    return problems


def gpu_batch_check(train_batch_size: int, **kwargs: Any) -> str:
    """``gpu_batch_problems``, raised as one error; '' when there is none (for a template)."""
    problems = gpu_batch_problems(train_batch_size, **kwargs)
    if problems:
        raise AnsibleFilterError("The batch sizes do not fit the GPUs: " + "; ".join(problems) + ".")
    return ""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpu_batch_problems": gpu_batch_problems, "gpu_batch_check": gpu_batch_check}
