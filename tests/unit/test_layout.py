"""The project's layout: the shared values reach the plays from any inventory, every layer is wired the same way."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import run_play

from playbook import run as run_playbook
from repo import tasks_in

REPO = Path(__file__).resolve().parents[2]
# Where the plays take their run lock (each stage takes the host's).
LOCK_DIR = Path(tempfile.gettempdir()) / "verl-p40-test-layout"
PROFILES = yaml.safe_load((REPO / "roles/stack/defaults/main/gpu_profiles.yml").read_text())["stack_gpu_profiles"]
# The layer names, in build order (the graph itself: tests/unit/test_layer_graph.py).
LAYERS = [
    layer["name"]
    for layer in yaml.safe_load((REPO / "roles/stack/defaults/main/stack.yml").read_text())["stack_layers"]
]


def play(inventory: Path, stage: Path) -> subprocess.CompletedProcess:
    # Only the tasks tagged always run: each stage's lock and snapshot, the roles' argument checks, the summary.
    return run_playbook(
        inventory,
        [],
        "--tags",
        "none",
        "--skip-tags",
        "preflight",
        "-e",
        "ansible_python_interpreter=" + sys.executable,
        # The stages take the host's run lock (tagged always): not in this machine's /var/lib, and
        # one per pytest-xdist worker (make unit runs two), which would wait on each other's.
        "-e",
        "stack_lock_file=" + str(LOCK_DIR / os.environ.get("PYTEST_XDIST_WORKER", "main") / "run.lock"),
        playbook=stage,
        # Preflight is skipped, but each role's argument validation (tagged always) still runs and
        # templates the role's defaults; the train role's read the profile preflight would set.
        preflight_profile=dict(PROFILES["pascal"], name="pascal"),
    )


def test_the_shared_values_reach_every_playbook_from_any_inventory(tmp_path):
    # An inventory of the user's own, with no group_vars beside it: the shared values (stack_lock_file,
    # stack_layers, the manifests) are the stack role's role defaults, so each stage still has them.
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}})
    )
    # The user's vaulted Hugging Face token, with no vault password given: a play that builds neither
    # the model nor the data layer must not need to decrypt it (no argument check of every play may list it).
    (tmp_path / "pw").write_text("pw\n")
    vaulted = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string", "--vault-password-file"]
        + [str(tmp_path / "pw"), "hf_secret", "--name", "stack_hf_token"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "group_vars" / "all" / "vault.yml").write_text(vaulted)
    playbooks = [REPO / "site.yml", *sorted((REPO / "playbooks").glob("*.yml"))]
    assert len(playbooks) >= 5
    for playbook in playbooks:
        run = play(tmp_path / "hosts.yml", playbook)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "stack : Validating arguments" in run.stdout, playbook


def test_no_layer_role_loads_the_shared_values_twice():
    # The layer protocol's import of the stack role brings its defaults (tasks/main.yml); a dependency on
    # it as well would load the role, its defaults and its argument spec once more for every play that
    # names the layer (Ansible loads a role anew for each reference): about 0.08 s each, on every run.
    for name in LAYERS:
        meta = yaml.safe_load((REPO / "roles" / name / "meta" / "main.yml").read_text())
        assert meta.get("dependencies") == [], name


@pytest.mark.parametrize("layer", ["driver", "cuda"])
def test_a_layer_role_in_a_play_of_its_own_has_the_shared_values(tmp_path, layer):
    # A play that names only the layer's role (an inventory and play of the user's own): the role's
    # argument check templates its defaults, which read the shared values, and a task of the play reads
    # them too. Without the protocol's import of the stack role in tasks/main.yml both fail.
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}})
    )
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "name": "One layer",
                    "hosts": "all",
                    "gather_facts": False,
                    "roles": [layer],
                    "post_tasks": [
                        {
                            "name": "Read the shared values",
                            "ansible.builtin.debug": {
                                "msg": "user={{ stack_user }} layers={{ stack_layer_names | length }}"
                            },
                            "tags": ["always"],
                        }
                    ],
                }
            ]
        )
    )
    run = run_playbook(
        tmp_path / "hosts.yml",
        [],
        "--tags",
        "none",
        "-e",
        "ansible_python_interpreter=" + sys.executable,
        playbook=tmp_path / "play.yml",
        preflight_profile=dict(PROFILES["pascal"], name="pascal"),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "user=verl layers=%d" % len(LAYERS) in run.stdout, run.stdout
    assert "%s : Validating arguments" % layer in run.stdout


def test_nothing_reads_the_former_group_vars():
    # The shared values moved from group_vars/ to roles/stack: no inventory may need a group_vars link
    # again. group_vars/ holds only all.yml, the settings users change, commented out (the plays reach it
    # through playbooks/group_vars; tests/unit/test_group_vars.py).
    assert sorted(path.name for path in (REPO / "group_vars").iterdir()) == ["all.yml"]
    assert not (REPO / "inventory" / "group_vars").exists()
    for scenario in sorted((REPO / "molecule").glob("*/molecule.yml")):
        links = ((yaml.safe_load(scenario.read_text())["provisioner"].get("inventory") or {}).get("links")) or {}
        assert "group_vars" not in links, scenario


def test_every_layer_role_has_the_standard_files():
    # What the protocol asks of a layer (its vars, tasks/build.yml) is checked with the graph
    # (tests/unit/test_layer_graph.py); these are what every role has besides.
    built = [name for name in LAYERS if (REPO / "roles" / name).is_dir()]
    assert built == LAYERS
    for name in built:
        role = REPO / "roles" / name
        for part in (
            "defaults/main.yml",
            "meta/argument_specs.yml",
            "meta/main.yml",
            "tasks/main.yml",
            "vars/main.yml",
        ):
            assert (role / part).is_file(), "%s lacks %s" % (name, part)
        assert (REPO / "tests" / "infra" / ("test_%s.py" % name)).is_file(), "no testinfra module for " + name


def test_every_layer_role_answers_to_the_verify_tag():
    """--tags verify must reach every layer's role (its layer_state query reads the request)."""
    layers = set(LAYERS) - {"preflight"}
    tagged = {}
    for playbook in sorted((REPO / "playbooks").glob("*.yml")):
        for play_ in yaml.safe_load(playbook.read_text()):
            for role in play_.get("roles") or []:
                tagged[role["role"]] = role.get("tags") or []
    # The setup stage's layers are included by the stages' shared setup; their tasks get the tags `apply` gives.
    for task in tasks_in(yaml.safe_load((REPO / "playbooks" / "tasks" / "setup.yml").read_text())):
        include = task.get("ansible.builtin.include_role")
        if include and include["name"] != "preflight":
            tagged[include["name"]] = (include.get("apply") or {}).get("tags") or []
    assert layers <= set(tagged), "a layer without a role in the stage playbooks: %s" % sorted(layers - set(tagged))
    assert [name for name in sorted(layers) if "verify" not in tagged[name]] == []


