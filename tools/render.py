#!/usr/bin/env python3
"""Render the training launcher (train.sh, train.env) for a GPU profile, without a host.

    python tools/render.py --profile pascal --out /tmp/launcher
    python tools/render.py --profile pascal --out DIR --var train_n_gpus_per_node=2
    python tools/render.py --profile pascal --out DIR --model-config config.json --gpu-memory-mib 16280
    python tools/render.py --profile pascal --out DIR --nvidia-smi gpus.csv [--nvidia-smi-topo p2p.txt]
    python tools/render.py --list-profiles

Variables come from where the train role gets them, in Ansible's order
(tools/stack_vars.py, which tests/infra's StackVars shares): the defaults of
the roles of the training play (the stack role's shared values and manifests,
the profiles among them; data, model, train: the train role's data and model
paths are the data and model layers' output directories), then the play's
group_vars for all hosts (group_vars/all.yml, the file users edit, read by
Ansible's own vars plugin from playbooks/, as a play of playbooks/train.yml
gets it), then --vars-file files and --var key=value pairs (YAML values, like
-e). The host is alone, in no inventory. The profile is handed over as
preflight_profile, the way the preflight role sets it, so train_profile
resolves through the role's own default.

The templates (templates/train.sh.j2, train.env.j2) are found the way the
train role's template tasks find them, by Ansible's search path for a role's
task (the role's templates/, then the play's: playbooks/templates, a link to
templates/), and rendered by Ansible's own Templar with the template module's
Jinja settings.

The HF rollout's micro-batch is computed from the model's config and the
card's memory (filter_plugins/rollout.py). On a host the train role reads
both there; here they default to the stack_model_architectures entry named
like train_model_path (Qwen2.5-0.5B-Instruct by default) and to the
profile's reference_card. --model-config (a config.json) and
--gpu-memory-mib (nvidia-smi's memory.total) set them, as do the variables
train_model_config and train_gpu_memory_mib.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))

from ansible import constants as C  # noqa: E402
from ansible.errors import AnsibleError  # noqa: E402
from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.template import Templar, trust_as_template  # noqa: E402
from stack_vars import PLAY_DIR, PlayVars, play_group_vars, role_defaults  # noqa: E402, F401

sys.path.insert(0, str(REPO / "filter_plugins"))
from control import WHY as CONTROL_WHY  # noqa: E402
from control import control_character_problems  # noqa: E402
from launcher import launcher_env_problems  # noqa: E402
from nvidia import gpus_picked, nvidia_smi_gpus, nvidia_smi_p2p  # noqa: E402

# The roles of playbooks/train.yml, in play order: the train role reads the data and model
# roles' output directories (train_data_dir, train_model_path).
# The training play's role defaults: stack (every layer role's dependency) holds its values in
# defaults/main/*.yml, the others in defaults/main.yml.
DEFAULTS_FILES = role_defaults("stack", "data", "model", "train")
# PLAY_DIR (stack_vars.py), the directory of the training play (playbooks/train.yml): Ansible loads
# its group_vars/ and looks in its templates/ for a role's template the role does not hold (both
# are links to the project's top-level directories of those names).
TRAIN_ROLE = REPO / "roles" / "train"
# What the train role renders on a host: file -> (the template task's src, mode).
TEMPLATES = {
    "train.sh": ("train.sh.j2", 0o755),
    # Its values may be credentials (train_extra_env): readable by the owner only.
    "train.env": ("train.env.j2", 0o600),
}

# What a profile must hold for the launcher; (key, test, what it should be).
_BOOL = ("a boolean", lambda v: isinstance(v, bool))
_POSITIVE_INT = ("a positive integer", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0)
_PROFILE_SCHEMA: list[tuple[str, tuple[str, Any]]] = [
    ("description", ("a string", lambda v: isinstance(v, str))),
    (
        "validated",
        (
            "a list of {what, where, evidence} (evidence: a file in this repository); [] when nothing ran",
            lambda v: (
                isinstance(v, list)
                and all(
                    isinstance(r, dict)
                    and set(r) == {"what", "where", "evidence"}
                    and all(isinstance(x, str) and x for x in r.values())
                    and (REPO / r["evidence"]).is_file()
                    for r in v
                )
            ),
        ),
    ),
    ("precision", ("float32 or bfloat16", lambda v: v in ("float32", "bfloat16"))),
    (
        "attn_implementation",
        ("eager, sdpa or flash_attention_2", lambda v: v in ("eager", "sdpa", "flash_attention_2")),
    ),
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
# Keys a profile may leave out; (key, test, what it should be) when given.
_OPTIONAL_SCHEMA: list[tuple[str, tuple[str, Any]]] = [
    ("needs_apex", _BOOL),
]
_BACKEND_SCHEMA: dict[str, list[tuple[str, tuple[str, Any]]]] = {
    "hf": [
        ("reference_card", ("a card named in stack_gpu_cards", lambda v: isinstance(v, str) and bool(v))),
        ("hf_rollout.memory_margin", ("a number in [0, 1)", lambda v: isinstance(v, (int, float)) and 0 <= v < 1)),
        ("hf_rollout.cuda_context_mib", _POSITIVE_INT),
    ],
    "vllm": [
        (
            "vllm_rollout.gpu_memory_utilization",
            ("a number in (0, 1]", lambda v: isinstance(v, (int, float)) and 0 < v <= 1),
        ),
        ("vllm_rollout.enforce_eager", _BOOL),
        ("vllm_rollout.max_num_seqs", _POSITIVE_INT),
        (
            "vllm_rollout.chunked_prefill",
            ("a boolean or null (verl's default)", lambda v: v is None or isinstance(v, bool)),
        ),
        (
            "vllm_rollout.max_num_batched_tokens",
            ("a positive integer or null (verl's default)", lambda v: v is None or _POSITIVE_INT[1](v)),
        ),
    ],
}


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
    for key, (expected, test) in _OPTIONAL_SCHEMA:
        if key in profile and not test(profile[key]):
            problems.append(f"profile {name}: {key} is {profile[key]!r}; it should be {expected}")
    problems += launcher_env_problems(profile.get("env"), f"stack_gpu_profiles.{name}.env")
    return problems


def parse_var(text: str) -> tuple[str, Any]:
    """'key=value' -> (key, YAML value of value)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--var {text!r}: expected key=value")
    return key.strip(), yaml.safe_load(raw) if raw.strip() else ""


