"""Shared fixtures for the unit tests.

- module_utils/ is made importable as ansible.module_utils.<name>, the way
  Ansible ships it to a module, so library/ modules import unchanged (the
  other code under test is importable by its name through pytest.ini's
  pythonpath).
- Real verl source distributions are fetched once with pip into a cache
  (env VERL_P40_CACHE, else <repo>/.cache/sdist, which git ignores) and
  unpacked once per session; tests that modify a tree get their own copy.
  To run offline, put verl-<version>.tar.gz into that cache beforehand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from playbook import command as playbook_command
from repo import use_module_utils

REPO = Path(__file__).resolve().parents[2]

use_module_utils()


def sdist_cache() -> Path:
    return Path(os.environ.get("VERL_P40_CACHE") or REPO / ".cache" / "sdist")


def fetch_verl_sdist(version: str) -> Path:
    """The verl-<version>.tar.gz source distribution, downloaded on first use."""
    cache = sdist_cache()
    archive = cache / ("verl-%s.tar.gz" % version)
    if archive.is_file():
        return archive
    cache.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--no-binary",
        ":all:",
        "verl==%s" % version,
        "--dest",
        str(cache),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not archive.is_file():
        pytest.fail(
            "Could not download the verl %s sdist (%s). Put verl-%s.tar.gz into %s "
            "(or set VERL_P40_CACHE to a directory holding it) and rerun.\n%s"
            % (version, " ".join(command), version, cache, done.stderr[-2000:])
        )
    return archive


def unpack(archive: Path, into: Path) -> Path:
    """Unpack an sdist and return its top directory (verl-<version>/)."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)
    (top,) = [path for path in into.iterdir() if path.is_dir()]
    return top


@pytest.fixture(scope="session")
def verl_041_pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An unpacked verl 0.4.1 tree shared by the session: read it, never write to it."""
    return unpack(fetch_verl_sdist("0.4.1"), tmp_path_factory.mktemp("verl-0.4.1-pristine"))


@pytest.fixture
def verl_041(verl_041_pristine: Path, tmp_path: Path) -> Path:
    """A private, writable copy of the verl 0.4.1 tree (its root, holding verl/)."""
    return Path(shutil.copytree(verl_041_pristine, tmp_path / verl_041_pristine.name, symlinks=True))


@pytest.fixture
def verl_091(tmp_path: Path) -> Path:
    """A writable verl 0.9.1 tree: a release the patch catalog does not know."""
    return unpack(fetch_verl_sdist("0.9.1"), tmp_path / "verl-0.9.1-tree")


# -- the launcher, rendered by tools/render.py ---------------------------------


def gpu_profile_names() -> list[str]:
    """The profiles in roles/stack/defaults/main/gpu_profiles.yml, for parametrizing tests."""
    import yaml

    data = yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "gpu_profiles.yml").read_text())
    return list(data["stack_gpu_profiles"])


@pytest.fixture(scope="session")
def rendered_launchers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """train.sh and train.env of every GPU profile with the train role's defaults: name -> directory."""
    import render

    root = tmp_path_factory.mktemp("launchers")
    return {name: render.render(name, root / name)["train.sh"].parent for name in gpu_profile_names()}


# -- a play on localhost, with the project's ansible.cfg ------------------------


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment of an Ansible run on localhost: the project's ansible.cfg, no localhost or
    inventory warnings, no colour; `extra` adds or replaces variables (the stdout callback)."""
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
        ANSIBLE_NOCOLOR="1",
        **extra,
    )


def run_play(
    tmp_path: Path,
    tasks: list[dict],
    *args: str,
    callback: str = "json",
    env: dict[str, str] | None = None,
    **play: object,
) -> subprocess.CompletedProcess:
    """One ansible-playbook run of `tasks` on localhost (local connection), through the project's
    ansible.cfg and with the stdout callback `callback`; `play` adds keys to the play (vars_files,
    module_defaults), `args` to the command line (--tags, -e), `env` to its environment. The caller
    reads stdout/stderr."""
    import yaml

    playbook = tmp_path / "play.yml"
    playbook.write_text(
        yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False, **play, "tasks": tasks}])
    )
    command = playbook_command(
        "localhost,", [], *args, "-e", "ansible_python_interpreter=" + sys.executable, playbook=playbook
    )
    run_env = ansible_env(ANSIBLE_STDOUT_CALLBACK=callback, **(env or {}))
    return subprocess.run(command, capture_output=True, text=True, env=run_env, cwd=REPO, check=False)


def play_results(tmp_path: Path, tasks: list[dict], **play: object) -> list[dict]:
    """run_play with the json callback: every task's result on localhost, in order; the play must pass."""
    import json

    done = run_play(tmp_path, tasks, **play)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return [task["hosts"]["localhost"] for task in json.loads(done.stdout)["plays"][0]["tasks"]]


# -- a module of library/, run by Ansible on localhost --------------------------


def run_module(name: str, args: dict, check: bool = False, diff: bool = False) -> dict:
    """Run one module of library/ through `ansible localhost -m`, as a task would; its result and _rc.
    With `diff`, in diff mode (--diff). The json callback reports the result as the module returned
    it, `diff` included (the oneline one drops it), plus Ansible's `invocation` and `action`."""
    import json

    command = [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", name, "-a", json.dumps(args)]
    command += ["-e", "ansible_python_interpreter=" + sys.executable]
    command += (["--check"] if check else []) + (["--diff"] if diff else [])
    env = ansible_env(ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="true")
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    try:
        report = json.loads(done.stdout)
        payload = report["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        pytest.fail("ansible -m %s gave no result (rc %d):\n%s\n%s" % (name, done.returncode, done.stdout, done.stderr))
    payload = {key: value for key, value in payload.items() if not key.startswith("_ansible")}
    payload["_rc"] = done.returncode
    return payload
