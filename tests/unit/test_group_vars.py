"""group_vars/all.yml, the one file a user edits, and templates/, the launcher's: no second home for a value or a file.

Each key in group_vars/all.yml, commented out or set, is an option of some role's
meta/argument_specs.yml. A line commented out shows that option's role default, so the file
never tells a user a stale default; a line set uncommented differs from it, since a repeated
default would be a second home for the value. The checks are plain functions of a project root,
shown below to fail on small broken projects.

Ansible finds both top-level directories beside the plays, as it does on its own: a play's
group_vars and templates/ are its playbook file's directory's, and the stage playbooks are in
playbooks/ (site.yml only imports them), so playbooks/group_vars and playbooks/templates are
links to the top. A real run of site.yml shows the file overriding a role default, and -e
overriding the file; Ansible's own search path shows the train role's template tasks reaching
templates/.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import yaml
from conftest import REPO

os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))

from ansible.parsing.dataloader import DataLoader  # noqa: E402

import render  # noqa: E402
from playbook import run as run_playbook  # noqa: E402

GROUP_VARS = Path("group_vars") / "all.yml"
# A setting shown commented out: `# name: value` at the start of a line. Prose comments never
# begin with a lower-case name and a colon.
COMMENTED = re.compile(r"^#\s?([a-z_][a-z0-9_]*):(?:\s|$)")
SET = re.compile(r"^([A-Za-z_]\w*):(?:\s|$)")
PROFILES = yaml.safe_load((REPO / "roles/stack/defaults/main/gpu_profiles.yml").read_text())["stack_gpu_profiles"]


def role_options(root: Path) -> set[str]:
    """Every option of every entry point of every role's meta/argument_specs.yml."""
    names: set[str] = set()
    for spec in sorted(root.glob("roles/*/meta/argument_specs.yml")):
        for entry in (yaml.safe_load(spec.read_text()).get("argument_specs") or {}).values():
            names |= set((entry or {}).get("options") or {})
    return names


def role_defaults(root: Path) -> dict[str, tuple[str, Any]]:
    """name -> (the defaults file that holds it, relative to root; its value, untemplated)."""
    found: dict[str, tuple[str, Any]] = {}
    for path in [*sorted(root.glob("roles/*/defaults/main.yml")), *sorted(root.glob("roles/*/defaults/main/*.yml"))]:
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            found.setdefault(name, (str(path.relative_to(root)), value))
    return found


def shown_settings(text: str) -> dict[str, Any]:
    """The settings shown commented out: name -> the value the line shows."""
    shown = {}
    for line in text.splitlines():
        match = COMMENTED.match(line)
        if match:
            shown[match.group(1)] = (yaml.safe_load(line.lstrip("#")) or {}).get(match.group(1))
    return shown


def set_settings(text: str) -> dict[str, Any]:
    """The settings set uncommented, as Ansible reads them (a vaulted value included)."""
    return DataLoader().load(text) or {}


def paragraphs(text: str) -> Iterator[list[str]]:
    lines: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.strip():
            lines.append(line)
        elif lines:
            yield lines
            lines = []


def group_vars_problems(root: Path) -> list[str]:
    """What in root's group_vars/all.yml is no role option, a stale or repeated default, or uncommented."""
    path = root / GROUP_VARS
    if not path.is_file():
        return ["%s is missing" % GROUP_VARS]
    text = path.read_text()
    options, defaults = role_options(root), role_defaults(root)
    shown, given = shown_settings(text), set_settings(text)
    problems = []
    for name, value in shown.items():
        if name not in options:
            problems.append("%s: %s is no role's option (roles/*/meta/argument_specs.yml)" % (GROUP_VARS, name))
        elif name not in defaults:
            problems.append("%s: %s is shown with a default, but no role has one" % (GROUP_VARS, name))
        elif value != defaults[name][1]:
            problems.append(
                "%s: %s is shown as %r, but its default (%s) is %r"
                % (GROUP_VARS, name, value, defaults[name][0], defaults[name][1])
            )
    for name, value in given.items():
        if name not in options:
            if name not in shown:
                problems.append("%s: %s is no role's option (roles/*/meta/argument_specs.yml)" % (GROUP_VARS, name))
        elif name in defaults and value == defaults[name][1]:
            problems.append(
                "%s: %s is set to its role default (%s); comment it out: the role holds the value"
                % (GROUP_VARS, name, defaults[name][0])
            )
    for lines in paragraphs(text):
        names = [m.group(1) for m in (COMMENTED.match(line) or SET.match(line) for line in lines) if m]
        prose = [line for line in lines if line.startswith("#") and not COMMENTED.match(line)]
        if names and not prose:
            problems.append("%s: %s has no comment saying what it is" % (GROUP_VARS, ", ".join(names)))
    return problems


