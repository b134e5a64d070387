"""filter_plugins/driver.py: the driver layer's decisions, before any of it is wired.

The PCI id table against pci.ids (the committed excerpt, and the host's own file where there is
one), a fake /sys tree and lspci output, the branch and flavour from the architectures, the
decision for driver_install auto/never/always, and the plans per OS and driver_source.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from conftest import run_module
from module_run import in_process

import driver  # filter_plugins/driver.py (pytest.ini's pythonpath)
import driver_info  # library/driver_info.py

EXCERPT = Path(__file__).resolve().parent / "samples" / "pci.ids" / "nvidia-2023.04.10.ids"

UBUNTU = {"distribution": "Ubuntu", "version": "22.04", "kernel": "5.15.0-91-generic"}
DEBIAN = {"distribution": "Debian", "version": "12.8", "kernel": "6.1.0-28-amd64"}
RUNFILE = {
    "version": "580.105.08",
    "file": "NVIDIA-Linux-x86_64-580.105.08.run",
    "url": "https://us.download.nvidia.com/tesla/580.105.08/NVIDIA-Linux-x86_64-580.105.08.run",
    "sha256": "0" * 64,
}


def nvidia_section(text: str) -> dict[int, str]:
    """device id -> name, from the NVIDIA vendor block of a pci.ids file."""
    found, inside = {}, False
    for line in text.splitlines():
        if re.match(r"^[0-9a-f]{4}  ", line):
            inside = line.startswith("10de  ")
        elif inside:
            match = re.match(r"^\t([0-9a-f]{4})  (.*)$", line)
            if match:
                found[int(match.group(1), 16)] = match.group(2)
    return found


def cards(*devices: int) -> list[dict]:
    return [dict(driver.gpu_arch(device), address="0000:%02x:00.0" % n) for n, device in enumerate(devices, 1)]


# --- the table -----------------------------------------------------------------------------------


def test_every_id_is_pci_ids_own_entry():
    excerpt = nvidia_section(EXCERPT.read_text())
    assert "Version: 2023.04.10" in EXCERPT.read_text()
    assert driver.NVIDIA_GPUS == excerpt
    for path in (Path("/usr/share/misc/pci.ids"), Path("/usr/share/hwdata/pci.ids")):
        if path.is_file():  # a newer pci.ids may rename a card, never move an id to another chip
            system = nvidia_section(path.read_text(errors="replace"))
            for device, name in driver.NVIDIA_GPUS.items():
                assert system[device][:2] == name[:2], (hex(device), name, system[device])


def test_the_table_holds_every_gpu_of_those_chips_and_nothing_else():
    for name in driver.NVIDIA_GPUS.values():
        assert name[:2] in driver.CHIP_ARCH
        assert not re.search(r"audio|usb|ucsi", name, re.I), name


@pytest.mark.parametrize(
    ("device", "arch", "name"),
    [
        (0x1B38, "pascal", "Tesla P40"),
        (0x15F7, "pascal", "Tesla P100 PCIe 12GB"),
        (0x15F8, "pascal", "Tesla P100 PCIe 16GB"),
        (0x15F9, "pascal", "Tesla P100 SXM2 16GB"),
        (0x1BB3, "pascal", "Tesla P4"),
        (0x1BB4, "pascal", "Tesla P6"),
        (0x1B39, "pascal", "Tesla P10"),
        (0x15F0, "pascal", "Quadro GP100"),
        (0x1B00, "pascal", "TITAN X"),
        (0x1B02, "pascal", "TITAN Xp"),
        (0x1B06, "pascal", "GeForce GTX 1080 Ti"),
        (0x1B80, "pascal", "GeForce GTX 1080"),
        (0x1B81, "pascal", "GeForce GTX 1070"),
        (0x1B82, "pascal", "GeForce GTX 1070 Ti"),
        (0x1B83, "pascal", "GeForce GTX 1060 6GB"),
        (0x1C03, "pascal", "GeForce GTX 1060 6GB"),
        (0x1C81, "pascal", "GeForce GTX 1050"),
        (0x1C82, "pascal", "GeForce GTX 1050 Ti"),
        (0x1D01, "pascal", "GeForce GT 1030"),
        (0x1DB1, "volta", "Tesla V100 SXM2 16GB"),
        (0x1DB4, "volta", "Tesla V100 PCIe 16GB"),
        (0x1DB5, "volta", "Tesla V100 SXM2 32GB"),
        (0x1DB6, "volta", "Tesla V100 PCIe 32GB"),
        (0x1DF6, "volta", "Tesla V100S PCIe 32GB"),
        (0x1D81, "volta", "TITAN V"),
        (0x1EB8, "turing", "Tesla T4"),
        (0x1E37, "turing", "Tesla T10 16GB"),
        (0x1E38, "turing", "Tesla T40 24GB"),
        (0x1E30, "turing", "Quadro RTX 6000/8000"),
        (0x1E04, "turing", "GeForce RTX 2080 Ti"),
        (0x2184, "turing", "GeForce GTX 1660"),
        (0x17FD, "maxwell", "Tesla M40"),
        (0x13F2, "maxwell", "Tesla M60"),
        (0x102D, "kepler", "Tesla K80"),
    ],
)
def test_data_center_cards_and_the_gtx_10_family_map_to_their_architecture(device, arch, name):
    entry = driver.gpu_arch(device)
    assert entry["arch"] == arch and name in entry["name"], entry
    assert entry["id"] == "10de:%04x" % device


def test_every_pascal_volta_turing_data_center_card_and_gtx_10xx_is_in_the_table():
    names = {name: device for device, name in driver.NVIDIA_GPUS.items()}
    tesla = [name for name in names if re.search(r"\[Tesla [PVT]\d", name)]
    assert len(tesla) >= 17, tesla
    for name, device in names.items():
        if re.search(r"Tesla [PVT]\d|GTX 10[5-8]0|GP100GL|GV100GL|TU10[24]GL", name):
            assert driver.gpu_arch(device)["arch"] in ("pascal", "volta", "turing"), name
    gtx10 = sorted(name for name in names if re.search(r"GeForce GTX 10[5-8]0", name))
    assert all(name.startswith("GP1") for name in gtx10), gtx10


def test_an_unknown_id_is_reported_not_guessed():
    entry = driver.gpu_arch(0x2330)  # an H100: Hopper, not in the table
    assert entry == {"id": "10de:2330", "device": 0x2330, "name": "unknown", "arch": None}
    choice = driver.driver_choice(cards(0x2330))
    assert choice["unknown"] == ["10de:2330"]
    assert "10de:2330 is not in the driver layer's table" in choice["problems"][0]
    # Beside a known card: the known card decides, the unknown one is still named.
    mixed = driver.driver_choice(cards(0x1B38, 0x2330))
    assert mixed["branch"] == 580 and mixed["unknown"] == ["10de:2330"] and not mixed["problems"]
    assert not mixed["open_allowed"]


# --- the bus -------------------------------------------------------------------------------------


def fake_device(root: Path, address: str, vendor: str, device: str, pci_class: str, bound: str | None = None) -> None:
    path = root / "sys" / "bus" / "pci" / "devices" / address
    path.mkdir(parents=True)
    (path / "vendor").write_text(vendor + "\n")
    (path / "device").write_text(device + "\n")
    (path / "class").write_text(pci_class + "\n")
    if bound:
        target = root / "sys" / "bus" / "pci" / "drivers" / bound
        target.mkdir(parents=True, exist_ok=True)
        (path / "driver").symlink_to(target)


def test_sysfs_lists_the_nvidia_display_devices(tmp_path: Path):
    """library/driver_info.py reads the bus on the host; driver_pci_gpus names each card on the controller."""
    fake_device(tmp_path, "0000:03:00.0", "0x10de", "0x1b38", "0x030200", bound="nouveau")
    fake_device(tmp_path, "0000:04:00.0", "0x10de", "0x2330", "0x030200")
    fake_device(tmp_path, "0000:05:00.0", "0x10de", "0x1c82", "0x030000", bound="nvidia")
    fake_device(tmp_path, "0000:05:00.1", "0x10de", "0x0fb9", "0x040300")  # the card's audio function
    fake_device(tmp_path, "0000:00:02.0", "0x8086", "0x3e92", "0x030000")  # an Intel GPU
    fake_device(tmp_path, "0000:06:00.0", "0x10de", "not-hex", "0x030000")  # unreadable: skipped
    devices = driver_info.pci_devices(str(tmp_path))
    assert [device["address"] for device in devices] == ["0000:03:00.0", "0000:04:00.0", "0000:05:00.0"]
    found = driver.pci_gpus(devices)
    assert [(gpu["address"], gpu["id"], gpu["arch"], gpu["driver"]) for gpu in found] == [
        ("0000:03:00.0", "10de:1b38", "pascal", "nouveau"),
        ("0000:04:00.0", "10de:2330", None, None),
        ("0000:05:00.0", "10de:1c82", "pascal", "nvidia"),
    ]
    assert found[0]["name"] == "GP102GL [Tesla P40]" and found[0]["class"] == "0x030200"
    assert driver_info.pci_devices(str(tmp_path / "none")) == []
    # The filter holds to NVIDIA's display class itself too (an audio function, another vendor).
    assert driver.pci_gpus([{"address": "a", "vendor": 0x10DE, "device": 0x0FB9, "class": 0x040300}]) == []
    assert driver.pci_gpus([{"address": "a", "vendor": 0x8086, "device": 0x3E92, "class": 0x030000}]) == []


# --- branch and flavour --------------------------------------------------------------------------


def test_pascal_with_turing_takes_r580_proprietary():
    choice = driver.driver_choice(cards(0x1B38, 0x1EB8))
    assert (choice["branch"], choice["flavour"], choice["limit"]) == (580, "proprietary", 580)
    assert choice["archs"] == ["pascal", "turing"] and not choice["open_allowed"] and not choice["problems"]
    refused = driver.driver_choice(cards(0x1B38, 0x1EB8), branch=590)
    assert "driver_branch 590: R580 is the last branch for Pascal cards (GP102GL [Tesla P40]" in refused["problems"][0]
    opened = driver.driver_choice(cards(0x1B38, 0x1EB8), flavour="open")
    assert "open kernel modules need Turing or newer" in opened["problems"][0]


def test_turing_alone_allows_a_newer_branch_and_the_open_flavour():
    choice = driver.driver_choice(cards(0x1EB8, 0x1EB8), branch=590, flavour="open")
    assert (choice["branch"], choice["flavour"], choice["limit"]) == (590, "open", None)
    assert choice["open_allowed"] and not choice["problems"]
    assert driver.driver_choice(cards(0x1EB8))["flavour"] == "proprietary"  # auto stays on the tested path


def test_maxwell_and_volta_end_at_r580_and_kepler_is_refused():
    assert driver.driver_choice(cards(0x17FD, 0x1DB4))["limit"] == 580
    kepler = driver.driver_choice(cards(0x102D))
    assert "Kepler cards have no driver newer than R470" in kepler["problems"][0]
    assert "CUDA 11.8 needs 520.61.05" in kepler["problems"][0]
    assert "CUDA 11.8 needs" in driver.driver_choice(cards(0x1B38), branch=515)["problems"][0]


# --- the decision --------------------------------------------------------------------------------


def test_a_present_590_driver_with_a_p40_is_replaced():
    decision = driver.driver_decision(cards(0x1B38), {"version": "590.44.01", "working": True}, "auto", UBUNTU)
    assert decision["action"] == "install"
    assert (
        decision["reason"]
        == "driver 590.44.01 cannot drive GP102GL [Tesla P40] (10de:1b38): R580 is the last branch for Pascal"
    )
    assert decision["plan"]["branch"] == 580


def test_a_working_580_is_left_alone_under_auto_and_replaced_under_always():
    present = {"version": "580.105.08", "working": True, "flavour": "proprietary"}
    kept = driver.driver_decision(cards(0x1B38), present, "auto", DEBIAN)
    assert kept["action"] == "keep" and kept["message"] == ""
    # a working, suitable 535 too: auto does not move a driver that drives every card
    assert (
        driver.driver_decision(cards(0x1B38), {"version": "535.261.03", "working": True}, "auto", UBUNTU)["action"]
        == "keep"
    )
    always = driver.driver_decision(cards(0x1B38), present, "always", UBUNTU)
    assert always["action"] == "install" and "driver_install: always" in always["reason"]


@pytest.mark.parametrize(
    ("present", "why"),
    [
        (None, "no NVIDIA driver is installed"),
        ({"version": "470.256.02", "working": True}, "older than the 520.61.05 CUDA 11.8 needs"),
        ({"version": "580.105.08", "working": False}, "installed but does not work"),
        ({"version": "580.105.08", "working": True, "flavour": "open"}, "open kernel modules"),
    ],
)
def test_auto_installs_where_no_working_suitable_driver_is(present, why):
    decision = driver.driver_decision(cards(0x1B38), present, "auto", UBUNTU)
    assert decision["action"] == "install" and why in decision["reason"]


def test_never_stops_with_the_exact_steps():
    decision = driver.driver_decision(cards(0x1B38), None, "never", UBUNTU)
    assert decision["action"] == "stop"
    message = decision["message"]
    assert message.startswith("driver_install: never, and no NVIDIA driver is installed. Install R580 (proprietary")
    assert "run the same command again" in message
    assert (
        "sudo apt-get install -y linux-modules-nvidia-580-server-5.15.0-91-generic nvidia-headless-no-dkms-580-server"
        in message
    )
    assert "sudo apt-mark hold " in message and "sudo update-initramfs -u" in message
    assert "blacklist nouveau" in message
    # never keeps a suitable driver without a word
    assert (
        driver.driver_decision(cards(0x1B38), {"version": "580.1.2", "working": True}, "never", UBUNTU)["action"]
        == "keep"
    )


def test_no_gpu_no_decision_and_a_bad_mode_is_refused():
    assert driver.driver_decision([], None, "auto", UBUNTU)["action"] == "none"
    with pytest.raises(AnsibleFilterError, match="driver_install 'sometimes'"):
        driver.driver_decision(cards(0x1B38), None, "sometimes", UBUNTU)


# --- the plans -----------------------------------------------------------------------------------


def test_ubuntu_takes_its_r580_server_packages_prebuilt_where_they_exist():
    plan = driver.driver_plan(UBUNTU)
    assert (plan["source"], plan["method"], plan["modules"]) == ("distro", "apt", "prebuilt")
    assert plan["packages"] == [
        "linux-modules-nvidia-580-server-5.15.0-91-generic",
        "nvidia-headless-no-dkms-580-server",
        "nvidia-utils-580-server",
        "nvidia-compute-utils-580-server",
    ]
    assert plan["hold"] == plan["packages"] and not plan["problems"]
    assert not any("open" in name for name in plan["packages"])
    dkms = driver.driver_plan(UBUNTU, prebuilt=False)
    assert dkms["modules"] == "dkms"
    assert dkms["packages"][:2] == ["linux-headers-5.15.0-91-generic", "nvidia-dkms-580-server"]
    assert "linux-headers-5.15.0-91-generic" not in dkms["hold"]
    opened = driver.driver_plan(UBUNTU, flavour="open")
    assert "nvidia-utils-580-server-open" in opened["packages"]
    # Ubuntu 20.04: no R580 modules from Canonical; NVIDIA's runfile by default
    assert driver.driver_plan(dict(UBUNTU, version="20.04"), runfile=RUNFILE)["method"] == "runfile"


def test_debian_takes_nvidias_runfile_by_default():
    plan = driver.driver_plan(DEBIAN, runfile=RUNFILE)
    assert (plan["source"], plan["method"], plan["modules"]) == ("runfile", "runfile", "dkms")
    assert plan["packages"][0] == "linux-headers-6.1.0-28-amd64"
    assert plan["runfile"]["args"] == ["--silent", "--dkms", "-m=kernel"]
    assert plan["runfile"]["artifact"] == "nvidia_driver_runfile" and not plan["problems"]
    assert "sudo sh ./NVIDIA-Linux-x86_64-580.105.08.run --silent --dkms -m=kernel" in plan["steps"]
    assert plan["nouveau"] == {
        "path": "/etc/modprobe.d/verl-p40-nouveau.conf",
        "text": "blacklist nouveau\noptions nouveau modeset=0\n",
    }
    assert plan["initramfs"] == ["update-initramfs", "-u"]
    unpinned = driver.driver_plan(DEBIAN)
    assert "nvidia_driver_runfile" in unpinned["problems"][0] and "not pinned yet" in unpinned["problems"][0]
    other = driver.driver_plan(DEBIAN, branch=580, runfile=dict(RUNFILE, version="570.1.2"))
    assert "the pinned runfile" in other["problems"][0]


def test_debian_distro_packages_are_535_on_12_550_on_13_and_refused_on_11():
    twelve = driver.driver_plan(DEBIAN, source="distro")
    assert (twelve["method"], twelve["branch"]) == ("apt", 535)
    kept = ["nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "nvidia-persistenced"]
    assert twelve["packages"] == ["linux-headers-6.1.0-28-amd64"] + kept
    assert twelve["hold"] == kept and not twelve["problems"]
    assert driver.driver_plan(dict(DEBIAN, version="13"), source="distro")["branch"] == 550
    eleven = driver.driver_plan(dict(DEBIAN, version="11.11"), source="distro")
    assert "Debian 11's non-free driver is R470" in eleven["problems"][0]
    wrong = driver.driver_plan(DEBIAN, source="distro", requested=580)
    assert "Debian 12's non-free packages are R535" in wrong["problems"][0]
    decision = driver.driver_decision(cards(0x1B38), None, "auto", DEBIAN, source="distro")
    assert decision["action"] == "install" and decision["choice"]["branch"] == 535


def test_an_unknown_os_is_refused():
    plan = driver.driver_plan({"distribution": "Fedora", "version": "40", "kernel": "6.8.5"})
    assert "not fedora 40" in plan["problems"][0]
    decision = driver.driver_decision(
        cards(0x1B38), None, "auto", {"distribution": "Fedora", "version": "40", "kernel": "x"}
    )
    assert decision["action"] == "stop"


# --- after the install ---------------------------------------------------------------------------


def test_nouveau_or_another_module_loaded_needs_a_reboot():
    bound = [dict(cards(0x1B38)[0], driver="nouveau")]
    stop = driver.driver_after_install(bound, None, "580.105.08", reboot=False)
    assert stop["action"] == "stop"
    assert stop["message"] == (
        "driver 580.105.08 is installed, but nouveau drives 0000:01:00.0: reboot, then run the same command"
        " again (or set driver_reboot: true)."
    )
    assert driver.driver_after_install(bound, None, "580.105.08", reboot=True)["action"] == "reboot"
    old = driver.driver_after_install(cards(0x1B38), "590.44.01", "580.105.08")
    assert old["action"] == "stop" and "nvidia module 590.44.01 loaded" in old["message"]
    assert driver.driver_after_install(cards(0x1B38), None, "580.105.08")["action"] == "load"
    assert driver.driver_after_install(cards(0x1B38), "580.105.08", "580.105.08")["action"] == "none"
    # Built for a kernel the host has not booted yet (driver_kernel): a reboot, whatever is loaded.
    later = driver.driver_after_install(
        cards(0x1B38), None, "580.105.08", kernel="6.1.0-41-amd64", running="6.1.0-28-amd64"
    )
    assert later["action"] == "stop"
    assert "built for the kernel 6.1.0-41-amd64 and the running kernel is 6.1.0-28-amd64" in later["message"]
    same = driver.driver_after_install(
        cards(0x1B38), None, "580.105.08", kernel="6.1.0-28-amd64", running="6.1.0-28-amd64"
    )
    assert same["action"] == "load"


def test_the_runfile_builds_for_a_kernel_not_running_only_when_asked():
    plan = driver.driver_plan(dict(DEBIAN, running_kernel="6.1.0-28-amd64"), "runfile", runfile=RUNFILE)
    assert plan["runfile"]["args"] == ["--silent", "--dkms", "-m=kernel"]
    later = dict(DEBIAN, kernel="6.1.0-41-amd64", running_kernel="6.1.0-28-amd64")
    plan = driver.driver_plan(later, "runfile", runfile=RUNFILE)
    assert plan["runfile"]["args"] == ["--silent", "--dkms", "-m=kernel", "--kernel-name=6.1.0-41-amd64"]
    assert plan["packages"][0] == "linux-headers-6.1.0-41-amd64"


# --- what the host has (library/driver_info.py) --------------------------------------------------


def program(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_the_loaded_module_its_flavour_and_the_one_on_disk(tmp_path: Path):
    modinfo = program(
        tmp_path / "modinfo",
        # Only for the kernel asked, where one is: -k KERNEL comes first.
        'if [ "$1" = -k ]; then [ "$2" = 6.1.0-41-amd64 ] || exit 1; shift 2; fi\n'
        'case "$2" in version) echo 580.105.08;; license) echo "${LICENSE:-NVIDIA}";; esac\n',
    )
    # Nothing loaded, nothing on disk (modinfo fails for a module it cannot find).
    missing = program(tmp_path / "modinfo-none", "echo 'modinfo: ERROR: Module nvidia not found.' >&2; exit 1\n")
    assert driver_info.module_state(str(tmp_path), missing) == {"loaded": None, "on_disk": None, "flavour": None}
    assert driver_info.module_state(str(tmp_path), "") == {"loaded": None, "on_disk": None, "flavour": None}
    # On disk, not loaded: the flavour from the module's licence (the open modules are MIT/GPL).
    assert driver_info.module_state(str(tmp_path), modinfo) == {
        "loaded": None,
        "on_disk": "580.105.08",
        "flavour": "proprietary",
    }
    assert driver_info.module_state(str(tmp_path), modinfo, "6.1.0-41-amd64")["on_disk"] == "580.105.08"
    assert driver_info.module_state(str(tmp_path), modinfo, "6.1.0-28-amd64")["on_disk"] is None
    # Loaded: /proc/driver/nvidia/version names the open modules.
    (tmp_path / "sys" / "module" / "nvidia").mkdir(parents=True)
    (tmp_path / "sys" / "module" / "nvidia" / "version").write_text("590.44.01\n")
    proc = tmp_path / "proc" / "driver" / "nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.44.01  Release Build\n")
    assert driver_info.module_state(str(tmp_path), "") == {"loaded": "590.44.01", "on_disk": None, "flavour": "open"}
    (proc / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.105.08  Wed Oct 29 2025\n")
    assert driver_info.module_state(str(tmp_path), "")["flavour"] == "proprietary"


def test_nvidia_smi_working_failing_and_missing(tmp_path: Path):
    two = program(
        tmp_path / "smi-two",
        'test "$1" = --query-gpu=driver_version,pci.bus_id,name,memory.total,ecc.mode.current,persistence_mode'
        " || exit 2\n"
        'test "$2" = --format=csv,noheader,nounits || exit 2\n'
        "echo '580.105.08, 00000000:03:00.0, Tesla P40, 22919, Enabled, Enabled'\n"
        "echo '580.105.08, 00000000:04:00.0, Tesla P100-PCIE-16GB, 16384, Disabled, Disabled'\n"
        # The five fields of the query before persistence_mode was asked for: not a card.
        "echo '580.105.08, 00000000:05:00.0, Tesla P40, 22919, Enabled'\n"
        "echo 'a line that is not a card'\n",
    )
    assert driver_info.smi_state(two) == {
        "rc": 0,
        "driver_version": "580.105.08",
        "gpus": 2,
        "cards": [
            {
                "bus_id": "00000000:03:00.0",
                "name": "Tesla P40",
                "memory_mib": 22919,
                "ecc": "Enabled",
                "persistence_mode": "Enabled",
            },
            {
                "bus_id": "00000000:04:00.0",
                "name": "Tesla P100-PCIE-16GB",
                "memory_mib": 16384,
                "ecc": "Disabled",
                "persistence_mode": "Disabled",
            },
        ],
        "error": "",
    }
    # A 590 driver on a P40: the driver answers, but sees no card.
    none = program(tmp_path / "smi-none", "echo 'No devices were found'; exit 6\n")
    assert driver_info.smi_state(none) == {
        "rc": 6,
        "driver_version": None,
        "gpus": 0,
        "cards": [],
        "error": "No devices were found",
    }
    assert driver_info.smi_state(str(tmp_path / "absent"))["rc"] == 127
    assert driver_info.smi_state("no-such-nvidia-smi-on-path")["rc"] == 127


def test_the_module_through_ansible(tmp_path: Path):
    """The same module as a task runs it (argument spec, transport, its own Python)."""
    smi = program(tmp_path / "nvidia-smi", P40_LINE)
    found = run_module("driver_info", {"root": str(tmp_path), "nvidia_smi": smi, "modinfo": "", "mokutil": ""})
    assert found["_rc"] == 0 and found["installed"] == {"version": "580.105.08", "working": True, "flavour": None}


def test_a_line_before_the_cards_does_not_hide_them(tmp_path: Path):
    """nvidia-smi can print a warning before its CSV (a corrupted infoROM): every card after it counts."""
    warned = program(
        tmp_path / "nvidia-smi",
        "echo 'WARNING: infoROM is corrupted at gpu 0000:03:00.0'\n" + P40_LINE,
    )
    found = driver_info.smi_state(warned)
    assert found["gpus"] == 1 and found["cards"][0]["name"] == "Tesla P40"
    assert found["driver_version"] == "580.105.08"


def test_a_long_error_keeps_its_last_500_characters(tmp_path: Path):
    """The reason nvidia-smi gives comes last (after a driver's banner, a library's warnings): that end
    is kept, bounded, so the result stays readable."""
    noisy = program(
        tmp_path / "nvidia-smi",
        "printf 'warning: %0600d\\n' 0 >&2; echo 'Failed to initialize NVML: Driver/library version mismatch' >&2; exit 18\n",
    )
    error = driver_info.smi_state(noisy)["error"]
    assert len(error) == 500 and error.endswith("\nFailed to initialize NVML: Driver/library version mismatch")


def test_a_program_that_cannot_run_or_hangs_is_reported_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Missing (127), not executable as it is (126, the reason), or hanging past a minute (126): the
    module reports it where the layer's decision reads it and goes on."""
    absent = str(tmp_path / "absent-nvidia-smi")
    assert driver_info.smi_state(absent)["error"] == "%s: not found" % absent
    broken = tmp_path / "nvidia-smi"
    broken.write_bytes(b"\x7fELF not really\n")
    broken.chmod(0o755)
    cannot = driver_info.smi_state(str(broken))
    assert cannot["rc"] == 126 and "Exec format error" in cannot["error"]
    directory = driver_info.smi_state(str(tmp_path))  # there, but no program: not "not installed"
    assert directory["rc"] == 126 and "Permission denied" in directory["error"]
    hung = program(tmp_path / "nvidia-smi-hung", "sleep 600\n")
    real = subprocess.run

    def a_minute_passes(argv, **kwargs):
        """subprocess.run, but the program has already run past the time the module gives it."""
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"]) if argv[0] == hung else real(argv, **kwargs)

    monkeypatch.setattr(subprocess, "run", a_minute_passes)
    stopped = driver_info.smi_state(hung)
    assert stopped["rc"] == 126 and stopped["error"].endswith("timed out after 60 seconds")


