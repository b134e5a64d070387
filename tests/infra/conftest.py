"""Shared fixtures of the testinfra modules: the variables a layer was built from.

The expected values come from the same variables the roles use: every role's defaults
(the stack role's shared values among them), the inventory's vars for the host (when it is in STACK_INVENTORY, default
inventory/hosts.yml), and the extra-vars files in STACK_VARS_FILES (comma-separated, the
files a Molecule scenario passes with -e @FILE), templated by Ansible itself.

    VERL_P40_SCENARIO=default pytest --hosts=podman://NAME tests/infra
    VERL_P40_SCENARIO=p40 STACK_VARS_FILES=my-vars.yml pytest --hosts=ssh://p40-01 tests/infra

VERL_P40_SCENARIO names the skip budget of the run (tests/conftest.py, SKIP_BUDGET).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from ansible.vars.manager import VariableManager

ROOT = Path(__file__).resolve().parents[2]
# Lookups and filters used in the variables need Ansible's plugin loader.
init_plugin_loader()

import sys  # noqa: E402

sys.path.insert(0, str(ROOT / "filter_plugins"))
from stack import stack_artifact  # noqa: E402


class StackVars:
    """Ansible variables of one host, templated on demand."""

    def __init__(self, hostname: str) -> None:
        self.loader = DataLoader()
        data: dict[str, Any] = {}
        # Every role's defaults: defaults/main.yml, or the files of defaults/main/ (stack).
        for defaults in sorted([*ROOT.glob("roles/*/defaults/main.yml"), *ROOT.glob("roles/*/defaults/main/*.yml")]):
            data.update(self._load(defaults))
        inventory = os.environ.get("STACK_INVENTORY", str(ROOT / "inventory" / "hosts.yml"))
        manager = InventoryManager(self.loader, sources=[inventory])
        # The host's place in the inventory (the Ray cluster's values read it); alone when it is not there.
        data.update(inventory_hostname=hostname, groups={"all": [hostname]}, hostvars={})
        if manager.get_host(hostname) is not None:
            variables = VariableManager(loader=self.loader, inventory=manager)

            def own(name: str) -> dict[str, Any]:
                found = variables.get_vars(host=manager.get_host(name), include_hostvars=False)
                return {
                    k: v
                    for k, v in found.items()
                    if not k.startswith("ansible_") and k not in ("inventory_hostname", "groups", "group_names", "omit")
                }

            data.update(own(hostname))
            data["groups"] = manager.get_groups_dict()
            data["hostvars"] = {name: own(name) for name in manager.hosts}
        for extra in filter(None, os.environ.get("STACK_VARS_FILES", "").split(",")):
            data.update(self._load(Path(extra.strip())))
        self.data = data
        self.templar = Templar(loader=self.loader, variables=data)

    def use_profile(self, name: str) -> None:
        """Set preflight_profile as preflight set it on the host, for the defaults that read it."""
        self.data["preflight_profile"] = dict(self["stack_gpu_profiles"][name], name=name)
        self.templar = Templar(loader=self.loader, variables=self.data)

    def _load(self, path: Path) -> dict[str, Any]:
        return self.loader.load_from_file(str(path), trusted_as_template=True) or {}

    def __getitem__(self, name: str) -> Any:
        return self.templar.template(trust_as_template("{{ %s }}" % name))

    def artifact(self, key: str) -> dict[str, Any]:
        return stack_artifact(self["stack_artifacts"], key, self["stack_artifact_overrides"], self["stack_mirror_url"])


@pytest.fixture(scope="module")
def stack(host) -> StackVars:
    variables = StackVars(host.backend.get_hostname())
    # The few facts the variables read (e.g. a version chosen per release).
    release = host.system_info.release or ""
    variables.data["ansible_facts"] = {
        "distribution": (host.system_info.distribution or "").capitalize(),
        "distribution_major_version": release.split(".")[0],
    }
    preflight = host.file(variables["stack_state_dir"] + "/preflight.json")
    if preflight.exists:
        variables.use_profile(json.loads(preflight.content_string)["inputs"]["profile"])
    return variables


@pytest.fixture(scope="module")
def layer_state(host, stack):
    """Read the state file of a layer on the host."""

    def read(name: str) -> dict[str, Any]:
        path = "%s/%s.json" % (stack["stack_state_dir"], name)
        state_file = host.file(path)
        assert state_file.exists, "%s is missing: the %s layer never completed" % (path, name)
        return json.loads(state_file.content_string)

    return read