def template_source(src: str, play_dir: Path = PLAY_DIR) -> Path:
    """The file a template task of the train role with this src renders: Ansible's search path for a
    role's task (the role's templates/, the role, its tasks/), then the play's directory's templates/."""
    loader = DataLoader()
    loader.set_basedir(str(play_dir))
    role = [str(TRAIN_ROLE), str(TRAIN_ROLE / "tasks")]
    return Path(loader.path_dwim_relative_stack(role, "templates", src, is_role=True))


def play_variables(extra_vars: dict[str, Any] | None = None) -> PlayVars:
    """The training play's variables for a host alone (stack_vars.py's order): its role defaults, then
    its group_vars for all hosts, then extra vars (highest). The host is localhost, or the
    inventory_hostname extra vars give (then alone in groups, unless they set groups too)."""
    hostname = (extra_vars or {}).get("inventory_hostname", "localhost")
    return PlayVars(DEFAULTS_FILES, play_dir=PLAY_DIR, hostname=hostname, extra_vars=extra_vars)


def load_variables(extra_vars: dict[str, Any] | None = None) -> tuple[DataLoader, dict[str, Any]]:
    """play_variables' loader and variables, untemplated."""
    variables = play_variables(extra_vars)
    return variables.loader, variables.data


def spec_options() -> list[str]:
    """Every option of every entry point of every role (roles/*/meta/argument_specs.yml) but the
    no_log ones: the names preflight checks for control characters (tasks/control_characters.yml)."""
    names: list[str] = []
    for spec in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        for entry in (yaml.safe_load(spec.read_text()).get("argument_specs") or {}).values():
            for name, option in ((entry or {}).get("options") or {}).items():
                if name not in names and not (option or {}).get("no_log"):
                    names.append(name)
    return names


def input_control_problems(templar: Templar, data: dict[str, Any]) -> list[str]:
    """The control characters in the options this render has, as preflight reports them."""
    problems: list[str] = []
    for name in spec_options():
        if name not in data:
            continue
        try:
            value = templar.template(data[name])
        except AnsibleError:
            continue  # needs a play (ansible_run_tags, a lookup): the launcher's templates do not read it
        problems += control_character_problems(value, name)
    return problems


