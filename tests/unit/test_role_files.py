"""Roles own their files: what a role copies or renders onto a host lives in that role.

A role's copy and template tasks take a relative src from its own files/ and
templates/, or, for a template the role does not hold, from the play's templates/
through Ansible's own search path (the launcher's train.sh.j2 and train.env.j2 are in
the project's templates/, which playbooks/templates links to); none reaches out of the
role through role_path (`{{ role_path }}/..`, `role_path | dirname`), no template is
in both places, and tools/ holds only what runs on the controller, never a script a
role installs on a host. The checks are plain functions of a project root, so the
broken layout (the scripts in tools/, reached through `{{ role_path }}/../../tools/`)
is shown to fail below.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO
from repo import tasks_in

os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))

from ansible.errors import AnsibleError  # noqa: E402
from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.template import Templar, trust_as_template  # noqa: E402

# role_path followed by a step up: `{{ role_path }}/..`, `role_path ~ '/..'`,
# `role_path + "/../x"`, `role_path | dirname`. playbook_dir and inventory_dir
# lead out of any role by definition.
ESCAPE = re.compile(
    r"""role_path\s*(?:\}\}|~|\+)?\s*['"]?\s*/\s*\.\."""
    r"""|role_path\s*\|\s*(?:dirname|realpath)"""
    r"""|\b(?:playbook_dir|inventory_dir)\b"""
)

# The one sanctioned look outside a role: preflight validates every layer's inputs
# against that layer's own meta/argument_specs.yml (its declared interface, which
# stays where it belongs) before the first layer changes the host.
ALLOWED_ESCAPES = {
    (
        "roles/preflight/tasks/layer_specs.yml",
        '__preflight_spec: "{{ role_path | dirname }}/{{ item }}/meta/argument_specs.yml"',
    ),
    # Every role's spec, for the control character check of every option.
    (
        "roles/preflight/tasks/control_characters.yml",
        "{%- set roles_dir = role_path | dirname -%}",
    ),
}

COPY_MODULES = {"copy": "files", "ansible.builtin.copy": "files"}
TEMPLATE_MODULES = {"template": "templates", "ansible.builtin.template": "templates"}


def role_path_escapes(root: Path) -> list[tuple[str, str]]:
    """(file relative to root, stripped line) for every line under roles/ that leaves its role."""
    found = []
    for path in sorted((root / "roles").rglob("*")):
        if not path.is_file() or path.suffix not in (".yml", ".yaml", ".j2"):
            continue
        for line in path.read_text().splitlines():
            if ESCAPE.search(line):
                found.append((str(path.relative_to(root)), line.strip()))
    return found


