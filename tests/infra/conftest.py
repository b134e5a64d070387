"""Shared fixtures of the testinfra modules: the variables a layer was built from.

The expected values come from the same variables the roles use, in Ansible's order
(tools/stack_vars.py, which tools/render.py shares): every role's defaults (the stack role's
shared values among them), the plays' group_vars/all.yml, the inventory's vars for the host
(when it is in STACK_INVENTORY, default inventory/hosts.yml), and the extra-vars files in
STACK_VARS_FILES (comma-separated, the files a Molecule scenario passes with -e @FILE),
templated by Ansible itself. stack_vars is importable here by pytest.ini's pythonpath (tools/),
which Molecule's verify gets too: its pytest finds the project's pytest.ini above tests/infra.

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
from ansible.plugins.loader import init_plugin_loader

from stack import stack_artifact
from stack_vars import PlayVars, role_defaults

REPO = Path(__file__).resolve().parents[2]
# Lookups and filters used in the variables need Ansible's plugin loader.
init_plugin_loader()


class StackVars(PlayVars):
    """Ansible variables of one host, templated on demand (stack_vars.PlayVars): every role's defaults,
    the plays' group_vars/all, the host's inventory vars (STACK_INVENTORY), STACK_VARS_FILES.
    use_profile sets preflight_profile as preflight set it on the host, for the defaults that read it."""

    def __init__(self, hostname: str) -> None:
        super().__init__(
            role_defaults(),
            inventory=os.environ.get("STACK_INVENTORY", str(REPO / "inventory" / "hosts.yml")),
            hostname=hostname,
            vars_files=[
                Path(extra.strip()) for extra in filter(None, os.environ.get("STACK_VARS_FILES", "").split(","))
            ],
        )

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


class TrainingUser:
    """Runs commands on the host as the training user (stack_user), with that user's rights only.

    Miniforge, the env, the verl checkout and the work directory (train.sh, the tools, the model
    and data) are that user's to change, so root never executes, sources or reads them
    (docs/security.md, "The rule"): every test that runs the env's python, pip or any binary in
    the env, Miniforge's conda, train.sh or a script of the work directory or the checkout, or
    reads a file's content there, does it through this fixture. Root running them on a real
    host (pytest --hosts=ssh://p40-01 as root) runs code that user can change; and root's
    Python writes root-owned __pycache__ into the user's checkout and env, which that user then
    cannot remove: a later verl rebuild (which moves the old checkout aside as the user) fails
    with "Permission denied". Root's own files (the records in /var/lib/verl-p40, the caches,
    CUDA) are read as root, as before.

    The command runs through runuser (util-linux, on every Debian and Ubuntu host) as root, with
    the user's HOME, USER and LOGNAME. Not testinfra's host.sudo: sudo prints "unable to resolve
    host NAME" on stderr wherever the hostname is not in /etc/hosts (a Molecule container on the
    host's network), and the tests read stderr (pip check's). Root runs the tests on every backend
    (podman, SSH as root, an ansible backend with become), so runuser needs no password.
    """

    def __init__(self, host, name: str) -> None:
        self.host = host
        self.name = name
        self.home = host.user(name).home

    def _wrap(self, command: str, *args: str) -> tuple:
        inner = self.host.backend.quote(command, *args)
        return (
            "runuser -u %s -- env HOME=%s USER=%s LOGNAME=%s /bin/sh -c %s",
            self.name,
            self.home,
            self.name,
            self.name,
            inner,
        )

    def run(self, command: str, *args: str):
        """host.run as the training user: a CommandResult (rc, stdout, stderr)."""
        return self.host.run(*self._wrap(command, *args))

    def check_output(self, command: str, *args: str) -> str:
        """host.check_output as the training user: stdout without its last newline; fails unless exit 0."""
        return self.host.check_output(*self._wrap(command, *args))

    def read(self, path: str) -> str:
        """The content of a file in the user's trees, read with that user's rights."""
        result = self.run("cat -- %s", path)
        assert result.rc == 0, "%s as %s: exit %s, %s" % (path, self.name, result.rc, result.stderr)
        return result.stdout


@pytest.fixture(scope="module")
def training_user(host, stack) -> TrainingUser:
    return TrainingUser(host, stack["stack_user"])


# The training user's trees: Miniforge, the env, the work directory and what the layers put in it
# (each configurable, so each is named). Nothing in them is root's: the roles write there as that
# user, and root's claims, records and caches live in /var/lib/verl-p40 and /var/cache/verl-p40.
USER_TREES = (
    "stack_conda_prefix",
    "stack_env_prefix",
    "stack_work_dir",
    "stack_verl_dir",
    "apex_src_dir",
    "model_dir",
    "data_output_dir",
    "train_work_dir",
    "train_tools_dir",
    "train_log_dir",
    "train_checkpoint_dir",
)

# Per host: what root owns in those trees as last seen, and what has been reported already.
_root_owned_seen: dict[str, set[str]] = {}
_root_owned_reported: dict[str, set[str]] = {}


def root_owned_in_the_users_trees(host, stack) -> set[str]:
    """Every path root owns in the training user's trees that exist on the host (find -xdev -user root)."""
    trees = sorted({stack[name] for name in USER_TREES})
    script = 'set -e; for tree; do if [ -e "$tree" ]; then find "$tree" -xdev -user root -print; fi; done'
    result = host.run("sh -c %s sh" + " %s" * len(trees), script, *trees)
    assert result.rc == 0, "find -user root in %s: exit %s, %s" % (trees, result.rc, result.stderr)
    return set(result.stdout.splitlines())