def test_secure_boot_from_mokutil_and_efi(tmp_path: Path):
    assert driver_info.secure_boot(str(tmp_path), "mokutil") == "disabled"  # no EFI: legacy boot
    (tmp_path / "sys" / "firmware" / "efi").mkdir(parents=True)
    on = program(tmp_path / "mok-on", "echo 'SecureBoot enabled'\n")
    off = program(tmp_path / "mok-off", "echo 'SecureBoot disabled'\n")
    odd = program(tmp_path / "mok-odd", "echo 'EFI variables are not supported on this system' >&2; exit 1\n")
    assert driver_info.secure_boot(str(tmp_path), on) == "enabled"
    assert driver_info.secure_boot(str(tmp_path), off) == "disabled"
    assert driver_info.secure_boot(str(tmp_path), odd) == "unknown"
    assert driver_info.secure_boot(str(tmp_path), "") == "unknown"


# The module as a task runs it, in this process (tests/fixtures/module_run.py);
# test_the_module_through_ansible (and test_module_docs) run it as a task.

P40_LINE = "echo '580.105.08, 00000000:03:00.0, Tesla P40, 22919, Enabled, Disabled'\n"


def facts(root: Path, smi: str, check: bool = False, **args: str) -> dict:
    return in_process(
        driver_info, dict({"root": str(root), "nvidia_smi": smi, "modinfo": "", "mokutil": ""}, **args), check=check
    )


