"""The cuda layer's choice of where gcc 11 comes from (roles/cuda/tasks/compiler.yml), on localhost in
check mode, with a Debian 13 host's facts: the suite it takes gcc-11 from, and the refusals that
stop before apt is asked or anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_play

# Debian 13 as the role sees it: the facts of a trixie host and its OS data (vars/Debian-13.yml).
TRIXIE = {
    "ansible_facts": {"distribution": "Debian", "distribution_major_version": "13", "distribution_release": "trixie"},
    **yaml.safe_load((REPO / "roles/cuda/vars/Debian-13.yml").read_text()),
}
PLAY = {"vars_files": [str(path) for path in sorted((REPO / "roles/stack/defaults/main").glob("*.yml"))]}


def compiler(tmp_path: Path, **extra: object) -> tuple[int, list[tuple[str, dict]]]:
    """compiler.yml's tasks in check mode (with diffs) with TRIXIE and `extra` as extra vars, the apt
    source and pin under tmp_path: the exit status and each task's name and result, in order, from
    the role's first task."""
    task = {"name": "The compiler", "ansible.builtin.include_role": {"name": "cuda", "tasks_from": "compiler.yml"}}
    files = {
        "cuda_compiler_apt_sources": str(tmp_path / "sources.list.d" / "gcc-11.sources"),
        "cuda_compiler_apt_preferences": str(tmp_path / "preferences.d" / "gcc-11"),
    }
    done = run_play(tmp_path, [task], "--check", "--diff", "-e", json.dumps({**TRIXIE, **files, **extra}), **PLAY)
    tasks = json.loads(done.stdout)["plays"][0]["tasks"][1:]
    return done.returncode, [(t["task"]["name"].removeprefix("cuda : "), t["hosts"]["localhost"]) for t in tasks]


def failure(results: list[tuple[str, dict]]) -> tuple[str, str]:
    (found,) = [(name, result["msg"]) for name, result in results if result.get("failed")]
    return found


def test_debian_13_takes_gcc_11_from_bookworm_pinned_below_the_release(tmp_path: Path):
    # The archive given, apt is not asked for it; check mode writes nothing (the diffs say what).
    _, results = compiler(tmp_path, cuda_compiler_apt_uri="file:///srv/debian")
    chosen = results[0][1]["ansible_facts"]
    assert chosen["__cuda_compiler_suite"] == "bookworm"
    assert chosen["cuda_host_compiler_path"] == "/usr/bin/g++-11"
    found = dict(results)
    assert found["Cuda | Stop where this release has no gcc 11 and no suite may provide one"].get("skipped")
    assert found["Cuda | Ask apt which archive serves trixie"].get("skipped")
    source = found["Cuda | Write the apt source of bookworm"]["diff"][0]["after"]
    assert "\nURIs: file:///srv/debian\nSuites: bookworm\nComponents: main\n" in source
    assert "\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n" in source
    pin = found["Cuda | Pin below this release the suite bookworm"]["diff"][0]["after"]
    assert "\nPackage: *\nPin: release n=bookworm\nPin-Priority: 1\n" in pin
    assert not (tmp_path / "sources.list.d").exists() and not (tmp_path / "preferences.d").exists()


def test_a_compiler_of_the_users_own_needs_no_suite(tmp_path: Path):
    # cuda_host_compiler set: no suite is added, whatever cuda_compiler_apt_suite says (a bad value
    # included: it is not used), and apt is asked for gcc, g++ and make only.
    _, results = compiler(tmp_path, cuda_host_compiler="/opt/gcc-11/bin/g++", cuda_compiler_apt_suite="not a suite")
    chosen = results[0][1]["ansible_facts"]
    assert chosen["__cuda_compiler_suite"] == "" and chosen["cuda_host_compiler_path"] == "/opt/gcc-11/bin/g++"
    found = dict(results)
    assert found["Cuda | Add the suite gcc 11 comes from ()"].get("skipped")
    assert found["Cuda | Install the compiler packages"]["invocation"]["module_args"]["name"] == ["gcc", "g++", "make"]


def test_none_on_debian_13_stops_before_apt_naming_what_to_do(tmp_path: Path):
    rc, results = compiler(tmp_path, cuda_compiler_apt_suite="none")
    assert rc != 0
    name, msg = failure(results)
    assert name == "Cuda | Stop where this release has no gcc 11 and no suite may provide one"
    assert "Debian 13's archive has no gcc 11" in msg and "cuda_host_compiler" in msg and "auto" in msg
    assert not any(name.startswith("Cuda | Install") for name, _ in results)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("cuda_compiler_apt_suite", "bookworm main"),
        ("cuda_compiler_apt_suite", "../bookworm"),
        ("cuda_compiler_apt_uri", "ftp://archive.example/debian"),
        ("cuda_compiler_apt_uri", "http://archive.example/debian bookworm"),
        ("cuda_compiler_apt_keyring", "keyring.gpg"),
        # An alias matches no pin of n=<codename>, and the host's own release pinned at 1 stops its updates.
        ("cuda_compiler_apt_suite", "oldstable"),
        ("cuda_compiler_apt_suite", "trixie"),
        # A newline would end the deb822 stanza (Python's $ lets one through; the check anchors at \Z).
        ("cuda_compiler_apt_uri", "http://archive.example/debian\n"),
        ("cuda_compiler_apt_suite", "bookworm\n"),
        # Names apt ignores (or reads in another format).
        ("cuda_compiler_apt_sources", "/etc/apt/sources.list.d/verl-p40-gcc-11.list"),
        ("cuda_compiler_apt_preferences", "/etc/apt/preferences.d/verl-p40-gcc-11.conf"),
    ],
)
def test_a_bad_suite_archive_or_keyring_stops_before_anything_is_written(tmp_path: Path, variable: str, value: str):
    rc, results = compiler(tmp_path, **{variable: value})
    assert rc != 0
    name, msg = failure(results)
    assert name == "Cuda | Check the suite and the archive to take gcc 11 from"
    assert variable in msg and value.strip() in msg
    assert not any(name.startswith(("Cuda | Write", "Cuda | Pin", "Cuda | Install")) for name, _ in results)
