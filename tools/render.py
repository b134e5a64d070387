#!/usr/bin/env python3
"""Render the training launcher (train.sh, train.env) for a GPU profile, without a host.

    python tools/render.py --profile pascal --out /tmp/launcher
    python tools/render.py --profile pascal --out DIR --var train_n_gpus_per_node=2
    python tools/render.py --list-profiles

Variables come from where the train role gets them: group_vars/all/*.yml
(the profiles among them) and roles/train/defaults/main.yml, then
--vars-file files and --var key=value pairs (YAML values, like -e). The
profile is handed over as preflight_profile, the way the preflight role sets
it, so train_profile resolves through the role's own default. Templates are
rendered by Ansible's own Templar with the template module's Jinja settings.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))

from ansible import constants as C  # noqa: E402
from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.template import Templar, trust_as_template  # noqa: E402

DEFAULTS_FILE = REPO / "roles" / "train" / "defaults" / "main.yml"
GROUP_VARS_DIR = REPO / "group_vars" / "all"
TEMPLATES = {
    "train.sh": (REPO / "templates" / "train.sh.j2", 0o755),
    "train.env": (REPO / "templates" / "train.env.j2", 0o644),
}

# What a profile must hold for the launcher; (key, test, what it should be).
_BOOL = ("a boolean", lambda v: isinstance(v, bool))
_POSITIVE_INT = ("a positive integer", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0)
_PROFILE_SCHEMA: list[tuple[str, tuple[str, Any]]] = [
    ("description", ("a string", lambda v: isinstance(v, str))),
    ("precision", ("float32 or bfloat16", lambda v: v in ("float32", "bfloat16"))),
    ("attn_implementation", ("eager, sdpa or flash_attention_2", lambda v: v in ("eager", "sdpa", "flash_attention_2"))),
    ("torch_compile", _BOOL),
    ("remove_padding", _BOOL),
    ("fused_kernels", _BOOL),
    ("gradient_checkpointing", _BOOL),
    ("rollout_backend", ("hf or vllm", lambda v: v in ("hf", "vllm"))),
    ("offload.actor_params", _BOOL),
    ("offload.actor_optimizer", _BOOL),
    ("offload.critic_params", _BOOL),
    ("offload.critic_optimizer", _BOOL),
    ("micro_batch_size_per_gpu.actor", _POSITIVE_INT),
    ("micro_batch_size_per_gpu.log_prob", _POSITIVE_INT),
    ("micro_batch_size_per_gpu.critic", _POSITIVE_INT),
    ("patch_fixes", ("a list of fix names", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v))),
    ("env", ("a mapping of variable names to values", lambda v: isinstance(v, dict))),
]
_BACKEND_SCHEMA: dict[str, list[tuple[str, tuple[str, Any]]]] = {
    "hf": [("hf_rollout.micro_batch_size", _POSITIVE_INT)],
    "vllm": [
        ("vllm_rollout.gpu_memory_utilization", ("a number in (0, 1]", lambda v: isinstance(v, (int, float)) and 0 < v <= 1)),
        ("vllm_rollout.enforce_eager", _BOOL),
        ("vllm_rollout.max_num_seqs", _POSITIVE_INT),
    ],
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _lookup(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def profile_problems(name: str, profile: Any) -> list[str]:
    """What is missing or malformed in one profile, as messages; [] when it renders."""
    if not isinstance(profile, dict):
        return [f"profile {name}: should be a mapping"]
    problems = []
    schema = _PROFILE_SCHEMA + _BACKEND_SCHEMA.get(profile.get("rollout_backend"), [])
    for key, (expected, test) in schema:
        try:
            value = _lookup(profile, key)
        except KeyError:
            problems.append(f"profile {name}: {key} is missing; it should be {expected}")
            continue
        if not test(value):
            problems.append(f"profile {name}: {key} is {value!r}; it should be {expected}")
    for var in profile.get("env") or {}:
        if not _ENV_NAME.match(str(var)):
            problems.append(f"profile {name}: env name {var!r} is not a shell variable name")
    return problems


def _trusted(value: Any) -> Any:
    """Mark strings as templates, as Ansible does for -e values."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    return value


def parse_var(text: str) -> tuple[str, Any]:
    """'key=value' -> (key, YAML value of value)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--var {text!r}: expected key=value")
    return key.strip(), yaml.safe_load(raw) if raw.strip() else ""


def load_variables(extra_vars: dict[str, Any] | None = None) -> tuple[DataLoader, dict[str, Any]]:
    """group_vars/all + the train role's defaults + extra vars (highest), untemplated."""
    loader = DataLoader()
    data: dict[str, Any] = {}
    for path in [*sorted(GROUP_VARS_DIR.glob("*.yml")), DEFAULTS_FILE]:
        data.update(loader.load_from_file(str(path), trusted_as_template=True) or {})
    data.update(_trusted(extra_vars or {}))
    return loader, data


def render(profile: str, out_dir: Path, extra_vars: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write train.sh and train.env for a profile into out_dir; return their paths."""
    loader, data = load_variables(extra_vars)
    profiles = data.get("stack_gpu_profiles") or {}
    if profile not in profiles:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(sorted(profiles))}")
    problems = profile_problems(profile, profiles[profile])
    if problems:
        raise ValueError("; ".join(problems))
    # preflight sets this fact in a play (roles/preflight/tasks/profile.yml).
    data.setdefault("preflight_profile", {**profiles[profile], "name": profile})
    data.setdefault("ansible_managed", C.config.get_config_value("DEFAULT_MANAGED_STR"))
    templar = Templar(loader=loader, variables=data)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (source, mode) in TEMPLATES.items():
        text = templar.template(
            trust_as_template(source.read_text()),
            escape_backslashes=False,
            # The template module's defaults.
            overrides=dict(trim_blocks=True, lstrip_blocks=False),
        )
        target = out_dir / name
        target.write_text(text)
        target.chmod(mode)
        written[name] = target
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", help="name of a profile in stack_gpu_profiles")
    parser.add_argument("--out", type=Path, help="directory to write train.sh and train.env into")
    parser.add_argument("--var", action="append", default=[], metavar="KEY=VALUE",
                        help="set a variable (YAML value), like ansible-playbook -e; repeatable")
    parser.add_argument("--vars-file", action="append", default=[], type=Path, metavar="FILE",
                        help="YAML file of variables, applied before --var; repeatable")
    parser.add_argument("--list-profiles", action="store_true", help="print the profile names and exit")
    args = parser.parse_args(argv)

    if args.list_profiles:
        _, data = load_variables()
        for name, profile in data["stack_gpu_profiles"].items():
            tested = "tested" if profile.get("tested_on_hardware") else "untested on hardware"
            print(f"{name}\t{tested}\t{profile.get('description', '')}")
        return 0
    if not args.profile or not args.out:
        parser.error("--profile and --out are required")

    extra: dict[str, Any] = {}
    try:
        for path in args.vars_file:
            extra.update(yaml.safe_load(path.read_text()) or {})
        for item in args.var:
            key, value = parse_var(item)
            extra[key] = value
        written = render(args.profile, args.out, extra)
    except (OSError, ValueError, yaml.YAMLError) as error:
        print(f"render.py: {error}", file=sys.stderr)
        return 1
    for path in written.values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
