"""Every role's meta/argument_specs.yml and defaults/main.yml name the same options, with the same defaults.

The spec is what validates input and what the role READMEs are generated from (tools/role_docs.py);
defaults/main.yml (or the files of defaults/main/) is what the role runs with. An option in one and
not the other, or a default the two disagree on, documents a role that does not exist. Values are
compared as raw YAML: a templated default ("{{ stack_work_dir }}/apex") must be the same string in
both files. One exception: a manifest (the stack role's artifacts, profiles, models) is data kept in a
file of its own under defaults/main/; its option leaves the default out and names that file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from playbook import run as run_playbook
from repo import tasks_in

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(
    path
    for path in (REPO / "roles").iterdir()
    if (path / "defaults" / "main.yml").is_file()
    or (path / "defaults" / "main").is_dir()
    or (path / "meta" / "argument_specs.yml").is_file()
)

# What each spec type accepts as a (non-templated) default; bool is no int here, as YAML keeps them apart.
TYPE_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "path": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "list": lambda v: isinstance(v, list),
    "dict": lambda v: isinstance(v, dict),
    "raw": lambda v: True,
}


def defaults_files(role: Path) -> list[Path]:
    """defaults/main.yml, or every file of a defaults/main/ directory (Ansible reads either)."""
    single = role / "defaults" / "main.yml"
    return [single] if single.is_file() else sorted((role / "defaults" / "main").glob("*.yml"))


def load_defaults(role: Path) -> dict[str, Any]:
    """The role's options from its defaults: private names (__x) are internals, not options."""
    return {name: value for name, (value, _) in load_defaults_with_files(role).items()}


def load_defaults_with_files(role: Path) -> dict[str, tuple[Any, str]]:
    """Each option's default and the defaults file that holds it (relative to the role)."""
    found: dict[str, tuple[Any, str]] = {}
    for path in defaults_files(role):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            if not name.startswith("__"):
                found[name] = (value, path.relative_to(role).as_posix())
    return found


def load_entry_points(role: Path) -> dict[str, dict[str, Any]]:
    path = role / "meta" / "argument_specs.yml"
    data = yaml.safe_load(path.read_text()) if path.is_file() else None
    return (data or {}).get("argument_specs") or {}


def same(a: Any, b: Any) -> bool:
    # JSON keeps true apart from 1 and 1 from 1.0, which == does not.
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def value_problems(where: str, spec: dict[str, Any], value: Any) -> list[str]:
    """Does a default fit its spec (type, elements, choices, sub-options)? Templates are not judged."""
    if value is None or templated(value):
        return []
    kind = spec.get("type", "str")
    if not TYPE_CHECKS.get(kind, lambda v: False)(value):
        return ["%s: default %r is not a %s" % (where, value, kind)]
    # As Ansible's validator: a list's choices are those of each of its items.
    if "choices" in spec and any(item not in spec["choices"] for item in (value if kind == "list" else [value])):
        return ["%s: default %r is not one of its choices %s" % (where, value, spec["choices"])]
    problems: list[str] = []
    if kind == "list":
        element = {"type": spec.get("elements", "raw"), "options": spec.get("options")}
        for index, item in enumerate(value):
            problems += value_problems("%s[%d]" % (where, index), element, item)
    elif kind == "dict" and spec.get("options"):
        for name in value:
            if name not in spec["options"]:
                problems.append("%s: key %s is not among its options" % (where, name))
        for name, sub in spec["options"].items():
            if name in value:
                problems += value_problems("%s.%s" % (where, name), sub, value[name])
            elif sub.get("required"):
                problems.append("%s: lacks the required key %s" % (where, name))
    return problems


def option_problems(where: str, spec: dict[str, Any]) -> list[str]:
    """What every documented option carries: a description, a type, the element type of a list."""
    problems = []
    description = spec.get("description")
    if isinstance(description, list):
        description = " ".join(description)
    if not isinstance(description, str) or not description.strip():
        problems.append("%s has no description" % where)
    if "type" not in spec:
        problems.append("%s has no type" % where)
    elif spec["type"] not in TYPE_CHECKS:
        problems.append("%s has the unknown type %s" % (where, spec["type"]))
    if spec.get("type") == "list" and "elements" not in spec:
        problems.append("%s is a list without elements" % where)
    for name, sub in (spec.get("options") or {}).items():
        problems += option_problems("%s.%s" % (where, name), sub)
    return problems