def render(profile: str, out_dir: Path, extra_vars: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write train.sh and train.env for a profile into out_dir; return their paths."""
    variables = play_variables(extra_vars)
    data = variables.data
    profiles = data.get("stack_gpu_profiles") or {}
    if profile not in profiles:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(sorted(profiles))}")
    problems = profile_problems(profile, profiles[profile])
    if problems:
        raise ValueError("; ".join(problems))
    # preflight sets this fact in a play (roles/preflight/tasks/profile.yml); extra vars still win.
    # What the play has of its inventory came with the variables: one host (localhost unless extra
    # vars name it, groups and hostvars), in no Ray cluster (stack_ray_group).
    variables.use_profile(profile)
    # What the template module adds.
    data.setdefault("ansible_managed", C.config.get_config_value("DEFAULT_MANAGED_STR"))
    templar = variables.templar
    # The names train.env exports, refused before anything is written (preflight does the same on a host).
    problems = launcher_env_problems(templar.template(data.get("train_extra_env")), "train_extra_env")
    if problems:
        raise ValueError("; ".join(problems))
    # No control character in any option the templates may read (preflight makes the same check on a host).
    problems = input_control_problems(templar, data)
    if problems:
        raise ValueError("; ".join(problems) + ": " + CONTROL_WHY)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (src, mode) in TEMPLATES.items():
        text = templar.template(
            trust_as_template(template_source(src).read_text()),
            escape_backslashes=False,
            # The template module's defaults.
            overrides=dict(trim_blocks=True, lstrip_blocks=False),
        )
        target = out_dir / name
        # The mode is set before the text goes in, on a new or an old file alike.
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        written[name] = target
    return written


def validation_lines(profile: dict[str, Any]) -> list[str]:
    """What has run for a profile, where, and the file that shows it (the profile's `validated`)."""
    runs = profile.get("validated") or []
    if not runs:
        return ["validated: never run on any GPU"]
    return ["validated: %s, on %s (%s)" % (run["what"], run["where"], run["evidence"]) for run in runs]


def preflight_gpu_vars(smi: Path, topo: Path | None, pick: list[Any]) -> dict[str, Any]:
    """What preflight sets from a host's nvidia-smi output (roles/preflight/tasks/gpu.yml and profile.yml), by the same
    filters."""
    gpus = gpus_picked(nvidia_smi_gpus(smi.read_text()), pick)
    found: dict[str, Any] = {"preflight_gpus": gpus}
    if len(gpus) > 1 and topo:
        p2p = nvidia_smi_p2p(topo.read_text(), [gpu["index"] for gpu in gpus])
        found["preflight_gpu_p2p"] = dict(p2p, checked=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", help="name of a profile in stack_gpu_profiles")
    parser.add_argument("--out", type=Path, help="directory to write train.sh and train.env into")
    parser.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a variable (YAML value), like ansible-playbook -e; repeatable",
    )
    parser.add_argument(
        "--vars-file",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="YAML file of variables, applied before --var; repeatable",
    )
    parser.add_argument(
        "--model-config",
        type=Path,
        metavar="FILE",
        help="the model's config.json, which sizes the HF rollout (sets train_model_config)",
    )
    parser.add_argument(
        "--gpu-memory-mib",
        type=int,
        metavar="MIB",
        help="GPU memory per GPU as nvidia-smi reports it (sets train_gpu_memory_mib)",
    )
    parser.add_argument(
        "--nvidia-smi",
        type=Path,
        metavar="FILE",
        help="a host's recorded `%s` output: its GPUs (picked by train_gpus) set the GPU count "
        "and memory, as preflight does (sets preflight_gpus)"
        % "nvidia-smi --query-gpu=... --format=csv,noheader,nounits",
    )
    parser.add_argument(
        "--nvidia-smi-topo",
        type=Path,
        metavar="FILE",
        help="that host's recorded `nvidia-smi topo -p2p r` output (sets preflight_gpu_p2p)",
    )
    parser.add_argument("--list-profiles", action="store_true", help="print the profile names and exit")
    args = parser.parse_args(argv)

    if args.list_profiles:
        _, data = load_variables()
        for name, profile in data["stack_gpu_profiles"].items():
            print(f"{name}\t{profile.get('description', '')}")
            print("\n".join("\t" + line for line in validation_lines(profile)))
        return 0
    if not args.profile or not args.out:
        parser.error("--profile and --out are required")

    extra: dict[str, Any] = {}
    try:
        for path in args.vars_file:
            extra.update(yaml.safe_load(path.read_text()) or {})
        if args.model_config:
            extra["train_model_config"] = json.loads(args.model_config.read_text())
        if args.gpu_memory_mib:
            extra["train_gpu_memory_mib"] = args.gpu_memory_mib
        for item in args.var:
            key, value = parse_var(item)
            extra[key] = value
        if args.nvidia_smi:
            extra.update(preflight_gpu_vars(args.nvidia_smi, args.nvidia_smi_topo, extra.get("train_gpus") or []))
        elif args.nvidia_smi_topo:
            parser.error("--nvidia-smi-topo needs --nvidia-smi")
        written = render(args.profile, args.out, extra)
        _, data = load_variables()
        for line in validation_lines(data["stack_gpu_profiles"][args.profile]):
            print(f"render.py: profile {args.profile}: {line}", file=sys.stderr)
    except (OSError, ValueError, yaml.YAMLError, AnsibleError) as error:
        print(f"render.py: {error}", file=sys.stderr)
        return 1
    for path in written.values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
