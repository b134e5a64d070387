"""The layer graph is declared once, in stack_layers (roles/stack/defaults/main/stack.yml): each layer's
name, stage and requires. Everything else follows it: each stage playbook lists exactly its stage's
layers, in order; site.yml imports the stages in that order; every layer role supplies its part of
the protocol (roles/stack/tasks/) and nothing more. graph_problems() says what drifted, naming the file
to fix; the tests run it on the project, and on copies with one part of a declaration taken away."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from repo import tasks_in

REPO = Path(__file__).resolve().parents[2]
STACK = Path("roles/stack/defaults/main/stack.yml")
SETUP = Path("playbooks/tasks/setup.yml")
# The protocol's entry points (roles/stack/tasks/): a layer imports layer (query, then work), or query
# and work with its own tasks between them (train), or record alone (preflight, which has no work).
ENTRY_POINTS = ({"layer"}, {"query", "work"}, {"record"})


def _load(repo: Path, path: Path):
    return yaml.safe_load((repo / path).read_text())


def requires_of(layer: dict) -> list[str]:
    """The layers an entry requires; a templated requires (train's) names them as quoted words."""
    requires = layer.get("requires", [])
    if isinstance(requires, str):
        return re.findall(r"'([A-Za-z0-9_]+)'", requires)
    return list(requires)


def protocol_imports(repo: Path, role: str) -> set[str]:
    """The protocol entry points a role's tasks/main.yml imports from the stack role."""
    path = repo / "roles" / role / "tasks" / "main.yml"
    if not path.is_file():
        return set()
    found = set()
    for task in tasks_in(yaml.safe_load(path.read_text())):
        spec = task.get("ansible.builtin.import_role") or task.get("import_role")
        if isinstance(spec, dict) and spec.get("name") == "stack":
            found.add(spec.get("tasks_from", "main"))
    return found


def stage_roles(repo: Path, stage: str) -> list[str]:
    return [
        role["role"] for play in _load(repo, Path("playbooks") / (stage + ".yml")) for role in play.get("roles") or []
    ]


def graph_problems(repo: Path) -> list[str]:
    layers = _load(repo, STACK)["stack_layers"]
    problems: list[str] = []
    names = [layer.get("name") for layer in layers]
    for index, layer in enumerate(layers):
        missing = {"name", "stage", "requires"} - set(layer)
        if missing:
            problems.append("%s: stack_layers entry %d lacks %s" % (STACK, index, ", ".join(sorted(missing))))
            continue
        for dep in requires_of(layer):
            if dep not in names:
                problems.append("%s: layer %s requires %s, which is not a layer" % (STACK, layer["name"], dep))
            elif names.index(dep) >= index:
                problems.append("%s: layer %s requires %s, which comes after it" % (STACK, layer["name"], dep))
    stages = list(dict.fromkeys(layer["stage"] for layer in layers if "stage" in layer))
    # Every stage but setup is a playbook that site.yml imports, in the order of stack_layers.
    playbooks = [stage for stage in stages if stage != "setup"]
    imported = [Path(play["ansible.builtin.import_playbook"]).stem for play in _load(repo, Path("site.yml"))]
    if [stage for stage in imported if stage in playbooks] != playbooks or not set(playbooks) <= set(imported):
        problems.append("site.yml: imports the stages %s; stack_layers orders them %s" % (imported, playbooks))
    for stage in playbooks:
        path = Path("playbooks") / (stage + ".yml")
        if not (repo / path).is_file():
            problems.append("%s: missing, and stack_layers names the stage %s" % (path, stage))
            continue
        want = [layer["name"] for layer in layers if layer.get("stage") == stage]
        have = stage_roles(repo, stage)
        if have != want:
            problems.append("%s: its roles are %s; stack_layers gives the %s stage %s" % (path, have, stage, want))
    # A layer runs from its role's main tasks; another entry (preflight's early input check) runs none.
    setup = [
        task["ansible.builtin.include_role"]["name"]
        for task in tasks_in(_load(repo, SETUP))
        if "ansible.builtin.include_role" in task
        and task["ansible.builtin.include_role"].get("tasks_from", "main") == "main"
    ]
    want = [layer["name"] for layer in layers if layer.get("stage") == "setup"]
    if setup != want:
        problems.append("%s: runs the layers %s; stack_layers gives the setup stage %s" % (SETUP, setup, want))
    # Each layer role: its part of the declaration.
    for name in names:
        role = Path("roles") / str(name)
        entry = protocol_imports(repo, str(name))
        if entry not in ENTRY_POINTS:
            problems.append(
                "%s: imports %s of the stack role; a layer imports the protocol: tasks_from layer (or query and "
                "work, or record alone)" % (role / "tasks/main.yml", sorted(entry) or "nothing")
            )
            continue
        role_vars = (
            yaml.safe_load((repo / role / "vars/main.yml").read_text())
            if (repo / role / "vars/main.yml").is_file()
            else {}
        )
        for var in ("__%s_inputs" % name, "__%s_record" % name):
            if var not in (role_vars or {}):
                problems.append("%s: lacks %s, the layer's part of the protocol" % (role / "vars/main.yml", var))
        if "record" not in entry and not (repo / role / "tasks/build.yml").is_file():
            problems.append(
                "%s: missing: the layer's work, which the protocol runs when there is some" % (role / "tasks/build.yml")
            )
    # A role that follows the protocol is a layer: the protocol finds its requires in stack_layers.
    for main in sorted((repo / "roles").glob("*/tasks/main.yml")):
        name = main.parent.parent.name
        if protocol_imports(repo, name) and name not in names:
            problems.append(
                "%s: imports the layer protocol, but %s is not in stack_layers (%s)"
                % (main.relative_to(repo), name, STACK)
            )
    # The protocol asks and records; a role only marks itself building (its own moment).
    for path in sorted((repo / "roles").glob("*/tasks/*.yml")):
        if path.parent.parent.name == "stack":
            continue
        for task in tasks_in(yaml.safe_load(path.read_text())):
            call = task.get("layer_state")
            if isinstance(call, dict) and call.get("state") != "building":
                problems.append(
                    "%s: %s asks or records a layer itself; the protocol (roles/stack/tasks/) does"
                    % (path.relative_to(repo), task.get("name"))
                )
    return problems


def test_the_layer_graph_is_declared_once():
    assert graph_problems(REPO) == []


def test_every_layer_has_a_stage_and_requires_earlier_layers():
    layers = _load(REPO, STACK)["stack_layers"]
    assert [layer["name"] for layer in layers][:3] == ["driver", "preflight", "cuda"]
    assert {layer["stage"] for layer in layers} == {"setup", "system", "python", "train"}
    assert requires_of(layers[-1]) == ["patch", "model"]


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    for part in ("roles", "playbooks"):
        shutil.copytree(REPO / part, tmp_path / part, symlinks=True)
    shutil.copy(REPO / "site.yml", tmp_path / "site.yml")
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def test_a_forgotten_build_file_names_the_file(copy):
    (copy / "roles/torch/tasks/build.yml").unlink()
    assert graph_problems(copy) == [
        "roles/torch/tasks/build.yml: missing: the layer's work, which the protocol runs when there is some"
    ]


def test_an_unknown_requirement_names_the_file(copy):
    _edit(
        copy / STACK,
        "{name: torch, stage: python, requires: [conda]}",
        "{name: torch, stage: python, requires: [kuda]}",
    )
    assert graph_problems(copy) == ["%s: layer torch requires kuda, which is not a layer" % STACK]


def test_a_later_requirement_names_the_file(copy):
    _edit(
        copy / STACK,
        "{name: torch, stage: python, requires: [conda]}",
        "{name: torch, stage: python, requires: [verl]}",
    )
    assert graph_problems(copy) == ["%s: layer torch requires verl, which comes after it" % STACK]


def test_a_layer_missing_from_stack_layers_names_the_files(copy):
    _edit(copy / STACK, "  - {name: vllm, stage: python, requires: [torch]}\n", "")
    problems = graph_problems(copy)
    assert (
        "playbooks/python.yml: its roles are %s; stack_layers gives the python stage %s"
        % (
            ["conda", "torch", "apex", "verl", "patch", "vllm"],
            ["conda", "torch", "apex", "verl", "patch"],
        )
        in problems
    )
    assert (
        "roles/vllm/tasks/main.yml: imports the layer protocol, but vllm is not in stack_layers (%s)" % STACK
        in problems
    )


def test_a_layer_missing_from_its_stage_names_the_playbook(copy):
    _edit(copy / "playbooks/python.yml", "    - role: patch\n      tags: [patch, verify]\n", "")
    assert graph_problems(copy) == [
        "playbooks/python.yml: its roles are %s; stack_layers gives the python stage %s"
        % (["conda", "torch", "apex", "verl", "vllm"], ["conda", "torch", "apex", "verl", "patch", "vllm"])
    ]


def test_a_stage_out_of_order_names_the_playbook(copy):
    text = (copy / "playbooks/train.yml").read_text()
    data, model = "    - role: data\n      tags: [data, verify]\n", "    - role: model\n      tags: [model, verify]\n"
    (copy / "playbooks/train.yml").write_text(text.replace(data + model, model + data))
    assert graph_problems(copy) == [
        "playbooks/train.yml: its roles are %s; stack_layers gives the train stage %s"
        % (["ray", "model", "data", "train"], ["ray", "data", "model", "train"])
    ]


def test_a_role_without_its_record_names_the_vars_file(copy):
    _edit(copy / "roles/verl/vars/main.yml", "__verl_record:", "__verl_recorded:")
    assert graph_problems(copy) == ["roles/verl/vars/main.yml: lacks __verl_record, the layer's part of the protocol"]


def test_a_role_that_asks_its_record_itself_names_the_file(copy):
    main = copy / "roles/cudnn/tasks/main.yml"
    main.write_text("---\n- name: Cudnn | Read the layer state\n  layer_state:\n    name: cudnn\n")
    problems = graph_problems(copy)
    assert problems[0].startswith("roles/cudnn/tasks/main.yml: imports nothing of the stack role")
    assert "roles/cudnn/tasks/main.yml: Cudnn | Read the layer state asks or records a layer itself" in problems[-1]


def test_the_protocol_imports_skip_the_stack_roles_argument_spec():
    """The protocol's entry points (tasks_from) have no argument spec; Ansible still loads and copies the
    stack role's whole spec file (the largest) for every import unless rolespec_validate is false: one
    load per layer, on every run, in the parse before the first task."""
    loud = []
    for path in sorted(REPO.glob("roles/*/tasks/*.yml")):
        for task in tasks_in(yaml.safe_load(path.read_text())):
            spec = task.get("ansible.builtin.import_role") if isinstance(task, dict) else None
            if isinstance(spec, dict) and spec.get("name") == "stack" and "tasks_from" in spec:
                if spec.get("rolespec_validate") is not False:
                    loud.append("%s: %s" % (path.relative_to(REPO), task.get("name")))
    assert loud == []
    specs = _load(REPO, Path("roles/stack/meta/argument_specs.yml"))["argument_specs"]
    assert set(specs) == {"main"}, "the stack role now has entry-point specs %s: validate them" % sorted(specs)
