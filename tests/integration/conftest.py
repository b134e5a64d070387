"""Fault tests: ansible-playbook against a throwaway Debian 12 container.

Each test drives site.yml with bad input or a failing artifact and checks both the message
and that no layer was left half-built. Two kinds of host, each removed afterwards:

- `host`: a new container of the Debian 12 image the Molecule scenarios start from, nothing
  built (one per worker: test_faults.py, test_url_faults.py; `make faults-new`);
- `built_host`: a container on an overlay of the default scenario's stack root (STACK_ROOT,
  converged by `make stack-root`), every layer built: the faults of a built host start there instead of
  building CUDA, conda, torch, Apex and verl again (one per module or class;
  test_python_faults.py, test_built_faults.py; `make faults-built`).

The stand-ins are served by the mirror that make starts (tests/fixtures/mirror.py), on the port
the image was built with: the mirror's URLs are part of each layer's record.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

import playbook
import sshd
from prepare_host import prepare
from repo import REPO, load_file

IMAGE = os.environ.get("STACK_TEST_IMAGE", "localhost/verl-p40-debian:12")
# The Makefile's STACK_ROOT: the directory the default scenario converged every layer into
# (molecule/common/tasks/stack_root.yml); each built host runs on an overlay of its own over it.
BUILT_ROOT = os.environ.get("VERL_P40_STACK_ROOT", "")
STANDINS = REPO / ".cache" / "standins"
# The same extra-vars files as the Molecule scenarios: the stand-ins, then what CI changes.
VARS_FILES = [
    STANDINS / "standins.yml",
    REPO / ".cache" / "standins-python" / "standins_python.yml",
    REPO / "tests" / "fixtures" / "ci-vars.yml",
]


@cache
def stack_paths() -> dict[str, str]:
    """Where the stack writes on a host, from the roles' own defaults (tests/infra's StackVars):
    the layer state directory, and every prefix or file a layer creates."""
    infra = load_file(REPO / "tests" / "infra" / "conftest.py", "infra_conftest")
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

    def __init__(self, name: str, workdir: Path, host_vars: dict[str, Any]) -> None:
        self.name = name
        self.inventory = workdir / "inventory"
        self.inventory.mkdir()
        (self.inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {name: host_vars}}}))
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

    def install_script(self, path: str, text: str) -> None:
        """Write `text` (a script, ending in a newline) to `path` on the host, mode 0755."""
        self.sh("cat > %s <<'EOF'\n%sEOF\nchmod 755 %s" % (path, text, path))

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


def missing_vars_files() -> None:
    missing = [str(path) for path in VARS_FILES if not path.is_file()]
    if missing:
        pytest.fail("missing %s: run `make standins` (make integration does)" % ", ".join(missing))


@contextmanager
def container(image: list[str], workdir_factory, systemd: bool = False) -> Iterator[Host]:
    """A container of image (podman run's last arguments before the command: an image, or --rootfs
    and a root), sharing the host's network (the mirror is on 127.0.0.1), removed after. Ansible
    reaches it over SSH with pipelining (tests/fixtures/sshd.py), as it reaches a real host. With
    `systemd`, booted with systemd as init (the images hold it, as the cluster scenario's nodes),
    for what only systemd can run."""
    name = "verl-p40-it-" + uuid.uuid4().hex[:8]
    init = ["--systemd", "always", *image, "/sbin/init"] if systemd else ["--init", *image, "sleep", "infinity"]
    subprocess.run(
        ["podman", "run", "-d", "--network", "host", "--name", name, *init],
        check=True,
        capture_output=True,
    )
    if systemd:
        # Up once it answers; "degraded" (a unit a container cannot run) is up too.
        subprocess.run(
            ["podman", "exec", name, "timeout", "60", "systemctl", "is-system-running", "--wait"],
            capture_output=True,
            check=False,
        )
    try:
        workdir = workdir_factory.mktemp(name)
        yield Host(name, workdir, sshd.start(name, workdir))
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, check=False)


@pytest.fixture(scope="session")
def host(tmp_path_factory):
    """A new container, prepared as molecule/default/prepare.yml prepares its host: nothing built."""
    missing_vars_files()
    with container([IMAGE], tmp_path_factory) as new:
        prepare(new.name)
        yield new


# The layers a built host holds: what site.yml builds on a host without a GPU or a cluster.
BUILT_LAYERS = ("cuda", "cudnn", "conda", "torch", "apex", "verl", "patch", "data", "model", "train")


@contextmanager
def built(tmp_path_factory) -> Iterator[Host]:
    """A container of the default scenario's converged image (prepared and converged there): every
    layer complete. A test module (built_host) or class (test_python_faults.py) gets one of its own,
    so that one group's faults leave the next group's host as the image has it."""
    missing_vars_files()
    layers = Path(BUILT_ROOT or "/nonexistent") / "var/lib/verl-p40/layers"
    if not BUILT_ROOT or not layers.is_dir():
        pytest.fail(
            "no converged stack root at VERL_P40_STACK_ROOT=%r (no %s): it is the default scenario's "
            "converged host. Run `make stack-root` (make faults-built and make integration do)." % (BUILT_ROOT, layers)
        )
    # An overlay of its own: the test's writes go to the container's storage, the root stays as built.
    with container(["--rootfs", BUILT_ROOT + ":O"], tmp_path_factory) as host:
        states = {layer: host.state(layer).get("status") for layer in BUILT_LAYERS}
        unbuilt = {layer: status for layer, status in states.items() if status != "complete"}
        assert unbuilt == {}, "%s has layers that are not complete: %s" % (BUILT_ROOT, unbuilt)
        yield host


@pytest.fixture(scope="module")
def built_host(tmp_path_factory):
    """A built host for a test module (conftest.built)."""
    with built(tmp_path_factory) as host:
        yield host
