"""The training launcher as tools/render.py writes it: syntax, lint, override list, behaviour.

Behaviour is checked by running the rendered train.sh against stand-ins: a
CUDA env script, a conda.sh whose `conda activate` puts a fake python3 first
on PATH, and that python3, which records its arguments and environment.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, gpu_profile_names

import render
import validate_overrides

PROFILES = gpu_profile_names()
DEFAULTS = REPO / "roles" / "train" / "defaults" / "main.yml"
TEMPLATES = [REPO / "templates" / "train.sh.j2", REPO / "templates" / "train.env.j2"]
# Variables the seed recipe set that nothing reads.
DEAD_VARIABLES = ("VLLM_DTYPE", "TRITON_MAX_SHARED_MEMORY")


def profiles() -> dict:
    return yaml.safe_load((REPO / "group_vars" / "all" / "gpu_profiles.yml").read_text())["stack_gpu_profiles"]


def print_overrides(script: Path, *extra: str) -> list[str]:
    return validate_overrides.overrides_from_script(script, list(extra))


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
    defined = set(yaml.safe_load(DEFAULTS.read_text()))
    for path in TEMPLATES:
        used = set(re.findall(r"(?<![\w.])(train_\w+)", path.read_text()))
        assert used <= defined, f"{path.name} uses undefined {sorted(used - defined)}"


# -- syntax and lint ---------------------------------------------------------

@pytest.mark.parametrize("name", PROFILES)
def test_rendered_files_pass_bash_n(name: str, rendered_launchers: dict[str, Path]):
    for file in ("train.sh", "train.env"):
        done = subprocess.run(["bash", "-n", str(rendered_launchers[name] / file)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", PROFILES)
def test_rendered_files_pass_shellcheck(name: str, rendered_launchers: dict[str, Path]):
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed")
    directory = rendered_launchers[name]
    done = subprocess.run(["shellcheck", "-x", "train.sh", "train.env"], cwd=directory, capture_output=True, text=True)
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
        "+actor_rollout_ref.rollout.micro_batch_size=16",
        "data.val_batch_size=16",
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


def test_extra_arguments_come_last(rendered_launchers: dict[str, Path]):
    script = rendered_launchers["pascal"] / "train.sh"
    overrides = print_overrides(script, "trainer.total_epochs=3", "++actor_rollout_ref.rollout.micro_batch_size=8")
    assert overrides[-2:] == ["trainer.total_epochs=3", "++actor_rollout_ref.rollout.micro_batch_size=8"]


def test_unknown_option_is_refused(rendered_launchers: dict[str, Path]):
    done = subprocess.run(["bash", str(rendered_launchers["pascal"] / "train.sh"), "--dryrun"],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "unknown option --dryrun" in done.stderr


def test_variables_reach_the_override_list(tmp_path: Path):
    render.render("pascal", tmp_path, {
        "train_n_gpus_per_node": 2,
        "train_total_training_steps": 12,
        "train_model_path": "/models/my model",
        "train_logger": ["console", "tensorboard"],
        "train_extra_overrides": ["actor_rollout_ref.actor.optim.lr=5e-7"],
    })
    overrides = print_overrides(tmp_path / "train.sh")
    assert "trainer.n_gpus_per_node=2" in overrides
    assert "trainer.total_training_steps=12" in overrides
    # A path with a space is quoted for Hydra, and survives bash as one word.
    assert "actor_rollout_ref.model.path='/models/my model'" in overrides
    assert "trainer.logger=[console,tensorboard]" in overrides
    assert overrides[-1] == "actor_rollout_ref.actor.optim.lr=5e-7"


def test_render_cli(tmp_path: Path):
    done = subprocess.run([sys.executable, str(REPO / "tools" / "render.py"),
                           "--profile", "pascal", "--out", str(tmp_path), "--var", "train_work_dir=/srv/run"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "cd /srv/run" in (tmp_path / "train.sh").read_text()
    assert "trainer.default_local_dir=/srv/run/checkpoints/gsm8k-gae-pascal" in (tmp_path / "train.sh").read_text()
    done = subprocess.run([sys.executable, str(REPO / "tools" / "render.py"),
                           "--profile", "kepler", "--out", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1
    assert "unknown profile 'kepler'" in done.stderr and "pascal" in done.stderr


# -- behaviour, with stand-ins for CUDA, conda and python ---------------------

FAKE_PYTHON = """#!/usr/bin/env bash
# Records how train.sh called python3; FAKE_EXIT sets its exit status.
printf '%s\\n' "$@" > "$FAKE_RECORD.args"
{ echo "PWD=$PWD"; echo "CUDA_HOME=${CUDA_HOME:-}"; echo "TORCHDYNAMO_DISABLE=${TORCHDYNAMO_DISABLE:-}";
  echo "PYTHONUNBUFFERED=${PYTHONUNBUFFERED:-}"; echo "CONDA_DEFAULT_ENV=${CONDA_DEFAULT_ENV:-}"; } > "$FAKE_RECORD.env"
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
    render.render("pascal", out, {
        "train_conda_prefix": str(conda),
        "train_conda_env": "p40-env",
        "train_cuda_env_script": str(cuda_script),
        "train_work_dir": str(work),
    })
    return {"script": out / "train.sh", "work": work, "logs": work / "logs", "record": tmp_path / "record"}


def run_launcher(launcher: dict[str, Path], *args: str, fail_with: int = 0) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(launcher["work"]), "FAKE_RECORD": str(launcher["record"]),
           "FAKE_EXIT": str(fail_with)}
    # Started from another directory: the launcher must find train.env itself.
    return subprocess.run(["bash", str(launcher["script"]), *args], cwd="/", env=env,
                          capture_output=True, text=True, timeout=60)


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
    assert env == {"PWD": str(launcher["work"]), "CUDA_HOME": "/fake/cuda-11.8", "TORCHDYNAMO_DISABLE": "1",
                   "PYTHONUNBUFFERED": "1", "CONDA_DEFAULT_ENV": "p40-env"}
    (log,) = launcher["logs"].iterdir()
    assert re.fullmatch(r"train-\d{8}-\d{6}\.log", log.name)
    assert "step:1 - fake training output" in log.read_text()
    assert "step:1 - fake training output" in done.stdout


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
