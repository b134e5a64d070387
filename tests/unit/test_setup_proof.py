"""Tests for tests/setup_proof/run.py, make setup and preflight end to end on Debian 11's Python 3.9
(`make setup-proof`).

The proof takes minutes of a CPython build and a container; these check its plan (a dry run, and
`make -n setup-proof`), the downloads list it hands uv (uv's own format), and how it judges what it
found: each check fails on the broken case it names.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any

import pytest

from repo import REPO, load_file

SCRIPT = REPO / "tests" / "setup_proof" / "run.py"
proof = load_file(SCRIPT, "setup_proof_run")

BUILT = {
    "version": "3.11.2",
    "file": "cpython-3.11.2+standin-x86_64-unknown-linux-gnu-install_only.tar.gz",
    "sha256": "ab" * 32,
}


def test_dry_run_plans_make_setup_and_preflight_on_debian_11():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("container: localhost/verl-p40-debian:11") for line in lines)
    for name, variables in (
        ("refused", "UV_PYTHON_INSTALL_DIR=/tmp/uv-refused UV_PYTHON_DOWNLOADS_JSON_URL=/srv/setup-proof/wrong.json"),
        ("setup", "UV_PYTHON_DOWNLOADS_JSON_URL=/srv/setup-proof/right.json"),
        ("again", "UV_PYTHON_DOWNLOADS_JSON_URL=/srv/setup-proof/right.json"),
    ):
        line = next(line for line in lines if line.startswith(name + ": "))
        assert line.endswith("cd /root/verl-p40 && %s make setup SETUP_PYTHON_VERSION=3.11" % variables), line
    preflight = next(line for line in lines if line.startswith("preflight: "))
    assert "ansible-playbook site.yml --tags preflight" in preflight and ". .venv/bin/activate" in preflight
    # The proof sets make setup's and uv's own variables, never a role default or the tool's code.
    assert "roles/" not in done.stdout and "tools/" not in done.stdout


def test_the_setup_python_version_is_one_make_setup_takes():
    # make setup's SETUP_PYTHON_VERSION takes 3.11 to 3.13 (tools/setup_python.py).
    setup_python = load_file(REPO / "tools" / "setup_python.py", "setup_python_for_proof")
    version = tuple(int(part) for part in proof.PYTHON.split("."))
    assert setup_python.OLDEST <= version <= setup_python.NEWEST


def test_the_downloads_list_has_uvs_format_and_names_only_the_standin():
    listed = proof.downloads(BUILT)
    assert list(listed) == ["cpython-3.11.2-linux-x86_64-gnu"]
    entry = listed["cpython-3.11.2-linux-x86_64-gnu"]
    # The keys of every entry of uv's download-metadata.json (uv 0.13.9's format).
    assert sorted(entry) == sorted(
        ["name", "arch", "os", "libc", "major", "minor", "patch", "prerelease", "url", "sha256", "variant", "build"]
    )
    assert (entry["name"], entry["os"], entry["libc"], entry["arch"]) == (
        "cpython",
        "linux",
        "gnu",
        {"family": "x86_64", "variant": None},
    )
    assert (entry["major"], entry["minor"], entry["patch"]) == (3, 11, 2)
    assert entry["url"] == "file:///srv/setup-proof/" + BUILT["file"]
    assert entry["sha256"] == BUILT["sha256"]
    assert proof.downloads(BUILT, sha256="0" * 64)["cpython-3.11.2-linux-x86_64-gnu"]["sha256"] == "0" * 64
    json.dumps(listed)  # what the proof writes


def run(rc: int = 0, output: str = "") -> dict[str, Any]:
    return {"rc": rc, "seconds": 1.0, "output": output}


LOCKED = proof.locked_version("ansible-core")
GOOD: dict[str, Any] = {
    "os": "Debian GNU/Linux 11 (bullseye)\nPython 3.9.2",
    "wrong": run(1, "error: Hash mismatch for `cpython-3.11.2-linux-x86_64-gnu`\nmake: *** Error 1"),
    "venv_after_wrong": "no",
    "setup": run(0, "make setup: getting CPython 3.11 with uv 0.13.9: `uv python install 3.11` downloads"),
    "venv": run(
        0,
        "3.11.2 /root/.local/share/uv/python/cpython-3.11.2-linux-x86_64-gnu/bin/python3.11\n"
        "ansible [core %s]\nansible-core==%s\nJinja2==3.1.6" % (LOCKED, LOCKED),
    ),
    "preflight": run(0, "Debian 11: converged in CI\nPLAY RECAP\nlocalhost : ok=40 changed=1 failed=0 skipped=9"),
    "setup_again": run(0, "make: Nothing to be done for 'setup'."),
}


def test_the_lock_names_ansible_core():
    assert LOCKED.startswith("2.")


def test_every_check_holds_on_what_a_good_run_prints():
    held = proof.checks(BUILT, GOOD)
    assert all(held.values()), held


@pytest.mark.parametrize(
    ("check", "path", "value"),
    [
        ("the container is Debian 11 on its python3 3.9", ("os",), "Debian GNU/Linux 12 (bookworm)\nPython 3.11.2"),
        ("a download of another sha256 is refused, no venv left", ("wrong", "rc"), 0),
        ("a download of another sha256 is refused, no venv left", ("wrong", "output"), "make: *** Error 1"),
        ("a download of another sha256 is refused, no venv left", ("venv_after_wrong",), "yes"),
        ("make setup got CPython 3.11 with uv", ("setup", "rc"), 2),
        ("make setup got CPython 3.11 with uv", ("setup", "output"), "make setup: using /usr/bin/python3.11"),
        ("the venv runs on the stand-in", ("venv", "output"), "3.9.2 /usr/bin/python3.9\nansible-core==%s" % LOCKED),
        ("the venv runs on the stand-in", ("venv", "output"), "3.11.2 /usr/bin/python3.11\nansible-core==%s" % LOCKED),
        (
            "the venv runs on the stand-in",
            ("venv", "output"),
            "3.11.9 /root/.local/share/uv/python/x/bin/python3.11\nansible-core==%s" % LOCKED,
        ),
        (
            "the venv holds the lock",
            ("venv", "output"),
            "3.11.2 /root/.local/share/uv/python/x/bin/python3.11\nansible-core==2.0.0",
        ),
        ("preflight passed on Debian 11", ("preflight", "rc"), 2),
        ("preflight passed on Debian 11", ("preflight", "output"), "Debian 11\nlocalhost : ok=3 changed=0 failed=1"),
        ("a second make setup does nothing", ("setup_again", "output"), "`uv python install 3.11` downloads"),
        ("a second make setup does nothing", ("setup_again", "rc"), 2),
    ],
)
def test_each_check_fails_on_its_broken_case(check: str, path: tuple[str, ...], value: Any):
    found = copy.deepcopy(GOOD)
    target = found
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    held = proof.checks(BUILT, found)
    assert not held[check], check
    assert [name for name, ok in held.items() if not ok] == [check]


def test_the_build_writes_the_file_the_plan_names():
    # One name for the stand-in's tarball: the build script's and the plan's come from TARBALL.
    assert "tarball=/out/" + proof.TARBALL.format(version="$version") + "\n" in proof.build_script()
    assert proof.TARBALL.format(version="3.11.2") == BUILT["file"]
