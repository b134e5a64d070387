"""tools/stack_vars.py: the one "role defaults plus what overrides them, templated" that
tools/render.py and tests/infra's StackVars (and, through it, tests/integration) build theirs from.

The order is Ansible's, lowest first: role defaults, the play's group_vars/all, the inventory's
group then host vars, vars files, extra vars; a fact set in between (preflight_profile) loses to
the vars files and extra vars. Each check below sets one variable in every layer up to one and
expects that layer's value, so swapping any two layers fails it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO

os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))

import render  # noqa: E402
import stack_vars  # noqa: E402
from repo import load_file  # noqa: E402
from stack_vars import PlayVars, role_defaults  # noqa: E402

# The layers, lowest first, as this test writes them.
LAYERS = ["defaults", "group_vars", "inventory_group", "inventory_host", "vars_file", "extra"]


def _write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def _set_up_to(layer: str) -> dict[str, str]:
    """For each layer at or below `layer`, name: that layer's name (the name is "up_to_<layer>")."""
    return {"up_to_" + top: layer for top in LAYERS[LAYERS.index(layer) :]}


@pytest.fixture
def project(tmp_path: Path) -> dict[str, Any]:
    """A project whose every layer sets up_to_<layer> for itself and every layer above it, so each
    up_to_<layer> should come out as <layer>."""
    roles = tmp_path / "roles"
    _write(
        roles / "one" / "defaults" / "main.yml", {**_set_up_to("defaults"), "who": "world", "greeting": "hi {{ who }}"}
    )
    # A role whose defaults are a directory (the stack role's way), read in name order.
    _write(roles / "two" / "defaults" / "main" / "a.yml", {"split": "a", "only_a": "a"})
    _write(roles / "two" / "defaults" / "main" / "b.yml", {"split": "b"})
    play_dir = tmp_path / "playbooks"
    _write(play_dir / "group_vars" / "all.yml", _set_up_to("group_vars"))
    inventory = _write(
        tmp_path / "inventory" / "hosts.yml",
        {
            "all": {
                "hosts": {"h2": {"ansible_connection": "local", "other": "h2's"}},
                "children": {
                    "g": {
                        "hosts": {"h1": {**_set_up_to("inventory_host"), "ansible_connection": "local"}},
                        "vars": _set_up_to("inventory_group"),
                    }
                },
            }
        },
    )
    vars_file = _write(tmp_path / "vars.yml", {**_set_up_to("vars_file"), "who": "{{ 'file' }}"})
    return dict(
        defaults_files=role_defaults(root=tmp_path),
        play_dir=play_dir,
        inventory=str(inventory),
        hostname="h1",
        vars_files=[vars_file],
        extra_vars=_set_up_to("extra"),
    )


def test_each_layer_overrides_the_ones_below_it(project: dict[str, Any]):
    variables = PlayVars(**project)
    assert {name: variables[name] for name in variables.data if name.startswith("up_to_")} == {
        "up_to_" + layer: layer for layer in LAYERS
    }


def test_each_layer_alone_is_read(project: dict[str, Any]):
    # Without the layers above it, each layer's own value shows: none is skipped.
    for layer, leave_out in (
        ("vars_file", dict(extra_vars=None)),
        ("inventory_host", dict(extra_vars=None, vars_files=[])),
        ("group_vars", dict(extra_vars=None, vars_files=[], inventory=None)),
        ("defaults", dict(extra_vars=None, vars_files=[], inventory=None, play_dir=None)),
    ):
        variables = PlayVars(**{**project, **leave_out})
        assert variables["up_to_" + layer] == layer, leave_out


def test_the_values_are_templated_against_the_whole_set(project: dict[str, Any]):
    variables = PlayVars(**project)
    # A default reads a value a vars file overrides; the file's value is a template too.
    assert variables["greeting"] == "hi file"
    # Extra vars are templates, as -e values are.
    variables = PlayVars(**{**project, "extra_vars": {"who": "{{ up_to_vars_file }}"}})
    assert variables["greeting"] == "hi vars_file"
    # A change to data shows (the infra fixture adds ansible_facts after building).
    variables.data["who"] = "later"
    assert variables["greeting"] == "hi later"
    # A string to template is marked as a template, as Ansible marks a task's text.
    assert variables.template(stack_vars.trusted("{{ who | upper }}")) == "LATER"
    assert variables.template("{{ who }}") == "{{ who }}"


