"""Every profile's launcher composes with the real verl 0.4.1 config, and the seed recipe does not.

Hydra's compose API loads verl/trainer/config/ppo_trainer.yaml from the
unpacked 0.4.1 sdist (conftest.verl_041_pristine) and applies the rendered
override list, as `python -m verl.trainer.main_ppo` would; no torch needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, gpu_profile_names

import validate_overrides as vo

PROFILES = gpu_profile_names()

# The seed recipe's launcher (its overrides, in its order): two keys that do
# not exist, one that nothing reads (rollout.max_num_seqs), and the rollout
# dtype left at bf16.
ORIGINAL_RECIPE = [
    "data.train_files=/root/data/gsm8k/train.parquet",
    "data.val_files=/root/data/gsm8k/test.parquet",
    "data.train_batch_size=64",
    "data.max_prompt_length=512",
    "data.max_response_length=256",
    "actor_rollout_ref.model.path=/root/models/Qwen2.5-0.5B-Instruct",
    "actor_rollout_ref.actor.ppo_mini_batch_size=32",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.fsdp_config.cpu_offload=True",
    "actor_rollout_ref.fsdp_config.offload_params=True",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
    "actor_rollout_ref.rollout.max_num_seqs=64",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "critic.model.path=/root/models/Qwen2.5-0.5B-Instruct",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.test_freq=10",
    "trainer.save_freq=10",
    "trainer.total_epochs=15",
    "trainer.logger=[console]",
]


def overrides_of(rendered: dict[str, Path], name: str, *extra: str) -> list[str]:
    return vo.overrides_from_script(rendered[name] / "train.sh", list(extra))


@pytest.mark.parametrize("name", PROFILES)
def test_profile_composes_with_verl_041(name: str, verl_041_pristine: Path, rendered_launchers: dict[str, Path]):
    result = vo.check(verl_041_pristine, overrides_of(rendered_launchers, name))
    assert result.refused == []
    assert result.problems == []
    assert result.warnings == []


@pytest.mark.parametrize("name", PROFILES)
def test_hydra_compose_api_directly(name: str, verl_041_pristine: Path, rendered_launchers: dict[str, Path]):
    # The same composition without the tool in between, so a bug there cannot hide a refusal.
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_041_pristine / "verl" / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides_of(rendered_launchers, name))
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1


def test_pascal_config_is_what_a_p40_needs(verl_041_pristine: Path, rendered_launchers: dict[str, Path]):
    cfg = vo.composed(verl_041_pristine, overrides_of(rendered_launchers, "pascal"))
    arr = cfg.actor_rollout_ref
    assert arr.rollout.name == "hf"
    assert arr.rollout.dtype == "float32"
    for fsdp in (arr.actor.fsdp_config, arr.ref.fsdp_config, cfg.critic.model.fsdp_config):
        assert fsdp.model_dtype == "float32"
        assert dict(fsdp.mixed_precision) == {
            "param_dtype": "float32",
            "reduce_dtype": "float32",
            "buffer_dtype": "float32",
        }
    assert arr.model.override_config._attn_implementation == "eager"
    assert arr.actor.use_torch_compile is False and arr.ref.use_torch_compile is False
    assert arr.model.use_remove_padding is False and cfg.critic.model.use_remove_padding is False
    assert arr.actor.fsdp_config.param_offload is False
    assert arr.actor.fsdp_config.optimizer_offload is True
    assert cfg.critic.model.fsdp_config.param_offload is True
    # Sized by filter_plugins/rollout.py for Qwen2.5-0.5B on a P40: the whole batch of 64 at once.
    assert arr.rollout.micro_batch_size == cfg.data.val_batch_size == 64
    assert cfg.trainer.resume_mode == "auto"
    assert cfg.trainer.default_local_dir == "/home/verl/verl-p40/train/checkpoints/gsm8k-gae-pascal"
    assert list(cfg.trainer.logger) == ["console"]
    assert cfg.trainer.total_training_steps is None
    # The critic reads the actor's tokenizer path by interpolation, resolved here.
    assert cfg.critic.model.tokenizer_path == "/home/verl/verl-p40/models/Qwen2.5-0.5B-Instruct"


def test_extra_arguments_win(verl_041_pristine: Path, rendered_launchers: dict[str, Path]):
    overrides = overrides_of(
        rendered_launchers,
        "pascal",
        "trainer.total_training_steps=12",
        "trainer.test_freq=10",
        "++actor_rollout_ref.rollout.micro_batch_size=8",
        "data.val_batch_size=8",
    )
    cfg = vo.composed(verl_041_pristine, overrides)
    assert cfg.trainer.total_training_steps == 12
    assert cfg.actor_rollout_ref.rollout.micro_batch_size == 8


def test_original_recipe_is_refused_naming_both_keys(verl_041_pristine: Path):
    result = vo.check(verl_041_pristine, ORIGINAL_RECIPE)
    assert [item.key for item in result.refused] == [
        "actor_rollout_ref.fsdp_config.cpu_offload",
        "actor_rollout_ref.fsdp_config.offload_params",
    ]
    assert "actor_rollout_ref.actor.fsdp_config.param_offload" in result.refused[0].reason
    assert not result.ok


def test_original_recipe_cli_exits_non_zero(verl_041_pristine: Path, tmp_path: Path):
    listing = tmp_path / "recipe.txt"
    listing.write_text("# the seed recipe\n" + "\n".join(ORIGINAL_RECIPE) + "\n")
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "roles" / "train" / "files" / "validate_overrides.py"),
            "--verl",
            str(verl_041_pristine),
            "--overrides-file",
            str(listing),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "refused: actor_rollout_ref.fsdp_config.cpu_offload=True" in done.stderr
    assert "refused: actor_rollout_ref.fsdp_config.offload_params=True" in done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["ok"] is False and len(summary["refused"]) == 2


def test_cli_accepts_the_package_directory_and_a_script(verl_041_pristine: Path, rendered_launchers: dict[str, Path]):
    # On a host, `python -c 'import verl'` gives the package directory.
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "roles" / "train" / "files" / "validate_overrides.py"),
            "--verl",
            str(verl_041_pristine / "verl"),
            "--script",
            str(rendered_launchers["pascal"] / "train.sh"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["ok"] is True


@pytest.mark.parametrize(
    "before, override",
    [
        ([], "+trainer.total_epochs=3"),  # '+' on a key verl already has
        ([], "actor_rollout_ref.rollout.micro_batch_size=4"),  # a key the YAML lacks, without '+'
        ([], "trainer.totl_epochs=3"),  # a typo
        # '+' twice (the error names a key two overrides set): '++' changes an added key.
        (["+actor_rollout_ref.rollout.micro_batch_size=4"], "+actor_rollout_ref.rollout.micro_batch_size=8"),
    ],
)
def test_single_bad_override_is_refused(before: list[str], override: str, verl_041_pristine: Path):
    result = vo.check(verl_041_pristine, ["trainer.total_epochs=2", *before, override, "trainer.save_freq=5"])
    assert [item.override for item in result.refused] == [override]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["data.val_batch_size=null"], "data.val_batch_size=null sends the whole validation set"),
        (["actor_rollout_ref.actor.fsdp_config.param_offload=true"], "never reloads offloaded ones"),
        # The rollout micro-batch is 64 (sized for 64 a step); 200 would need 3 unequal chunks.
        (["data.train_batch_size=200"], "cannot split 200 prompts per GPU into 3 equal chunks"),
        (["actor_rollout_ref.actor.ppo_mini_batch_size=6"], "is not a multiple of its micro batch (8)"),
        (["data.train_batch_size=16"], "smaller than actor_rollout_ref.actor.ppo_mini_batch_size=32"),
    ],
)
def test_batch_arithmetic_verl_would_assert_late(
    extra: list[str], message: str, verl_041_pristine: Path, rendered_launchers: dict[str, Path]
):
    result = vo.check(verl_041_pristine, overrides_of(rendered_launchers, "pascal", *extra))
    assert result.refused == []
    assert any(message in problem for problem in result.problems), result.problems


def test_missing_config_is_bad_input(tmp_path: Path):
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "roles" / "train" / "files" / "validate_overrides.py"),
            "--verl",
            str(tmp_path),
            "trainer.total_epochs=1",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "no ppo_trainer.yaml" in done.stderr