def test_the_module_reports_the_hosts_devices_driver_and_boot(tmp_path: Path):
    """One P40 bound to a working proprietary 580 driver, on a host booted with Secure Boot."""
    fake_device(tmp_path, "0000:03:00.0", "0x10de", "0x1b38", "0x030200", bound="nvidia")
    (tmp_path / "sys" / "module" / "nvidia").mkdir(parents=True)
    (tmp_path / "sys" / "module" / "nvidia" / "version").write_text("580.105.08\n")
    (tmp_path / "sys" / "firmware" / "efi").mkdir(parents=True)
    smi = program(tmp_path / "nvidia-smi", P40_LINE)
    mokutil = program(tmp_path / "mokutil", "echo 'SecureBoot enabled'\n")
    found = facts(tmp_path, smi, mokutil=mokutil)
    assert found["_rc"] == 0 and found["changed"] is False
    assert found["devices"] == [
        {"vendor": 0x10DE, "device": 0x1B38, "class": 0x030200, "driver": "nvidia", "address": "0000:03:00.0"}
    ]
    assert found["module"] == {"loaded": "580.105.08", "on_disk": None, "flavour": "proprietary"}
    assert found["nvidia_smi"]["gpus"] == 1 and found["nvidia_smi"]["driver_version"] == "580.105.08"
    assert found["installed"] == {"version": "580.105.08", "working": True, "flavour": "proprietary"}
    assert found["nouveau_loaded"] is False and found["nvidia_smi_path"] == smi
    assert found["kernel"] == os.uname().release and found["secure_boot"] == "enabled"
    # It only reads: check mode (a --check run decides the same) gives the same.
    assert facts(tmp_path, smi, check=True, mokutil=mokutil) == found