def test_the_stack_roles_defaults_directory_is_read_in_name_order(project: dict[str, Any]):
    variables = PlayVars(**project)
    assert variables["split"] == "b" and variables["only_a"] == "a"


def test_the_host_sees_its_inventory_or_is_alone(project: dict[str, Any]):
    variables = PlayVars(**project)
    assert variables["inventory_hostname"] == "h1"
    groups = variables["groups"]
    assert sorted(groups["all"]) == ["h1", "h2"] and groups["g"] == ["h1"]
    # Every host's own vars, without the connection settings.
    assert variables["hostvars"]["h2"]["other"] == "h2's"
    assert not any(name.startswith("ansible_") for values in variables["hostvars"].values() for name in values)
    for alone in (dict(hostname="elsewhere"), dict(inventory=None, hostname="elsewhere")):
        variables = PlayVars(**{**project, **alone})
        assert variables["groups"] == {"all": ["elsewhere"]} and variables["hostvars"] == {}
        assert variables["up_to_inventory_host"] == "group_vars"


def test_the_profile_is_a_fact_under_the_extra_vars(tmp_path: Path):
    defaults = _write(tmp_path / "defaults.yml", {"stack_gpu_profiles": {"p": {"x": "{{ 1 + 1 }}"}}})
    variables = PlayVars([defaults], play_dir=None)
    variables.use_profile("p")
    # Templated, with its name, as preflight's set_fact makes it.
    assert variables["preflight_profile"] == {"x": 2, "name": "p"}
    variables = PlayVars([defaults], play_dir=None, extra_vars={"preflight_profile": {"name": "given"}})
    variables.use_profile("p")
    assert variables["preflight_profile"] == {"name": "given"}
    given = _write(tmp_path / "given.yml", {"preflight_profile": {"name": "file"}})
    variables = PlayVars([defaults], play_dir=None, vars_files=[given])
    variables.use_profile("p")
    assert variables["preflight_profile"] == {"name": "file"}


def test_role_defaults_names_each_roles_files():
    stack = sorted((REPO / "roles" / "stack" / "defaults" / "main").glob("*.yml"))
    assert stack and role_defaults("stack", "train") == [*stack, REPO / "roles" / "train" / "defaults" / "main.yml"]
    # Every role, by name: the files tests/infra's StackVars reads.
    every = sorted([*REPO.glob("roles/*/defaults/main.yml"), *REPO.glob("roles/*/defaults/main/*.yml")])
    assert role_defaults() == every


def test_render_and_the_infra_tests_build_theirs_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    # render.py: the training play's roles, the play's group_vars, extra vars over them.
    assert render.DEFAULTS_FILES == role_defaults("stack", "data", "model", "train")
    assert render.play_group_vars is stack_vars.play_group_vars
    variables = render.play_variables({"train_total_epochs": 3})
    assert isinstance(variables, PlayVars) and variables["train_total_epochs"] == 3
    assert variables["groups"] == {"all": ["localhost"]}
    loader, data = render.load_variables({"train_total_epochs": 4})
    assert data["train_total_epochs"] == 4 and loader is not None
    # tests/infra's StackVars: every role, the inventory and vars files of its environment.
    infra = load_file(REPO / "tests" / "infra" / "conftest.py", "infra_conftest_of_test_stack_vars")
    assert issubclass(infra.StackVars, PlayVars)
    inventory = _write(tmp_path / "hosts.yml", {"all": {"hosts": {"n1": {"stack_user": "from-host"}}}})
    vars_file = _write(tmp_path / "vars.yml", {"stack_state_dir": "/from/file"})
    monkeypatch.setenv("STACK_INVENTORY", str(inventory))
    monkeypatch.setenv("STACK_VARS_FILES", "%s," % vars_file)
    variables = infra.StackVars("n1")
    assert variables["stack_user"] == "from-host" and variables["stack_state_dir"] == "/from/file"
    assert variables.data["groups"] == {"all": ["n1"], "ungrouped": ["n1"]}
    assert "stack_gpu_profiles" in variables.data and "train_total_epochs" in variables.data
