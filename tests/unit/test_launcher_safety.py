"""Hostile values in the launcher's variables: refused early, or passed as literal text.

train.env exports train_extra_env and the profile's env; train.sh passes the
train_* values to verl as Hydra overrides. A name that is not a shell name is
refused (filter_plugins/launcher.py, called by tools/render.py, the preflight
role and the template itself); a value reaches verl as the text given, through
bash, Hydra's override parser and OmegaConf, and never runs as shell code.
"""

from __future__ import annotations

import json
import random
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import REPO, run_play

import render
import validate_overrides as vo
from launcher import hydra_value, launcher_env, launcher_env_problems, verl_logger_problems, verl_loggers

# The HF rollout is sized from the model's config (filter_plugins/rollout.py).
MODEL_CONFIG = yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "model_architectures.yml").read_text())[
    "stack_model_architectures"
]["Qwen2.5-0.5B-Instruct"]
BAD_NAMES = ["X=1;touch pwned;Y", "1ST", "A-B", "A B", "$(touch pwned)", "", "PATH\n", "É"]
GOOD_NAMES = ["HF_HOME", "_x", "A1", "wandb_api_key"]

# Text that must reach verl unchanged. Ansible templates -e values, so none
# holds Jinja's own "{{", "{%" or "{#".
HOSTILE = [
    "back\\slash",
    "trailing\\",
    "\\\\double",
    "it's",
    "\\'quoted\\'",
    'say "hi"',
    "a,b",
    "[x,y]",
    "{a: b}",
    "key=value",
    "with space",
    " lead and trail ",
    "~/home",
    "$HOME",
    "$",
    "{}",
    "",
    "*?|&<>();#!`",
    "x\\$ {y}",
    "}{$",
]


def payloads(marker: Path) -> list[str]:
    """Shell code that creates `marker` if bash ever runs it."""
    return [
        f"$(touch {marker}.1)",
        f"`touch {marker}.2`",
        f";touch {marker}.3",
        f"'; touch {marker}.4; '",
        f'"; touch {marker}.5; "',
        f"\\'$(touch {marker}.6)",
        f"| touch {marker}.7",
        f"&& touch {marker}.8 #",
    ]


# -- environment variable names -------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_env_name_is_refused_naming_the_variable(name: str):
    problems = launcher_env_problems({"OK": "1", name: "1"}, "train_extra_env")
    assert len(problems) == 1
    assert problems[0].startswith(f"train_extra_env: {name!r} is not an environment variable name")
    assert "letters, digits and _" in problems[0]
    with pytest.raises(AnsibleFilterError, match="train_extra_env"):
        launcher_env({name: "1"}, "train_extra_env")


def test_good_env_names_and_values_pass():
    env = {name: "x" for name in GOOD_NAMES} | {"N": 3, "EMPTY": "", "F": 0.5}
    assert launcher_env_problems(env, "train_extra_env") == []
    assert launcher_env(env, "train_extra_env") == env
    assert launcher_env(None, "train_extra_env") == {}


@pytest.mark.parametrize("value", [None, [1], {"a": 1}])
def test_env_value_must_be_a_scalar(value):
    (problem,) = launcher_env_problems({"NAME": value}, "stack_gpu_profiles.pascal.env")
    assert problem.startswith("stack_gpu_profiles.pascal.env.NAME is ")


def test_env_must_be_a_mapping():
    (problem,) = launcher_env_problems("X=1;touch pwned", "train_extra_env")
    assert "should be a mapping" in problem


def test_a_name_that_is_no_string_is_refused():
    # YAML reads `train_extra_env: {1: x}` with the number 1 as the key.
    (problem,) = launcher_env_problems({1: "x", "OK": "1"}, "train_extra_env")
    assert problem.startswith("train_extra_env: 1 is not an environment variable name")


def test_render_refuses_a_bad_name_before_writing(tmp_path: Path):
    with pytest.raises(ValueError, match=r"train_extra_env: 'X=1;touch pwned;Y' is not an environment variable"):
        render.render("pascal", tmp_path, {"train_extra_env": {"X=1;touch pwned;Y": "1"}})
    assert not (tmp_path / "train.env").exists() and not (tmp_path / "train.sh").exists()
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "render.py"),
            "--profile",
            "pascal",
            "--out",
            str(tmp_path),
            "--var",
            "train_extra_env={'A B': 1}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("render.py: train_extra_env: 'A B' is not an environment variable name")


