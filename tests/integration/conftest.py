"""Fault tests: ansible-playbook against a throwaway Debian 12 container.

Each test drives site.yml with bad input or a failing artifact and checks both the message
and that no layer was left half-built. The container is made from the same local image as
the Molecule scenario and removed afterwards; the stand-ins are served by the mirror that
`make integration` starts (tests/fixtures/mirror.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import playbook  # noqa: E402
from prepare_host import prepare  # noqa: E402

IMAGE = os.environ.get("STACK_TEST_IMAGE", "localhost/verl-p40-debian:12")
STANDINS = ROOT / ".cache" / "standins"
# The same extra-vars files as the Molecule scenarios: the stand-ins, then what CI changes.
VARS_FILES = [
    STANDINS / "standins.yml",
    ROOT / ".cache" / "standins-python" / "standins_python.yml",
    ROOT / "tests" / "fixtures" / "ci-vars.yml",
]


@cache
def stack_paths() -> dict[str, str]:
    """Where the stack writes on a host, from the roles' own defaults (tests/infra's StackVars):
    the layer state directory, and every prefix or file a layer creates."""
    spec = importlib.util.spec_from_file_location("infra_conftest", ROOT / "tests" / "infra" / "conftest.py")
    infra = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(infra)
    variables = infra.StackVars("no-such-host")
    names = [
        "stack_state_dir",
        "cuda_prefix",
        "cuda_profile_script",
        "cudnn_prefix",
        "stack_conda_prefix",
        "conda_profile_script",
        "stack_work_dir",
    ]
    return {name: variables[name] for name in names}


class Host:
    """One container and the ansible-playbook runs against it."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.name = name
        self.inventory = workdir / "inventory"
        self.inventory.mkdir()
        (self.inventory / "hosts.yml").write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "hosts": {
                            name: {
                                "ansible_connection": "containers.podman.podman",
                                "ansible_python_interpreter": "/usr/bin/python3",
                            }
                        }
                    }
                }
            )
        )
        self.standins = yaml.safe_load((STANDINS / "standins.yml").read_text())

    def sh(self, command: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["podman", "exec", self.name, "sh", "-c", command], capture_output=True, text=True, check=check
        )

    def play(self, *args: str, **extra_vars: Any) -> subprocess.CompletedProcess:
        """site.yml against this container, with CI's vars files (tests/fixtures/playbook.py)."""
        return playbook.run(self.inventory / "hosts.yml", VARS_FILES, *args, **extra_vars)

    def state(self, layer: str) -> dict[str, Any]:
        out = self.sh("cat /var/lib/verl-p40/layers/%s.json 2>/dev/null || echo '{}'" % layer).stdout
        return json.loads(out)

    def fake_nvidia_smi(self, line: str | None) -> None:
        """Put an nvidia-smi that prints one GPU line on the host's PATH; None removes it."""
        if line is None:
            self.sh("rm -f /usr/local/bin/nvidia-smi")
        else:
            self.sh(
                "printf '#!/bin/sh\\necho \"%s\"\\n' > /usr/local/bin/nvidia-smi"
                " && chmod +x /usr/local/bin/nvidia-smi" % line
            )

    def exists(self, path: str) -> bool:
        return self.sh("test -e %s" % path, check=False).returncode == 0

    def python(self, script: str, *args: str, python: str = "/opt/miniforge3/envs/verl-env/bin/python") -> Any:
        """Run a Python script in the host (the env's python by default); its last line, as JSON."""
        done = subprocess.run(
            ["podman", "exec", self.name, python, "-c", script, *args], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    def as_user(self, command: str, check: bool = True) -> subprocess.CompletedProcess:
        """A shell command as the training user (git refuses a checkout another user owns)."""
        return subprocess.run(
            ["podman", "exec", "--user", "verl", "--workdir", "/", self.name, "sh", "-c", command],
            capture_output=True,
            text=True,
            check=check,
        )


@pytest.fixture(scope="session")
def host(tmp_path_factory):
    missing = [str(path) for path in VARS_FILES if not path.is_file()]
    if missing:
        pytest.fail("missing %s: run `make standins` (make integration does)" % ", ".join(missing))
    name = "verl-p40-it-" + uuid.uuid4().hex[:8]
    subprocess.run(
        ["podman", "run", "-d", "--init", "--network", "host", "--name", name, IMAGE, "sleep", "infinity"],
        check=True,
        capture_output=True,
    )
    try:
        prepare(name)
        yield Host(name, tmp_path_factory.mktemp(name))
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, check=False)
