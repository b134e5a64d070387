"""tests/standins/host_tools.py: the one list of host programs that .ci/run installs and checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import host_tools

REPO = Path(__file__).resolve().parents[2]

TOOL = REPO / "tests" / "standins" / "host_tools.py"


def test_catatonit_is_installed_and_checked():
    # The package a fresh machine lacked: podman's --init binary, a Recommends.
    assert "catatonit" in host_tools.packages()
    gone = host_tools.missing(which=lambda name: "/usr/bin/" + name, exists=lambda path: False)
    assert [(program, package) for program, package, _ in gone] == [
        ("/usr/libexec/podman/catatonit", "catatonit"),
        ("/usr/share/keyrings/debian-archive-trixie-automatic.gpg", "debian-archive-keyring"),
        ("/etc/ssl/certs/ca-certificates.crt", "ca-certificates"),
    ]


def test_nothing_missing_when_all_present():
    assert host_tools.missing(which=lambda name: "/usr/bin/" + name, exists=lambda path: True) == []


def test_check_names_the_missing_package(tmp_path):
    # An empty PATH: every program on PATH is missing; the message names each package.
    result = subprocess.run(
        [sys.executable, str(TOOL), "check"], capture_output=True, text=True, env={"PATH": str(tmp_path)}, check=False
    )
    assert result.returncode == 1
    assert "missing podman (Debian package podman" in result.stderr
    assert "missing g++-11 (Debian package g++-11" in result.stderr
    assert "apt-get install --no-install-recommends" in result.stderr


def test_ci_installs_and_checks_the_same_list():
    ci = (REPO / ".ci" / "run").read_text()
    assert "host_tools.py packages" in ci and "host_tools.py check" in ci
    assert ci.index("host_tools.py check") < ci.index("step setup")
    out = subprocess.run([sys.executable, str(TOOL), "packages"], capture_output=True, text=True, check=True).stdout
    assert out.split() == host_tools.packages()


def test_ci_runs_every_step_of_make_test():
    # .ci/run runs make test's prerequisites one by one (to time them): none may be left out.
    makefile = (REPO / "Makefile").read_text()
    targets = next(line for line in makefile.splitlines() if line.startswith("test:")).split(":")[1].split("##")[0]
    ci = (REPO / ".ci" / "run").read_text()
    # The targets of each step's make (step NAME make [-j N] TARGET...), in order.
    ran = [
        word
        for line in ci.splitlines()
        if line.startswith("step ") and line.split()[2] == "make"
        for word in line.split()[3:]
        if not word.startswith("-") and not word.isdigit()
    ]
    assert [target for target in ran if target in targets.split()] == targets.split()


def test_ci_timings_file(tmp_path):
    steps = tmp_path / "steps"
    steps.write_text("packages 20 0.52\nunit 200\n")
    out = tmp_path / "ci.json"
    subprocess.run(
        [sys.executable, str(REPO / ".ci" / "timings.py"), str(steps), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    record = json.loads(out.read_text())
    assert record["steps"] == [
        {"step": "packages", "seconds": 20, "load_average": 0.52},
        {"step": "unit", "seconds": 200},
    ]
    assert record["total_seconds"] == 220 and record["machine"]["cores"] >= 1


def test_every_tool_the_fixtures_require_is_on_the_list():
    # A fixture's need_tools("X") names a program .ci/run must install: a name missing from
    # the list would fail on a fresh machine only, minutes into the run.
    import re

    listed = {program for program, _, _ in host_tools.PROGRAMS}
    called = set()
    for path in [*(REPO / "tests" / "fixtures").glob("*.py"), *(REPO / "tests" / "standins").glob("*.py")]:
        for args in re.findall(r"need_tools\(([^)]*)\)", path.read_text()):
            called.update(re.findall(r'"([^"]+)"', args))
    assert called, "no need_tools calls found: the scan is broken"
    assert called - listed == set()
