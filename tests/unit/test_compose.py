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
from test_render import planned

import validate_overrides as vo

PROFILES = gpu_profile_names()
# What filter_plugins/memory.py picks for the pascal launcher's defaults (Qwen2.5-0.5B-Instruct,
# PPO, a P40): the micro-batches, checkpointing and optimizer offload the rendered list carries.
PASCAL_PLAN = planned("Qwen2.5-0.5B-Instruct")

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
    # The HF rollout generates with the actor's weights: never offloaded. The rest is the memory plan's.
    assert arr.actor.fsdp_config.param_offload is False
    assert arr.actor.fsdp_config.optimizer_offload is PASCAL_PLAN["offload"]["actor_optimizer"]
    assert cfg.critic.model.fsdp_config.param_offload is True
    assert cfg.critic.model.fsdp_config.optimizer_offload is PASCAL_PLAN["offload"]["critic_optimizer"]
    assert arr.model.enable_gradient_checkpointing is PASCAL_PLAN["gradient_checkpointing"]["actor"]
    assert arr.actor.ppo_micro_batch_size_per_gpu == PASCAL_PLAN["micro_batch_size_per_gpu"]["actor"]
    assert cfg.critic.ppo_micro_batch_size_per_gpu == PASCAL_PLAN["micro_batch_size_per_gpu"]["critic"]
    # Sized by filter_plugins/memory.py for Qwen2.5-0.5B on a P40: the whole batch of 64 at once.
    assert arr.rollout.micro_batch_size == cfg.data.val_batch_size == PASCAL_PLAN["rollout_micro_batch_size"] == 64
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
        # 6 sequences per update against the critic's micro-batch that the memory plan picked.
        (
            ["actor_rollout_ref.actor.ppo_mini_batch_size=6"],
            "is not a multiple of its micro batch (%d)" % PASCAL_PLAN["micro_batch_size_per_gpu"]["critic"],
        ),
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


# -- the checks themselves, on a config built here (no Hydra: each case takes milliseconds) --------

SMALL = {
    "algorithm": {"adv_estimator": "gae"},
    "data": {"train_batch_size": 64, "val_batch_size": 64},
    "trainer": {"n_gpus_per_node": 1, "nnodes": 1},
    "actor_rollout_ref": {
        "actor": {
            "ppo_mini_batch_size": 32,
            "ppo_micro_batch_size": None,
            "ppo_micro_batch_size_per_gpu": 8,
            "use_dynamic_bsz": False,
            "ulysses_sequence_parallel_size": 1,
            "fsdp_config": {"param_offload": False},
        },
        "rollout": {
            "name": "hf",
            "n": 1,
            "tensor_model_parallel_size": 1,
            "log_prob_micro_batch_size": None,
            "log_prob_micro_batch_size_per_gpu": 8,
            "log_prob_use_dynamic_bsz": False,
            "micro_batch_size": 64,
        },
        "ref": {
            "log_prob_micro_batch_size": None,
            "log_prob_micro_batch_size_per_gpu": 8,
            "log_prob_use_dynamic_bsz": False,
        },
    },
    "critic": {
        "ppo_mini_batch_size": 32,
        "ppo_micro_batch_size": None,
        "ppo_micro_batch_size_per_gpu": 8,
        "use_dynamic_bsz": False,
        "ulysses_sequence_parallel_size": 1,
    },
}
ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
NEEDS = "(verl refuses to start without a micro-batch size)"


def small(changes: dict):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(SMALL)
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