def spec_problems(
    defaults: dict[str, Any],
    entry_points: dict[str, dict[str, Any]],
    files: dict[str, str] | None = None,
    secrets: set[str] | None = None,
) -> list[str]:
    """Every way the spec and defaults/main.yml disagree, as sentences naming the option.

    files: each option's defaults file; a data option kept in defaults/main/<name>.yml may leave its
    default out of the spec when its description names that file.
    secrets: options that another entry point documents with no_log. Ansible's argument check decrypts
    every option it validates, so a vaulted secret in a main spec would need the vault password on every
    play; such a default is documented and checked only where it is used.
    """
    files = files or {}
    problems = []
    if defaults and "main" not in entry_points:
        problems.append("no main entry point, but defaults/main.yml has options")
    main_options = (entry_points.get("main") or {}).get("options") or {}
    for name in defaults:
        if name in main_options and name in (secrets or set()):
            problems.append("%s is a secret: the main entry point would decrypt it on every play" % name)
        elif name not in main_options and name not in (secrets or set()):
            problems.append("%s is in defaults/main.yml but not among the main entry point's options" % name)
    for entry, entry_spec in entry_points.items():
        for name, spec in ((entry_spec or {}).get("options") or {}).items():
            where = "%s (entry point %s)" % (name, entry)
            problems += option_problems(where, spec)
            if name in defaults:
                if spec.get("required"):
                    problems.append("%s is required, but defaults/main.yml gives it a default" % where)
                if "default" not in spec:
                    if not data_file_named(spec, files.get(name, "")):
                        problems.append("%s has no default, but defaults/main.yml has %r" % (where, defaults[name]))
                elif not same(spec["default"], defaults[name]):
                    problems.append(
                        "%s: the spec's default %r differs from defaults/main.yml's %r"
                        % (where, spec["default"], defaults[name])
                    )
                problems += value_problems(where, spec, defaults[name])
            elif not spec.get("required"):
                problems.append("%s is neither in defaults/main.yml nor required" % where)
            elif "default" in spec:
                problems.append("%s is required and has a default" % where)
    return problems


def data_file_named(spec: dict[str, Any], path: str) -> bool:
    """A data option's spec may omit its default: only for a file of defaults/main/ its description names."""
    description = spec.get("description")
    if isinstance(description, list):
        description = " ".join(description)
    return path.startswith("defaults/main/") and path in " ".join(str(description or "").split())


def test_every_role_is_checked():
    names = [role.name for role in ROLES]
    assert {"train", "stack_artifact", "stack"} <= set(names), names


def secret_options() -> set[str]:
    """Options some role's entry point other than main documents with no_log (stack_hf_token)."""
    return {
        name
        for role in ROLES
        for entry, spec in load_entry_points(role).items()
        if entry != "main"
        for name, option in ((spec or {}).get("options") or {}).items()
        if option.get("no_log")
    }


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_spec_matches_defaults(role: Path):
    found = load_defaults_with_files(role)
    files = {n: f for n, (_, f) in found.items()}
    problems = spec_problems(load_defaults(role), load_entry_points(role), files, secret_options())
    assert not problems, "roles/%s:\n  %s" % (role.name, "\n  ".join(problems))


# The checks themselves, on broken pairs: each must be caught.
GOOD_DEFAULTS = {"x_dir": "{{ stack_work_dir }}/x", "x_jobs": 0, "x_mode": "a", "x_flags": ["-a"]}
GOOD_SPEC = {
    "main": {
        "options": {
            "x_dir": {"type": "path", "default": "{{ stack_work_dir }}/x", "description": "Where x goes."},
            "x_jobs": {"type": "int", "default": 0, "description": "Jobs."},
            "x_mode": {"type": "str", "choices": ["a", "b"], "default": "a", "description": "Mode."},
            "x_flags": {"type": "list", "elements": "str", "default": ["-a"], "description": "Flags."},
            "x_key": {"type": "str", "required": True, "description": "A key the caller gives."},
        }
    }
}


def broken(change) -> list[str]:
    defaults = json.loads(json.dumps(GOOD_DEFAULTS))
    spec = json.loads(json.dumps(GOOD_SPEC))
    change(defaults, spec["main"]["options"])
    return spec_problems(defaults, spec)


