"""The training launcher as tools/render.py writes it: syntax, lint, override list, behaviour.

Behaviour is checked by running the rendered train.sh against stand-ins: a
CUDA env script, a conda.sh whose `conda activate` puts a fake python3 first
on PATH, and that python3, which records its arguments and environment.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import REPO, gpu_profile_names

import memory
import render
import validate_overrides

PROFILES = gpu_profile_names()
DEFAULTS = REPO / "roles" / "train" / "defaults" / "main.yml"
MODELS = yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "model_architectures.yml").read_text())[
    "stack_model_architectures"
]
# The launcher's templates, where the train role and render.py find them (templates/).
TEMPLATES = [render.template_source(src) for src, _ in render.TEMPLATES.values()]
# Variables the seed recipe set that nothing reads.
DEAD_VARIABLES = ("VLLM_DTYPE", "TRITON_MAX_SHARED_MEMORY")
ARCHITECTURES = yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "model_architectures.yml").read_text())
PRESETS = ARCHITECTURES["stack_train_presets"]
MIB = 2**20


def profiles() -> dict:
    return yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "gpu_profiles.yml").read_text())[
        "stack_gpu_profiles"
    ]


def print_overrides(script: Path, *extra: str) -> list[str]:
    return validate_overrides.overrides_from_script(script, list(extra))


def planned(model: str, gpu_memory_mib: int | None = None, **changes) -> dict:
    """The plan filter_plugins/memory.py gives for what the pascal launcher renders: the train role's
    defaults (token budgets, batch sizes, algorithm), the profile's margin and CUDA context, and the
    profile's reference card unless a memory is given; ``changes`` are memory_plan's arguments."""
    pascal = profiles()["pascal"]
    train = yaml.safe_load(DEFAULTS.read_text())
    data = yaml.safe_load((REPO / "roles" / "data" / "defaults" / "main.yml").read_text())
    cards = yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "gpu_profiles.yml").read_text())
    args = dict(
        gpu_memory_mib=gpu_memory_mib or cards["stack_gpu_cards"][pascal["reference_card"]]["memory_mib"],
        prompt_length=data["data_max_prompt_length"],
        response_length=train["train_max_response_length"],
        train_batch_size=train["train_batch_size"],
        ppo_mini_batch_size=train["train_ppo_mini_batch_size"],
        rollout_n=train["train_rollout_n"],
        adv_estimator=train["train_adv_estimator"],
        reference=train["train_use_kl_loss"],
        lora_rank=train["train_lora_rank"],
        attn_implementation=pascal["attn_implementation"],
        memory_margin=pascal["hf_rollout"]["memory_margin"],
        cuda_context_mib=pascal["hf_rollout"]["cuda_context_mib"],
    )
    args.update(changes)
    return memory.memory_plan(MODELS[model], **args)


def memory_overrides(plan: dict) -> set[str]:
    """The overrides train.sh must carry for a memory plan (templates/train.sh.j2's Memory and Rollout parts)."""
    micro, ckpt, offload = plan["micro_batch_size_per_gpu"], plan["gradient_checkpointing"], plan["offload"]
    lower = {True: "true", False: "false"}
    return {
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro['actor']}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro['log_prob']}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro['log_prob']}",
        f"critic.ppo_micro_batch_size_per_gpu={micro['critic']}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={lower[ckpt['actor']]}",
        f"critic.model.enable_gradient_checkpointing={lower[ckpt['critic']]}",
        f"actor_rollout_ref.actor.fsdp_config.param_offload={lower[offload['actor_params']]}",
        f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={lower[offload['actor_optimizer']]}",
        f"critic.model.fsdp_config.param_offload={lower[offload['critic_params']]}",
        f"critic.model.fsdp_config.optimizer_offload={lower[offload['critic_optimizer']]}",
        f"+actor_rollout_ref.rollout.micro_batch_size={plan['rollout_micro_batch_size']}",
        f"data.val_batch_size={plan['val_batch_size']}",
    }


def header_plan(script: Path) -> dict[str, int]:
    """What train.sh's header says of its plan: MiB usable and resident, parameters, predicted peaks (MiB)."""
    text = script.read_text()
    found = {
        "usable": int(re.search(r"\((\d+) MiB usable\), \d+ parameters", text).group(1)),
        "parameters": int(re.search(r"MiB usable\), (\d+) parameters", text).group(1)),
        "resident": int(re.search(r"# (\d+) MiB resident, about", text).group(1)),
    }
    peaks = re.search(
        r"# rollout (\d+), log-prob (\d+), actor update (\d+)(?:, critic update (\d+), values (\d+))?", text
    )
    names = ("rollout", "log_prob", "actor_update", "critic_update", "critic_values")
    found.update({name: int(value) for name, value in zip(names, peaks.groups()) if value})
    return found


def largest_divisor(number: int, limit: int) -> int:
    """The HF rollout's documented rule: the largest divisor of the per-GPU batch whose prompts fit."""
    return max(d for d in range(1, number + 1) if number % d == 0 and d <= limit)


# -- the data ----------------------------------------------------------------


@pytest.mark.parametrize("name", PROFILES)
def test_profile_has_what_the_launcher_needs(name: str):
    assert render.profile_problems(name, profiles()[name]) == []


def test_profile_check_names_what_is_wrong():
    broken = dict(profiles()["pascal"])
    del broken["offload"]
    broken["rollout_backend"] = "vllm"  # without vllm_rollout
    broken["env"] = {"NOT A NAME": "1"}
    problems = " | ".join(render.profile_problems("pascal", broken))
    assert "offload.actor_params is missing" in problems
    assert "vllm_rollout.gpu_memory_utilization is missing" in problems
    assert "'NOT A NAME'" in problems


def test_profile_patch_fixes_exist_in_the_catalog():
    from ansible.module_utils.verl_fixes import CATALOG

    known = {fix["name"] for fix in CATALOG["0.4.1"]}
    for name, profile in profiles().items():
        assert set(profile["patch_fixes"]) <= known, name


def test_hf_profiles_keep_the_actor_weights_on_the_gpu():
    for name, profile in profiles().items():
        if profile["rollout_backend"] == "hf":
            assert profile["offload"]["actor_params"] is False, name
            assert "hf_rollout_timing" in profile["patch_fixes"], name


def test_every_default_is_documented_and_used():
    lines = DEFAULTS.read_text().splitlines()
    names = [m.group(1) for m in (re.match(r"^(train_\w+):", line) for line in lines) if m]
    templates = "\n".join(path.read_text() for path in TEMPLATES)
    defaults_text = DEFAULTS.read_text()
    for number, line in enumerate(lines):
        match = re.match(r"^(train_\w+):", line)
        if not match:
            continue
        block = []
        for previous in reversed(lines[:number]):
            if not previous.strip():
                break
            block.append(previous)
        assert any(item.startswith("#") for item in block), f"{match.group(1)} has no comment above it"
    for name in names:
        # Read by a template, or by another default that a template reads.
        users = len(re.findall(rf"\b{name}\b", templates)) + len(re.findall(rf"\b{name}\b", defaults_text)) - 1
        assert users > 0, f"{name} is read by nothing"


def test_templates_use_only_defined_variables():
    # The train role's defaults, and the values named for the train layer that the stack role holds
    # because another layer reads them too (train_max_checkpoints: preflight sizes the checkpoints).
    defined = set(yaml.safe_load(DEFAULTS.read_text())) | set(
        yaml.safe_load((REPO / "roles/stack/defaults/main/stack.yml").read_text())
    )
    for path in TEMPLATES:
        # (train_report.py is a file name, not a variable.)
        used = set(re.findall(r"(?<![\w.])(train_\w+)\b(?!\.py)", path.read_text()))
        assert used <= defined, f"{path.name} uses undefined {sorted(used - defined)}"