def test_render_refuses_a_bad_name_in_a_profile(tmp_path: Path):
    profiles = yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "gpu_profiles.yml").read_text())[
        "stack_gpu_profiles"
    ]
    profiles["pascal"]["env"]["X=1;touch pwned;Y"] = "1"
    with pytest.raises(ValueError, match=r"stack_gpu_profiles.pascal.env: 'X=1;touch pwned;Y'"):
        render.render("pascal", tmp_path, {"stack_gpu_profiles": profiles})


def test_template_refuses_a_bad_name_by_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # With render.py's own check out of the way, the template's filter still stops it.
    monkeypatch.setattr(render, "launcher_env_problems", lambda env, variable: [])
    with pytest.raises(Exception, match="is not an environment variable name"):
        render.render("pascal", tmp_path, {"train_extra_env": {"X=1;touch pwned;Y": "1"}})
    assert not (tmp_path / "train.env").exists()


def test_preflight_refuses_a_bad_name(tmp_path: Path):
    # The preflight tasks themselves, on localhost with a local connection; they only read variables.
    check = [{"name": "Run it", "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "launcher_env"}}]
    profiles = REPO / "roles" / "stack" / "defaults" / "main" / "gpu_profiles.yml"

    def play(extra: dict) -> subprocess.CompletedProcess:
        return run_play(tmp_path, check, "-e", "@%s" % profiles, "-e", json.dumps(extra), callback="default")

    refused = play({"train_extra_env": {"X=1;touch pwned;Y": "1", "HF_HOME": "/data"}})
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "train_extra_env: 'X=1;touch pwned;Y' is not an environment variable name" in refused.stdout
    assert "nothing was changed on the host" in refused.stdout
    passed = play({"train_extra_env": {"HF_HOME": "/data", "WANDB_API_KEY": "k;$(x)"}})
    assert passed.returncode == 0, passed.stdout + passed.stderr


# -- Hydra values -----------------------------------------------------------------


def composed_value(text: str):
    """What OmegaConf holds after Hydra parses `k=<text>` and the value is merged and resolved."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    override = OverridesParser.create().parse_override("k=" + text)
    cfg = OmegaConf.create({"other": 1})
    OmegaConf.update(cfg, "k", override.value(), merge=True)
    OmegaConf.resolve(cfg)
    return OmegaConf.to_container(cfg, resolve=True)["k"]


def test_hydra_value_keeps_plain_values_as_they_were():
    assert hydra_value("/srv/run/checkpoints/gsm8k-gae-pascal") == "/srv/run/checkpoints/gsm8k-gae-pascal"
    assert hydra_value("64") == "64"  # -e gives strings; verl needs the number
    assert hydra_value(["console", "tensorboard"]) == "[console,tensorboard]"
    assert hydra_value(True) == "true" and hydra_value(None) == "null" and hydra_value(5e-7) == "5e-07"
    assert hydra_value("/models/my model") == "'/models/my model'"
    # Words Hydra types stay its types, as on the command line: -e train_total_training_steps=null.
    assert composed_value(hydra_value("null")) is None and composed_value(hydra_value("12")) == 12


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_string_survives_hydra_and_omegaconf(text: str):
    assert composed_value(hydra_value(text)) == text
    assert composed_value(hydra_value(["console", text, "a,b"])) == ["console", text, "a,b"]


def test_random_strings_survive_hydra_and_omegaconf():
    # Seeded, so a failure repeats; the alphabet is every character either parser treats specially.
    alphabet = list("\\'\",[]{}()=: \t$;`|&<>*?!#~%@+-./aZ0") + ["\\'", "\\\\"]
    generator = random.Random(10)
    for _ in range(1500):
        text = "".join(generator.choice(alphabet) for _ in range(generator.randint(1, 10)))
        if "${" in text or text == "???":
            continue
        expected = text
        got = composed_value(hydra_value(text))
        if not hydra_value(text).startswith("'"):
            continue  # a plain string: Hydra types it, as on the command line
        assert got == expected, (text, hydra_value(text))


@pytest.mark.parametrize(
    "text, message",
    [
        ("${trainer.nnodes}", "holds '${'"),
        ("x\\${y}", "holds '${'"),
        ("???", "missing value"),
        ("a\nb", "line break"),
        ("a\rb", "line break"),
        ("a\x00b", "NUL"),
    ],
)
def test_values_no_quoting_can_carry_are_refused(text: str, message: str):
    with pytest.raises(AnsibleFilterError, match="trainer.project_name: .*" + message.replace("$", r"\$")):
        hydra_value(text, "trainer.project_name")
    with pytest.raises(AnsibleFilterError):
        hydra_value(["console", text], "trainer.logger")


def test_escaped_interpolation_does_not_survive_verls_resolve(verl_041_pristine: Path):
    # Why "${" is refused rather than escaped: OmegaConf's escape (\${) composes
    # to the literal text, but verl 0.4.1's TaskRunner.run calls
    # OmegaConf.resolve(config), after which the value interpolates.
    cfg = vo.composed(verl_041_pristine, ["trainer.project_name='p\\${trainer.nnodes}'"])
    assert cfg.trainer.project_name == "p1"
    with pytest.raises(AnsibleFilterError):
        hydra_value("p${trainer.nnodes}", "trainer.project_name")


def test_other_types_are_refused():
    with pytest.raises(AnsibleFilterError, match="data.x: .* is a dict"):
        hydra_value({"a": 1}, "data.x")


# -- train_logger -------------------------------------------------------------------
# verl asserts each name of trainer.logger when training starts, after Ray and the workers have
# started, and stops at the import of a logger whose package the env lacks: refused before that.


def test_the_loggers_the_env_runs_pass_unchanged():
    assert verl_logger_problems(["console", "tensorboard", "wandb"]) == []
    assert verl_loggers(("console", "tensorboard")) == ["console", "tensorboard"]


def test_each_bad_logger_is_named_and_console_is_kept():
    problems = verl_logger_problems(["console", "mlflow", "nope"], "train_logger")
    assert problems == [
        "train_logger: verl's 'mlflow' logger needs a package the env does not install (it is not in "
        "roles/verl/files/requirements-verl-0.4.1.txt); use console, tensorboard, wandb",
        "train_logger: 'nope' is not one of verl 0.4.1's loggers; use console, tensorboard, wandb",
    ]
    (problem,) = verl_logger_problems(["tensorboard"], "train_logger")
    assert problem.startswith("train_logger must keep console")
    with pytest.raises(AnsibleFilterError, match="'mlflow' logger needs a package.*; train_logger must keep console"):
        verl_loggers(["mlflow"])


@pytest.mark.parametrize("loggers", ["console", None, ["console", 1], {"console": True}])
def test_loggers_must_be_a_list_of_names(loggers):
    (problem,) = verl_logger_problems(loggers, "train_logger")
    assert problem.startswith("train_logger should be a list of verl's logger names (console, tensorboard, wandb)")


# -- the rendered launcher: verl's config, bash ---------------------------------------


def hostile_vars(text: str) -> dict:
    return {
        "train_project_name": text,
        "train_experiment_name": "e" + text,
        "train_model_path": "/models/" + text,
        # Such a path names no known architecture; the config comes as on a host.
        "train_model_config": MODEL_CONFIG,
    }


@pytest.mark.parametrize("text", [*HOSTILE, "$(touch /tmp/pwned)", ";touch x"])
def test_hostile_values_reach_verls_config_as_text(text: str, verl_041_pristine: Path, tmp_path: Path):
    render.render("pascal", tmp_path, hostile_vars(text))
    overrides = vo.overrides_from_script(tmp_path / "train.sh")
    # train_logger takes verl's logger names only (verl_loggers); a list of texts through
    # the same hydra_value the launcher writes it with.
    overrides.append("trainer.logger=" + hydra_value(["console", text, "a,b"], "trainer.logger"))
    # vo.composed resolves the config in place, as verl's TaskRunner.run does.
    cfg = vo.composed(verl_041_pristine, overrides)
    assert cfg.trainer.project_name == text
    assert cfg.trainer.experiment_name == "e" + text
    assert cfg.actor_rollout_ref.model.path == "/models/" + text
    assert cfg.critic.model.path == "/models/" + text
    # Read through verl's own interpolation of the actor's path.
    assert cfg.critic.model.tokenizer_path == "/models/" + text
    assert list(cfg.trainer.logger) == ["console", text, "a,b"]
    assert cfg.trainer.default_local_dir.endswith("/checkpoints/e" + text)


FAKE_PYTHON = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$FAKE_RECORD.args"
env > "$FAKE_RECORD.env"
"""


def stand_ins(tmp_path: Path) -> dict:
    """Variables that point train.env at a stand-in CUDA script and conda whose python3 records its call."""
    fake_bin = tmp_path / "fakebin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text(FAKE_PYTHON)
    (fake_bin / "python3").chmod(0o755)
    conda = tmp_path / "conda"
    (conda / "etc" / "profile.d").mkdir(parents=True)
    (conda / "etc" / "profile.d" / "conda.sh").write_text(
        'conda() { export CONDA_DEFAULT_ENV="$2"; export PATH="%s:$PATH"; }\n' % fake_bin
    )
    cuda = tmp_path / "cuda-env.sh"
    cuda.write_text("export CUDA_HOME=/fake/cuda\n")
    work = tmp_path / "work"
    work.mkdir()
    return {
        "train_conda_prefix": str(conda),
        "train_cuda_env_script": str(cuda),
        "train_work_dir": str(work),
    }


def run(script: Path, *args: str, record: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args],
        cwd=script.parent,
        env={"PATH": "/usr/bin:/bin", "HOME": str(script.parent), "FAKE_RECORD": str(record)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_bash_never_runs_a_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # The templates themselves, with render.py's control character check (preflight's) out of the
    # way: a newline in a value is still one quoted word.
    monkeypatch.setattr(render, "input_control_problems", lambda templar, data: [])
    marker = tmp_path / "pwned"
    hostile = payloads(marker)
    variables = stand_ins(tmp_path)
    variables.update(
        {
            "train_project_name": hostile[0],
            "train_experiment_name": hostile[1],
            "train_model_path": "/models/" + hostile[2],
            "train_model_config": MODEL_CONFIG,
            "train_extra_overrides": ["trainer.default_hdfs_dir=" + hostile[3]],
            "train_extra_env": {f"V{number}": text for number, text in enumerate(hostile)},
            "train_conda_env": "env\n" + hostile[4],
        }
    )
    out = tmp_path / "launcher"
    render.render("pascal", out, variables)
    record = tmp_path / "record"
    for args in (["--print-overrides"], ["--dry-run"], [], [hostile[5]]):
        done = run(out / "train.sh", *args, record=record)
        assert done.returncode == 0, done.stderr
    args = Path(f"{record}.args").read_text().splitlines()
    assert "trainer.project_name=" + hydra_value(hostile[0]) in args
    assert args[-1] == hostile[5]
    env = Path(f"{record}.env").read_text()
    assert f"V0={hostile[0]}\n" in env and f"V7={hostile[7]}\n" in env
    # The error paths of train.env print a path too (before this check, inside "...", where $(...) ran).
    render.render("pascal", tmp_path / "broken", dict(variables, train_cuda_env_script=str(tmp_path / hostile[0])))
    done = run(tmp_path / "broken" / "train.sh", record=record)
    assert done.returncode == 1 and "is missing; build the cuda layer" in done.stderr
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("pwned")) == []
    # The same payload does run when bash evaluates it, so the check above can fail.
    subprocess.run(["bash", "-c", "echo " + hostile[2]], capture_output=True, check=False)
    assert Path(f"{marker}.3").exists()


# -- secrets ------------------------------------------------------------------------


def test_train_env_is_private_and_secrets_stay_off_the_command_line(tmp_path: Path):
    secret = "hf_s3cr3t-token-value"
    variables = stand_ins(tmp_path) | {"train_extra_env": {"HF_TOKEN": secret}}
    out = tmp_path / "launcher"
    out.mkdir()
    (out / "train.env").write_text("old\n")
    (out / "train.env").chmod(0o644)  # an older render: its mode is tightened too
    render.render("pascal", out, variables)
    assert stat.S_IMODE((out / "train.env").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "train.sh").stat().st_mode) == 0o755
    assert secret not in (out / "train.sh").read_text()
    record = tmp_path / "record"
    for args in ([], ["--dry-run"]):
        done = run(out / "train.sh", *args, record=record)
        assert done.returncode == 0, done.stderr
        assert secret not in Path(f"{record}.args").read_text()
        assert f"HF_TOKEN={secret}\n" in Path(f"{record}.env").read_text()
    assert secret not in "\n".join(vo.overrides_from_script(out / "train.sh"))


def test_train_role_writes_train_env_private():
    def walk(tasks):
        for task in tasks:
            yield task
            yield from walk(task.get("block", []))

    tasks = [
        task
        for path in sorted((REPO / "roles" / "train" / "tasks").glob("*.yml"))
        for task in yaml.safe_load(path.read_text()) or []
    ]
    (task,) = [
        task
        for task in walk(tasks)
        if str(task.get("ansible.builtin.template", {}).get("dest", "")).endswith("/train.env")
    ]
    assert task["ansible.builtin.template"]["mode"] == "0600"
    # Written as the training user, so it is that user's file (and a link there cannot redirect root).
    assert task["become_user"] == "{{ stack_user }}" and "owner" not in task["ansible.builtin.template"]
    assert task["diff"] is False