def verify_request(tmp_path: Path, *args: str) -> str:
    """What `verify` every layer_state call gets (stack_layer_args) with these command-line options."""
    task = {"debug": {"msg": "verify=[{{ stack_layer_args.verify }}]"}, "tags": ["always"]}
    stack_vars = str(REPO / "roles/stack/defaults/main/stack.yml")
    done = run_play(tmp_path, [task], *args, callback="default", vars_files=[stack_vars])
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split("verify=[", 1)[1].split("]", 1)[0]


def test_the_verify_tag_is_a_verify_request(tmp_path):
    assert verify_request(tmp_path) == ""
    assert verify_request(tmp_path, "--tags", "verify") == "all"
    assert verify_request(tmp_path, "--tags", "verify,torch,apex") == "torch,apex"
    # A tag alone converges that layer; it asks for no check.
    assert verify_request(tmp_path, "--tags", "cuda") == ""
    # -e verify=... still wins.
    assert verify_request(tmp_path, "--tags", "verify", "-e", "verify=cuda") == "cuda"


def test_molecule_gets_every_plugin_path_of_ansible_cfg():
    """Molecule runs ansible-playbook with its own ansible.cfg: each plugin path of the project's
    must reach it as ANSIBLE_<KEY>, or a scenario whose playbook is not beside the plugins (bullseye
    imports playbooks/system.yml) runs without them (stack_wait would run as its documentation stub)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    paths = {k: v for k, v in cfg["defaults"].items() if k == "library" or k.endswith(("_plugins", "_path", "_utils"))}
    assert {"library", "action_plugins", "filter_plugins", "lookup_plugins"} <= set(paths)
    env = yaml.safe_load((REPO / ".config/molecule/config.yml").read_text())["provisioner"]["env"]
    missing = [
        key
        for key, value in paths.items()
        if env.get("ANSIBLE_" + key.upper()) != "${MOLECULE_PROJECT_DIRECTORY}/" + value
    ]
    assert missing == []
