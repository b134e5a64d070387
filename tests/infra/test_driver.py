"""The driver layer: every NVIDIA GPU on the PCI bus driven by the recorded driver, or none to drive.

In CI's containers the bus has no NVIDIA device: the record says so and the layer changed nothing
(no blacklist, no held package). On a GPU host (molecule -s p40) nvidia-smi lists every card the
bus has, under the recorded branch, with the proprietary modules where a card older than Turing is,
and nvidia-persistenced keeps every card in persistence mode.
"""

# NVIDIA (0x10de) display devices (class 0x03xx) on the bus, as the layer's driver_info reads them.
BUS = (
    "for d in /sys/bus/pci/devices/*; do "
    'v=$(cat "$d/vendor" 2>/dev/null); c=$(cat "$d/class" 2>/dev/null); '
    'case "$v:$c" in 0x10de:0x03*) echo "${d##*/}";; esac; done'
)


def test_the_record_names_every_nvidia_gpu_on_the_bus(host, layer_state):
    record = layer_state("driver")
    on_bus = host.run(BUS).stdout.split()
    assert sorted(gpu["address"] for gpu in record["details"]["gpus"]) == sorted(on_bus)
    assert record["details"]["reboot_pending"] is False


def test_the_driver_drives_every_card_or_nothing_was_changed(host, layer_state):
    """One test for both kinds of host, each branch checking (no early return that checks nothing)."""
    record = layer_state("driver")
    gpus = record["details"]["gpus"]
    if not gpus:
        # CI's containers: nothing to drive, and nothing changed.
        assert record["details"]["action"] == "none" and record["version"] == "none"
        assert record["details"]["reason"] == "no NVIDIA display device on the PCI bus"
        assert record["details"]["persistenced"] is None and record["details"]["persistenced_wanted"] is True
        assert not host.file("/etc/systemd/system/nvidia-persistenced.service").exists
        assert not host.file("/etc/modprobe.d/verl-p40-nouveau.conf").exists
        held = host.run("apt-mark showhold").stdout.split()
        assert [name for name in held if "nvidia" in name] == []
        return
    smi = host.run("nvidia-smi --query-gpu=pci.bus_id,driver_version --format=csv,noheader")
    assert smi.rc == 0, smi.stdout + smi.stderr
    rows = [line.split(", ") for line in smi.stdout.strip().splitlines()]
    assert len(rows) == len(gpus)
    assert {version for _, version in rows} == {record["version"]}
    if record["details"]["action"] == "install":
        assert record["version"].split(".")[0] == str(record["details"]["branch"])
    if any(gpu["arch"] in ("kepler", "maxwell", "pascal", "volta") for gpu in gpus):
        proc = host.file("/proc/driver/nvidia/version").content_string
        assert "Open Kernel Module" not in proc
    assert "nouveau" not in host.run("cat /proc/modules").stdout.split()
    # A GPU host runs systemd: the persistence daemon runs and every card is in persistence mode
    # (unless driver_persistenced is false, as the record says).
    if not record["details"]["persistenced_wanted"]:
        assert record["details"]["persistenced"] is None
        return
    assert record["details"]["persistenced"] == "running"
    assert host.service("nvidia-persistenced").is_running and host.service("nvidia-persistenced").is_enabled
    modes = host.run("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader").stdout.split()
    assert modes == ["Enabled"] * len(gpus), modes
