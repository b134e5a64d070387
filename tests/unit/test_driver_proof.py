"""Tests for tests/driver_proof/run.py, Debian's own driver packages through the driver layer
(`make driver-proof`).

The proof takes minutes of a real DKMS build per release and a container; these check its plan (a
dry run, and `make -n driver-proof`), the apt sources it writes, the kernel it reads from apt, and
how it judges what it found: each check fails on the broken case it names.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from repo import REPO, load_file

SCRIPT = REPO / "tests" / "driver_proof" / "run.py"
proof = load_file(SCRIPT, "driver_proof_run")


def test_dry_run_plans_the_distro_path_on_debian_12_and_13():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "Debian 12 (localhost/verl-p40-debian:12): R535" in done.stdout
    assert "Debian 13 (localhost/verl-p40-debian:13): R550" in done.stdout
    runs = [line for line in done.stdout.splitlines() if line.strip().startswith("twice: ")]
    assert len(runs) == 2
    for line in runs:
        assert "--tags driver" in line and '"driver_source": "distro"' in line
        assert '"driver_host_root": "/srv/verl-p40-fixtures/bus"' in line
    # The proof changes vars, the bus and the container's apt sources, never a role default.
    assert "roles/" not in done.stdout


def test_the_debian_table_is_the_driver_layers():
    driver = load_file(REPO / "filter_plugins" / "driver.py", "driver_filters_for_proof")
    assert proof.BRANCH == {release: driver.DEBIAN_DISTRO_BRANCH[release] for release in proof.RELEASES}
    # What docs/driver.md and the result files name: Debian 12's R535, 13's R550.
    assert proof.BRANCH == {"12": 535, "13": 550}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            "deb http://archive.test/debian trixie main\n",
            "deb http://archive.test/debian trixie main contrib non-free non-free-firmware\n",
        ),
        (
            "deb [signed-by=/k.gpg] http://archive.test/debian bookworm main contrib\n",
            "deb [signed-by=/k.gpg] http://archive.test/debian bookworm main contrib non-free non-free-firmware\n",
        ),
        (
            "Types: deb\nURIs: http://archive.test/debian\nSuites: trixie trixie-updates\nComponents: main\n",
            "Types: deb\nURIs: http://archive.test/debian\nSuites: trixie trixie-updates\n"
            "Components: main contrib non-free non-free-firmware\n",
        ),
        # Not an entry of main, or a comment: as it is.
        ("# deb http://archive.test/debian trixie main\n", "# deb http://archive.test/debian trixie main\n"),
        ("deb http://archive.test/other trixie extras\n", "deb http://archive.test/other trixie extras\n"),
    ],
)
def test_the_components_the_layer_asks_for_are_added_once(before: str, after: str):
    assert proof.with_components(before) == after
    assert proof.with_components(after) == after


def test_the_kernel_is_the_one_debians_headers_metapackage_depends_on():
    depends = "linux-headers-amd64\n  Depends: linux-headers-6.1.0-41-amd64\n"
    assert proof.debian_kernel(depends) == "6.1.0-41-amd64"
    with pytest.raises(SystemExit, match="names no linux-headers"):
        proof.debian_kernel("linux-headers-amd64\n")


KERNEL = "6.12.57+deb13-amd64"
GOOD: dict[str, Any] = {
    "runs": [
        {"rc": 2, "asks_reboot": True},
        {"rc": 2, "asks_reboot": True},
    ],
    "record_after_first": {
        "status": "complete",
        "version": "550.163.01",
        "details": {"source": "distro", "flavour": "proprietary", "reboot_pending": True},
    },
    "record": {
        "status": "complete",
        "version": "550.163.01",
        "details": {"source": "distro", "flavour": "proprietary", "reboot_pending": True},
    },
    "packages": {
        "nvidia-kernel-dkms": "550.163.01-2",
        "nvidia-smi": "550.163.01-2",
        "libcuda1": "550.163.01-2",
        "nvidia-persistenced": "550.163.01-1",
    },
    "dkms": "nvidia-current/550.163.01, %s, x86_64: installed" % KERNEL,
    "modinfo": {
        "version": "550.163.01",
        "license": "NVIDIA",
        "vermagic": KERNEL + " SMP preempt mod_unload modversions",
    },
    "held": ["libcuda1", "nvidia-kernel-dkms", "nvidia-persistenced", "nvidia-smi"],
    "persistenced": {"unit": True, "enabled": True},
    "nouveau": "blacklist nouveau\noptions nouveau modeset=0\n",
    "dpkg_log_after_first": "42",
    "dpkg_log_after_second": "42",
}


def broken(path: str, value: Any) -> dict[str, Any]:
    found = copy.deepcopy(GOOD)
    *keys, last = path.split(".")
    node: Any = found
    for key in keys:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return found


def test_a_good_run_holds_every_check():
    assert all(proof.checks("13", KERNEL, GOOD).values())


@pytest.mark.parametrize(
    ("path", "value", "check"),
    [
        ("runs.0.rc", 0, "first run stops for the reboot"),
        ("runs.0.asks_reboot", False, "first run stops for the reboot"),
        (
            "record.details.reboot_pending",
            False,
            "record after each run: complete, distro, proprietary, reboot pending",
        ),
        ("record.details.source", "runfile", "record after each run: complete, distro, proprietary, reboot pending"),
        (
            "record_after_first.status",
            "building",
            "record after each run: complete, distro, proprietary, reboot pending",
        ),
        ("record.version", "535.261.03", "record: Debian's branch"),
        ("packages.libcuda1", "", "packages installed at Debian's branch"),
        ("dkms", "nvidia-current/550.163.01, 6.1.0-41-amd64, x86_64: installed", "dkms: installed for the kernel"),
        ("dkms", "nvidia-current/550.163.01, %s, x86_64: built" % KERNEL, "dkms: installed for the kernel"),
        ("modinfo.license", "Dual MIT/GPL", "module: NVIDIA's licence and version"),
        ("modinfo.vermagic", "6.1.0-41-amd64 SMP", "module: built for the kernel"),
        ("held", ["nvidia-smi"], "branch held"),
        ("held", ["libcuda1", "nvidia-kernel-dkms", "nvidia-smi"], "branch held"),
        ("packages.nvidia-persistenced", "535.171.04-1~deb12u1", "packages installed at Debian's branch"),
        ("persistenced.enabled", False, "nvidia-persistenced enabled for boot"),
        ("persistenced.unit", False, "nvidia-persistenced enabled for boot"),
        ("nouveau", "", "nouveau blacklisted"),
        ("dpkg_log_after_second", "45", "second run installs nothing and still waits"),
        ("runs.1.asks_reboot", False, "second run installs nothing and still waits"),
    ],
)
def test_each_check_fails_on_its_broken_case(path: str, value: Any, check: str):
    found = proof.checks("13", KERNEL, broken(path, value))
    assert [name for name, ok in found.items() if not ok] == [check]


def test_no_dpkg_log_proves_no_install_either():
    # grep's count is empty without a log, and equal to itself after both runs.
    found = dict(copy.deepcopy(GOOD), dpkg_log_after_first="", dpkg_log_after_second="")
    assert [name for name, ok in proof.checks("13", KERNEL, found).items() if not ok] == [
        "second run installs nothing and still waits"
    ]


def test_a_run_never_overwrites_a_kept_result(tmp_path: Path):
    assert proof.result_path(tmp_path, "2026-12-06") == tmp_path / "2026-12-06.json"
    (tmp_path / "2026-12-06.json").write_text("{}")
    assert proof.result_path(tmp_path, "2026-12-06") == tmp_path / "2026-12-06-2.json"
    (tmp_path / "2026-12-06-2.json").write_text("{}")
    assert proof.result_path(tmp_path, "2026-12-06") == tmp_path / "2026-12-06-3.json"
    assert proof.result_path(tmp_path, "2026-12-07") == tmp_path / "2026-12-07.json"
