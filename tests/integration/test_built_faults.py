"""Faults of a built host: the run lock, root's scratch and cache against the training user, a
foreign tree at a layer's prefix. Each ends with a clear message and changes no layer.

The tests run in order on one container of the default scenario's verified image
(conftest.built_host: every layer built), which they leave as they found it.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import stack_run
from repo import REPO


@pytest.fixture(scope="module")
def host(built_host):
    """Every fault here is one of a built host."""
    return built_host


def test_foreign_tree_at_a_prefix_is_left_alone(host):
    # The user's own cuDNN where cudnn_prefix now points: the layer must not delete it.
    host.sh("mkdir -p /opt/users-cudnn/include && echo mine > /opt/users-cudnn/include/cudnn_version.h")
    run = host.play("--tags", "cudnn", cudnn_prefix="/opt/users-cudnn")
    assert run.returncode != 0
    assert "/opt/users-cudnn (cudnn_prefix = /opt/users-cudnn) holds something this project did not make" in " ".join(
        run.output.split()
    )
    assert host.sh("cat /opt/users-cudnn/include/cudnn_version.h").stdout == "mine\n"
    assert host.state("cudnn")["status"] == "complete"  # the layer was not marked building for nothing
    host.sh("rm -rf /opt/users-cudnn")


def module_on_host(host, module: str, args: dict) -> tuple[int, str]:
    """One module of library/ run on the container as the play runs it (root, the host's Python)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "-i", str(host.inventory / "hosts.yml"), host.name]
        + ["-m", module, "-a", json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    return done.returncode, " ".join((done.stdout + done.stderr).split())


@pytest.mark.parametrize(
    "plant, why",
    [
        ("ln -s /etc/shadow {wheel}", "is a link"),
        ("mkfifo {wheel}", "is not a plain file"),
    ],
)
def test_what_the_user_swaps_in_for_the_built_wheel_is_not_taken(host, plant, why):
    """The attack on the Apex cache: the training user replaces the wheel it built with a link to a
    root-only file (or a FIFO, which would hang a read) between root's check and root's copy.
    Broken case: the find + isreg check, then a root copy by path (copy remote_src), copied
    /etc/shadow into the 0644 cache. The take (library/stack_take.py) opens the file once, with the
    user's rights and O_NOFOLLOW|O_NONBLOCK, so the planted thing is refused and nothing is cached."""
    host.sh("id verl >/dev/null 2>&1 || useradd -m -s /bin/bash verl")
    wheel = "/home/verl/apex.dist/apex-0.1-cp310-cp310-linux_x86_64.whl"
    host.as_user("rm -rf /home/verl/apex.dist && mkdir /home/verl/apex.dist && " + plant.format(wheel=wheel))
    cache = "/var/cache/verl-p40/apex-wheels/attack"
    try:
        rc, out = module_on_host(host, "stack_take", {"src": wheel, "user": "verl", "dest": cache})
        assert rc != 0 and "%s %s" % (wheel, why) in out and "Nothing was cached" in out, out
        assert host.sh("ls -A %s 2>/dev/null || true" % cache).stdout.strip() == ""
    finally:
        host.sh("rm -rf /home/verl/apex.dist %s" % cache)


LOCK = "/var/lib/verl-p40/run.lock"


def plant_lock(host, run_id: str, controller: str, **fields) -> None:
    """A lock of another run, taken in this boot of the host (so not stale by a reboot)."""
    boot = host.sh("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    lock = {"id": run_id, "controller": controller, "pid": 1, "user": "bob", "started": "2026-12-01T00:00:00Z"}
    host.sh(
        "mkdir -p /var/lib/verl-p40 && echo %s > %s"
        % (shlex.quote(json.dumps(dict(lock, boot_id=boot, **fields))), LOCK)
    )


def dead_pid() -> int:
    """The process id of a process of this controller that has ended."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


def read_file(host, path: str) -> str:
    return host.sh("cat %s 2>/dev/null || true" % path).stdout


def test_one_run_at_a_time(host):
    # Another controller's run holds the host: refused at once, nothing marked building.
    before = read_file(host, "/var/lib/verl-p40/layers/cuda.json")
    plant_lock(host, "other-controller-1-0123456789abcdef", "other-controller")
    run = host.play("--tags", "cuda", rebuild="cuda")
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert (
        "Another run of the stack holds this host: run other-controller-1-0123456789abcdef of bob@other-controller"
        in out
    )
    assert "-e break_lock=other-controller-1-0123456789abcdef" in out
    assert read_file(host, "/var/lib/verl-p40/layers/cuda.json") == before
    # Told that run is gone, the next run takes over, and releases the lock at its end; the older name still works.
    run = host.play("--tags", "preflight", break_lock="other-controller-1-0123456789abcdef")
    assert run.returncode == 0, run.output[-3000:]
    assert not host.exists(LOCK)
    plant_lock(host, "other-controller-1-0123456789abcdef", "other-controller")
    run = host.play("--tags", "preflight", stack_lock_takeover="other-controller-1-0123456789abcdef")
    assert run.returncode == 0, run.output[-3000:]
    assert not host.exists(LOCK)
    # A run of this controller (this machine, boot and pid namespace) whose process is gone: taken over without asking.
    pid = dead_pid()
    plant_lock(
        host,
        "%s-%d-feedc0ffee000000" % (socket.gethostname(), pid),
        socket.gethostname(),
        pid=pid,
        ticks="1",
        instance=stack_run.instance(),
    )
    run = host.play("--tags", "preflight")
    assert run.returncode == 0, run.output[-3000:]
    assert not host.exists(LOCK)


def test_a_controller_with_the_same_host_name_keeps_its_lock(host):
    """A clone of this controller (a VM, a container, a CI runner: the same host name, even a process id that is
    gone here) holds the lock: this controller cannot see its processes, so it never takes the lock by itself.
    Before the fix a holder with this host name was judged by this controller's /proc and taken over."""
    pid = dead_pid()
    clone = {"pid": pid, "ticks": "1", "instance": "0" * 32}  # another machine id and boot
    holders = [
        ("%s-%d-0123456789abcdef" % (socket.gethostname(), pid), clone),
        ("%s-%d-1" % (socket.gethostname(), pid), {"pid": pid}),  # a lock of the previous version
    ]
    for run_id, fields in holders:
        plant_lock(host, run_id, socket.gethostname(), **fields)
        lock = read_file(host, LOCK)
        run = host.play("--tags", "preflight")
        assert run.returncode != 0, run.output[-3000:]
        out = " ".join(run.output.split())
        assert "Another run of the stack holds this host: run %s of bob@%s" % (run_id, socket.gethostname()) in out
        assert "-e break_lock=%s" % run_id in out
        assert read_file(host, LOCK) == lock
        # Only the holder's id, exactly, breaks it.
        run = host.play("--tags", "preflight", break_lock=run_id + "0")
        assert run.returncode != 0 and read_file(host, LOCK) == lock
        assert "does not name it" in " ".join(run.output.split())
        run = host.play("--tags", "preflight", break_lock=run_id)
        assert run.returncode == 0, run.output[-3000:]
        assert not host.exists(LOCK)


def test_an_unreadable_lock_stops_the_run_with_what_to_do(host):
    """Before the fix a lock file that does not parse was "an unreadable lock" with an empty run id to give
    to the takeover: no rerun could ever take it."""
    host.sh("mkdir -p /var/lib/verl-p40 && printf '{not json' > %s" % LOCK)
    run = host.play("--tags", "preflight")
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert "The host's run lock %s cannot be read (not JSON" % LOCK in out
    assert "rm %s" % LOCK in out and "-e break_lock=unreadable" in out
    assert read_file(host, LOCK) == "{not json"
    run = host.play("--tags", "preflight", break_lock="unreadable")
    assert run.returncode == 0, run.output[-3000:]
    assert not host.exists(LOCK)


@pytest.mark.parametrize(
    "args, message",
    [
        # Before the fix the lock tasks (tagged always) were skipped and the layers ran without the lock.
        (("--skip-tags", "always", "--tags", "cuda"), "This run skips the host lock (--skip-tags always"),
        (
            ("--start-at-task", "Read every layer's record at once", "--tags", "preflight"),
            "This run skips the host lock (--start-at-task",
        ),
        # The lock tasks skipped another way: the layers' own check (layer_state) refuses.
        (("--tags", "preflight", "-e", "__stack_lock_held=true"), "does not hold the host's run lock %s" % LOCK),
    ],
    ids=["skip-tags-always", "start-at-task", "lock-tasks-skipped"],
)
def test_a_run_that_skips_the_lock_changes_no_layer(host, args, message):
    # Without a preflight record, any record this run wrote shows (preflight records on every run).
    host.sh("rm -f /var/lib/verl-p40/layers/preflight.json")
    records = read_file(host, "/var/lib/verl-p40/layers/*.json")
    plant_lock(host, "other-controller-1-0123456789abcdef", "other-controller")
    try:
        run = host.play(*args, rebuild="cuda")
        assert run.returncode != 0, run.output[-3000:]
        assert message in " ".join(run.output.split())
        assert read_file(host, "/var/lib/verl-p40/layers/*.json") == records
        assert json.loads(read_file(host, LOCK))["id"] == "other-controller-1-0123456789abcdef"
    finally:
        host.sh("rm -f %s" % LOCK)


@pytest.mark.parametrize(
    "plant, message",
    [
        # Any local user can make the directory in /var/tmp first and swap what the installer unpacks
        # (the default is under the root-only cache; a user may still point the variable there).
        ("mkdir /var/tmp/verl-p40 && chown nobody /var/tmp/verl-p40", "/var/tmp/verl-p40 is owned by uid 65534"),
        ("ln -s /etc /var/tmp/verl-p40", "it is reached through a link (it resolves to /etc/cuda-installer)"),
    ],
)
def test_a_scratch_directory_root_did_not_make(host, plant, message):
    before = host.sh("cat /var/lib/verl-p40/layers/cuda.json").stdout
    etc_mode = host.sh("stat -c %a /etc").stdout
    host.sh("rm -rf /var/tmp/verl-p40 && " + plant)
    try:
        run = host.play("--tags", "cuda", rebuild="cuda", cuda_installer_tmpdir="/var/tmp/verl-p40/cuda-installer")
    finally:
        host.sh("rm -rf /var/tmp/verl-p40")
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert message in out and "it must lie under directories only root can write" in out
    assert not host.exists("/etc/cuda-installer")
    # Refused before the layer was marked building or the toolkit touched.
    assert host.sh("cat /var/lib/verl-p40/layers/cuda.json").stdout == before
    assert "release 11.8" in host.sh("/usr/local/cuda-11.8/bin/nvcc --version").stdout
    assert host.sh("stat -c %a /etc").stdout == etc_mode