@pytest.mark.parametrize(
    "changes, problems, warnings",
    [
        ({}, [], []),
        (
            {"trainer.n_gpus_per_node": 2, "trainer.nnodes": 2, "data.train_batch_size": 6},
            [
                "data.train_batch_size x rollout.n = 6 is not divisible by the 4 GPUs",
                f"data.train_batch_size=6 is smaller than {ACTOR}.ppo_mini_batch_size=32",
                "data.train_batch_size=6 is smaller than critic.ppo_mini_batch_size=32",
            ],
            [],
        ),
        (
            {"trainer.n_gpus_per_node": 4, f"{ROLLOUT}.tensor_model_parallel_size": 3},
            ["4 GPUs are not divisible by rollout.tensor_model_parallel_size=3"],
            [],
        ),
        ({f"{ACTOR}.ppo_micro_batch_size_per_gpu": None}, [f"set {ACTOR}.ppo_micro_batch_size_per_gpu {NEEDS}"], []),
        (
            {f"{ACTOR}.ppo_micro_batch_size": 8},
            [f"set only {ACTOR}.ppo_micro_batch_size_per_gpu, not also {ACTOR}.ppo_micro_batch_size"],
            [],
        ),
        ({f"{ACTOR}.use_dynamic_bsz": True, f"{ACTOR}.ppo_micro_batch_size_per_gpu": None}, [], []),
        (
            # A dynamic actor skips its own checks only, not the sections after it.
            {
                f"{ACTOR}.use_dynamic_bsz": True,
                f"{ACTOR}.ppo_micro_batch_size_per_gpu": None,
                f"{REF}.log_prob_micro_batch_size_per_gpu": None,
                "critic.ppo_mini_batch_size": 1000,
            },
            [
                f"set {REF}.log_prob_micro_batch_size_per_gpu {NEEDS}",
                "data.train_batch_size=64 is smaller than critic.ppo_mini_batch_size=1000",
            ],
            [],
        ),
        (
            {"algorithm.adv_estimator": "grpo", "critic.ppo_micro_batch_size_per_gpu": None},
            [],
            [],
        ),
        ({"algorithm.adv_estimator": "grpo", "critic.ppo_mini_batch_size": 1000}, [], []),
        ({"critic.use_dynamic_bsz": True, "critic.ppo_mini_batch_size": 1000}, [], []),
        ({"critic.ppo_micro_batch_size_per_gpu": None}, [f"set critic.ppo_micro_batch_size_per_gpu {NEEDS}"], []),
        (
            {"critic.ppo_micro_batch_size_per_gpu": 5},
            ["critic: the per-GPU mini batch (32 x 1 / 1 = 32) is not a multiple of its micro batch (5)"],
            [],
        ),
        (
            {f"{REF}.log_prob_micro_batch_size_per_gpu": None},
            [f"set {REF}.log_prob_micro_batch_size_per_gpu {NEEDS}"],
            [],
        ),
        ({f"{REF}.log_prob_micro_batch_size_per_gpu": None, f"{REF}.log_prob_use_dynamic_bsz": True}, [], []),
        (
            {f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": None},
            [f"set {ROLLOUT}.log_prob_micro_batch_size_per_gpu {NEEDS}"],
            [],
        ),
        (
            {f"{ROLLOUT}.log_prob_micro_batch_size": 8},
            [f"set only {ROLLOUT}.log_prob_micro_batch_size_per_gpu, not also {ROLLOUT}.log_prob_micro_batch_size"],
            [],
        ),
        (
            {"data.train_batch_size": 16},
            [
                f"data.train_batch_size=16 is smaller than {ACTOR}.ppo_mini_batch_size=32",
                "data.train_batch_size=16 is smaller than critic.ppo_mini_batch_size=32",
            ],
            [],
        ),
        ({"data.train_batch_size": 32}, [], []),
        (
            # Sequence parallel wider than the GPUs: one data-parallel rank, not none.
            {f"{ACTOR}.ulysses_sequence_parallel_size": 2, f"{ACTOR}.ppo_micro_batch_size_per_gpu": 32},
            [],
            [],
        ),
        (
            # 4 GPUs, sequence parallel 2: data parallel 2 halves both the mini batch and a global micro batch.
            {
                "trainer.n_gpus_per_node": 4,
                f"{ACTOR}.ulysses_sequence_parallel_size": 2,
                f"{ACTOR}.ppo_micro_batch_size_per_gpu": None,
                f"{ACTOR}.ppo_micro_batch_size": 12,
            },
            [f"{ACTOR}: the per-GPU mini batch (32 x 1 / 2 = 16) is not a multiple of its micro batch (6)"],
            [],
        ),
        ({f"{ACTOR}.ppo_mini_batch_size": 0}, [f"{ACTOR}.ppo_mini_batch_size x rollout.n / 1 GPUs is 0"], []),
        (
            {f"{ROLLOUT}.n": 3, f"{ACTOR}.ppo_micro_batch_size_per_gpu": 5},
            [f"{ACTOR}: the per-GPU mini batch (32 x 3 / 1 = 96) is not a multiple of its micro batch (5)"],
            [],
        ),
        (
            {f"{ACTOR}.fsdp_config.param_offload": True},
            [
                "the hf rollout generates with the actor's weights and never reloads offloaded ones: "
                f"set {ACTOR}.fsdp_config.param_offload=False"
            ],
            [],
        ),
        (
            {f"{ROLLOUT}.micro_batch_size": None},
            [],
            [f"the hf rollout generates the whole batch at once without +{ROLLOUT}.micro_batch_size"],
        ),
        (
            {f"{ROLLOUT}.micro_batch_size": 7, "data.val_batch_size": 7},
            [
                "the hf rollout cannot split 64 prompts per GPU into 9 equal chunks (micro_batch_size=7); "
                "make data.train_batch_size / GPUs a multiple of it"
            ],
            [],
        ),
        (
            {"data.val_batch_size": None},
            [
                "with the hf rollout, data.val_batch_size=null sends the whole validation set as one batch, which "
                "it can split only if its size divides evenly (GSM8K test: 1319 rows, a prime); set data.val_batch_size=64"
            ],
            [],
        ),
        (
            {"data.val_batch_size": 65},
            [],
            [
                "validation batches of 65 may not split into equal hf rollout chunks of 64; "
                "data.val_batch_size=64 always does"
            ],
        ),
        ({"data.val_batch_size": 128, "trainer.n_gpus_per_node": 2}, [], []),
        (
            {"data.val_batch_size": 129, "trainer.n_gpus_per_node": 2},
            [],
            [
                "validation batches of 129 may not split into equal hf rollout chunks of 64; "
                "data.val_batch_size=128 always does"
            ],
        ),
        (
            {f"{ROLLOUT}.name": "vllm", "data.val_batch_size": None, f"{ACTOR}.fsdp_config.param_offload": True},
            [],
            [],
        ),
    ],
)
def test_batch_problems_one_rule_at_a_time(changes: dict, problems: list[str], warnings: list[str]):
    assert vo.batch_problems(small(changes)) == (problems, warnings)


def test_a_global_micro_batch_is_divided_by_the_data_parallel_size():
    assert vo._per_gpu(12, None, 2) == 6
    assert vo._per_gpu(13, None, 2) == 6
    assert vo._per_gpu(12, 5, 2) == 5
    assert vo._per_gpu(None, None, 2) is None


# -- the exit status the train role stops on, in this process --------------------------------------


def cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, dict, str]:
    status = vo.main(list(argv))
    out, err = capsys.readouterr()
    return status, json.loads(out.splitlines()[-1]), err