def test_the_installed_version_is_nvidia_smis_else_the_loaded_modules_else_the_one_on_disk(tmp_path: Path):
    """After an upgrade without a reboot the three differ; a driver that does not answer is still
    installed (the layer replaces or repairs it), and none at all is None."""
    smi = program(tmp_path / "nvidia-smi", P40_LINE)
    failing = program(tmp_path / "nvidia-smi-failing", "echo 'NVIDIA-SMI has failed'; exit 9\n")
    modinfo = program(
        tmp_path / "modinfo", 'case "$2" in version) echo 590.44.01;; license) echo "Dual MIT/GPL";; esac\n'
    )
    root = tmp_path / "root"
    (root / "sys" / "module" / "nvidia").mkdir(parents=True)
    (root / "sys" / "module" / "nvidia" / "version").write_text("580.95.05\n")
    installed = facts(root, smi, modinfo=modinfo)["installed"]
    assert installed == {"version": "580.105.08", "working": True, "flavour": "proprietary"}
    installed = facts(root, failing, modinfo=modinfo)["installed"]
    assert installed == {"version": "580.95.05", "working": False, "flavour": "proprietary"}
    (root / "sys" / "module" / "nvidia" / "version").unlink()
    installed = facts(root, failing, modinfo=modinfo)["installed"]
    assert installed == {"version": "590.44.01", "working": False, "flavour": "open"}
    assert facts(root, failing)["installed"] == {"version": None, "working": False, "flavour": None}