@pytest.fixture(scope="module", autouse=True)
def _root_leaves_nothing_in_the_users_trees(request, host, stack):
    """After each module: root owns nothing in the training user's trees (Miniforge, the env,
    the work directory, the verl checkout, the model, data, launcher and log directories).

    Broken case: a test (or a role) that runs the env's python as root, as these modules did
    (`<env>/bin/python -c 'import verl'`, `pip check`, validate_overrides.py): Python writes
    root-owned __pycache__ directories into the checkout and the env, which the training user
    cannot remove, so a later verl rebuild, which moves the old checkout aside as that user,
    fails with "mv: cannot remove .../__pycache__/...pyc: Permission denied". Each path is
    reported once, at the teardown of the module after which it was first seen, saying whether
    it was there before that module ran (the converge, or an earlier run of these tests as root)
    or appeared while it ran (its tests as root, or a play one of them ran).
    """
    name = host.backend.get_hostname()
    if name not in _root_owned_seen:
        _root_owned_seen[name] = root_owned_in_the_users_trees(host, stack)
    before = _root_owned_seen[name]
    yield
    after = root_owned_in_the_users_trees(host, stack)
    _root_owned_seen[name] = after
    reported = _root_owned_reported.setdefault(name, set())
    new = after - reported
    reported |= after
    if new:
        module = request.module.__name__.rsplit(".", 1)[-1] + ".py"
        said = []
        for title, paths in (
            (
                "already there before %s ran (the converge, or an earlier run of these tests as root)" % module,
                new & before,
            ),
            ("left while %s ran (a test of it ran something as root, or a play it ran did)" % module, new - before),
        ):
            if paths:
                listed = sorted(paths)
                more = " and %d more" % (len(listed) - 20) if len(listed) > 20 else ""
                said.append("%s:\n  %s%s" % (title, "\n  ".join(listed[:20]), more))
        pytest.fail(
            "root owns %d path(s) in %s's trees, which that user cannot remove (a verl rebuild then fails);"
            " run what is in them as the training user (the training_user fixture):\n%s"
            % (len(new), stack["stack_user"], "\n".join(said)),
            pytrace=False,
        )