def test_every_setting_is_a_role_option_shown_with_its_default():
    assert group_vars_problems(REPO) == []
    text = (REPO / GROUP_VARS).read_text()
    # The settings people change are there (shown, or set by a user): user, paths, mirrors, the token
    # file, GPUs, model, training sizes.
    assert {
        "stack_user",
        "stack_work_dir",
        "stack_mirror_url",
        "stack_pip_index_url",
        "stack_hf_token_file",
        "train_gpus",
        "model_name",
        "train_batch_size",
    } <= set(shown_settings(text)) | set(set_settings(text))


def _project(tmp_path: Path, group_vars: str) -> Path:
    root = tmp_path / "project"
    (root / "roles" / "train" / "meta").mkdir(parents=True)
    (root / "roles" / "train" / "defaults").mkdir()
    (root / "roles" / "train" / "meta" / "argument_specs.yml").write_text(
        yaml.safe_dump(
            {
                "argument_specs": {
                    "main": {
                        "options": {
                            "train_batch_size": {"type": "int", "default": 64},
                            "train_gpus": {"type": "list", "default": []},
                        }
                    }
                }
            }
        )
    )
    (root / "roles" / "train" / "defaults" / "main.yml").write_text("---\ntrain_batch_size: 64\ntrain_gpus: []\n")
    (root / "group_vars").mkdir()
    (root / GROUP_VARS).write_text(group_vars)
    return root


def test_the_checks_fail_on_a_broken_file(tmp_path: Path):
    good = "---\n# Prompts per step.\n# train_batch_size: 64\n\n# The GPUs.\n# train_gpus: []\n"
    assert group_vars_problems(_project(tmp_path / "good", good)) == []
    # Overrides that differ from the default are the file's purpose.
    assert group_vars_problems(_project(tmp_path / "set", good + "train_batch_size: 32\n")) == []

    # A key no role documents, commented out or set.
    broken = good + "\n# A typo.\n# train_batchsize: 64\n\n# Another.\nstack_usr: me\n"
    assert group_vars_problems(_project(tmp_path / "unknown", broken)) == [
        "group_vars/all.yml: train_batchsize is no role's option (roles/*/meta/argument_specs.yml)",
        "group_vars/all.yml: stack_usr is no role's option (roles/*/meta/argument_specs.yml)",
    ]
    # A default repeated uncommented: a second home for the value.
    repeated = good.replace("# train_batch_size: 64", "train_batch_size: 64")
    assert group_vars_problems(_project(tmp_path / "repeated", repeated)) == [
        "group_vars/all.yml: train_batch_size is set to its role default (roles/train/defaults/main.yml);"
        " comment it out: the role holds the value"
    ]
    # A default shown stale.
    stale = good.replace("# train_batch_size: 64", "# train_batch_size: 128")
    assert group_vars_problems(_project(tmp_path / "stale", stale)) == [
        "group_vars/all.yml: train_batch_size is shown as 128, but its default (roles/train/defaults/main.yml) is 64"
    ]
    # A setting with no word of what it is.
    bare = good.replace("# The GPUs.\n", "")
    assert group_vars_problems(_project(tmp_path / "bare", bare)) == [
        "group_vars/all.yml: train_gpus has no comment saying what it is"
    ]
    assert group_vars_problems(tmp_path / "none") == ["group_vars/all.yml is missing"]


def test_the_plays_directory_links_to_group_vars_and_templates():
    # Relative links, so a clone anywhere works; nothing else of the kind is in playbooks/.
    for name in ("group_vars", "templates"):
        link = REPO / "playbooks" / name
        assert link.is_symlink() and os.readlink(link) == "../" + name, link
        assert link.resolve() == (REPO / name).resolve()
    # One copy of each template: the train role holds none.
    assert sorted(path.name for path in (REPO / "templates").iterdir()) == ["train.env.j2", "train.sh.j2"]
    assert not (REPO / "roles" / "train" / "templates").exists()


