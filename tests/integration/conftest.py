"""Fault tests: ansible-playbook against a throwaway Debian 12 container.

Each test drives site.yml with bad input or a failing artifact and checks both the message
and that no layer was left half-built. The container is made from the same local image as
the Molecule scenario and removed afterwards; the stand-ins are served by the mirror that
`make integration` starts (tests/fixtures/mirror.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
from prepare_host import prepare  # noqa: E402
IMAGE = os.environ.get("STACK_TEST_IMAGE", "localhost/verl-p40-debian:12")
STANDINS = ROOT / ".cache" / "standins"
# The same extra-vars files as the Molecule scenarios: the stand-ins, then what CI changes.
VARS_FILES = [STANDINS / "standins.yml", ROOT / ".cache" / "standins-python" / "standins_python.yml",
              ROOT / "tests" / "fixtures" / "ci-vars.yml"]


class Host:
    """One container and the ansible-playbook runs against it."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.name = name
        self.inventory = workdir / "inventory"
        self.inventory.mkdir()
        (self.inventory / "group_vars").symlink_to(ROOT / "group_vars")
        (self.inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {name: {
            "ansible_connection": "containers.podman.podman",
            "ansible_python_interpreter": "/usr/bin/python3"}}}}))
        self.standins = yaml.safe_load((STANDINS / "standins.yml").read_text())

    def sh(self, command: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["podman", "exec", self.name, "sh", "-c", command],
                              capture_output=True, text=True, check=check)

    def play(self, *args: str, **extra_vars: Any) -> subprocess.CompletedProcess:
        files = [arg for path in VARS_FILES for arg in ("-e", "@%s" % path)]
        command = ["ansible-playbook", "-i", str(self.inventory / "hosts.yml"), str(ROOT / "site.yml"),
                   *files, "-e", json.dumps(extra_vars), *args]
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0")
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
        result.output = result.stdout + result.stderr  # type: ignore[attr-defined]
        return result

    def state(self, layer: str) -> dict[str, Any]:
        out = self.sh("cat /var/lib/verl-p40/layers/%s.json 2>/dev/null || echo '{}'" % layer).stdout
        return json.loads(out)

    def fake_nvidia_smi(self, line: str | None) -> None:
        """Put an nvidia-smi that prints one GPU line on the host's PATH; None removes it."""
        if line is None:
            self.sh("rm -f /usr/local/bin/nvidia-smi")
        else:
            self.sh("printf '#!/bin/sh\\necho \"%s\"\\n' > /usr/local/bin/nvidia-smi"
                    " && chmod +x /usr/local/bin/nvidia-smi" % line)

    def exists(self, path: str) -> bool:
        return self.sh("test -e %s" % path, check=False).returncode == 0


@pytest.fixture(scope="session")
def host(tmp_path_factory):
    missing = [str(path) for path in VARS_FILES if not path.is_file()]
    if missing:
        pytest.fail("missing %s: run `make standins` (make integration does)" % ", ".join(missing))
    name = "verl-p40-it-" + uuid.uuid4().hex[:8]
    subprocess.run(["podman", "run", "-d", "--init", "--network", "host", "--name", name, IMAGE,
                    "sleep", "infinity"], check=True, capture_output=True)
    try:
        prepare(name)
        yield Host(name, tmp_path_factory.mktemp(name))
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True)