def test_wrong_batch_sizes_alone_exit_1(verl_041_pristine: Path, capsys: pytest.CaptureFixture):
    # Every override composes; only the batch arithmetic is wrong: still exit 1, the train role stops.
    status, summary, err = cli(
        capsys, "--verl", str(verl_041_pristine), "data.train_batch_size=3", "trainer.n_gpus_per_node=2"
    )
    assert status == 1
    assert summary["ok"] is False and summary["refused"] == [] and summary["overrides"] == 2
    assert "data.train_batch_size x rollout.n = 3 is not divisible by the 2 GPUs" in summary["problems"]
    assert "problem: data.train_batch_size x rollout.n = 3 is not divisible by the 2 GPUs" in err
    assert "ok: verl composes" not in err


def test_a_valid_list_exits_0_and_warnings_do_not_fail_it(verl_041_pristine: Path, capsys: pytest.CaptureFixture):
    overrides = [line for line in ORIGINAL_RECIPE if "fsdp_config" not in line and "rollout.name" not in line]
    status, summary, err = cli(capsys, "--verl", str(verl_041_pristine), *overrides)
    assert status == 0, err
    assert summary == {"ok": True, "overrides": len(overrides), "refused": [], "problems": [], "warnings": []}
    assert err.strip().splitlines()[-1] == "ok: verl composes all %d overrides" % len(overrides)
    status, summary, err = cli(
        capsys,
        "--verl",
        str(verl_041_pristine),
        *overrides,
        "actor_rollout_ref.rollout.name=hf",
        "data.val_batch_size=8",
    )
    assert status == 0 and summary["ok"] is True and summary["warnings"], err
    assert "warning: the hf rollout generates the whole batch at once" in err


def test_a_refused_override_is_reported_with_its_key_and_reason(verl_041_pristine: Path, capsys):
    status, summary, err = cli(capsys, "--verl", str(verl_041_pristine), "trainer.totl_epochs=3")
    assert status == 1 and summary["ok"] is False
    (refusal,) = summary["refused"]
    assert refusal["override"] == "trainer.totl_epochs=3" and refusal["key"] == "trainer.totl_epochs"
    assert "refused: trainer.totl_epochs=3\n  key trainer.totl_epochs: " in err
    assert refusal["reason"].endswith(
        "(A '+' makes Hydra accept a new key, but only keys verl's code reads do anything.)"
    )


def test_overrides_come_from_a_file_then_the_command_line(verl_041_pristine: Path, tmp_path: Path, capsys):
    listed = tmp_path / "list.txt"
    listed.write_text("# a comment\n\n  trainer.total_epochs=2  \ntrainer.save_freq=5\n")
    assert vo.overrides_from_file(listed) == ["trainer.total_epochs=2", "trainer.save_freq=5"]
    status, summary, _ = cli(
        capsys, "--verl", str(verl_041_pristine), "--overrides-file", str(listed), "trainer.test_freq=5"
    )
    assert summary["overrides"] == 3 and summary["refused"] == []  # verl's defaults lack micro-batch sizes
    assert status == 1 and any("micro-batch size" in problem for problem in summary["problems"])