def test_a_driver_that_answers_without_a_card_is_not_working(tmp_path: Path):
    """nvidia-smi exits 0 but lists no GPU (a card the driver does not support): not working."""
    silent = program(tmp_path / "nvidia-smi", "echo 'No devices were found, yet exit 0'\n")
    found = facts(tmp_path, silent)
    assert found["nvidia_smi"]["rc"] == 0 and found["nvidia_smi"]["gpus"] == 0
    assert found["installed"]["working"] is False


def test_the_kernel_asked_is_the_one_modinfo_reads(tmp_path: Path):
    """A driver built for a kernel not running yet is on disk for that kernel only."""
    modinfo = program(
        tmp_path / "modinfo",
        'if [ "$1" = -k ]; then [ "$2" = 6.1.0-41-amd64 ] || exit 1; shift 2; else exit 1; fi\n'
        'case "$2" in version) echo 580.105.08;; license) echo NVIDIA;; esac\n',
    )
    absent = str(tmp_path / "absent-nvidia-smi")
    assert facts(tmp_path, absent, modinfo=modinfo, kernel="6.1.0-41-amd64")["module"]["on_disk"] == "580.105.08"
    assert facts(tmp_path, absent, modinfo=modinfo)["module"]["on_disk"] is None


def test_debians_module_file_is_found_for_the_kernel_asked(tmp_path: Path):
    """Debian's nvidia-kernel-dkms installs the module as nvidia-current.ko, which modinfo does not find
    as nvidia (make driver-proof found the layer recording "driver None" for Debian 12's and 13's
    real packages): the version and licence come from nvidia-current where nvidia is not found."""
    modinfo = program(
        tmp_path / "modinfo",
        'if [ "$1" = -k ]; then [ "$2" = 6.12.57+deb13-amd64 ] || exit 1; shift 2; fi\n'
        '[ "$3" = nvidia-current ] || { echo "modinfo: ERROR: Module $3 not found." >&2; exit 1; }\n'
        'case "$2" in version) echo 550.163.01;; license) echo NVIDIA;; esac\n',
    )
    found = driver_info.module_state(str(tmp_path), modinfo, "6.12.57+deb13-amd64")
    assert found == {"loaded": None, "on_disk": "550.163.01", "flavour": "proprietary"}
    assert driver_info.module_state(str(tmp_path), modinfo, "6.1.0-41-amd64")["on_disk"] is None


