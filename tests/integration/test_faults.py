"""Bad input and faults end with a clear message and no half-built layer.

The tests share one container and run in order: the preflight faults first (nothing may
change), then the CUDA installer failing half way and the clean retry.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from conftest import STANDINS, stack_paths

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
        ({"cuda_prefix": "//"}, "cuda_prefix resolves to /, a system directory"),
        ({"cudnn_prefix": "/usr/lib/"}, "cudnn_prefix resolves to /usr/lib, a system directory"),
        ({"stack_conda_prefix": "/data"}, "stack_conda_prefix resolves to /data, less than two levels deep"),
        ({"stack_verl_dir": "/root"}, "stack_verl_dir resolves to /root, a system directory"),
    ],
)
def test_invalid_variables(host, extra, message):
    run = host.play(**extra)
    assert run.returncode != 0
    assert message in run.output
    assert_nothing_built(host)


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


def plant_lock(host, run_id: str, controller: str) -> None:
    boot = host.sh("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    lock = {"id": run_id, "controller": controller, "pid": 1, "user": "bob", "started": "2026-12-01T00:00:00Z"}
    host.sh(
        "mkdir -p /var/lib/verl-p40 && echo %s > /var/lib/verl-p40/run.lock"
        % json.dumps(json.dumps(dict(lock, boot_id=boot)))
    )


def test_one_run_at_a_time(host):
    # Another controller's run holds the host: refused at once, nothing marked building.
    before = host.sh("cat /var/lib/verl-p40/layers/cuda.json").stdout
    plant_lock(host, "other-controller-1-1", "other-controller")
    run = host.play("--tags", "cuda", rebuild="cuda")
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert "Another run of the stack holds this host: run other-controller-1-1 of bob@other-controller" in out
    assert "-e stack_lock_takeover=other-controller-1-1" in out
    assert host.sh("cat /var/lib/verl-p40/layers/cuda.json").stdout == before
    # Told that run is gone, the next run takes over, and releases the lock at its end.
    run = host.play("--tags", "preflight", stack_lock_takeover="other-controller-1-1")
    assert run.returncode == 0, run.output[-3000:]
    assert not host.exists("/var/lib/verl-p40/run.lock")
    # A run of this controller that died (its process is gone): taken over without asking.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    plant_lock(host, "%s-%d-1" % (socket.gethostname(), dead.pid), socket.gethostname())
    run = host.play("--tags", "preflight")
    assert run.returncode == 0, run.output[-3000:]
    assert not host.exists("/var/lib/verl-p40/run.lock")


@pytest.mark.parametrize(
    "plant, message",
    [
        # Any local user can make the directory in /var/tmp first and swap what the installer unpacks.
        ("mkdir /var/tmp/verl-p40 && chown nobody /var/tmp/verl-p40", "/var/tmp/verl-p40 is owned by nobody"),
        ("ln -s /etc /var/tmp/verl-p40", "/var/tmp/verl-p40 is a link"),
    ],
)
def test_a_scratch_directory_root_did_not_make(host, plant, message):
    before = host.sh("cat /var/lib/verl-p40/layers/cuda.json").stdout
    etc_mode = host.sh("stat -c %a /etc").stdout
    host.sh("rm -rf /var/tmp/verl-p40 && " + plant)
    try:
        run = host.play("--tags", "cuda", rebuild="cuda")
    finally:
        host.sh("rm -rf /var/tmp/verl-p40")
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert message in out and "Root runs the CUDA installer from there" in out
    # Refused before the layer was marked building or the toolkit touched.
    assert host.sh("cat /var/lib/verl-p40/layers/cuda.json").stdout == before
    assert "release 11.8" in host.sh("/usr/local/cuda-11.8/bin/nvcc --version").stdout
    assert host.sh("stat -c %a /etc").stdout == etc_mode