def test_no_overrides_or_no_config_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as stop:
        vo.main(["--verl", str(tmp_path)])
    assert stop.value.code == 2 and "no overrides given" in capsys.readouterr().err
    status, summary, err = cli(capsys, "--verl", str(tmp_path), "trainer.total_epochs=1")
    assert status == 2 and summary["ok"] is False and "no ppo_trainer.yaml under" in summary["error"]
    assert err.startswith("validate_overrides.py: ")


def test_the_config_directory_is_found_from_any_of_three_places(verl_041_pristine: Path, tmp_path: Path):
    config = (verl_041_pristine / "verl" / "trainer" / "config").resolve()
    for given in (verl_041_pristine, verl_041_pristine / "verl", config):
        assert vo.config_dir(given) == config
    with pytest.raises(FileNotFoundError, match="give the verl checkout root"):
        vo.config_dir(tmp_path)


def test_override_keys_and_the_hint_for_known_replacements():
    assert vo.override_key("++a.b=1=2") == "a.b"
    assert vo.override_key("~a.b") == "a.b"
    reason = vo._reason(
        "actor_rollout_ref.fsdp_config.cpu_offload=true", ValueError("Could not override.\nmore\nlines")
    )
    assert reason == "Could not override. Use actor_rollout_ref.actor.fsdp_config.param_offload / optimizer_offload."
    assert vo._reason("x=1", ValueError("one\ntwo\nthree\nfour")) == "one two three"
    assert vo._first_lines(ValueError("")) == "ValueError"
    assert vo._culprit(["a=1", "b=2"], ValueError("Key 'b' is not in struct\nmore")) == 1
    assert vo._culprit(["a=1", "+a=2"], ValueError("Key 'a' twice")) is None
    assert vo._culprit(["a=1"], ValueError("")) is None


def test_a_config_that_does_not_resolve_is_a_problem(verl_041_pristine: Path):
    result = vo.check(verl_041_pristine, ["trainer.project_name=${no.such.key}"])
    assert result.refused == []
    assert result.problems[0].startswith("the composed config does not resolve: ")
    assert len(result.problems) == 1


def test_a_launcher_that_cannot_list_its_overrides_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture):
    script = tmp_path / "train.sh"
    script.write_text('echo "no such option: $1" >&2\nexit 3\n')
    status, summary, err = cli(capsys, "--verl", str(tmp_path), "--script", str(script))
    assert status == 2 and summary["ok"] is False
    assert "--print-overrides failed (3): no such option: --print-overrides" in err


def test_verl_is_a_required_argument(capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as stop:
        vo.main(["trainer.total_epochs=1"])
    assert stop.value.code == 2 and "the following arguments are required: --verl" in capsys.readouterr().err


def test_a_batch_size_given_as_text_is_a_problem_not_a_crash(verl_041_pristine: Path):
    result = vo.check(verl_041_pristine, ["data.train_batch_size=many"])
    assert result.refused == [] and len(result.problems) == 1
    assert result.problems[0].startswith("could not check the batch sizes: ")


def test_a_launcher_that_hangs_is_given_up_after_a_minute(tmp_path: Path, monkeypatch, capsys):
    def hang(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    monkeypatch.setattr(vo.subprocess, "run", hang)
    status, summary, err = cli(capsys, "--verl", str(tmp_path), "--script", str(tmp_path / "train.sh"))
    assert status == 2 and "timed out after 60 seconds" in summary["error"]


def test_help_says_what_it_does(capsys: pytest.CaptureFixture):
    with pytest.raises(SystemExit) as stop:
        vo.main(["--help"])
    assert stop.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Compose Hydra overrides with a verl checkout's own config; name every override verl refuses." in out


def test_hydra_left_initialized_by_another_caller_is_no_obstacle(verl_041_pristine: Path):
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    def leave_initialized() -> None:
        initialize_config_dir(config_dir=str(vo.config_dir(verl_041_pristine)), version_base=None).__enter__()
        assert GlobalHydra.instance().is_initialized()

    try:
        leave_initialized()
        assert vo.composed(verl_041_pristine, ["trainer.total_epochs=3"]).trainer.total_epochs == 3
        leave_initialized()
        assert vo.check(verl_041_pristine, ["trainer.total_epochs=3"]).refused == []
    finally:
        GlobalHydra.instance().clear()


def test_the_composed_config_is_resolved_in_place(verl_041_pristine: Path):
    from omegaconf import OmegaConf

    cfg = vo.composed(verl_041_pristine, ["trainer.project_name=${trainer.experiment_name}"])
    assert not OmegaConf.is_interpolation(cfg.trainer, "project_name")
    assert "${" not in OmegaConf.to_yaml(cfg)