def test_nouveau_loaded_is_read_from_sys_module(tmp_path: Path):
    absent = str(tmp_path / "absent-nvidia-smi")
    assert facts(tmp_path, absent)["nouveau_loaded"] is False
    (tmp_path / "sys" / "module" / "nouveau").mkdir(parents=True)
    assert facts(tmp_path, absent)["nouveau_loaded"] is True


def test_nvidia_smi_is_a_path_as_given_or_a_name_found_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A path is reported as given, even where nothing is there yet; a name is looked up on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program(bin_dir / "nvidia-smi", P40_LINE)
    monkeypatch.setenv("PATH", "%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"]))
    found = facts(tmp_path, "nvidia-smi")
    assert found["nvidia_smi_path"] == str(bin_dir / "nvidia-smi") and found["installed"]["working"] is True
    assert facts(tmp_path, "verl-p40-no-such-smi")["nvidia_smi_path"] is None
    absent = str(tmp_path / "absent" / "nvidia-smi")
    assert facts(tmp_path, absent)["nvidia_smi_path"] == absent


def test_nvidia_persistenced_beside_nvidia_smi_else_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The daemon the driver installed with its nvidia-smi (a runfile's /usr/bin, a package's), else
    one on PATH; none: null. A file that cannot run is not the daemon."""
    driver_dir, path_dir = tmp_path / "driver", tmp_path / "path"
    driver_dir.mkdir()
    path_dir.mkdir()
    smi = program(driver_dir / "nvidia-smi", P40_LINE)
    monkeypatch.setenv("PATH", "%s%s%s" % (path_dir, os.pathsep, os.environ["PATH"]))
    assert shutil.which("nvidia-persistenced") is None, "this machine has a real nvidia-persistenced on PATH"
    assert facts(tmp_path, smi)["persistenced_path"] is None
    on_path = program(path_dir / "nvidia-persistenced", "exit 0\n")
    assert facts(tmp_path, smi)["persistenced_path"] == on_path
    beside = driver_dir / "nvidia-persistenced"
    beside.write_text("#!/bin/sh\n")
    assert facts(tmp_path, smi)["persistenced_path"] == on_path  # not executable
    beside.chmod(0o755)
    assert facts(tmp_path, smi)["persistenced_path"] == str(beside)
    # nvidia-smi through a link (alternatives): beside the program the link names.
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "nvidia-smi").symlink_to(smi)
    assert facts(tmp_path, str(tmp_path / "link" / "nvidia-smi"))["persistenced_path"] == str(beside)


def test_root_runs_no_daemon_anyone_else_could_have_written(tmp_path: Path):
    """The file and every directory above it (links resolved) root's and not group- or world-writable."""
    assert driver_info.not_root_only(None) == "" == driver_info.not_root_only("")
    env = os.path.realpath("/usr/bin/env")  # root's on any Debian host, as the packages' /usr/bin is
    assert driver_info.not_root_only(env) == ""
    # /tmp is world-writable (sticky): a program under it, root's or not, is refused.
    daemon = tmp_path / "nvidia-persistenced"
    daemon.write_text("#!/bin/sh\n")
    daemon.chmod(0o755)
    assert "/tmp is writable by everyone" in driver_info.not_root_only(str(daemon))
    os.chown(daemon, 1000, 1000)
    assert driver_info.not_root_only(str(daemon)) == "%s (%s is owned by uid 1000)" % (daemon, daemon)
    os.chown(daemon, 0, 0)
    daemon.chmod(0o775)
    assert driver_info.not_root_only(str(daemon)) == "%s (%s is writable by its group)" % (daemon, daemon)
    # A link is judged by what it names.
    link = tmp_path / "link"
    link.symlink_to(env)
    assert driver_info.not_root_only(str(link)) == ""
    assert "No such file" in driver_info.not_root_only(str(tmp_path / "gone"))


