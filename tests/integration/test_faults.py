"""Bad input and faults on a new host end with a clear message and no half-built layer.

The tests share one container and run in order: the preflight and input faults first (nothing
may change), then the CUDA installer failing half way and the clean retry. The faults of a host
whose layers are built are in test_built_faults.py and test_python_faults.py.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml
import standin_driver
from conftest import IMAGE, STANDINS, container, missing_vars_files, stack_paths
from pci_bus import BUS, plant_bus
from repo import REPO


P40_OLD_DRIVER = "0, Tesla P40, 6.1, 24576, 470.256.02, 00000000:3B:00.0"
P40_GOOD_DRIVER = "0, Tesla P40, 6.1, 24576, 535.183.01, 00000000:3B:00.0"


def assert_nothing_built(host) -> None:
    """No layer recorded anything (preflight, which builds nothing, may have) and nothing
    exists at any prefix or file a layer writes. Checking only the cuda and cudnn states and
    /usr/local/cuda-11.8 missed a fault that stopped later, e.g. a conda prefix or work
    directory left behind by a run that went past the system layers."""
    paths = stack_paths()
    listing = host.sh("ls -A %s 2>/dev/null || true" % paths["stack_state_dir"]).stdout.split()
    assert [name for name in listing if name not in ("preflight.json", "driver.json")] == [], (
        "layer state written: %s" % listing
    )
    # The driver layer, which runs first, found no NVIDIA GPU on the container's bus and changed nothing
    # (tests/infra/test_driver.py holds that): a stop of another layer leaves that record alone.
    if "driver.json" in listing:
        assert host.state("driver")["details"]["action"] == "none"
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


# The driver layer reads the bus under driver_host_root: a stand-in tree of sysfs entries.
def test_the_driver_layer_under_never_stops_with_the_steps(host):
    plant_bus(host)
    run = host.play("--tags", "driver", driver_host_root=BUS, driver_install="never")
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert "GP102GL [Tesla P40]: pascal; stop: no NVIDIA driver is installed" in out
    assert (
        "driver_install: never, and no NVIDIA driver is installed. Install R580 (proprietary modules) yourself" in out
    )
    assert "sudo apt-get install -y linux-headers-" in out and "--silent --dkms -m=kernel" in out
    assert_nothing_built(host)
    assert not host.exists("/etc/modprobe.d/verl-p40-nouveau.conf")


def test_a_590_driver_on_a_p40_is_named_and_an_unpinned_runfile_refused(host):
    """NVIDIA's newest driver does not see a P40: auto would replace it, and says why it cannot yet
    (the R580 runfile is not pinned in the manifest; Debian's R535 packages are the other way)."""
    plant_bus(host, loaded="590.44.01")
    run = host.play("--tags", "driver", driver_host_root=BUS)
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert "driver 590.44.01 cannot drive GP102GL [Tesla P40] (10de:1b38): R580 is the last branch for Pascal" in out
    assert "Driver 590.44.01 cannot drive GP102GL [Tesla P40] (10de:1b38): R580 is the last branch for Pascal;" in out
    assert "the driver layer cannot install one here" in out
    assert "nvidia_driver_runfile" in out and "is not pinned yet" in out and "driver_source: distro" in out
    assert_nothing_built(host)


def test_an_unknown_card_is_reported_not_guessed(host):
    plant_bus(host, device="0x2330")
    run = host.play("--tags", "driver", driver_host_root=BUS)
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert "NVIDIA device 10de:2330 is not in the driver layer's table" in out
    assert "set driver_install: never" in out
    assert_nothing_built(host)


def test_a_runfile_under_another_sha256_is_refused(host):
    """Pinned, but the file the mirror serves is not the pinned one: nothing is installed."""
    plant_bus(host)
    overrides = ci_overrides(host)
    standin = host.standins["standin_artifacts"]["cuda_runfile"]
    overrides["nvidia_driver_runfile"] = {
        "version": "580.105.08",
        "file": standin["file"],
        "url": "https://downloads.invalid/" + standin["file"],
        "sha256": "0" * 64,
    }
    run = host.play("--tags", "driver", driver_host_root=BUS, stack_artifact_overrides=overrides)
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert "expected sha256 " + "0" * 64 in out and "got " + standin["sha256"] in out
    assert_nothing_built(host)
    assert host.state("driver")["details"]["action"] == "none"
    assert host.sh("dpkg -l 'linux-headers-*' 2>/dev/null | grep -c ^ii || true").stdout.strip() == "0"


def test_secure_boot_without_a_key_stops_before_anything_changes(host):
    plant_bus(host)
    standin = yaml.safe_load((STANDINS / "standin_driver.yml").read_text())["standin_driver_runfile"]
    overrides = dict(ci_overrides(host), nvidia_driver_runfile=dict(standin, url="https://downloads.invalid/x.run"))
    host.sh(
        "mkdir -p %s/sys/firmware/efi && printf '#!/bin/sh\\necho SecureBoot enabled\\n' > /usr/local/bin/mokutil"
        " && chmod +x /usr/local/bin/mokutil" % BUS
    )
    try:
        run = host.play("--tags", "driver", driver_host_root=BUS, stack_artifact_overrides=overrides)
    finally:
        host.sh("rm -f /usr/local/bin/mokutil")
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert "Secure Boot is on, and the modules this install builds are not signed by a key the firmware trusts" in out
    assert "mokutil --import" in out and "driver_mok_key" in out
    assert_nothing_built(host)
    assert not host.exists("/var/cache/verl-p40/" + standin["file"])


# A working R580 driver's nvidia-smi as the driver layer and preflight ask it, the persistence mode
# on while the persistence daemon's pid file names a live process.
P40_R580_SMI = r"""#!/bin/sh
mode=Disabled
pid=$(cat /var/run/nvidia-persistenced/nvidia-persistenced.pid 2>/dev/null) && kill -0 "$pid" 2>/dev/null && mode=Enabled
case "$1" in
  --query-gpu=driver_version,*) echo "580.105.08, 00000000:03:00.0, Tesla P40, 22919, Enabled, $mode" ;;
  *) echo '0, Tesla P40, 6.1, 22919, 580.105.08, 00000000:03:00.0' ;;
esac
"""


def test_the_runfile_path_builds_with_dkms_and_waits_for_the_reboot(host):
    """NVIDIA's runfile path, with a stand-in that has its interface (tests/standins/standin_driver.py):
    a Debian kernel's headers (the CI machine's own kernel is not Debian's, so the layer builds for
    the kernel driver_kernel names, as for a kernel installed but not booted yet), dkms, the
    installer silent with -m=kernel and --kernel-name, a real DKMS build of the stand-in's module
    against those headers, nouveau's blacklist; then the record says it waits for a reboot and the
    run stops. A rerun before the reboot installs nothing again; after a simulated reboot (the
    module loaded, nvidia-smi answering) the same command finds the driver and records it."""
    plant_bus(host)
    try:
        runfile_path(host)
    finally:
        # The next tests start from a host without a driver, as the others here.
        host.sh(
            "dkms remove -m nvidia -v 580.105.08 --all >/dev/null 2>&1; rm -rf /usr/src/nvidia-580.105.08"
            " /usr/bin/nvidia-smi /usr/local/bin/nvidia-smi /etc/modprobe.d/verl-p40-nouveau.conf"
            " /usr/bin/nvidia-persistenced /etc/systemd/system/nvidia-persistenced.service"
            " /var/log/nvidia-installer.log /var/lib/verl-p40/layers/driver.json"
            " /var/lib/verl-p40/layers/trees/driver.json; rmdir /var/lib/verl-p40/layers/trees;"
            " userdel nvidia-persistenced",
            check=False,
        )


def runfile_path(host) -> None:
    standin = yaml.safe_load((STANDINS / "standin_driver.yml").read_text())["standin_driver_runfile"]
    pinned = dict(standin, url="https://downloads.invalid/" + standin["file"])
    overrides = dict(ci_overrides(host), nvidia_driver_runfile=pinned)
    # What a real Debian host has and a minimal container lacks: the initramfs tools.
    host.sh("apt-get update -qq && apt-get install -y -qq --no-install-recommends initramfs-tools >/dev/null")
    depends = host.sh("apt-cache depends linux-headers-amd64").stdout
    kernel = re.search(r"Depends: linux-headers-(\S+-amd64)$", depends, re.M).group(1)
    args = {"driver_host_root": BUS, "driver_kernel": kernel, "stack_artifact_overrides": overrides}
    run = host.play("--tags", "driver", **args)
    assert run.returncode != 0, run.output[-3000:]
    out = " ".join(run.output.split())
    assert (
        "driver 580.105.08 is installed, but it was built for the kernel %s and the running kernel is" % kernel in out
    )
    assert "reboot, then run the same command again" in out
    record = host.state("driver")
    assert record["status"] == "complete" and record["version"] == "580.105.08"
    assert record["details"]["action"] == "install" and record["details"]["reboot_pending"] is True
    assert record["details"]["source"] == "runfile" and record["details"]["flavour"] == "proprietary"
    log = host.sh("cat /var/log/nvidia-installer.log").stdout
    assert "options: --silent --dkms -m=kernel --kernel-name=%s --tmpdir=" % kernel in log
    assert "is now complete" in log
    assert "installed" in host.sh("dkms status -m nvidia -v 580.105.08 -k %s" % kernel).stdout
    assert host.sh("modinfo -k %s -F license nvidia" % kernel).stdout.strip() == "NVIDIA"
    assert (
        host.sh("cat /etc/modprobe.d/verl-p40-nouveau.conf").stdout == "blacklist nouveau\noptions nouveau modeset=0\n"
    )
    assert not host.exists("/var/cache/verl-p40/scratch/driver-installer")

    # Before the reboot: still waiting; the installer does not run again.
    run = host.play("--tags", "driver", **args)
    assert run.returncode != 0 and "reboot, then run the same command again" in " ".join(run.output.split())
    assert host.sh("cat /var/log/nvidia-installer.log").stdout == log
    assert host.state("driver")["details"]["reboot_pending"] is True

    # The reboot, simulated: sysfs anew, the module loaded and bound, nvidia-smi answering (the
    # driver layer's query and preflight's).
    plant_bus(host, loaded="580.105.08", bound=True)
    host.install_script("/usr/local/bin/nvidia-smi", P40_R580_SMI)
    run = host.play("--tags", "driver", **args)
    assert run.returncode == 0, run.output[-3000:]
    record = host.state("driver")
    assert record["details"]["reboot_pending"] is False and record["details"]["action"] == "keep"
    assert record["details"]["cards"] == [
        {
            "bus_id": "00000000:03:00.0",
            "name": "Tesla P40",
            "memory_mib": 22919,
            "ecc": "Enabled",
            "persistence_mode": "Disabled",
        }
    ]
    # The runfile brings nvidia-persistenced without a unit: the layer writes one and makes its
    # user; a container has no systemd to start it with, and the record says so.
    assert record["details"]["persistenced"] == "not started: systemd does not run this host"
    assert "nvidia-persistenced: not started: systemd does not run this host" in " ".join(run.output.split())
    unit = host.sh("cat /etc/systemd/system/nvidia-persistenced.service").stdout
    assert 'ExecStart="/usr/bin/nvidia-persistenced" "--user" "nvidia-persistenced"\n' in unit
    assert "Type=forking\n" in unit and "RuntimeDirectory=nvidia-persistenced\n" in unit
    assert "WantedBy=multi-user.target" in unit
    user = host.sh("getent passwd nvidia-persistenced").stdout.strip().split(":")
    assert int(user[2]) < 1000 and user[6] == "/usr/sbin/nologin", user


def test_nvidia_persistenced_runs_under_systemd(tmp_path_factory):
    """The unit the layer writes for the runfile's daemon, run by a real systemd (a container booted
    with it): a P40 on the stand-in bus under a working R580 driver that the layer keeps, the
    stand-in daemon (NVIDIA's start: --user, its runtime directory, a fork) in /usr/bin as the
    runfile installs it. systemd starts it as the daemon's user, enables it for boot, the cards go
    to persistence mode, and a stop leaves no runtime directory behind (systemd's, not an rm -rf)."""
    missing_vars_files()
    with container([IMAGE], tmp_path_factory, systemd=True) as host:
        # The driver as after the reboot (test_the_runfile_path_..., above): loaded, bound, answering;
        # systemd runs the host (driver_info reads it under driver_host_root, as sys/ and proc/).
        plant_bus(host, loaded="580.105.08", bound=True)
        host.sh("mkdir -p %s/run/systemd/system" % BUS)
        host.install_script("/usr/local/bin/nvidia-smi", P40_R580_SMI)
        host.install_script("/usr/bin/nvidia-persistenced", standin_driver.NVIDIA_PERSISTENCED)
        run = host.play("--tags", "driver", driver_host_root=BUS)
        assert run.returncode == 0, run.output[-3000:]
        out = " ".join(run.output.split())
        assert "nvidia-persistenced: running" in out
        record = host.state("driver")
        assert record["details"]["action"] == "keep" and record["details"]["persistenced"] == "running"
        assert record["details"]["cards"][0]["persistence_mode"] == "Enabled"
        assert host.sh("systemctl is-active nvidia-persistenced").stdout.strip() == "active"
        assert host.sh("systemctl is-enabled nvidia-persistenced").stdout.strip() == "enabled"
        pid = host.sh("cat /run/nvidia-persistenced/nvidia-persistenced.pid").stdout.strip()
        assert host.sh("ps -o user= -p %s" % pid).stdout.strip() == "nvidia-persistenced"
        assert host.sh("stat -c %U /run/nvidia-persistenced").stdout.strip() == "nvidia-persistenced"
        # A second look (-e verify=driver makes the layer look again): nothing to change.
        again = host.play("--tags", "driver", driver_host_root=BUS, verify="driver")
        assert again.returncode == 0 and re.search(r"changed=0\b", again.output), again.output[-3000:]
        host.sh("systemctl stop nvidia-persistenced")
        assert not host.exists("/run/nvidia-persistenced")
        # A daemon that runs but leaves the cards out of persistence mode (nvidia-smi says Disabled
        # whatever runs) is no daemon doing its work: the layer stops and says where to look.
        host.sh("sed -i 's/mode=Enabled$/mode=Disabled/' /usr/local/bin/nvidia-smi")
        off = host.play("--tags", "driver", driver_host_root=BUS, verify="driver")
        assert off.returncode != 0
        assert (
            "nvidia-persistenced was started, but nvidia-smi reports persistence mode off on 00000000:03:00.0"
            in " ".join(off.output.split())
        )


TWO_P40_SMI = r"""#!/bin/sh
# Two P40s on a board without peer-to-peer between them (ACS).
case "$1" in
  topo) printf ' \tGPU0\tGPU1\t\n GPU0\tX\tNS\t\n GPU1\tNS\tX\t\n\nLegend:\n\n  X    = Self\n  NS   = Not supported\n' ;;
  *) printf '0, Tesla P40, 6.1, 22919, 535.183.01, 00000000:3B:00.0\n1, Tesla P40, 6.1, 22919, 535.183.01, 00000000:AF:00.0\n' ;;
esac
"""


def test_two_gpus_without_peer_to_peer(host):
    host.install_script("/usr/local/bin/nvidia-smi", TWO_P40_SMI)
    try:
        # Two P40s' RAM estimate (24.5 GiB) is more than a CI machine has; memory is not this test's subject.
        run = host.play("--tags", "preflight", preflight_require_gpu=True, preflight_min_ram_gb=0)
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
        "cp /etc/os-release /etc/os-release.orig && sed -i 's/^VERSION_ID=.*/VERSION_ID=\"14\"/' /etc/os-release"
        " && cp /etc/debian_version /etc/debian_version.orig && echo 14.0 > /etc/debian_version"
    )
    try:
        run = host.play()
    finally:
        host.sh("mv /etc/os-release.orig /etc/os-release && mv /etc/debian_version.orig /etc/debian_version")
    assert run.returncode != 0
    assert "Debian 14 is not supported" in run.output
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
    driver_record = stack_paths()["stack_state_dir"] + "/driver.json"
    host.sh("rm -f %s" % driver_record)
    run = host.play(**extra)
    assert run.returncode != 0
    # Whitespace as one space: the output wraps a long message.
    assert message in " ".join(run.output.split())
    assert_nothing_built(host)
    # Every input but those of the roles whose defaults read the GPU profile (apex_max_jobs here; a
    # role's options carry its name) is checked before the first layer: the driver layer did not run,
    # so it recorded nothing. (-e rebuild is checked by layer_state's first query, the driver's own.)
    late = yaml.safe_load((REPO / "roles/preflight/vars/main.yml").read_text())["__preflight_input_roles"]
    if not any(name.split("_")[0] in late or name == "rebuild" for name in extra):
        assert not host.exists(driver_record), "the driver layer ran before the bad input was refused"
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


def test_a_user_that_cannot_be_created(host):
    run = host.play("--tags", "conda", stack_user="Bad User!")
    assert run.returncode != 0
    assert "The training user 'Bad User!'" in run.output
    assert host.state("conda") == {}
    assert not host.exists("/opt/miniforge3")
    # Nothing of any layer was written either.
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
    # CUDA alone: cuDNN's archive (1.1 GB unpacked) would take a minute of this lane to copy and unpack
    # through the same artifact tasks; the default scenario and Debian 11 build cuDNN from the mirror.
    run = host.play("--tags", "cuda", stack_controller_cache_dir=str(STANDINS), stack_mirror_url="http://127.0.0.1:9")
    assert run.returncode == 0, run.output[-3000:]
    assert host.state("cuda")["status"] == "complete"
    assert host.state("cudnn") == {}
    nvcc = host.sh("/usr/local/cuda-11.8/bin/nvcc --version").stdout
    assert "release 11.8, V11.8.89" in nvcc
    # The half-built tree was removed first: the good installer did not merely complete it.
    assert not host.exists("/usr/local/cuda-11.8/leftover-of-the-failed-run")


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