def _trusted(value: Any) -> Any:
    """Mark strings as templates, as Ansible does for the text of a task file."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    return value


def _variables(root: Path, role: Path, loader: DataLoader) -> dict[str, Any]:
    """Every role's defaults (the stack role's defaults/main/ too), the role's own vars and role_path: enough to name
    a source."""
    data: dict[str, Any] = {}
    paths = [
        *sorted(root.glob("roles/*/defaults/main.yml")),
        *sorted(root.glob("roles/*/defaults/main/*.yml")),
        *sorted((role / "vars").glob("*.yml")),
    ]
    for path in paths:
        data.update(loader.load_from_file(str(path), trusted_as_template=True) or {})
    # What Ansible sets while the role runs (site.yml and playbooks/*.yml sit at or under the root).
    data.update(role_path=str(role.resolve()), role_name=role.name, playbook_dir=str(root.resolve()))
    return data


def _template(loader: DataLoader, variables: dict[str, Any], value: Any) -> Any:
    """value templated, or None where it depends on what only a play on a host has (a registered result)."""
    try:
        return Templar(loader=loader, variables=variables).template(_trusted(value))
    except AnsibleError:
        return None


def copied_sources(root: Path) -> list[dict[str, Any]]:
    """What each role's copy/template tasks take from the controller, src resolved where it can be.

    Each entry: role, task file, kind (files or templates), src as written, and resolved:
    the src templated with the task's loop item, or None where it depends on what a play
    registers (a found wheel's path) and cannot be named without a host.
    """
    sources = []
    loader = DataLoader()
    for role in sorted(p for p in (root / "roles").iterdir() if (p / "tasks").is_dir()):
        variables = _variables(root, role, loader)
        for task_file in sorted((role / "tasks").glob("*.yml")):
            for task in tasks_in(yaml.safe_load(task_file.read_text())):
                for module, kind in {**COPY_MODULES, **TEMPLATE_MODULES}.items():
                    args = task.get(module)
                    if not isinstance(args, dict) or "src" not in args or args.get("remote_src"):
                        continue
                    items = _template(loader, variables, task["loop"]) if "loop" in task else [None]
                    for item in items if isinstance(items, list) else [None]:
                        resolved = _template(loader, {**variables, "item": item}, args["src"])
                        sources.append(
                            dict(
                                role=role.name,
                                task_file=str(task_file.relative_to(root)),
                                kind=kind,
                                src=args["src"],
                                resolved=resolved,
                            )
                        )
    return sources


# The directory of the stage playbooks: a role's template task that finds no file in the role
# looks in this directory's templates/ (Ansible's search path ends with the play's directory).
PLAY_DIR = "playbooks"


def misplaced_sources(root: Path) -> list[str]:
    """A src that is not its own role's file, as messages.

    A relative src must be in the role's files/ (copy) or templates/ (template), or, a
    template, in the play's templates/ (playbooks/templates/) and not in the role's too;
    an absolute one inside the project must be inside the role. An absolute path outside
    the project is a run-time path (the controller's download cache), not a project file.
    """
    problems = []
    for source in copied_sources(root):
        resolved = source["resolved"]
        if not resolved:
            continue
        role_dir = (root / "roles" / source["role"]).resolve()
        in_role = (role_dir / source["kind"] / str(resolved)).is_file()
        in_play = source["kind"] == "templates" and (root / PLAY_DIR / "templates" / str(resolved)).is_file()
        if not Path(resolved).is_absolute() and in_role and in_play:
            problems.append(
                "%s: src %r is in roles/%s/templates/ and in %s/templates/: keep one"
                % (source["task_file"], source["src"], source["role"], PLAY_DIR)
            )
            continue
        if Path(resolved).is_absolute():
            target = Path(os.path.normpath(resolved))
            if target.is_relative_to(root.resolve()) and not target.is_relative_to(role_dir):
                problems.append(
                    "%s: src %r is %s, outside roles/%s/"
                    % (source["task_file"], source["src"], target.relative_to(root.resolve()), source["role"])
                )
        elif not (in_role or in_play):
            problems.append(
                "%s: src %r is not in roles/%s/%s/%s"
                % (
                    source["task_file"],
                    source["src"],
                    source["role"],
                    source["kind"],
                    " or %s/templates/" % PLAY_DIR if source["kind"] == "templates" else "",
                )
            )
    return problems


def host_scripts_in_tools(root: Path) -> list[str]:
    """Names in tools/ that a role installs on hosts (a copied src, or a file in a role's files/)."""
    tools = {path.name for path in (root / "tools").iterdir() if path.is_file()}
    copied = {Path(s["resolved"]).name for s in copied_sources(root) if s["resolved"]}
    shipped = {path.name for path in root.glob("roles/*/files/**/*") if path.is_file()}
    return sorted(tools & (copied | shipped))


def test_no_role_reaches_outside_itself_through_role_path():
    found = set(role_path_escapes(REPO))
    assert found - ALLOWED_ESCAPES == set(), "a role reaches outside its own directory; move the file into it"
    assert ALLOWED_ESCAPES <= found, "an allowed escape is gone: drop it from ALLOWED_ESCAPES"


@pytest.mark.parametrize(
    "line",
    [
        'src: "{{ role_path }}/../../tools/model_fetch.py"',
        "src: \"{{ role_path ~ '/../../tools/x.py' }}\"",
        '__train_templates: "{{ role_path | dirname | dirname }}/templates"',
        'src: "{{ playbook_dir }}/../tools/x.py"',
    ],
)
def test_the_escape_pattern_catches_the_ways_out(line: str):
    assert ESCAPE.search(line)


@pytest.mark.parametrize("line", ['paths: ["{{ role_path }}/vars"]', "src: model_fetch.py", "# see role_path docs"])
def test_the_escape_pattern_passes_a_path_inside_the_role(line: str):
    assert not ESCAPE.search(line)


def test_every_copied_file_is_the_roles_own():
    assert misplaced_sources(REPO) == []
    resolved = {(s["role"], s["kind"], s["resolved"]) for s in copied_sources(REPO)}
    # The resolution works: the host scripts and the launcher's templates are among what it names.
    assert {
        ("data", "files", "gsm8k_to_verl.py"),
        ("model", "files", "model_fetch.py"),
        ("train", "files", "validate_overrides.py"),
        ("train", "files", "train_report.py"),
        ("train", "templates", "train.sh.j2"),
        ("train", "templates", "train.env.j2"),
    } <= resolved


def test_tools_holds_no_script_a_role_installs():
    assert host_scripts_in_tools(REPO) == []
    assert {path.name for path in (REPO / "tools").glob("*.py")} >= {"render.py", "bench.py"}


def test_the_checks_fail_on_the_former_layout(tmp_path: Path):
    # The layout before roles owned their files: the model role's fetch tool in tools/,
    # copied through role_path, and the train role's templates at the project's top, reached
    # through role_path instead of Ansible's search path.
    root = tmp_path / "project"
    (root / "tools").mkdir(parents=True)
    (root / "tools" / "model_fetch.py").write_text("")
    (root / "templates").mkdir()
    (root / "templates" / "train.sh.j2").write_text("")
    (root / "roles" / "stack" / "defaults" / "main").mkdir(parents=True)
    (root / "roles" / "stack" / "defaults" / "main" / "stack.yml").write_text("stack_work_dir: /opt/w\n")
    for role, tasks in {
        "model": [
            {"name": "x", "ansible.builtin.copy": {"src": "{{ role_path }}/../../tools/model_fetch.py", "dest": "/x"}}
        ],
        "train": [{"name": "y", "ansible.builtin.template": {"src": "{{ __t }}/train.sh.j2", "dest": "/y"}}],
        "data": [{"name": "z", "ansible.builtin.copy": {"src": "gsm8k_to_verl.py", "dest": "/z"}}],
    }.items():
        (root / "roles" / role / "tasks").mkdir(parents=True)
        (root / "roles" / role / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks))
    (root / "roles" / "train" / "vars").mkdir()
    (root / "roles" / "train" / "vars" / "main.yml").write_text(
        '__t: "{{ role_path | dirname | dirname }}/templates"\n'
    )

    assert [file for file, _ in role_path_escapes(root)] == ["roles/model/tasks/main.yml", "roles/train/vars/main.yml"]
    assert misplaced_sources(root) == [
        "roles/data/tasks/main.yml: src 'gsm8k_to_verl.py' is not in roles/data/files/",
        "roles/model/tasks/main.yml: src '{{ role_path }}/../../tools/model_fetch.py' is tools/model_fetch.py,"
        " outside roles/model/",
        "roles/train/tasks/main.yml: src '{{ __t }}/train.sh.j2' is templates/train.sh.j2, outside roles/train/",
    ]
    assert host_scripts_in_tools(root) == ["model_fetch.py"]
    # Moved into their roles, the same checks pass.
    (root / "roles" / "model" / "files").mkdir()
    (root / "tools" / "model_fetch.py").rename(root / "roles" / "model" / "files" / "model_fetch.py")
    (root / "roles" / "model" / "tasks" / "main.yml").write_text(
        yaml.safe_dump([{"name": "x", "ansible.builtin.copy": {"src": "model_fetch.py", "dest": "/x"}}])
    )
    assert host_scripts_in_tools(root) == []
    assert [file for file, _ in role_path_escapes(root)] == ["roles/train/vars/main.yml"]
    # The launcher's templates stay at the top, found through the play's templates/: a relative src
    # with no playbooks/templates is not found, with the link it is, and a second copy in the role is refused.
    (root / "roles" / "train" / "vars" / "main.yml").unlink()
    (root / "roles" / "train" / "tasks" / "main.yml").write_text(
        yaml.safe_dump([{"name": "y", "ansible.builtin.template": {"src": "train.sh.j2", "dest": "/y"}}])
    )
    train = [problem for problem in misplaced_sources(root) if problem.startswith("roles/train/")]
    assert train == [
        "roles/train/tasks/main.yml: src 'train.sh.j2' is not in roles/train/templates/ or playbooks/templates/"
    ]
    (root / "playbooks").mkdir()
    (root / "playbooks" / "templates").symlink_to("../templates")
    assert [problem for problem in misplaced_sources(root) if problem.startswith("roles/train/")] == []
    (root / "roles" / "train" / "templates").mkdir()
    (root / "roles" / "train" / "templates" / "train.sh.j2").write_text("")
    assert [problem for problem in misplaced_sources(root) if problem.startswith("roles/train/")] == [
        "roles/train/tasks/main.yml: src 'train.sh.j2' is in roles/train/templates/ and in playbooks/templates/: keep one"
    ]