def test_systemd_is_read_from_run_systemd_system(tmp_path: Path):
    """sd_booted()'s test, under root: most containers have no systemd to start a daemon with."""
    absent = str(tmp_path / "absent-nvidia-smi")
    assert facts(tmp_path, absent)["systemd"] is False
    (tmp_path / "run" / "systemd").mkdir(parents=True)
    (tmp_path / "run" / "systemd" / "system").write_text("")  # a file is not systemd's directory
    assert facts(tmp_path, absent)["systemd"] is False
    (tmp_path / "run" / "systemd" / "system").unlink()
    (tmp_path / "run" / "systemd" / "system").mkdir()
    assert facts(tmp_path, absent)["systemd"] is True


def test_secure_boot_signs_with_the_users_key_or_stops_with_the_steps():
    runfile = driver.driver_plan(DEBIAN, "runfile", runfile=RUNFILE)
    distro = driver.driver_plan(DEBIAN, "distro")
    prebuilt = driver.driver_plan(UBUNTU, "distro", prebuilt=True)
    assert driver.driver_secure_boot(runfile, "disabled")["action"] == "none"
    assert driver.driver_secure_boot(runfile, "unknown")["action"] == "none"
    # Canonical's prebuilt modules are signed by a key the firmware already trusts.
    assert driver.driver_secure_boot(prebuilt, "enabled")["action"] == "none"
    signed = driver.driver_secure_boot(runfile, "enabled", "/root/mok.key", "/root/mok.der")
    assert signed["action"] == "sign"
    assert signed["args"] == ["--module-signing-secret-key=/root/mok.key", "--module-signing-public-key=/root/mok.der"]
    stop = driver.driver_secure_boot(runfile, "enabled")
    assert stop["action"] == "stop" and "mokutil --import" in stop["message"] and "driver_mok_key" in stop["message"]
    # A key alone is not a pair.
    assert driver.driver_secure_boot(runfile, "enabled", "/root/mok.key")["action"] == "stop"
    dkms = driver.driver_secure_boot(distro, "enabled", "/root/mok.key", "/root/mok.der")
    assert dkms["action"] == "stop" and "/etc/dkms/framework.conf" in dkms["message"]


# --- the edges of each decision ------------------------------------------------------------------


def test_a_device_id_read_as_hex_text_is_the_same_card():
    # driver_gpu_arch as a filter takes the id as sysfs and lspci print it.
    assert driver.gpu_arch("1b38") == driver.gpu_arch(0x1B38)
    assert driver.gpu_arch("1b38")["name"] == "GP102GL [Tesla P40]"


@pytest.mark.parametrize(("device", "limit"), [(0x17FD, 580), (0x1B38, 580), (0x1DB4, 580), (0x102D, 470)])
def test_each_architecture_alone_ends_at_its_own_last_branch(device, limit):
    # Maxwell, Pascal, Volta: R580 (NVIDIA's deprecation schedule); Kepler: R470.
    assert driver.driver_choice(cards(device))["limit"] == limit


def test_the_last_branch_itself_and_cuda_s_own_branch_are_accepted():
    assert driver.driver_choice(cards(0x1B38), branch=580)["problems"] == []
    # R520 is the branch of 520.61.05, the driver CUDA 11.8 bundles.
    assert driver.driver_choice(cards(0x1EB8), branch=520)["problems"] == []
    assert driver.driver_choice(cards(0x1EB8), branch=519)["problems"] == [
        "driver_branch 519: CUDA 11.8 needs 520.61.05 or newer"
    ]


def test_a_branch_too_new_names_the_first_architecture_it_leaves_behind():
    # Maxwell and Pascal both end at R580: the refusal names the older, once.
    refused = driver.driver_choice(cards(0x17FD, 0x1B38), branch=590)
    assert refused["problems"] == [
        "driver_branch 590: R580 is the last branch for Maxwell cards (GM200GL [Tesla M40] (10de:17fd)); a newer"
        " driver does not see them"
    ]


def test_the_open_flavour_refusal_names_the_cards_that_need_the_proprietary_one():
    opened = driver.driver_choice(cards(0x1B38, 0x1EB8), flavour="open")
    assert opened["problems"] == [
        "driver_flavour open: the open kernel modules need Turing or newer (the GSP), and GP102GL [Tesla P40]"
        " (10de:1b38) is not; use proprietary"
    ]
    # An unknown card alone: its id, since its architecture is not known.
    unknown = driver.driver_choice(cards(0x2330), flavour="open")
    assert unknown["problems"][-1].endswith("and 10de:2330 is not; use proprietary")


def test_a_plan_without_a_kernel_release_or_with_an_unknown_source_is_refused():
    assert (
        "the running kernel's release (uname -r) is not known"
        in driver.driver_plan(dict(DEBIAN, kernel=""))["problems"]
    )
    assert driver.driver_plan(DEBIAN, source="ppa")["problems"] == ["driver_source 'ppa': give auto, distro or runfile"]


def test_the_steps_are_what_a_person_runs_for_each_plan():
    assert driver.driver_plan(UBUNTU)["steps"] == [
        "sudo apt-get update",
        "apt-cache policy linux-modules-nvidia-580-server-5.15.0-91-generic   # Canonical's signed modules for this"
        " kernel; where there are none, install linux-headers-5.15.0-91-generic nvidia-dkms-580-server in its place",
        "sudo apt-get install -y linux-modules-nvidia-580-server-5.15.0-91-generic nvidia-headless-no-dkms-580-server"
        " nvidia-utils-580-server nvidia-compute-utils-580-server",
        "sudo apt-mark hold linux-modules-nvidia-580-server-5.15.0-91-generic nvidia-headless-no-dkms-580-server"
        " nvidia-utils-580-server nvidia-compute-utils-580-server",
        "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee /etc/modprobe.d/verl-p40-nouveau.conf",
        "sudo update-initramfs -u",
        "sudo reboot   # then: nvidia-smi",
    ]
    distro = driver.driver_plan(DEBIAN, source="distro")
    assert distro["components"] == ["contrib", "non-free", "non-free-firmware"]
    assert distro["steps"][:4] == [
        "# enable the contrib non-free non-free-firmware components in /etc/apt/sources.list, then:",
        "sudo apt-get update",
        "sudo apt-get install -y linux-headers-6.1.0-28-amd64 nvidia-kernel-dkms nvidia-smi libcuda1 nvidia-persistenced",
        "sudo apt-mark hold nvidia-kernel-dkms nvidia-smi libcuda1 nvidia-persistenced",
    ]
    # Debian 11 has no non-free-firmware component.
    assert driver.driver_plan(dict(DEBIAN, version="11.11"), source="distro")["components"] == ["contrib", "non-free"]
    # Not pinned yet: the steps name the file by its branch; nothing is held.
    unpinned = driver.driver_plan(DEBIAN)["steps"]
    assert unpinned[:4] == [
        "sudo apt-get update",
        "sudo apt-get install -y linux-headers-6.1.0-28-amd64 dkms gcc make",
        "# download NVIDIA-Linux-x86_64-580.<version>.run and check its sha256 against the manifest's"
        " nvidia_driver_runfile, then:",
        "sudo sh ./'NVIDIA-Linux-x86_64-580.<version>.run' --silent --dkms -m=kernel",
    ]
    assert not any(line.startswith("sudo apt-mark hold") for line in unpinned)


