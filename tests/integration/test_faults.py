"""Bad input and faults end with a clear message and no half-built layer.

The tests share one container and run in order: the preflight faults first (nothing may
change), then the CUDA installer failing half way and the clean retry.
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
from conftest import ROOT, STANDINS, stack_paths

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lookup_plugins"))
import stack_run  # noqa: E402

P40_OLD_DRIVER = "0, Tesla P40, 6.1, 24576, 470.256.02, 00000000:3B:00.0"
P40_GOOD_DRIVER = "0, Tesla P40, 6.1, 24576, 535.183.01, 00000000:3B:00.0"


def assert_nothing_built(host) -> None:
    """No layer recorded anything (preflight, which builds nothing, may have) and nothing
    exists at any prefix or file a layer writes. Checking only the cuda and cudnn states and
    /usr/local/cuda-11.8 missed a fault that stopped later, e.g. a conda prefix or work
    directory left behind by a run that went past the system layers."""
    paths = stack_paths()
    listing = host.sh("ls -A %s 2>/dev/null || true" % paths["stack_state_dir"]).stdout.split()
    assert [name for name in listing if name != "preflight.json"] == [], "layer state written: %s" % listing
    written = [path for name, path in paths.items() if name != "stack_state_dir" and host.exists(path)]
    assert written == [], "written: %s" % written


def test_no_gpu_with_gpus_required(host):
    run = host.play(preflight_require_gpu=True)
    assert run.returncode != 0
    assert "No usable NVIDIA GPU" in run.output
    assert "preflight_require_gpu: false" in run.output
    assert_nothing_built(host)


def test_driver_too_old(host):
    host.fake_nvidia_smi(P40_OLD_DRIVER)
    try:
        run = host.play("--tags", "preflight", preflight_require_gpu=True)
    finally:
        host.fake_nvidia_smi(None)
    assert run.returncode != 0
    assert "runs driver 470.256.02" in run.output and "520.61.05" in run.output
    assert_nothing_built(host)


def test_p40_selects_the_pascal_profile(host):
    host.fake_nvidia_smi(P40_GOOD_DRIVER)
    try:
        run = host.play("--tags", "preflight", preflight_require_gpu=True)
    finally:
        host.fake_nvidia_smi(None)
    assert run.returncode == 0, run.output
    assert "1 x Tesla P40 (cc 6.1, 24576 MiB), driver 535.183.01; profile pascal" in run.output
    assert host.state("preflight")["inputs"]["profile"] == "pascal"


TWO_P40_SMI = r"""#!/bin/sh
# Two P40s on a board without peer-to-peer between them (ACS).
case "$1" in
  topo) printf ' \tGPU0\tGPU1\t\n GPU0\tX\tNS\t\n GPU1\tNS\tX\t\n\nLegend:\n\n  X    = Self\n  NS   = Not supported\n' ;;
  *) printf '0, Tesla P40, 6.1, 22919, 535.183.01, 00000000:3B:00.0\n1, Tesla P40, 6.1, 22919, 535.183.01, 00000000:AF:00.0\n' ;;
