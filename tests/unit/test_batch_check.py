"""filter_plugins/batch.py: verl 0.4.1's batch rules against the GPU count, at render time.

Each rule is checked against what verl itself does (ray_trainer's divisibility check,
fsdp_workers' mini/micro normalization), on the cases that pass and the ones that fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from batch import gpu_batch_check, gpu_batch_problems

REPO = Path(__file__).resolve().parents[2]

PASCAL = {"actor": 4, "critic": 8}


def verl_refuses(batch: int, mini: int, n: int, gpus: int, micro: dict[str, int], critic: bool) -> bool:
    """What verl 0.4.1 does with these numbers (ray_trainer._validate_config, fsdp_workers)."""
    if (batch * n) % gpus or batch < mini:
        return True
    for role in ["actor"] + (["critic"] if critic else []):
        per_gpu = mini * n // gpus
        if per_gpu <= 0 or per_gpu % micro[role]:
            return True
    return False


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 6, 8, 16])
@pytest.mark.parametrize("batch, mini", [(64, 32), (64, 64), (48, 16), (128, 32), (32, 64), (96, 24)])
@pytest.mark.parametrize("n, critic", [(1, True), (5, False), (2, True)])
def test_the_filter_refuses_what_verl_refuses(gpus, batch, mini, n, critic):
    problems = gpu_batch_problems(batch, mini, n, gpus, PASCAL, critic=critic)
    assert bool(problems) == verl_refuses(batch, mini, n, gpus, PASCAL, critic), problems


def test_the_pascal_defaults_fit_one_two_and_four_gpus():
    for gpus in (1, 2, 4):
        assert gpu_batch_problems(64, 32, 1, gpus, PASCAL) == []


def test_eight_gpus_name_the_variable_and_a_value_that_works():
    (problem,) = gpu_batch_problems(64, 32, 1, 8, PASCAL, profile="pascal")
    assert problem == (
        "train_ppo_mini_batch_size 32: each of the 8 GPUs gets 4 sequences per critic update, not a multiple "
        "of its micro-batch 8 (stack_gpu_profiles.pascal.micro_batch_size_per_gpu.critic): set "
        "train_ppo_mini_batch_size to a multiple of 64"
    )
    assert gpu_batch_problems(64, 64, 1, 8, PASCAL) == []


def test_a_batch_that_does_not_divide_among_the_gpus():
    problems = gpu_batch_problems(64, 32, 1, 3, PASCAL)
    assert problems[0].startswith("train_batch_size 64 x train_rollout_n 1 = 64 sequences do not divide among 3 GPUs")
    assert problems[0].endswith("set train_batch_size to a multiple of 3")


def test_the_suggested_multiples_pass():
    # Whatever the filter suggests for the mini-batch is accepted.
    for gpus in (3, 6, 8, 12):
        for n in (1, 2, 5):
            step = int(gpu_batch_problems(gpus * 64, 1, n, gpus, PASCAL)[-1].rsplit(" ", 1)[1])
            assert gpu_batch_problems(step * 8, step, n, gpus, PASCAL) == []


def test_check_raises_one_error_with_every_problem():
    assert gpu_batch_check(64, ppo_mini_batch_size=32, rollout_n=1, n_gpus=2, micro_batch_size_per_gpu=PASCAL) == ""
    with pytest.raises(AnsibleFilterError, match="do not fit the GPUs: train_batch_size 64"):
        gpu_batch_check(64, ppo_mini_batch_size=32, rollout_n=1, n_gpus=3, micro_batch_size_per_gpu=PASCAL)


def test_zero_gpus_is_refused_with_a_message_not_a_division_by_zero():
    """Catches the GPU guard moved to `gpus < 0`: 0 GPUs would reach `% gpus` and raise ZeroDivisionError."""
    assert gpu_batch_problems(64, 32, 1, 0, PASCAL) == [
        "train_n_gpus_per_node x train_nnodes is 0; it must be at least 1"
    ]
    with pytest.raises(AnsibleFilterError, match="is 0; it must be at least 1"):
        gpu_batch_check(64, ppo_mini_batch_size=32, rollout_n=1, n_gpus=0, micro_batch_size_per_gpu=PASCAL)


@pytest.mark.parametrize("micro", [{}, {"actor": None, "critic": 0}])
def test_a_role_without_a_micro_batch_counts_as_micro_batch_one(micro):
    """Catches a default micro-batch other than 1 for a role the mapping lacks (or leaves empty): 2 would
    refuse 3 sequences per GPU, 0 would divide by zero."""
    # 48 x 1 over 16 GPUs: 3 sequences per GPU, a multiple of 1 only.
    assert gpu_batch_problems(96, 48, 1, 16, micro) == []
    assert gpu_batch_problems(96, 48, 1, 16, micro, critic=False) == []


def test_one_sequence_per_gpu_is_enough():
    """Catches the "less than one sequence" test moved to `< 2` or `<= 1`: exactly one sequence per GPU
    per update, with micro-batches of 1, is what verl accepts."""
    ones = {"actor": 1, "critic": 1}
    assert gpu_batch_problems(8, 8, 1, 8, ones) == []
    assert gpu_batch_problems(4, 4, 2, 8, ones) == []
    assert verl_refuses(8, 8, 1, 8, ones, True) is False
    # One fewer sequence than GPUs is refused, with the multiple that works.
    (problem,) = gpu_batch_problems(8, 7, 1, 8, ones, critic=False)
    assert problem.endswith(
        "less than one sequence each per actor update: set train_ppo_mini_batch_size to a multiple of 8"
    )


def test_micro_source_names_the_variable_that_pinned_the_micro_batch():
    """Catches the message naming the profile (or no variable) when the micro-batch came from
    train_memory_fixed: the user must be sent to the variable that set it."""
    (problem,) = gpu_batch_problems(64, 32, 1, 8, PASCAL, profile="pascal", micro_source="train_memory_fixed")
    assert "(train_memory_fixed.critic)" in problem
    assert "stack_gpu_profiles" not in problem
    (plain,) = gpu_batch_problems(64, 32, 1, 8, PASCAL)
    assert "(the critic micro-batch)" in plain