def test_a_matching_pair_passes():
    assert spec_problems(GOOD_DEFAULTS, GOOD_SPEC) == []
    # A list's choices are its items' (as Ansible validates them; train_logger's).
    assert broken(lambda d, o: o["x_flags"].update(choices=["-a", "-b"])) == []


def test_private_names_are_not_options(tmp_path: Path):
    (tmp_path / "defaults").mkdir()
    (tmp_path / "defaults" / "main.yml").write_text("x_jobs: 0\n__x_internal: 1\n")
    assert load_defaults(tmp_path) == {"x_jobs": 0}


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda d, o: d.update(x_new=1), "x_new is in defaults/main.yml but not among"),
        (lambda d, o: o["x_jobs"].pop("default"), "x_jobs (entry point main) has no default"),
        (lambda d, o: o["x_jobs"].update(default=1), "differs from defaults/main.yml's 0"),
        (lambda d, o: o["x_jobs"].update(default=False), "differs from defaults/main.yml's 0"),
        (lambda d, o: o["x_dir"].update(default="{{ stack_work_dir }}/y"), "x_dir (entry point main): the spec's"),
        (lambda d, o: o["x_key"].pop("required"), "x_key (entry point main) is neither in defaults"),
        (lambda d, o: o.update(x_gone={"type": "str", "description": "Old."}), "x_gone (entry point main) is neither"),
        (lambda d, o: o["x_key"].update(default="k"), "x_key (entry point main) is required and has a default"),
        (lambda d, o: o["x_jobs"].update(required=True), "x_jobs (entry point main) is required, but"),
        (lambda d, o: o["x_jobs"].pop("description"), "x_jobs (entry point main) has no description"),
        (lambda d, o: o["x_jobs"].pop("type"), "x_jobs (entry point main) has no type"),
        (lambda d, o: o["x_flags"].pop("elements"), "x_flags (entry point main) is a list without elements"),
        (lambda d, o: (d.update(x_jobs="4"), o["x_jobs"].update(default="4")), "default '4' is not a int"),
        (lambda d, o: (d.update(x_mode="c"), o["x_mode"].update(default="c")), "is not one of its choices"),
        (lambda d, o: (d.update(x_flags=[1]), o["x_flags"].update(default=[1])), "x_flags (entry point main)[0]"),
        # A list's choices are its items' (train_logger's); one item outside them is caught.
        (lambda d, o: o["x_flags"].update(choices=["-b"]), "default ['-a'] is not one of its choices ['-b']"),
    ],
)
def test_each_disagreement_is_caught(change, expected):
    problems = broken(change)
    assert any(expected in problem for problem in problems), problems


def test_a_data_option_names_its_file_or_gives_its_default():
    data = {"x_table": {"a": 1}}
    named = {"main": {"options": {"x_table": {"type": "dict", "description": "See defaults/main/table.yml."}}}}
    assert spec_problems(data, named, {"x_table": "defaults/main/table.yml"}) == []
    # The same spec, but the value sits in defaults/main.yml (not a data file), or another file is named.
    assert spec_problems(data, named, {"x_table": "defaults/main.yml"}) != []
    assert spec_problems(data, named, {"x_table": "defaults/main/other.yml"}) != []
    assert spec_problems(data, named) != []


def test_stack_spec_names_each_data_file():
    role = REPO / "roles" / "stack"
    found = load_defaults_with_files(role)
    options = load_entry_points(role)["main"]["options"]
    without_default = {name for name, spec in options.items() if "default" not in spec}
    assert without_default == {
        "stack_artifacts",
        "stack_gpu_profiles",
        "stack_gpu_cards",
        "stack_model_architectures",
        "stack_train_presets",
        "stack_train_preset_runs",
    }
    for name in without_default:
        assert data_file_named(options[name], found[name][1]), name


def test_a_secret_is_checked_only_where_it_is_used():
    assert "stack_hf_token" in secret_options()
    with_secret = dict(GOOD_DEFAULTS, x_token="")
    assert spec_problems(with_secret, GOOD_SPEC, secrets={"x_token"}) == []
    # In the main spec it would be decrypted on every play; not a secret, it must be documented.
    spec = json.loads(json.dumps(GOOD_SPEC))
    spec["main"]["options"]["x_token"] = {"type": "str", "default": "", "no_log": True, "description": "A token."}
    assert "x_token is a secret" in " ".join(spec_problems(with_secret, spec, secrets={"x_token"}))
    assert "x_token is in defaults/main.yml but not among" in " ".join(spec_problems(with_secret, GOOD_SPEC))