# -- syntax and lint ---------------------------------------------------------


@pytest.mark.parametrize("name", PROFILES)
def test_rendered_files_pass_bash_n(name: str, rendered_launchers: dict[str, Path]):
    for file in ("train.sh", "train.env"):
        done = subprocess.run(
            ["bash", "-n", str(rendered_launchers[name] / file)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", PROFILES)
def test_rendered_files_pass_shellcheck(name: str, rendered_launchers: dict[str, Path]):
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed")
    directory = rendered_launchers[name]
    done = subprocess.run(
        ["shellcheck", "-x", "train.sh", "train.env"], cwd=directory, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_train_sh_is_executable(rendered_launchers: dict[str, Path]):
    script = rendered_launchers["pascal"] / "train.sh"
    assert script.stat().st_mode & 0o111
    assert script.read_text().startswith("#!/usr/bin/env bash\n")


# -- the override list -------------------------------------------------------


@pytest.mark.parametrize("name", PROFILES)
def test_override_list_is_clean(name: str, rendered_launchers: dict[str, Path]):
    directory = rendered_launchers[name]
    overrides = print_overrides(directory / "train.sh")
    keys = [validate_overrides.override_key(item) for item in overrides]
    duplicated = sorted({key for key in keys if keys.count(key) > 1})
    assert not duplicated, f"keys set twice: {duplicated}"
    for item in overrides:
        assert re.match(r"^\+?[a-z_][\w.]*=\S", item), f"not a key=value override: {item!r}"
        assert not item.startswith("actor_rollout_ref.fsdp_config."), item
        assert not item.startswith("actor_rollout_ref.rollout.max_num_seqs="), "read by nothing"
    text = (directory / "train.sh").read_text() + (directory / "train.env").read_text()
    for variable in DEAD_VARIABLES:
        assert variable not in text


def test_pascal_override_list_is_the_p40_set(rendered_launchers: dict[str, Path]):
    overrides = set(print_overrides(rendered_launchers["pascal"] / "train.sh"))
    for expected in (
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.dtype=float32",
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=float32",
        "+actor_rollout_ref.ref.fsdp_config.model_dtype=float32",
        "+critic.model.fsdp_config.mixed_precision.param_dtype=float32",
        "+actor_rollout_ref.model.override_config._attn_implementation=eager",
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.model.use_remove_padding=false",
        "critic.model.use_remove_padding=false",
        "actor_rollout_ref.actor.fsdp_config.param_offload=false",
        # Computed for Qwen2.5-0.5B-Instruct on the profile's reference card (a P40).
        "+actor_rollout_ref.rollout.micro_batch_size=64",
        "data.val_batch_size=64",
        "trainer.resume_mode=auto",
    ):
        assert expected in overrides
    # vLLM-only settings are left out where the HF rollout runs.
    assert not [item for item in overrides if "gpu_memory_utilization" in item or "engine_kwargs" in item]


def test_vllm_profiles_get_the_engine_settings(rendered_launchers: dict[str, Path]):
    overrides = print_overrides(rendered_launchers["volta"] / "train.sh")
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.4" in overrides
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_seqs=64" in overrides
    assert not [item for item in overrides if "rollout.micro_batch_size" in item]


PREFILL_KEYS = ("actor_rollout_ref.rollout.enable_chunked_prefill", "actor_rollout_ref.rollout.max_num_batched_tokens")


@pytest.mark.parametrize("name", PROFILES)
def test_vllm_prefill_settings_where_the_profile_asks(name: str, rendered_launchers: dict[str, Path]):
    # The seed recipe's chunked prefill off and 512 tokens, on the profiles that use vLLM with a small
    # card (volta, turing); the budget is raised to the longest sequence (512 + 256 by default), the
    # least verl 0.4.1 and vLLM accept. Elsewhere verl's own defaults stand: no override at all.
    overrides = print_overrides(rendered_launchers[name] / "train.sh")
    found = {validate_overrides.override_key(item): item for item in overrides}
    vllm = profiles()[name].get("vllm_rollout") or {}
    if profiles()[name]["rollout_backend"] == "vllm" and vllm.get("chunked_prefill") is not None:
        assert found[PREFILL_KEYS[0]] == PREFILL_KEYS[0] + "=false"
        assert found[PREFILL_KEYS[1]] == PREFILL_KEYS[1] + "=768"
    else:
        assert not set(PREFILL_KEYS) & set(found), name
    assert (name in ("volta", "turing")) == (PREFILL_KEYS[0] in found)


def test_the_token_budget_is_the_seed_s_with_the_seed_s_lengths(tmp_path: Path, verl_041_pristine: Path):
    # Prompt 256 + response 256, the seed recipe's lengths: its 512 tokens stand as they are.
    render.render("volta", tmp_path / "seed", {"train_max_prompt_length": 256})
    overrides = print_overrides(tmp_path / "seed" / "train.sh")
    assert PREFILL_KEYS[1] + "=512" in overrides
    # verl 0.4.1's config holds both keys: Hydra composes them (no "+") and they land in the rollout's section.
    cfg = validate_overrides.composed(verl_041_pristine, overrides).actor_rollout_ref.rollout
    assert (cfg.enable_chunked_prefill, cfg.max_num_batched_tokens) == (False, 512)
    # A longer sequence than the profile's budget raises it: 1024 + 256.
    render.render("turing", tmp_path / "long", {"train_max_prompt_length": 1024})
    assert PREFILL_KEYS[1] + "=1280" in print_overrides(tmp_path / "long" / "train.sh")


def test_a_profile_s_prefill_settings_are_checked():
    broken = dict(profiles()["volta"], vllm_rollout=dict(profiles()["volta"]["vllm_rollout"]))
    broken["vllm_rollout"]["chunked_prefill"] = "no"
    broken["vllm_rollout"]["max_num_batched_tokens"] = 0
    broken["needs_apex"] = "yes"
    problems = " | ".join(render.profile_problems("volta", broken))
    assert "vllm_rollout.chunked_prefill is 'no'" in problems
    assert "vllm_rollout.max_num_batched_tokens is 0" in problems
    assert "needs_apex is 'yes'" in problems


def test_every_profile_s_launcher_exports_the_run_variables(rendered_launchers: dict[str, Path]):
    for name, directory in rendered_launchers.items():
        exported = dict(re.findall(r"^export (\w+)=(.*)$", (directory / "train.env").read_text(), re.M))
        assert exported["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128", name
        assert exported["HYDRA_FULL_ERROR"] == "1", name


def launcher_standins(out: Path) -> tuple[str, str]:
    """The stand-in Miniforge prefix and CUDA script the launcher fixture's train.env sources."""
    env_text = (out / "train.env").read_text()
    conda = re.search(r"^\. (\S+)/etc/profile\.d/conda\.sh$", env_text, re.M).group(1)
    cuda = re.search(r"^\. (\S+cuda-env\.sh)$", env_text, re.M).group(1)
    return conda, cuda


def test_train_extra_env_overrides_the_run_variables(launcher: dict[str, Path]):
    out = launcher["script"].parent
    conda, cuda = launcher_standins(out)
    render.render(
        "pascal",
        out,
        {
            "train_conda_prefix": conda,
            "train_conda_env": "p40-env",
            "train_cuda_env_script": cuda,
            "train_work_dir": str(launcher["work"]),
            "train_extra_env": {"PYTORCH_CUDA_ALLOC_CONF": "", "HYDRA_FULL_ERROR": "0"},
        },
    )
    done = run_launcher(launcher)
    assert done.returncode == 0, done.stderr
    _, env = recorded(launcher)
    assert (env["PYTORCH_CUDA_ALLOC_CONF"], env["HYDRA_FULL_ERROR"]) == ("", "0")


def test_extra_arguments_come_last(rendered_launchers: dict[str, Path]):
    script = rendered_launchers["pascal"] / "train.sh"
    overrides = print_overrides(script, "trainer.total_epochs=3", "++actor_rollout_ref.rollout.micro_batch_size=8")
    assert overrides[-2:] == ["trainer.total_epochs=3", "++actor_rollout_ref.rollout.micro_batch_size=8"]


def test_unknown_option_is_refused(rendered_launchers: dict[str, Path]):
    done = subprocess.run(
        ["bash", str(rendered_launchers["pascal"] / "train.sh"), "--dryrun"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "unknown option --dryrun" in done.stderr


def test_variables_reach_the_override_list(tmp_path: Path):
    render.render(
        "pascal",
        tmp_path,
        {
            "train_n_gpus_per_node": 2,
            "train_total_training_steps": 12,
            "train_model_path": "/models/my model",
            # A model render.py does not know: its config comes as a variable.
            "train_model_config": MODELS["Qwen2.5-1.5B-Instruct"],
            "train_lora_rank": 32,
            "train_adv_estimator": "grpo",
            "train_logger": ["console", "tensorboard"],
            "train_extra_overrides": ["actor_rollout_ref.actor.optim.lr=5e-7"],
        },
    )
    overrides = print_overrides(tmp_path / "train.sh")
    assert "trainer.n_gpus_per_node=2" in overrides
    assert "trainer.total_training_steps=12" in overrides
    # A path with a space is quoted for Hydra, and survives bash as one word.
    assert "actor_rollout_ref.model.path='/models/my model'" in overrides
    assert "trainer.logger=[console,tensorboard]" in overrides
    assert overrides[-1] == "actor_rollout_ref.actor.optim.lr=5e-7"


# -- verl's loggers (train_logger) --------------------------------------------

VERL_LOCK = REPO / "roles" / "verl" / "files" / "requirements-verl-0.4.1.txt"
# tensorboard 2.19.0's Requires-Dist (its METADATA), and those of the packages it
# brings that need more: grpcio 1.85.3 typing-extensions~=4.12, werkzeug 3.1.9
# markupsafe>=2.1.1 (which the torch layer installs, as jinja2's).
TENSORBOARD_CLOSURE = {
    "tensorboard": ["absl-py", "grpcio", "markdown", "numpy", "packaging", "protobuf", "setuptools", "six"]
    + ["tensorboard-data-server", "werkzeug"],
    "grpcio": ["typing-extensions"],
    "werkzeug": ["markupsafe"],
}
FROM_THE_TORCH_LAYER = {"markupsafe"}


def launcher_filters():
    import launcher

    return launcher


def lock_pins() -> dict[str, str]:
    pins = re.findall(r"(?m)^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", VERL_LOCK.read_text())
    return {name.lower(): version for name, version in pins}


def test_the_loggers_the_env_can_run_reach_verl(tmp_path: Path, verl_041_pristine: Path):
    render.render("pascal", tmp_path, {"train_logger": ["console", "tensorboard", "wandb"]})
    overrides = print_overrides(tmp_path / "train.sh")
    assert "trainer.logger=[console,tensorboard,wandb]" in overrides
    cfg = validate_overrides.composed(verl_041_pristine, overrides)
    assert list(cfg.trainer.logger) == ["console", "tensorboard", "wandb"]


@pytest.mark.parametrize(
    ("loggers", "message"),
    [
        (["console", "mlflow"], "verl's 'mlflow' logger needs a package the env does not install"),
        (["console", "tensorbord"], "'tensorbord' is not one of verl 0.4.1's loggers; use console, tensorboard, wandb"),
        (["tensorboard"], "train_logger must keep console: train.sh --report"),
        ("console", "train_logger should be a list"),
    ],
)
def test_loggers_the_env_cannot_run_are_refused_at_render_time(tmp_path: Path, loggers, message: str):
    # verl would stop at the import (or its own assert) after Ray and the workers have started.
    with pytest.raises(Exception, match=re.escape(message)):
        render.render("pascal", tmp_path, {"train_logger": loggers})
    assert not (tmp_path / "train.sh").exists()


def test_each_accepted_logger_is_verl_s_and_its_package_is_in_the_env_lock(verl_041_pristine: Path):
    launcher = launcher_filters()
    tracking = (verl_041_pristine / "verl" / "utils" / "tracking.py").read_text()
    supported = re.search(r"supported_backend = (\[[^\]]*\])", tracking).group(1)
    assert sorted(launcher.VERL_LOGGERS) == sorted(yaml.safe_load(supported))
    assert set(launcher.ENV_LOGGERS) <= set(launcher.VERL_LOGGERS)
    pins = lock_pins()
    for name, package in launcher.ENV_LOGGERS.items():
        assert package is None or package in pins, (name, package)
    # The argument spec offers the same names, so preflight refuses others before any layer runs.
    spec = yaml.safe_load((REPO / "roles" / "train" / "meta" / "argument_specs.yml").read_text())
    option = spec["argument_specs"]["main"]["options"]["train_logger"]
    assert option["choices"] == list(launcher.ENV_LOGGERS)


def test_tensorboard_s_dependencies_are_all_in_the_env_lock():
    # pip --require-hashes installs the lock; a dependency missing from it (and not already in
    # the env) would stop the verl layer's install. numpy 1.26.4 and protobuf 6.33.6 as verl has them.
    pins = lock_pins()
    assert pins["tensorboard"] == "2.19.0"
    for package, requires in TENSORBOARD_CLOSURE.items():
        assert package in pins
        for name in requires:
            assert name in pins or name in FROM_THE_TORCH_LAYER, (package, name)
    # 2.20 and later also require pillow, which nothing else in the env needs.
    assert "pillow" not in pins


def test_batch_sizes_are_checked_against_the_gpus_at_render_time(tmp_path: Path):
    # volta (vLLM): its profile's critic micro-batch of 8 does not fit 32 / 8 = 4 per GPU. verl would
    # stop minutes into the run; the render stops at once, naming the variable and a value.
    where = r"stack_gpu_profiles\.volta\.micro_batch_size_per_gpu\.critic\): "
    with pytest.raises(Exception, match=where + "set train_ppo_mini_batch_size to a multiple of 64"):
        render.render("volta", tmp_path / "a", {"train_n_gpus_per_node": 8})
    assert not (tmp_path / "a" / "train.sh").exists()
    render.render("volta", tmp_path / "b", {"train_n_gpus_per_node": 8, "train_ppo_mini_batch_size": 64})
    assert "trainer.n_gpus_per_node=8" in print_overrides(tmp_path / "b" / "train.sh")
    # pascal (HF rollout): filter_plugins/memory.py picks each micro-batch among the divisors of the
    # per-GPU mini-batch, so 8 GPUs render, every micro-batch dividing the 4 sequences each GPU gets.
    render.render("pascal", tmp_path / "c", {"train_n_gpus_per_node": 8})
    found = dict(item.split("=", 1) for item in print_overrides(tmp_path / "c" / "train.sh"))
    for key in ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "critic.ppo_micro_batch_size_per_gpu"):
        assert 4 % int(found[key]) == 0, key
    # A micro-batch pinned in train_memory_fixed is checked the same way, naming that variable.
    with pytest.raises(
        Exception, match=r"train_memory_fixed\.critic\): set train_ppo_mini_batch_size to a multiple of 64"
    ):
        render.render("pascal", tmp_path / "d", {"train_n_gpus_per_node": 8, "train_memory_fixed": {"critic": 8}})
    assert not (tmp_path / "d" / "train.sh").exists()


P40 = {"name": "Tesla P40", "compute_capability": "6.1", "memory_mib": 22919}


def test_the_gpu_count_comes_from_preflight(tmp_path: Path):
    # Preflight's GPUs set trainer.n_gpus_per_node; no GPU (CI, render.py alone) is 1.
    gpus = [dict(P40, index=i) for i in range(4)]
    render.render("pascal", tmp_path / "a", {"preflight_gpus": gpus})
    assert "trainer.n_gpus_per_node=4" in print_overrides(tmp_path / "a" / "train.sh")
    render.render("pascal", tmp_path / "b", {})
    assert "trainer.n_gpus_per_node=1" in print_overrides(tmp_path / "b" / "train.sh")
    # The variable still wins.
    render.render("pascal", tmp_path / "c", {"preflight_gpus": gpus, "train_n_gpus_per_node": 2})
    assert "trainer.n_gpus_per_node=2" in print_overrides(tmp_path / "c" / "train.sh")


def test_picked_gpus_and_peer_to_peer_reach_train_env(tmp_path: Path):
    picked = [dict(P40, index=1), dict(P40, index=3)]
    blocked = {"checked": True, "ok": False, "blocked": ["GPU 1 - GPU 3: CNS (Chipset not supported)"]}
    render.render(
        "pascal", tmp_path / "a", {"train_gpus": [1, 3], "preflight_gpus": picked, "preflight_gpu_p2p": blocked}
    )
    env = (tmp_path / "a" / "train.env").read_text()
    assert "export CUDA_DEVICE_ORDER=PCI_BUS_ID\nexport CUDA_VISIBLE_DEVICES=1,3\n" in env
    assert "export NCCL_P2P_DISABLE=1" in env
    assert "trainer.n_gpus_per_node=2" in print_overrides(tmp_path / "a" / "train.sh")
    # Peer-to-peer available, or not checked, or one GPU: NCCL is left to decide.
    for p2p, gpus in (({"checked": True, "ok": True, "blocked": []}, picked), ({}, picked[:1])):
        render.render("pascal", tmp_path / "b", {"preflight_gpus": gpus, "preflight_gpu_p2p": p2p})
        env = (tmp_path / "b" / "train.env").read_text()
        assert "NCCL_P2P_DISABLE" not in env and "CUDA_VISIBLE_DEVICES" not in env


def cluster_vars(me: str) -> dict:
    """The inventory of a Ray cluster of two hosts, a and b (b marked as the head), seen from me."""
    return {
        "inventory_hostname": me,
        "groups": {"all": ["a", "b", "c"], "verl_cluster": ["a", "b"]},
        "hostvars": {"a": {}, "b": {"ray_head": True}, "c": {}},
        "preflight_gpus": [P40],
    }


def test_the_ray_head_attaches_to_the_cluster_with_every_host(tmp_path: Path):
    render.render("pascal", tmp_path / "head", cluster_vars("b"))
    overrides = print_overrides(tmp_path / "head" / "train.sh")
    assert "trainer.nnodes=2" in overrides and "trainer.n_gpus_per_node=1" in overrides
    assert "\nexport RAY_ADDRESS=auto\n" in (tmp_path / "head" / "train.env").read_text()
    # A host outside the group, and a lone host, train alone.
    for name, extra in (("outside", cluster_vars("c")), ("alone", {})):
        render.render("pascal", tmp_path / name, extra)
        assert "trainer.nnodes=1" in print_overrides(tmp_path / name / "train.sh")
        assert "RAY_ADDRESS" not in (tmp_path / name / "train.env").read_text()
    # The variable still wins.
    render.render("pascal", tmp_path / "set", dict(cluster_vars("b"), train_nnodes=1))
    assert "trainer.nnodes=1" in print_overrides(tmp_path / "set" / "train.sh")


def test_a_recorded_nvidia_smi_output_sets_the_gpus(tmp_path: Path):
    # render.py --nvidia-smi: the launcher a host with that output gets (the two-GPU proof renders it).
    samples = REPO / "tests" / "unit" / "samples"
    smi, topo = samples / "nvidia-smi" / "p40-x2-ecc.txt", samples / "nvidia-smi-topo" / "p40-x2-acs.txt"
    host = ["--profile", "pascal", "--nvidia-smi", str(smi), "--nvidia-smi-topo", str(topo)]
    assert render.main(host + ["--out", str(tmp_path / "a")]) == 0
    assert "trainer.n_gpus_per_node=2" in print_overrides(tmp_path / "a" / "train.sh")
    assert "Sized for 22919 MiB" in (tmp_path / "a" / "train.sh").read_text()
    assert "export NCCL_P2P_DISABLE=1" in (tmp_path / "a" / "train.env").read_text()
    # train_gpus picks one of them, as on the host.
    assert render.main(host + ["--out", str(tmp_path / "b"), "--var", "train_gpus=[1]"]) == 0
    assert "trainer.n_gpus_per_node=1" in print_overrides(tmp_path / "b" / "train.sh")
    assert "NCCL_P2P_DISABLE" not in (tmp_path / "b" / "train.env").read_text()


def rollout_overrides(directory: Path) -> tuple[int, int]:
    overrides = print_overrides(directory / "train.sh")
    micro = [item for item in overrides if item.startswith("+actor_rollout_ref.rollout.micro_batch_size=")]
    val = [item for item in overrides if item.startswith("data.val_batch_size=")]
    return int(micro[0].split("=")[1]), int(val[0].split("=")[1])


def test_rollout_micro_batch_follows_the_model_and_the_card(tmp_path: Path):
    # 1.5B trains with LoRA and GRPO on a P40 (full fine-tuning does not fit: the test below).
    lora = {"train_model_config": MODELS["Qwen2.5-1.5B-Instruct"], "train_lora_rank": 32, "train_adv_estimator": "grpo"}
    plan = planned("Qwen2.5-1.5B-Instruct", lora_rank=32, adv_estimator="grpo")
    render.render("pascal", tmp_path / "a", lora)
    assert rollout_overrides(tmp_path / "a") == (plan["rollout_micro_batch_size"], plan["val_batch_size"])
    # The rule: the largest divisor of the per-GPU batch (64 prompts) whose prompts fit beside the
    # resident weights; validation in one chunk per GPU.
    assert plan["rollout_micro_batch_size"] == largest_divisor(64, plan["rollout_fits"])
    assert plan["val_batch_size"] == plan["rollout_micro_batch_size"]
    # Two GPUs: 32 prompts each, validation in batches of one chunk per GPU.
    two = planned("Qwen2.5-1.5B-Instruct", lora_rank=32, adv_estimator="grpo", n_gpus=2)
    render.render("pascal", tmp_path / "b", {**lora, "train_n_gpus_per_node": 2})
    assert rollout_overrides(tmp_path / "b") == (two["rollout_micro_batch_size"], 2 * two["rollout_micro_batch_size"])
    assert two["rollout_micro_batch_size"] == largest_divisor(32, two["rollout_fits"])
    # The explicit variable wins.
    render.render("pascal", tmp_path / "c", {"train_rollout_micro_batch_size": 16})
    assert rollout_overrides(tmp_path / "c") == (16, 16)
    # The header says where the figure came from.
    text = (tmp_path / "a" / "train.sh").read_text()
    assert "computed by filter_plugins/memory.py" in text and "Sized for 22919 MiB" in text
    assert "(train_rollout_micro_batch_size):" in (tmp_path / "c" / "train.sh").read_text()


def test_a_host_s_gpus_set_the_memory_and_the_report_s_peak(tmp_path: Path):
    # As preflight reports them: the smallest GPU sizes the rollout, the first names the card.
    gpus = [
        {"index": 0, "name": "Tesla P100-PCIE-16GB", "memory_mib": 16280, "compute_capability": "6.0"},
        {"index": 1, "name": "Tesla P40", "memory_mib": 22919, "compute_capability": "6.1"},
    ]
    lora = {"train_model_config": MODELS["Qwen2.5-1.5B-Instruct"], "train_lora_rank": 32, "train_adv_estimator": "grpo"}
    render.render("pascal", tmp_path, {"preflight_gpus": gpus, **lora})
    text = (tmp_path / "train.sh").read_text()
    assert "Sized for 16280 MiB" in text
    assert "--card 'Tesla P100-PCIE-16GB' --peak-tflops 9.34" in text
    # Both GPUs train (n_gpus_per_node from preflight), each sized for the smaller card.
    assert "trainer.n_gpus_per_node=2" in print_overrides(tmp_path / "train.sh")
    plan = planned("Qwen2.5-1.5B-Instruct", 16280, lora_rank=32, adv_estimator="grpo", n_gpus=2)
    assert memory_overrides(plan) <= set(print_overrides(tmp_path / "train.sh"))
    assert rollout_overrides(tmp_path) == (plan["rollout_micro_batch_size"], 2 * plan["rollout_micro_batch_size"])


def test_a_kl_term_counts_the_reference_model(tmp_path: Path):
    # Full fine-tuning (0.5B, GRPO): a KL term makes verl build a reference model, whose fp32 weights
    # (4 bytes a parameter) stay on the GPU beside the actor's. train_use_kl_loss, or the key in
    # train_extra_overrides, counts the same.
    grpo = {"train_adv_estimator": "grpo"}
    render.render("pascal", tmp_path / "a", grpo)
    render.render("pascal", tmp_path / "b", {**grpo, "train_use_kl_loss": True})
    render.render(
        "pascal", tmp_path / "c", {**grpo, "train_extra_overrides": ["actor_rollout_ref.actor.use_kl_loss=True"]}
    )
    without, with_kl, extra = (header_plan(tmp_path / name / "train.sh") for name in "abc")
    offload = "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false"
    assert all(offload in print_overrides(tmp_path / name / "train.sh") for name in "ab")  # the same other terms
    assert abs((with_kl["resident"] - without["resident"]) - 4 * without["parameters"] / MIB) <= 1
    assert extra == with_kl
    assert "actor_rollout_ref.actor.use_kl_loss=true" in print_overrides(tmp_path / "b" / "train.sh")
    assert "actor_rollout_ref.actor.use_kl_loss=true" not in print_overrides(tmp_path / "a" / "train.sh")
    for name, reference in (("a", False), ("b", True)):
        plan = planned("Qwen2.5-0.5B-Instruct", adv_estimator="grpo", reference=reference)
        assert memory_overrides(plan) <= set(print_overrides(tmp_path / name / "train.sh"))
        assert header_plan(tmp_path / name / "train.sh")["resident"] == plan["resident_mib"]
    # With LoRA the reference model is the actor with its adapter off: nothing more stays.
    lora = {"train_model_config": MODELS["Qwen2.5-1.5B-Instruct"], "train_lora_rank": 32, **grpo}
    render.render("pascal", tmp_path / "d", lora)
    render.render("pascal", tmp_path / "e", {**lora, "train_use_kl_loss": True})
    assert header_plan(tmp_path / "d" / "train.sh") == header_plan(tmp_path / "e" / "train.sh")
    assert "actor_rollout_ref.actor.use_kl_loss=true" in print_overrides(tmp_path / "e" / "train.sh")


@pytest.mark.parametrize("algorithm", ["gae", "grpo"])
@pytest.mark.parametrize("model", ["Qwen2.5-1.5B-Instruct", "Qwen2.5-3B-Instruct"])
def test_full_fine_tuning_of_1_5b_and_3b_is_refused_on_one_p40(tmp_path: Path, model: str, algorithm: str):
    # Every weight trained, on one P40: the memory model says it does not fit, and the render stops
    # with its message (the term that is too big, the usable memory, and what would fit instead).
    from ansible.errors import AnsibleError

    with pytest.raises(AnsibleFilterError) as expected:
        planned(model, adv_estimator=algorithm)
    message = str(expected.value)
    with pytest.raises(AnsibleError) as error:
        render.render("pascal", tmp_path, {"train_model_config": MODELS[model], "train_adv_estimator": algorithm})
    assert message in str(error.value)
    assert not (tmp_path / "train.sh").exists()
    assert "The run does not fit 1 GPU(s) of 22919 MiB" in message
    # The term: 3B PPO's two resident models (actor and critic) alone exceed the card; otherwise the
    # actor's optimizer step (5 copies of every fp32 weight).
    if (model, algorithm) == ("Qwen2.5-3B-Instruct", "gae"):
        assert "The weights verl keeps on the GPU alone (the actor's weights" in message
        assert "the critic's weights" in message
    else:
        assert "The actor update: its optimizer step (5 copies of the trainable fp32 weights" in message
    # The fix: LoRA (with GRPO where the critic is what does not fit).
    assert re.search(r"It would fit with (LoRA \(train_lora_rank: 32\)|LoRA and GRPO) \(predicted peak", message)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_renders_its_algorithm_and_the_memory_model_s_sizes(tmp_path: Path, name: str):
    preset = PRESETS[name]
    model = preset["model"].split("/")[-1]
    render.render("pascal", tmp_path, {"train_preset": name, "model_name": preset["model"]})
    script = tmp_path / "train.sh"
    overrides = set(print_overrides(script))
    # The algorithm, batch and LoRA keys the preset names.
    assert {
        f"actor_rollout_ref.model.path=/home/verl/verl-p40/models/{model}",
        f"algorithm.adv_estimator={preset['adv_estimator']}",
        f"actor_rollout_ref.rollout.n={preset['rollout_n']}",
        f"data.train_batch_size={preset['batch_size']}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={preset['ppo_mini_batch_size']}",
    } <= overrides
    assert ("actor_rollout_ref.actor.use_kl_loss=true" in overrides) == preset["use_kl_loss"]
    lora = {
        f"actor_rollout_ref.model.lora_rank={preset.get('lora_rank', 0)}",
        f"actor_rollout_ref.model.lora_alpha={preset.get('lora_alpha')}",
        f"actor_rollout_ref.model.target_modules={preset.get('lora_target_modules')}",
    }
    assert (lora <= overrides) == (preset["lora_rank"] > 0)
    assert not [item for item in overrides if "lora_rank" in item] or preset["lora_rank"] > 0
    # The experiment (and checkpoint directory) name follows the algorithm.
    suffix = "-lora" if preset["lora_rank"] else ""
    assert f"trainer.experiment_name=gsm8k-{preset['adv_estimator']}{suffix}-pascal" in overrides
    # Every memory knob is the memory model's for these inputs (a KL term without LoRA adds a reference).
    plan = planned(
        model,
        train_batch_size=preset["batch_size"],
        ppo_mini_batch_size=preset["ppo_mini_batch_size"],
        rollout_n=preset["rollout_n"],
        adv_estimator=preset["adv_estimator"],
        reference=preset["use_kl_loss"],
        lora_rank=preset["lora_rank"],
        lora_target_modules=preset.get("lora_target_modules", "all-linear"),
    )
    assert memory_overrides(plan) <= overrides
    # ... which keeps the model's documented rules: micro-batches divide the per-GPU mini-batch, the
    # rollout's divides the per-GPU batch and is the largest that fits, and the header's predicted
    # peak of every phase stays under the usable memory.
    mini = preset["ppo_mini_batch_size"] * preset["rollout_n"]
    assert mini % plan["micro_batch_size_per_gpu"]["actor"] == 0
    assert preset["adv_estimator"] != "gae" or mini % plan["micro_batch_size_per_gpu"]["critic"] == 0
    assert plan["rollout_micro_batch_size"] == largest_divisor(preset["batch_size"], plan["rollout_fits"])
    header = header_plan(script)
    assert header["usable"] == plan["usable_mib"] and header["resident"] == plan["resident_mib"]
    assert header["parameters"] == plan["parameters"]
    peaks = {key: value for key, value in header.items() if key in plan["peaks_mib"]}
    assert peaks == plan["peaks_mib"]
    assert max(peaks.values()) <= header["usable"]
    assert f"({plan['lora_parameters']} in the LoRA adapter)" in script.read_text()


def test_a_preset_is_refused_with_another_model_or_a_wrong_name(tmp_path: Path):
    # The default model (0.5B) is not the one the 1.5B preset is sized for.
    with pytest.raises(Exception, match="train_preset qwen15b-grpo-lora trains Qwen/Qwen2.5-1.5B-Instruct"):
        render.render("pascal", tmp_path / "a", {"train_preset": "qwen15b-grpo-lora"})
    with pytest.raises(Exception, match="train_preset 'nope' is no preset; stack_train_presets has qwen05b-ppo-full"):
        render.render("pascal", tmp_path / "b", {"train_preset": "nope"})
    assert not (tmp_path / "a" / "train.sh").exists() and not (tmp_path / "b" / "train.sh").exists()


def test_lora_variables_reach_verl_and_bad_ones_are_refused(tmp_path: Path):
    lora = {"train_model_config": MODELS["Qwen2.5-1.5B-Instruct"], "train_adv_estimator": "grpo"}
    render.render(
        "pascal",
        tmp_path / "a",
        {**lora, "train_lora_rank": 16, "train_lora_alpha": 8, "train_lora_target_modules": ["q_proj", "v_proj"]},
    )
    overrides = print_overrides(tmp_path / "a" / "train.sh")
    assert "actor_rollout_ref.model.lora_rank=16" in overrides
    assert "actor_rollout_ref.model.lora_alpha=8" in overrides
    assert "actor_rollout_ref.model.target_modules=[q_proj,v_proj]" in overrides
    adapter = memory.lora_parameters(MODELS["Qwen2.5-1.5B-Instruct"], 16, ["q_proj", "v_proj"])
    assert f"({adapter} in the LoRA adapter)" in (tmp_path / "a" / "train.sh").read_text()
    assert "trainer.experiment_name=gsm8k-grpo-lora-pascal" in overrides
    with pytest.raises(Exception, match="train_lora_target_modules: .* not module names"):
        render.render("pascal", tmp_path / "b", {**lora, "train_lora_rank": 8, "train_lora_target_modules": ["q;rm"]})
    with pytest.raises(Exception, match="train_lora_alpha should be a positive number"):
        render.render("pascal", tmp_path / "c", {**lora, "train_lora_rank": 8, "train_lora_alpha": 0})


@pytest.mark.parametrize("profile", ["volta", "turing", "ampere_plus"])
def test_a_lora_rank_the_vllm_rollout_refuses_stops_the_render(tmp_path: Path, profile: str):
    """vLLM 0.8.5 takes only its own ranks as max_lora_rank (verl 0.4.1 passes the actor's): another
    stops the render, naming the variable and the ranks, before anything is written."""
    with pytest.raises(Exception, match=r"train_lora_rank 24: the profile's vLLM rollout .* takes 8, 16, 32, 64, 128"):
        render.render(profile, tmp_path / "a", {"train_lora_rank": 24, "train_adv_estimator": "grpo"})
    assert not (tmp_path / "a" / "train.sh").exists()
    render.render(profile, tmp_path / "b", {"train_lora_rank": 32, "train_adv_estimator": "grpo"})
    assert "actor_rollout_ref.model.lora_rank=32" in print_overrides(tmp_path / "b" / "train.sh")


def test_lora_on_the_hf_rollout_needs_its_patch_fix():
    assert memory.lora_check(24, 32, "all-linear", "hf", ["hf_rollout_lora_wrap"]) == ""
    with pytest.raises(Exception, match="train_lora_rank 24: verl 0.4.1's HF rollout .* hf_rollout_lora_wrap"):
        memory.lora_check(24, 32, "all-linear", "hf", ["no_bf16_autocast"])
    # Full fine-tuning needs neither.
    assert memory.lora_check(0, 32, "all-linear", "hf", []) == "" == memory.lora_check(0, 32, "all-linear", "vllm")
    for rank in memory.VLLM_LORA_RANKS:
        assert memory.lora_check(rank, 16, "all-linear", "vllm") == ""
    for rank in (1, 4, 24, 48, 500):
        with pytest.raises(Exception, match="vLLM rollout"):
            memory.lora_check(rank, 16, "all-linear", "vllm")


def test_the_vllm_lora_ranks_are_the_pinned_vllms():
    """VLLM_LORA_RANKS is vLLM 0.8.5's list: a new vLLM in the manifest must look at it again."""
    artifacts = yaml.safe_load((REPO / "roles/stack/defaults/main/artifacts.yml").read_text())["stack_artifacts"]
    assert str(artifacts["vllm_wheel"]["version"]) == "0.8.5"
    assert "vLLM 0.8.5 (the vllm layer's wheel)" in (REPO / "filter_plugins/memory.py").read_text()
    # vllm/config.py of vLLM 0.8.5, LoRAConfig.__post_init__'s possible_max_ranks, as read from its sdist.
    assert memory.VLLM_LORA_RANKS == (8, 16, 32, 64, 128, 256, 320, 512)


def test_render_cli_sizes_for_a_config_file_and_a_card(tmp_path: Path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MODELS["Qwen2.5-1.5B-Instruct"]))
    command = [sys.executable, str(REPO / "tools" / "render.py"), "--profile", "pascal", "--out", str(tmp_path / "a")]
    command += ["--var", "train_lora_rank=32", "--var", "train_adv_estimator=grpo"]
    done = subprocess.run([*command, "--model-config", str(config)], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    plan = planned("Qwen2.5-1.5B-Instruct", lora_rank=32, adv_estimator="grpo")
    assert rollout_overrides(tmp_path / "a") == (plan["rollout_micro_batch_size"], plan["val_batch_size"])
    # An 8 GiB card (a GTX 1080): the memory model refuses it, and so does the CLI.
    with pytest.raises(AnsibleFilterError, match="does not fit"):
        planned("Qwen2.5-1.5B-Instruct", 8192, lora_rank=32, adv_estimator="grpo")
    done = subprocess.run(
        [*command, "--model-config", str(config), "--gpu-memory-mib", "8192"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "render.py:" in done.stderr and "does not fit" in done.stderr
    done = subprocess.run(
        [*command, "--var", "train_model_path=/m/Unknown-7B"], check=False, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "--model-config FILE" in done.stderr


def test_model_and_data_paths_are_the_layers_output_directories(tmp_path: Path):
    """train.sh names the directory the model layer fills (model_dir) and the data layer's
    output (data_output_dir): changing model_name, model_dir or data_output_dir moves the
    launcher with them. With a literal path, another model_name left the launcher pointing
    at a directory no layer wrote."""
    render.render(
        "pascal",
        tmp_path / "a",
        {"model_name": "Qwen/Qwen2.5-1.5B-Instruct", "train_lora_rank": 32, "train_adv_estimator": "grpo"},
    )
    overrides = print_overrides(tmp_path / "a" / "train.sh")
    assert "actor_rollout_ref.model.path=/home/verl/verl-p40/models/Qwen2.5-1.5B-Instruct" in overrides
    assert "critic.model.path=/home/verl/verl-p40/models/Qwen2.5-1.5B-Instruct" in overrides

    # A path that names no known architecture: the rollout is sized from the given config.
    config = yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "model_architectures.yml").read_text())
    config = config["stack_model_architectures"]["Qwen2.5-0.5B-Instruct"]
    render.render(
        "pascal",
        tmp_path / "b",
        {"model_dir": "/srv/models/m", "data_output_dir": "/srv/data/g", "train_model_config": config},
    )
    overrides = print_overrides(tmp_path / "b" / "train.sh")
    assert "actor_rollout_ref.model.path=/srv/models/m" in overrides
    assert "data.train_files=/srv/data/g/train.parquet" in overrides
    assert "data.val_files=/srv/data/g/test.parquet" in overrides


def test_train_role_derives_its_paths_from_the_layers():
    defaults = yaml.safe_load(DEFAULTS.read_text())
    assert defaults["train_model_path"] == "{{ model_dir }}"
    assert defaults["train_data_dir"] == "{{ data_output_dir }}"


def test_render_cli(tmp_path: Path):
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "render.py"),
            "--profile",
            "pascal",
            "--out",
            str(tmp_path),
            "--var",
            "train_work_dir=/srv/run",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "cd /srv/run" in (tmp_path / "train.sh").read_text()
    assert "trainer.default_local_dir=/srv/run/checkpoints/gsm8k-gae-pascal" in (tmp_path / "train.sh").read_text()
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "render.py"), "--profile", "kepler", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "unknown profile 'kepler'" in done.stderr and "pascal" in done.stderr


# -- behaviour, with stand-ins for CUDA, conda and python ---------------------

FAKE_PYTHON = """#!/usr/bin/env bash
# Records how train.sh called python3; FAKE_EXIT sets its exit status.
printf '%s\\n' "$@" > "$FAKE_RECORD.args"
{ echo "PWD=$PWD"; echo "CUDA_HOME=${CUDA_HOME:-}"; echo "TORCHDYNAMO_DISABLE=${TORCHDYNAMO_DISABLE:-}";
  echo "PYTHONUNBUFFERED=${PYTHONUNBUFFERED:-}"; echo "CONDA_DEFAULT_ENV=${CONDA_DEFAULT_ENV:-}";
  echo "PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF-unset}"; echo "HYDRA_FULL_ERROR=${HYDRA_FULL_ERROR-unset}";
} > "$FAKE_RECORD.env"
echo "step:1 - fake training output"
exit "${FAKE_EXIT:-0}"
"""

FAKE_CONDA = """# conda.sh stand-in. Like conda's own hooks, it reads variables that may be unset.
conda() {
  [ "$1" = activate ] || return 1
  [ -z "$SOME_UNSET_CONDA_VARIABLE" ] || true
  export CONDA_DEFAULT_ENV="$2"
  export PATH="%s:$PATH"
}
"""


@pytest.fixture
def launcher(tmp_path: Path) -> dict[str, Path]:
    """A pascal launcher rendered against stand-ins under tmp_path."""
    fake_bin = tmp_path / "fakebin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text(FAKE_PYTHON)
    (fake_bin / "python3").chmod(0o755)
    conda = tmp_path / "conda"
    (conda / "etc" / "profile.d").mkdir(parents=True)
    (conda / "etc" / "profile.d" / "conda.sh").write_text(FAKE_CONDA % fake_bin)
    cuda_script = tmp_path / "cuda-env.sh"
    cuda_script.write_text("export CUDA_HOME=/fake/cuda-11.8\n")
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "launcher"
    render.render(
        "pascal",
        out,
        {
            "train_conda_prefix": str(conda),
            "train_conda_env": "p40-env",
            "train_cuda_env_script": str(cuda_script),
            "train_work_dir": str(work),
        },
    )
    return {"script": out / "train.sh", "work": work, "logs": work / "logs", "record": tmp_path / "record"}


def run_launcher(launcher: dict[str, Path], *args: str, fail_with: int = 0) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(launcher["work"]),
        "FAKE_RECORD": str(launcher["record"]),
        "FAKE_EXIT": str(fail_with),
    }
    # Started from another directory: the launcher must find train.env itself.
    return subprocess.run(
        ["bash", str(launcher["script"]), *args],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def recorded(launcher: dict[str, Path]) -> tuple[list[str], dict[str, str]]:
    args = Path(str(launcher["record"]) + ".args").read_text().splitlines()
    env = dict(line.split("=", 1) for line in Path(str(launcher["record"]) + ".env").read_text().splitlines())
    return args, env


def test_train_runs_verl_in_the_env_and_logs(launcher: dict[str, Path]):
    done = run_launcher(launcher, "trainer.total_epochs=3")
    assert done.returncode == 0, done.stderr
    args, env = recorded(launcher)
    assert args[:2] == ["-m", "verl.trainer.main_ppo"]
    assert args[2:] == print_overrides(launcher["script"], "trainer.total_epochs=3")
    assert env == {
        "PWD": str(launcher["work"]),
        "CUDA_HOME": "/fake/cuda-11.8",
        "TORCHDYNAMO_DISABLE": "1",
        "PYTHONUNBUFFERED": "1",
        "CONDA_DEFAULT_ENV": "p40-env",
        # The seed recipe's allocator setting and Hydra's full tracebacks (__stack_run_env).
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128",
        "HYDRA_FULL_ERROR": "1",
    }
    (log,) = launcher["logs"].iterdir()
    assert re.fullmatch(r"train-\d{8}-\d{6}\.log", log.name)
    assert "step:1 - fake training output" in log.read_text()
    assert "step:1 - fake training output" in done.stdout


def test_a_ray_worker_refuses_to_train_and_names_the_head(launcher: dict[str, Path]):
    # The launcher fixture's stand-ins, rendered for host a, a worker of the cluster whose head is b.
    out = launcher["script"].parent
    conda, cuda = launcher_standins(out)
    render.render(
        "pascal",
        out,
        dict(
            cluster_vars("a"),
            train_conda_prefix=conda,
            train_conda_env="p40-env",
            train_cuda_env_script=cuda,
            train_work_dir=str(launcher["work"]),
        ),
    )
    done = run_launcher(launcher)
    assert done.returncode == 2
    assert "a is a worker of the Ray cluster verl_cluster; start training on its head, b" in done.stderr
    assert not Path(str(launcher["record"]) + ".args").exists() and not launcher["logs"].exists()
    # The dry run still works there.
    assert run_launcher(launcher, "--dry-run").returncode == 0


def test_train_exit_status_is_verl_s(launcher: dict[str, Path]):
    done = run_launcher(launcher, fail_with=3)
    assert done.returncode == 3
    (log,) = launcher["logs"].iterdir()
    assert "exit status 3" in log.read_text()


def test_dry_run_prints_the_composed_config_and_trains_nothing(launcher: dict[str, Path]):
    done = run_launcher(launcher, "--dry-run", "trainer.total_epochs=3")
    assert done.returncode == 0, done.stderr
    args, _ = recorded(launcher)
    assert args[:5] == ["-m", "verl.trainer.main_ppo", "--cfg", "job", "--resolve"]
    assert args[-1] == "trainer.total_epochs=3"
    assert not launcher["logs"].exists()
    # The memory plan goes to stderr (stdout stays verl's config): the default run, 0.5B PPO on a P40.
    plan = planned("Qwen2.5-0.5B-Instruct")
    micro = plan["micro_batch_size_per_gpu"]
    assert "train.sh: memory plan (filter_plugins/memory.py" in done.stderr
    assert (
        f"micro-batches: actor {micro['actor']}, log-prob {micro['log_prob']}, critic {micro['critic']}, "
        f"rollout {plan['rollout_micro_batch_size']} prompts"
    ) in done.stderr
    assert f"predicted peak {plan['peak_mib']} ({plan['peak_phase']})" in done.stderr


def test_missing_conda_is_reported(launcher: dict[str, Path], tmp_path: Path):
    shutil.rmtree(tmp_path / "conda")
    done = run_launcher(launcher)
    assert done.returncode != 0
    assert "no conda at" in done.stderr
    assert not Path(str(launcher["record"]) + ".args").exists()


def test_validator_reads_the_same_list(launcher: dict[str, Path]):
    # The role validates what --print-overrides prints; it must match what python3 gets.
    run_launcher(launcher)
    args, _ = recorded(launcher)
    assert json.dumps(args[2:]) == json.dumps(print_overrides(launcher["script"]))


def test_report_runs_the_report_tool_on_the_newest_log(launcher: dict[str, Path]):
    launcher["logs"].mkdir()
    (launcher["logs"] / "train-20260101-000000.log").write_text("old\n")
    (launcher["logs"] / "train-20260102-000000.log").write_text("new\n")
    done = run_launcher(launcher, "--report")
    assert done.returncode == 0, done.stderr
    args, env = recorded(launcher)
    newest = str(launcher["logs"] / "train-20260102-000000.log")
    assert args[0] == "/home/verl/verl-p40/tools/train_report.py"
    assert args[-1] == newest
    assert args[args.index("--plot") + 1] == newest + ".svg"
    assert args[args.index("--card") + 1] == "Tesla P40"
    assert args[args.index("--peak-tflops") + 1] == "11.76"
    assert args[args.index("--gpus") + 1] == "1"
    assert args[args.index("--model-config") + 1] == "/home/verl/verl-p40/models/Qwen2.5-0.5B-Instruct/config.json"
    # The report runs in the training env (train.env sourced), and trains nothing.
    assert env["CONDA_DEFAULT_ENV"] == "p40-env"
    assert len(list(launcher["logs"].iterdir())) == 2


def test_report_draws_its_plot_with_the_standard_library_alone(launcher: dict[str, Path], tmp_path: Path):
    # The env's python3 has only the env's lock (no matplotlib); here it is a Python
    # without any site-packages (-S -I), running the report the train role copies.
    (tmp_path / "fakebin" / "python3").write_text(
        f'#!/usr/bin/env bash\nexec {shlex.quote(sys.executable)} -S -I "$@"\n'
    )
    render.render(
        "pascal",
        tmp_path / "own",
        {
            "train_conda_prefix": str(tmp_path / "conda"),
            "train_conda_env": "p40-env",
            "train_cuda_env_script": str(tmp_path / "cuda-env.sh"),
            "train_work_dir": str(launcher["work"]),
            "train_tools_dir": str(REPO / "roles" / "train" / "files"),
        },
    )
    launcher["logs"].mkdir()
    log = launcher["logs"] / "train-20260102-000000.log"
    shutil.copy(REPO / "tests" / "gpu" / "results" / "memory-24gib-computed-train.log", log)
    done = run_launcher(dict(launcher, script=tmp_path / "own" / "train.sh"), "--report")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"plot: {log}.svg"
    assert Path(f"{log}.svg").read_text().startswith("<svg ")


def test_report_takes_a_relative_log_and_refuses_two(launcher: dict[str, Path], tmp_path: Path):
    log = tmp_path / "mine.log"
    log.write_text("step:1 - x:1\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(launcher["work"]), "FAKE_RECORD": str(launcher["record"])}
    done = subprocess.run(
        ["bash", str(launcher["script"]), "--report", "mine.log"],
        cwd=tmp_path,
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    args, _ = recorded(launcher)
    assert args[-1] == str(log)
    done = run_launcher(launcher, "--report", "a.log", "b.log")
    assert done.returncode == 2
    assert "--report takes one log file" in done.stderr


def test_report_without_logs_says_so(launcher: dict[str, Path]):
    done = run_launcher(launcher, "--report")
    assert done.returncode == 1
    assert "no train-*.log in" in done.stderr
    assert not Path(str(launcher["record"]) + ".args").exists()


def test_profiles_say_what_ran_where():
    # No profile claims a card it never ran on; each claim names the file its run wrote.
    for name, profile in profiles().items():
        assert "tested_on_hardware" not in profile, name
        for run in profile["validated"]:
            assert (REPO / run["evidence"]).is_file(), (name, run["evidence"])
    pascal = profiles()["pascal"]["validated"]
    # Each says it never ran on a P40, and where it did run: an H200 or an H100, or no GPU at all (a build).
    assert pascal and all("never on a P40" in run["where"] for run in pascal)
    assert all(any(where in run["where"] for where in ("H200", "H100", "no GPU")) for run in pascal)
    broken = dict(profiles()["pascal"], validated=[dict(pascal[0], evidence="tests/gpu/results/missing.txt")])
    assert any("validated" in problem for problem in render.profile_problems("pascal", broken))


def test_list_profiles_prints_the_validation(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "render.py"), "--list-profiles"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "validated: never run on any GPU" in done.stdout
    assert "on an NVIDIA H200" in done.stdout and "never on a P40" in done.stdout
    assert "tested" not in done.stdout.replace("untested", "")
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "render.py"), "--profile", "pascal", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "render.py: profile pascal: validated:" in done.stderr and "never on a P40" in done.stderr


def ray_unit_env(tmp_path: Path, extra: dict) -> dict:
    """The Ray units' environment (roles/ray/vars/main.yml's __ray_env), templated by Ansible from
    the stack's and the ray role's own files, with the preflight results in extra."""
    from conftest import play_results

    files = sorted(str(p) for p in (REPO / "roles" / "stack" / "defaults" / "main").glob("*.yml"))
    files += [str(REPO / "roles" / "ray" / "defaults" / "main.yml"), str(REPO / "roles" / "ray" / "vars" / "main.yml")]
    profile = dict(profiles()["pascal"], name="pascal")
    (result,) = play_results(
        tmp_path,
        [{"ansible.builtin.debug": {"var": "__ray_env"}}],
        vars_files=files,
        vars={"preflight_profile": profile, "ray_interface": "", "train_gpus": [], **extra},
    )
    return result["__ray_env"]


def test_the_ray_units_get_the_gpu_variables_of_train_env(tmp_path: Path):
    # One decision (roles/stack's __stack_gpu_env) for both: train.env's exports and the units'
    # environment file name the same GPUs and the same peer-to-peer setting.
    picked = [dict(P40, index=1), dict(P40, index=3)]
    blocked = {"checked": True, "ok": False, "blocked": ["GPU 1 - GPU 3: CNS (Chipset not supported)"]}
    gpu_names = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "NCCL_P2P_DISABLE")
    cases = {
        "picked-blocked": {"train_gpus": [1, 3], "preflight_gpus": picked, "preflight_gpu_p2p": blocked},
        "all-p2p": {"preflight_gpus": picked, "preflight_gpu_p2p": {"checked": True, "ok": True, "blocked": []}},
        "one": {"preflight_gpus": picked[:1], "preflight_gpu_p2p": {}},
        # train.env once also asked for more than one GPU in the run: the units did not.
        "picked-blocked-run-on-one": {
            "train_gpus": [1, 3],
            "preflight_gpus": picked,
            "preflight_gpu_p2p": blocked,
            "train_n_gpus_per_node": 1,
        },
    }
    for name, extra in cases.items():
        render.render("pascal", tmp_path / name, extra)
        exported = dict(re.findall(r"^export (\w+)=(.*)$", (tmp_path / name / "train.env").read_text(), re.M))
        unit = ray_unit_env(tmp_path, extra)
        assert {k: v for k, v in exported.items() if k in gpu_names} == {
            k: v for k, v in unit.items() if k in gpu_names
        }, name
        # The profile's variables and those of every run reach both too.
        assert set(profiles()["pascal"]["env"]) <= set(exported) & set(unit)
        for variable in ("PYTHONUNBUFFERED", "PYTORCH_CUDA_ALLOC_CONF", "HYDRA_FULL_ERROR"):
            assert exported[variable] == unit[variable], (name, variable)
        if name.startswith("picked"):
            assert (unit["CUDA_VISIBLE_DEVICES"], unit["NCCL_P2P_DISABLE"]) == ("1,3", "1"), name