esac
"""


def test_two_gpus_without_peer_to_peer(host):
    host.sh("cat > /usr/local/bin/nvidia-smi <<'EOF'\n%sEOF\nchmod +x /usr/local/bin/nvidia-smi" % TWO_P40_SMI)
    try:
        run = host.play("--tags", "preflight", preflight_require_gpu=True)
        recorded = host.state("preflight")
        picked = host.play("--tags", "preflight", preflight_require_gpu=True, train_gpus=[1])
        missing = host.play("--tags", "preflight", preflight_require_gpu=True, train_gpus=[5])
    finally:
        host.fake_nvidia_smi(None)
    assert run.returncode == 0, run.output[-3000:]
    out = " ".join(run.output.split())
    assert "2 x Tesla P40 (cc 6.1, 22919 MiB), driver 535.183.01; profile pascal" in out
    assert "peer-to-peer: not available (GPU 0 - GPU 1: NS (Not supported); GPU 1 - GPU 0: NS" in out
    assert "the launcher sets NCCL_P2P_DISABLE=1" in out
    assert recorded["inputs"]["p2p"]["ok"] is False
    assert "gpus no peer-to-peer (GPU 0 - GPU 1: NS (Not supported), ...): train.env sets NCCL_P2P_DISABLE=1" in out
    assert picked.returncode == 0, picked.output[-3000:]
    assert "1 x Tesla P40 (cc 6.1, 22919 MiB), driver 535.183.01; profile pascal (of 2 x Tesla P40" in " ".join(
        picked.output.split()
    )
    assert "peer-to-peer: not available" not in picked.output
    assert missing.returncode != 0
    assert "train_gpus names GPU 5, which this host lacks (nvidia-smi's indexes here: 0, 1)" in " ".join(
        missing.output.split()
    )


def test_unsupported_os(host):
    host.sh(
        "cp /etc/os-release /etc/os-release.orig && sed -i 's/^VERSION_ID=.*/VERSION_ID=\"13\"/' /etc/os-release"
        " && cp /etc/debian_version /etc/debian_version.orig && echo 13.1 > /etc/debian_version"
    )
    try:
        run = host.play()
    finally:
        host.sh("mv /etc/os-release.orig /etc/os-release && mv /etc/debian_version.orig /etc/debian_version")
    assert run.returncode != 0
    assert "Debian 13 is not supported" in run.output
    assert_nothing_built(host)


def test_too_little_disk(host):
    run = host.play(preflight_disk_requirements=[{"path": "/usr/local/cuda-11.8", "min_free_gb": 1000000}])
    assert run.returncode != 0
    assert "Not enough free disk space" in run.output and "needs 1000000.0 GiB" in run.output
    assert_nothing_built(host)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"cuda_link": "maybe"}, "cuda_link"),
        ({"cudnn_link_into_cuda": "sometimes"}, "cudnn_link_into_cuda"),
        ({"data_source": "ftp"}, "data_source"),
        ({"apex_max_jobs": "many"}, "apex_max_jobs"),
        ({"rebuild": "cdua"}, "rebuild names unknown layer(s) cdua"),
        ({"cuda_prefix": "/usr"}, "cuda_prefix resolves to /usr, a system directory"),
        ({"cuda_prefix": "/"}, "cuda_prefix resolves to /, a system directory"),
        ({"cudnn_prefix": "/usr/lib"}, "cudnn_prefix resolves to /usr/lib, a system directory"),
        ({"cudnn_prefix": "/usr/lib/"}, "cudnn_prefix is spelled '/usr/lib/': write it as '/usr/lib'"),
        ({"stack_conda_prefix": "/data"}, "stack_conda_prefix resolves to /data, less than two levels deep"),
        ({"stack_verl_dir": "/root"}, "stack_verl_dir resolves to /root, a system directory"),
        # A control character in any templated value is refused before anything changes (preflight,
        # filter_plugins/control.py). Before: a newline in cuda_prefix ran as root from a comment of
        # /etc/profile.d/verl-p40-cuda.sh, one in stack_work_dir added lines to the Ray unit, and the
        # mirror URLs added keys to pip.conf and .condarc.
        (
            {"cuda_prefix": "/usr/local/cuda-11.8\ntouch /tmp/pwned-by-cuda-prefix"},
            "cuda_prefix holds a newline (\\n) at character 21",
        ),
        (
            {"stack_work_dir": "/home/verl/verl-p40\nExecStartPre=+/bin/touch /tmp/pwned-by-work-dir"},
            "stack_work_dir holds a newline (\\n) at character 20",
        ),
        ({"stack_env_name": "verl-env\r\nx"}, "stack_env_name holds a carriage return (\\r) at character 9"),
        (
            {"stack_pip_index_url": "https://pypi.org/simple\nindex-url = https://evil.example/simple"},
            "stack_pip_index_url holds a newline (\\n) at character 24",
        ),
        (
            {"stack_conda_forge_mirror": "https://conda.example/conda-forge\nchannels: [evil]"},
            "stack_conda_forge_mirror holds a newline (\\n) at character 34",
        ),
    ],
)
def test_invalid_variables(host, extra, message):
    run = host.play(**extra)
    assert run.returncode != 0
    # Whitespace as one space: the output wraps a long message.
    assert message in " ".join(run.output.split())
    assert_nothing_built(host)
    assert not host.exists("/tmp/pwned-by-cuda-prefix") and not host.exists("/tmp/pwned-by-work-dir")


def test_train_without_the_model_config(host):
    # The HF rollout is sized from the model's config.json; without it the train role
    # stops before it writes anything, saying what to do.
    run = host.play("--tags", "train", train_model_path="/nonexistent/model")
    assert run.returncode != 0
    assert "/nonexistent/model/config.json cannot be read" in run.output
    assert "--tags model" in run.output and "train_model_config" in run.output
    assert host.state("train") == {}
    assert_nothing_built(host)


def ci_overrides(host) -> dict:
    """stack_artifact_overrides as tests/fixtures/ci-vars.yml sets them, for a test to change one."""
    return {
        "cuda_runfile": host.standins["standin_artifacts"]["cuda_runfile"],
        "cudnn_archive": host.standins["standin_artifacts"]["cudnn_archive"],
    }


def test_wrong_checksum(host):
    overrides = ci_overrides(host)
    overrides["cuda_runfile"] = dict(overrides["cuda_runfile"], sha256="0" * 64)
    run = host.play("--tags", "cuda,cudnn", stack_artifact_overrides=overrides)
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert overrides["cuda_runfile"]["file"] in out
    assert "expected sha256 " + "0" * 64 in out
    assert "got " + host.standins["standin_artifacts"]["cuda_runfile"]["sha256"] in out
    assert_nothing_built(host)
    assert not host.exists("/var/cache/verl-p40/" + overrides["cuda_runfile"]["file"])


def test_installer_failing_half_way_is_redone(host):
    overrides = ci_overrides(host)
    overrides["cuda_runfile"] = host.standins["standin_cuda_runfile_failing"]
    run = host.play("--tags", "cuda,cudnn", stack_artifact_overrides=overrides)
    assert run.returncode != 0
    assert "The CUDA installer exited with" in run.output
    assert "Last lines of /var/log/cuda-installer.log" in run.output
    assert host.state("cuda")["status"] == "building"
    assert host.state("cudnn") == {}
    host.sh("touch /usr/local/cuda-11.8/leftover-of-the-failed-run")
    # A partial download in the host's cache is fetched again.
    good = host.standins["standin_artifacts"]["cuda_runfile"]["file"]
    host.sh("mkdir -p /var/cache/verl-p40 && head -c 1000 /dev/urandom > /var/cache/verl-p40/" + good)

    # This time through the controller's cache (as air-gapped users pre-seed it); the mirror is unreachable.
    run = host.play(
        "--tags", "cuda,cudnn", stack_controller_cache_dir=str(STANDINS), stack_mirror_url="http://127.0.0.1:9"
    )
    assert run.returncode == 0, run.output[-3000:]
    assert host.state("cuda")["status"] == "complete"
    assert host.state("cudnn")["status"] == "complete"
    nvcc = host.sh("/usr/local/cuda-11.8/bin/nvcc --version").stdout
    assert "release 11.8, V11.8.89" in nvcc
    # The half-built tree was removed first: the good installer did not merely complete it.
    assert not host.exists("/usr/local/cuda-11.8/leftover-of-the-failed-run")


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


def test_a_prefix_the_user_swapped_for_a_link_is_not_deleted(host):
    """The attack: stack_conda_prefix lies in the training user's home, so that user can swap the
    prefix the conda layer installed for a link to a directory of someone else's before a rebuild.
    Broken case: the delete check took realpath() of the recorded prefix when it checked, found the
    link's target "ours" and deleted it. Root's claim (state directory) names the directory it made
    by its inode, so the link's target is foreign and stays."""
    prefix = "/home/verl/miniforge3"
    host.sh("id verl >/dev/null 2>&1 || useradd -m -s /bin/bash verl")
    host.as_user("mkdir -p %s /home/verl/victim/keep" % prefix)
    dev, ino = host.sh("stat -c '%%d %%i' %s" % prefix).stdout.split()
    claim = {"layer": "conda", "trees": [{"path": prefix, "resolved": prefix, "id": [int(dev), int(ino)]}]}
    host.sh(
        "mkdir -p /var/lib/verl-p40/layers/trees && echo %s > /var/lib/verl-p40/layers/trees/conda.json"
        % shlex.quote(json.dumps(claim))
    )
    # The user swaps the claimed prefix for a link to the directory they want root to delete.
    host.as_user("rmdir %s && ln -s /home/verl/victim %s" % (prefix, prefix))
    try:
        run = host.play("--tags", "conda", rebuild="conda", stack_conda_prefix=prefix)
        out = " ".join(run.output.split())
        assert run.returncode != 0
        assert "/home/verl/victim (stack_conda_prefix = %s) holds something this project did not make" % prefix in out
        assert host.exists("/home/verl/victim/keep")
        assert host.state("conda").get("status") != "building"
    finally:
        host.sh("rm -rf %s /home/verl/victim /var/lib/verl-p40/layers/trees/conda.json" % prefix)


def module_on_host(host, module: str, args: dict) -> tuple[int, str]:
    """One module of library/ run on the container as the play runs it (root, the host's Python)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "-i", str(host.inventory / "hosts.yml"), host.name]
        + ["-m", module, "-a", json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
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
            ("--start-at-task", "Preflight | Record what was found", "--tags", "preflight"),
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