def test_another_entry_point_needs_defaults_or_required():
    spec = dict(GOOD_SPEC, extra={"options": {"x_other": {"type": "str", "description": "Only here."}}})
    assert spec_problems(GOOD_DEFAULTS, spec) == [
        "x_other (entry point extra) is neither in defaults/main.yml nor required"
    ]


def test_dict_elements_follow_their_options():
    spec = {
        "main": {
            "options": {
                "x_req": {
                    "type": "list",
                    "elements": "dict",
                    "default": [{"path": "/a"}],
                    "description": "Requirements.",
                    "options": {
                        "path": {"type": "str", "required": True, "description": "A path."},
                        "min_free_gb": {"type": "float", "required": True, "description": "GiB."},
                    },
                }
            }
        }
    }
    problems = spec_problems({"x_req": [{"path": "/a"}]}, spec)
    assert problems == ["x_req (entry point main)[0]: lacks the required key min_free_gb"]


def run_layer_specs(tmp_path: Path, extra_vars: dict[str, Any], roles: list[str]) -> subprocess.CompletedProcess:
    """Preflight's check of every layer's spec (roles/preflight/tasks/layer_specs.yml), run by Ansible with
    the pascal profile and the defaults of the given roles, the way a play of those roles has them."""
    play_file = tmp_path / "layer_specs.yml"
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "vars_files": [str(path) for name in ["stack", *roles] for path in defaults_files(REPO / "roles" / name)],
        "tasks": [
            {
                "name": "Choose the profile, as preflight does",
                "ansible.builtin.set_fact": {
                    "preflight_profile": "{{ stack_gpu_profiles['pascal'] | combine({'name': 'pascal'}) }}"
                },
            },
            # As preflight runs it: before the first layer, then the layers the profile decides.
            {
                "name": "Check every layer's inputs",
                "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "layer_specs.yml"},
            },
            {
                "name": "Check the inputs the profile decides",
                "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "layer_specs.yml"},
                "vars": {"__preflight_input_stage": "profile"},
            },
        ],
    }
    play_file.write_text(yaml.safe_dump([play]))
    inventory = REPO / "inventory" / "hosts.yml"
    interpreter = "ansible_python_interpreter=" + sys.executable
    return run_playbook(inventory, [], "-l", "localhost", "-e", interpreter, playbook=play_file, **extra_vars)


def test_ansible_accepts_every_default_and_refuses_a_bad_value(tmp_path: Path):
    # Ansible's own validator, on the templated defaults: a type or choice the real value does not fit fails here.
    every_role = [role.name for role in ROLES]
    good = run_layer_specs(tmp_path, {}, every_role)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "item=train" in good.stdout
    bad = run_layer_specs(tmp_path, {"train_batch_size": "many", "vllm_enabled": "perhaps"}, every_role)
    assert bad.returncode != 0
    assert "train_batch_size" in bad.stdout and "vllm_enabled" in bad.stdout, bad.stdout


def test_layers_outside_the_play_are_not_judged_by_their_spec_defaults(tmp_path: Path):
    # site.yml's first play holds preflight, cuda and cudnn only: the later layers' spec defaults (vllm_enabled's
    # expression, train_profile's) are untemplated text there, which must not be validated as values.
    run = run_layer_specs(tmp_path, {}, ["preflight", "cuda", "cudnn"])
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize(
    "role", [path for path in ROLES if (path / "vars" / "main.yml").is_file()], ids=lambda p: p.name
)
def test_no_task_registers_over_a_var(role: Path) -> None:
    # A registered result outranks role vars: `register: __x` over a var __x silently replaces the
    # value every later task reads (cudnn's file list became a find result and its record failed).
    # Task-level vars outrank a registered result: a `vars:` __x on one task hides a register __x.
    tasks = [
        (path, task)
        for path in sorted((role / "tasks").glob("*.yml"))
        for task in tasks_in(yaml.safe_load(path.read_text()))
    ]
    role_vars = set(yaml.safe_load((role / "vars" / "main.yml").read_text()) or {})
    role_vars |= {name for _, task in tasks for name in (task.get("vars") or {})}
    shadowed = [
        f"{path.relative_to(REPO)}: {task['register']}" for path, task in tasks if task.get("register") in role_vars
    ]
    assert not shadowed, f"tasks register over the role's vars (vars/main.yml or a task's vars): {shadowed}"
