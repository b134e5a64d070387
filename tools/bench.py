#!/usr/bin/env python3
"""Benchmark the converge of site.yml into a fresh container, through ansible-runner.

Prints, per scenario (cold converge, no-op rerun, one-layer rebuilds), the wall time and,
from ansible-runner's event stream, each layer's task count, changed count and seconds.
Needs the local images and stand-ins (`make bench` builds them and serves the mirror).

Ansible reaches the container two ways: Podman's connection (what Molecule uses; every
module call costs several `podman` commands, and it cannot pipeline) and SSH with
pipelining and a persistent control connection to an sshd in the container (how a real P40
host is reached). The no-op rerun is timed over both.

    python tools/bench.py [--image localhost/verl-p40-debian:12] [--keep]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
from prepare_host import prepare  # noqa: E402
HELPER_ROLES = {"stack_artifact"}
VARS_FILES = [ROOT / ".cache/standins/standins.yml", ROOT / ".cache/standins-python/standins_python.yml",
              ROOT / "tests/fixtures/ci-vars.yml"]


SSH_PORT = 22022


def start_sshd(container: str, workdir: Path) -> None:
    """An sshd in the container on a loopback port, reached with a throwaway key."""
    key = workdir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    script = ("apt-get install -y -qq openssh-server >/dev/null && mkdir -p /root/.ssh /run/sshd && "
              "cat > /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys && "
              "/usr/sbin/sshd -p %d -o ListenAddress=127.0.0.1 -o PermitRootLogin=prohibit-password" % SSH_PORT)
    subprocess.run(["podman", "exec", "-i", container, "sh", "-c", script],
                   input=Path(str(key) + ".pub").read_bytes(), check=True, capture_output=True)


def run(name: str, workdir: Path, inventory: Path, extravars: dict[str, Any], cmdline: str = "") -> dict[str, Any]:
    private = workdir / name.replace(" ", "-")
    private.mkdir()
    start = time.monotonic()
    result = ansible_runner.run(
        private_data_dir=str(private), playbook=str(ROOT / "site.yml"), inventory=str(inventory),
        extravars=extravars, cmdline=cmdline, quiet=True,
        envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )
    wall = time.monotonic() - start
    events = list(result.events)
    if result.rc != 0:
        tail = [e.get("stdout", "") for e in events[-15:]]
        raise SystemExit("%s failed (rc %s):\n%s" % (name, result.rc, "\n".join(tail)))
    table = layer_table(events)
    return {"name": name, "wall": wall, "changed": sum(int(r["changed"]) for r in table.values()), "layers": table}


def report(results: list[dict[str, Any]]) -> None:
    for res in results:
        print("\n%s: %.1f s wall, %d changed" % (res["name"], res["wall"], res["changed"]))
        print("  %-12s %6s %8s %9s" % ("layer", "tasks", "changed", "seconds"))
        for layer, row in res["layers"].items():
            print("  %-12s %6d %8d %9.1f" % (layer, row["tasks"], row["changed"], row["seconds"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="localhost/verl-p40-debian:12")
    parser.add_argument("--keep", action="store_true", help="keep the container afterwards")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)

    container = "verl-p40-bench-" + uuid.uuid4().hex[:6]
    subprocess.run(["podman", "run", "-d", "--init", "--network", "host", "--name", container, args.image,
                    "sleep", "infinity"], check=True, capture_output=True)
    try:
        with tempfile.TemporaryDirectory(prefix="verl-p40-bench-") as tmp:
            workdir = Path(tmp)
            (workdir / "inventory").mkdir()
            (workdir / "inventory" / "group_vars").symlink_to(ROOT / "group_vars")
            inventory = workdir / "inventory" / "hosts.yml"
            inventory.write_text(yaml.safe_dump({"all": {"hosts": {container: {
                "ansible_connection": "containers.podman.podman",
                "ansible_python_interpreter": "/usr/bin/python3"}}}}))
            ssh_inventory = workdir / "inventory" / "ssh.yml"
            ssh_inventory.write_text(yaml.safe_dump({"all": {"hosts": {container: {
                "ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": SSH_PORT,
                "ansible_user": "root", "ansible_ssh_private_key_file": str(workdir / "id_ed25519"),
                "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                "ansible_ssh_pipelining": True,
                "ansible_python_interpreter": "/usr/bin/python3"}}}}))
            # The same extra-vars files and prepare step as the Molecule scenario.
            files = " ".join("-e @%s" % path for path in VARS_FILES)
            prepare(container)
            start_sshd(container, workdir)
            results = [
                run("cold converge (podman connection)", workdir, inventory, {}, files),
                run("no-op rerun (podman connection)", workdir, inventory, {}, files),
                run("no-op rerun (ssh, pipelining)", workdir, ssh_inventory, {}, files),
                run("--tags cuda -e rebuild=cuda (ssh)", workdir, ssh_inventory, {"rebuild": "cuda"}, files + " --tags cuda"),
                run("--tags apex -e rebuild=apex, cached wheel (ssh)", workdir, ssh_inventory, {"rebuild": "apex"},
                    files + " --tags apex"),
            ]
    finally:
        if not args.keep:
            subprocess.run(["podman", "rm", "-f", "-t", "0", container], capture_output=True)
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
