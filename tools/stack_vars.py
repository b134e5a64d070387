"""The variables a play of the stack gets for one host, without the play: role defaults plus what
overrides them, templated by Ansible's own Templar on demand.

One order, lowest first (each layer's values replace the ones before). It is Ansible's but for one
simplification: Ansible puts the group vars written in an inventory file below the play's
group_vars/all and only its host vars above; here all of the inventory's vars come after it (no key
of the project's group_vars/all is set in an inventory today):

1. the roles' defaults (role_defaults: defaults/main.yml, or the files of defaults/main/);
2. the play's group_vars for all hosts (group_vars/all.yml, read by Ansible's vars plugins from
   the play's directory, playbooks/, as a play of playbooks/*.yml gets it);
3. the inventory's vars for the host, its groups and the other hosts' vars (inventory_hostname,
   groups, hostvars), by Ansible's InventoryManager and VariableManager; a host in no inventory
   is alone (groups: all of it);
4. vars files (-e @FILE);
5. extra vars (-e key=value), highest.

A fact a play sets in between (preflight_profile, by use_profile) goes under the vars files and
extra vars, as set_fact does: -e still wins.

    variables = PlayVars(role_defaults("stack", "train"), extra_vars={"train_total_epochs": 3})
    variables.use_profile("pascal")
    variables["train_profile"]

tools/render.py (the training play's roles, extra vars from its command line) and
tests/infra/conftest.py (every role, the inventory's host, STACK_VARS_FILES) both build theirs
here. Importable by its name from tools/ (pytest.ini's pythonpath, or render.py's own directory).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ansible.inventory.group import Group
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.vars.manager import VariableManager
from ansible.vars.plugins import get_vars_from_path

REPO = Path(__file__).resolve().parents[1]
# The directory of the stack's plays (playbooks/*.yml): Ansible loads its group_vars/ (a link to the
# project's top-level group_vars/, beside site.yml).
PLAY_DIR = REPO / "playbooks"
# What the inventory's VariableManager returns that is no host's own value, besides the ansible_
# ones (connection settings, magic variables): the magic variables this module sets itself.
_NOT_OWN = ("inventory_hostname", "groups", "group_names", "omit")


def role_defaults(*roles: str, root: Path = REPO) -> list[Path]:
    """The defaults files of the named roles, in that order (every role, by name, when none is named):
    each role's defaults/main.yml, or the files of its defaults/main/ in name order (the stack role)."""
    names = roles or sorted(path.name for path in (root / "roles").iterdir() if (path / "defaults").is_dir())
    files: list[Path] = []
    for name in names:
        defaults = root / "roles" / name / "defaults"
        files += [defaults / "main.yml"] if (defaults / "main.yml").is_file() else sorted(defaults.glob("main/*.yml"))
    return files


def trusted(value: Any) -> Any:
    """Mark strings as templates, as Ansible does for -e values."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(item) for item in value]
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    return value


def play_group_vars(loader: DataLoader, play_dir: Path = PLAY_DIR) -> dict[str, Any]:
    """The group_vars of group all beside the play (group_vars/all.yml), by Ansible's vars plugins."""
    return get_vars_from_path(loader, str(play_dir), [Group("all")], "task")


def inventory_vars(loader: DataLoader, inventory: str | None, hostname: str) -> dict[str, Any]:
    """The host's place in the inventory and its vars (host and group vars, the inventory's own
    group_vars/ and host_vars/): inventory_hostname, groups (the Ray cluster's values read them),
    hostvars (every host's own vars) and the host's own vars. A host not in the inventory, or no
    inventory, is alone: groups {all: [host]}, hostvars {}."""
    found: dict[str, Any] = {"inventory_hostname": hostname, "groups": {"all": [hostname]}, "hostvars": {}}
    if inventory is None:
        return found
    manager = InventoryManager(loader, sources=[inventory])
    if manager.get_host(hostname) is None:
        return found
    variables = VariableManager(loader=loader, inventory=manager)

    def own(name: str) -> dict[str, Any]:
        values = variables.get_vars(host=manager.get_host(name), include_hostvars=False)
        return {k: v for k, v in values.items() if not k.startswith("ansible_") and k not in _NOT_OWN}

    found.update(own(hostname))
    found["groups"] = manager.get_groups_dict()
    found["hostvars"] = {name: own(name) for name in manager.hosts}
    return found


class PlayVars:
    """Ansible variables of one host as a play gets them (the module's order), templated on demand.

    data holds them untemplated (strings marked as templates, as Ansible loads them), extra what the
    vars files and extra vars set, templar templates against data (a change to data shows)."""

    def __init__(
        self,
        defaults_files: Iterable[Path],
        *,
        play_dir: Path | None = PLAY_DIR,
        inventory: str | None = None,
        hostname: str = "localhost",
        vars_files: Iterable[Path] = (),
        extra_vars: dict[str, Any] | None = None,
    ) -> None:
        self.loader = DataLoader()
        data: dict[str, Any] = {}
        # 1. Role defaults.
        for path in defaults_files:
            data.update(self.load(path))
        # 2. The play's group_vars/all.
        if play_dir is not None:
            data.update(play_group_vars(self.loader, play_dir))
        # 3. The inventory's host and group vars.
        data.update(inventory_vars(self.loader, inventory, hostname))
        # 4. Vars files, then 5. extra vars: what -e sets.
        self.extra: dict[str, Any] = {}
        for path in vars_files:
            self.extra.update(self.load(path))
        self.extra.update(trusted(extra_vars or {}))
        data.update(self.extra)
        self.data = data
        self.templar = Templar(loader=self.loader, variables=data)

    def load(self, path: Path) -> dict[str, Any]:
        """A YAML file of variables, as Ansible loads one (its strings templates)."""
        return self.loader.load_from_file(str(path), trusted_as_template=True) or {}

    def set_fact(self, name: str, value: Any) -> None:
        """What a play's set_fact sets: over everything but the vars files and extra vars."""
        if name not in self.extra:
            self.data[name] = value

    def use_profile(self, name: str) -> None:
        """preflight_profile as preflight sets it on a host (roles/preflight/tasks/profile.yml): the
        profile of that name in stack_gpu_profiles, templated, with its name; for the defaults that
        read it (train_profile, patch_fixes, vllm_enabled)."""
        if "preflight_profile" not in self.extra:
            self.set_fact("preflight_profile", dict(self["stack_gpu_profiles"][name], name=name))

    def template(self, value: Any, **options: Any) -> Any:
        """value templated against these variables (options: Templar.template's); only strings marked as
        templates (trusted, or loaded by load) are, as in Ansible."""
        return self.templar.template(value, **options)

    def __getitem__(self, name: str) -> Any:
        """The variable (or expression) name, templated."""
        return self.templar.template(trust_as_template("{{ %s }}" % name))
