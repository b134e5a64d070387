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

# The seed recipe's launcher, exactly: the original P40 attempt's 30 Hydra overrides in its
# order (docs/training.md, "The original recipe, line by line"), its paths replaced by the
# project's defaults on a host (train_data_dir, train_model_path). tests/gpu/original_recipe.txt
# holds the same list for the GPU proof.
ORIGINAL_RECIPE = [
    "data.train_files=/home/verl/verl-p40/data/gsm8k/train.parquet",
    "data.val_files=/home/verl/verl-p40/data/gsm8k/test.parquet",
    "data.train_batch_size=1",
    "data.max_prompt_length=256",
    "data.max_response_length=256",
    "actor_rollout_ref.model.path=/home/verl/verl-p40/models/Qwen2.5-0.5B-Instruct",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.max_num_batched_tokens=512",
    "actor_rollout_ref.rollout.enable_chunked_prefill=false",
    "actor_rollout_ref.fsdp_config.cpu_offload=true",
    "actor_rollout_ref.fsdp_config.offload_params=true",
    "actor_rollout_ref.rollout.max_num_seqs=1",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "critic.optim.lr=1e-5",
    "critic.model.path=/home/verl/verl-p40/models/Qwen2.5-0.5B-Instruct",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.logger=console",
    "trainer.val_before_train=False",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.save_freq=10",
    "trainer.test_freq=10",
    "trainer.total_epochs=2",
]

# Its environment, in its order.
ORIGINAL_ENV = {
    "HYDRA_FULL_ERROR": "1",
    "VLLM_DTYPE": "float32",
    "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128",
    "PYTHONUNBUFFERED": "1",
    "TRITON_MAX_SHARED_MEMORY": "49152",
}

# The two keys verl 0.4.1 has never had (the seed's lines 16 and 17).
REFUSED_KEYS = ["actor_rollout_ref.fsdp_config.cpu_offload", "actor_rollout_ref.fsdp_config.offload_params"]


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


def test_original_recipe_file_is_the_list():
    # The GPU proof reads the file, the tests read the list: one recipe, 30 lines, 5 variables.
    listing = REPO / "tests" / "gpu" / "original_recipe.txt"
    assert vo.overrides_from_file(listing) == ORIGINAL_RECIPE
    assert len(ORIGINAL_RECIPE) == 30 and len(ORIGINAL_ENV) == 5
    header = listing.read_text()
    for name, value in ORIGINAL_ENV.items():
        assert "%s=%s" % (name, value) in header
    run_ppo = (REPO / "tests" / "gpu" / "run_ppo.sh").read_text()
    exported = " ".join("%s=%s" % item for item in ORIGINAL_ENV.items())
    assert exported in run_ppo, "run_ppo.sh must run the recipe with the seed's 5 variables"


def test_original_recipe_is_refused_naming_both_keys(verl_041_pristine: Path):
    result = vo.check(verl_041_pristine, ORIGINAL_RECIPE)
    assert [item.key for item in result.refused] == REFUSED_KEYS
    # Hydra: "Could not override ... Key 'fsdp_config' is not in struct": verl 0.4.1's
    # actor_rollout_ref has fsdp_config only under actor, ref and critic.model.
    assert all(item.reason.startswith("Could not override '%s'" % item.key) for item in result.refused)
    assert "actor_rollout_ref.actor.fsdp_config.param_offload" in result.refused[0].reason
    assert "actor_rollout_ref.actor.fsdp_config.param_offload" in result.refused[1].reason
    assert not result.ok


def test_the_rest_of_the_original_recipe_composes_and_is_not_what_a_p40_needs(verl_041_pristine: Path):
    # The other 28 lines are keys verl has: they compose, batch arithmetic included ...
    rest = [item for item in ORIGINAL_RECIPE if vo.override_key(item) not in REFUSED_KEYS]
    assert len(rest) == 28
    result = vo.check(verl_041_pristine, rest)
    assert result.ok and result.warnings == []
    cfg = vo.composed(verl_041_pristine, rest)
    arr = cfg.actor_rollout_ref
    # ... but nothing of it offloads (the refused lines were the only offload asked for),
    assert arr.actor.fsdp_config.param_offload is False and arr.actor.fsdp_config.optimizer_offload is False
    assert cfg.critic.model.fsdp_config.param_offload is False
    # the rollout stays bf16 (VLLM_DTYPE is no vLLM variable) and attention flash_attention_2,
    assert arr.rollout.dtype == "bfloat16"
    assert "_attn_implementation" not in arr.model.override_config
    # and the vLLM rollout keeps prefix caching: verl 0.4.1 hard-codes it on.
    spmd = verl_041_pristine / "verl" / "workers" / "rollout" / "vllm_rollout" / "vllm_rollout_spmd.py"
    assert spmd.read_text().splitlines()[163].strip() == "enable_prefix_caching=True,"
    # Validation first runs at step 10 (val_before_train=False, test_freq=10).
    assert cfg.trainer.val_before_train is False and cfg.trainer.test_freq == 10
    assert cfg.data.val_batch_size is None  # the whole test set in one generate call


def test_original_recipe_lines_equal_to_verls_defaults(verl_041_pristine: Path):
    # docs/training.md says which lines change nothing: verl 0.4.1's YAML has the same value.
    defaults = vo.composed(verl_041_pristine, [])
    from omegaconf import OmegaConf

    same = []
    for item in ORIGINAL_RECIPE:
        key = vo.override_key(item)
        if key in REFUSED_KEYS:
            continue
        given = OmegaConf.select(vo.composed(verl_041_pristine, [item]), key)
        if given == OmegaConf.select(defaults, key):
            same.append(key)
    assert same == [
        "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.rollout.name",
        "critic.optim.lr",
        "algorithm.kl_ctrl.kl_coef",
        "trainer.nnodes",
    ]


def test_what_verl_041_reads_of_the_original_recipe(verl_041_pristine: Path):
    # Python files of verl 0.4.1 that name a setting, outside its config and the vendored
    # vLLM 0.5.4/0.6.3 (verl/third_party), which the FSDP recipe does not use.
    def readers(word: str) -> list[str]:
        package = verl_041_pristine / "verl"
        return sorted(
            path.relative_to(verl_041_pristine).as_posix()
            for path in package.rglob("*.py")
            if "third_party" not in path.relative_to(package).parts and word in path.read_text(errors="replace")
        )

    assert readers("max_num_seqs") == []  # accepted by Hydra, passed to vLLM by nothing
    for name in ("VLLM_DTYPE", "TRITON_MAX_SHARED_MEMORY", "PYTORCH_CUDA_ALLOC_CONF"):
        assert readers(name) == [], name
    # The two vLLM settings the seed set do reach vLLM's engine (as verl's defaults would).
    for word in ("max_num_batched_tokens", "enable_chunked_prefill"):
        assert "verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py" in readers(word)


def test_original_recipe_cli_exits_non_zero(verl_041_pristine: Path):
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "roles" / "train" / "files" / "validate_overrides.py"),
            "--verl",
            str(verl_041_pristine),
            "--overrides-file",
            str(REPO / "tests" / "gpu" / "original_recipe.txt"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "refused: actor_rollout_ref.fsdp_config.cpu_offload=true" in done.stderr
    assert "refused: actor_rollout_ref.fsdp_config.offload_params=true" in done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["ok"] is False and summary["overrides"] == 30 and len(summary["refused"]) == 2


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