def test_debian_s_distro_packages_are_proprietary_only():
    opened = driver.driver_plan(DEBIAN, source="distro", flavour="open")
    assert opened["problems"] == ["driver_source distro on Debian: the layer installs the proprietary modules only"]


@pytest.mark.parametrize("missing", ["url", "sha256", "version"])
def test_a_runfile_entry_missing_any_pin_is_not_pinned(missing):
    plan = driver.driver_plan(DEBIAN, runfile=dict(RUNFILE, **{missing: ""}))
    assert plan["problems"] == [
        "driver_source runfile: the manifest entry nvidia_driver_runfile (version, file, url, sha256 of NVIDIA's R580"
        " .run installer) is not pinned yet; pin it in stack_artifact_overrides, or use driver_source: distro"
    ]
    # On Ubuntu the way out names Canonical's packages.
    ubuntu = driver.driver_plan(dict(UBUNTU, version="20.04"), runfile=dict(RUNFILE, **{missing: ""}))
    assert ubuntu["problems"][0].endswith("or use driver_source: distro (Ubuntu's packages)")


def test_a_runfile_of_another_branch_is_named_with_its_branch():
    other = driver.driver_plan(DEBIAN, branch=580, runfile=dict(RUNFILE, version="570.1.2", file="x-570.run"))
    assert other["problems"] == [
        "driver_branch 580: the pinned runfile x-570.run is R570; pin the 580 one in nvidia_driver_runfile"
    ]


def test_cuda_s_own_minimum_driver_and_a_turing_card_s_open_modules_are_kept():
    assert (
        driver.driver_decision(cards(0x1B38), {"version": "520.61.05", "working": True}, "auto", UBUNTU)["action"]
        == "keep"
    )
    open_t4 = {"version": "580.105.08", "working": True, "flavour": "open"}
    assert driver.driver_decision(cards(0x1EB8), open_t4, "auto", UBUNTU)["action"] == "keep"
    # A driver nothing says works is not kept.
    assert driver.driver_decision(cards(0x1B38), {"version": "580.105.08"}, "auto", UBUNTU)["action"] == "install"


def test_a_debian_release_without_distro_packages_keeps_the_chosen_branch():
    decision = driver.driver_decision(cards(0x1B38), None, "auto", dict(DEBIAN, version="10"), source="distro")
    assert decision["action"] == "stop" and decision["choice"]["branch"] == 580


def test_never_without_problems_says_nothing_more_and_with_them_warns():
    quiet = driver.driver_decision(cards(0x1B38), None, "never", UBUNTU)["message"]
    assert "Beware" not in quiet
    fedora = {"distribution": "Fedora", "version": "40", "kernel": "6.8.5"}
    warned = driver.driver_decision(cards(0x1B38), None, "never", fedora, runfile=RUNFILE)["message"]
    assert warned.endswith(
        "\nBeware:\n- the driver layer knows Ubuntu 20.04, 22.04, 24.04 and Debian 11, 12, 13, not fedora 40"
    )


def test_a_stop_says_why_as_a_sentence_and_what_stands_in_the_way():
    fedora = {"distribution": "Fedora", "version": "40", "kernel": "6.8.5"}
    stop = driver.driver_decision(cards(0x1B38), None, "auto", fedora, runfile=RUNFILE)
    assert stop["reason"] == "no NVIDIA driver is installed"
    assert stop["message"] == (
        "No NVIDIA driver is installed; the driver layer cannot install one here:\n"
        "- the driver layer knows Ubuntu 20.04, 22.04, 24.04 and Debian 11, 12, 13, not fedora 40"
    )
    present = {"version": "580.105.08", "working": True, "flavour": "proprietary"}
    always = driver.driver_decision(cards(0x1B38), present, "always", fedora, runfile=RUNFILE)
    assert (
        always["reason"] == "driver_install: always"
        and "cannot install one here:\n- the driver layer knows" in (always["message"])
    )


def test_versions_compare_by_number_after_the_install():
    # The module's version and the one installed, written with or without their zero parts.
    assert driver.driver_after_install(cards(0x1B38), "580.105", "580.105.0")["action"] == "none"
    assert driver.driver_after_install(cards(0x1B38), "580.105.8", "580.105.08")["action"] == "none"
    # A kernel built for, with the running one not known: nothing says a reboot is needed.
    assert driver.driver_after_install(cards(0x1B38), None, "580.105.08", kernel="6.1.0-41-amd64")["action"] == "load"
    rebooting = driver.driver_after_install([dict(cards(0x1B38)[0], driver="nouveau")], None, "580.105.08", reboot=True)
    assert (
        rebooting["message"]
        == "driver 580.105.08 installed; nouveau drives 0000:01:00.0: rebooting (driver_reboot: true)"
    )


def test_a_device_that_is_no_gpu_is_passed_over_and_the_cards_after_it_are_still_found():
    devices = [
        {"address": "0000:01:00.1", "vendor": 0x10DE, "device": 0x0FB9, "class": 0x040300},  # the card's audio
        {"address": "0000:02:00.0", "vendor": 0x10DE, "device": 0x1B38, "class": 0x030200},
    ]
    assert [gpu["address"] for gpu in driver.pci_gpus(devices)] == ["0000:02:00.0"]


def test_secure_boot_with_half_a_key_pair_asks_for_a_pair_whatever_the_source():
    distro = driver.driver_plan(DEBIAN, "distro")
    for key, cert in (("/root/mok.key", ""), ("", "/root/mok.der")):
        stop = driver.driver_secure_boot(distro, "enabled", key, cert)
        assert stop["action"] == "stop" and "Make a key pair" in stop["message"], (key, cert)