def _tasks(items: list) -> Iterator[Any]:
    for item in items:
        if hasattr(item, "block"):
            yield from _tasks(item.block + item.rescue + item.always)
        else:
            yield item


def test_the_train_roles_template_tasks_find_the_top_level_templates():
    # site.yml as Ansible loads it, each play's base directory set as ansible-playbook sets it
    # (PlaybookExecutor: an imported play's own directory), and each task's own search path.
    from ansible.inventory.manager import InventoryManager
    from ansible.playbook import Playbook
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig
    from ansible.vars.manager import VariableManager

    # What ansible-playbook sets up before it loads a playbook (the collection finder), once per process.
    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader()
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources="localhost,")
    book = Playbook.load(str(REPO / "site.yml"), variable_manager=VariableManager(loader, inventory), loader=loader)
    found = {}
    for play in book.get_plays():
        loader.set_basedir(play._included_path if play._included_path is not None else book._basedir)
        for block in play.compile():
            for task in _tasks([block]):
                role = task._role.get_name() if task._role else None
                if role == "train" and task.name == "Train | Render the launcher on the controller":
                    for src, _ in render.TEMPLATES.values():
                        found[src] = loader.path_dwim_relative_stack(task.get_search_path(), "templates", src)
    assert set(found) == {"train.sh.j2", "train.env.j2"}
    for src, path in found.items():
        assert Path(path).resolve() == (REPO / "templates" / src).resolve()
        # render.py finds the very file the role renders.
        assert render.template_source(src) == Path(path)


def test_render_applies_group_vars_between_role_defaults_and_extra_vars(tmp_path: Path):
    play_dir = tmp_path / "playbooks"
    (play_dir / "group_vars").mkdir(parents=True)
    (play_dir / "group_vars" / "all.yml").write_text("---\ntrain_batch_size: 32\ntrain_total_epochs: 3\n")
    loader = DataLoader()
    assert render.play_group_vars(loader, play_dir) == {"train_batch_size": 32, "train_total_epochs": 3}
    # The project's own file sets nothing.
    assert render.play_group_vars(loader) == {}


def _play(root: Path, inventory: Path, *args: str) -> subprocess.CompletedProcess:
    """site.yml of root, only the tasks tagged always (each stage's lock and snapshot, the roles' argument
    checks, the summary), as tests/unit/test_layout.py runs it."""
    command = ["--tags", "none", "--skip-tags", "preflight", "-e", "ansible_python_interpreter=" + sys.executable]
    return run_playbook(
        inventory, [], *command, *args, root=root, preflight_profile=dict(PROFILES["pascal"], name="pascal")
    )


def test_site_yml_takes_group_vars_over_role_defaults_and_e_over_group_vars(tmp_path: Path):
    # The project with a group_vars/all.yml of its own: site.yml, playbooks/ (its links too) and
    # ansible.cfg copied, the rest linked.
    root = tmp_path / "project"
    root.mkdir()
    for name in ("roles", "library", "action_plugins", "module_utils", "filter_plugins", "lookup_plugins", "templates"):
        (root / name).symlink_to(REPO / name)
    for name in ("ansible.cfg", "site.yml"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "playbooks", root / "playbooks", symlinks=True)
    lock = tmp_path / "from-group-vars" / "run.lock"
    (root / "group_vars").mkdir()
    (root / GROUP_VARS).write_text(
        (REPO / GROUP_VARS).read_text()
        + "\n# Set by the test: the run lock's place, and a port the stack role's spec refuses.\n"
        + "stack_lock_file: %s\nstack_ray_port: not-a-port\n" % lock
    )
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}))

    # The file's port reaches the stack role in site.yml's first play, over the role default 6379.
    run = _play(root, inventory, "-e", "stack_lock_file=%s" % (tmp_path / "from-e" / "run.lock"))
    assert run.returncode != 0
    assert "stack_ray_port" in run.stdout + run.stderr, run.stdout + run.stderr
    # -e beats the file; the file's lock path, over the role default, is where every stage took the lock.
    run = _play(root, inventory, "-e", "stack_ray_port=6379")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "stack : Validating arguments" in run.stdout
    assert lock.parent.is_dir()
