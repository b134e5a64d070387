"""The disk_space module, run in this process (tests/fixtures/module_run.py): what preflight's refusal
for lack of disk space rests on, branch by branch.

Each filesystem reports the free space a test gives it (os.statvfs faked for that test's directory), so
a requirement just at the free space, or just above it, is the same on every machine and while other
processes write to the disk. test_stack_plugins and test_preflight_checks cover check() against the real
free space; test_through_ansible (and test_module_docs) run the module as a task.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import run_module
from module_run import in_process

import disk_space

GIB = 1024**3
BLOCK = 4096


def mount_of(path: Path) -> str:
    """The mount point of the filesystem holding `path`, as coreutils' stat finds it."""
    return subprocess.run(["stat", "--format=%m", str(path)], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def free(monkeypatch: pytest.MonkeyPatch):
    """free(path, gib): the filesystem of `path` has `gib` GiB free for a user (and 5 GiB more reserved
    for root, which no requirement may count on); other paths report their real free space."""
    given: dict[str, float] = {}
    real = os.statvfs

    def statvfs(path):
        if str(path) in given:
            blocks = round(given[str(path)] * GIB / BLOCK)
            return SimpleNamespace(f_bavail=blocks, f_bfree=blocks + 5 * GIB // BLOCK, f_frsize=BLOCK, f_bsize=BLOCK)
        return real(path)

    monkeypatch.setattr(os, "statvfs", statvfs)
    return lambda path, gib: given.__setitem__(str(path), gib)


def space(*requirements: dict, check: bool = False) -> dict:
    return in_process(disk_space, {"requirements": list(requirements)}, check=check)


def test_a_requirement_just_at_the_free_space_fits_and_one_above_it_falls_short(tmp_path: Path, free):
    free(tmp_path, 10)
    fits = space({"path": str(tmp_path), "min_free_gb": 10})
    assert fits["_rc"] == 0 and not fits["changed"] and fits["shortfalls"] == []
    assert fits["filesystems"] == [
        {"mount": mount_of(tmp_path), "free_gb": 10.0, "needed_gb": 10.0, "paths": [str(tmp_path)]}
    ]
    short = space({"path": str(tmp_path), "min_free_gb": 10.2})
    assert short["_rc"] == 0, "a shortfall is the caller's to judge, not a failed task"
    assert short["shortfalls"] == [
        "%s has 10.0 GiB free, needs 10.2 GiB for %s 10.2 GiB" % (mount_of(tmp_path), tmp_path)
    ]


def test_the_free_space_is_what_a_user_may_take_in_gib_to_one_decimal(tmp_path: Path, free):
    """Root's reserved blocks are not counted, a GiB is 1024³ bytes (as df -h counts), and 10.04 GiB
    reads as 10.0 (as the shortfall prints it)."""
    free(tmp_path, 100)
    [filesystem] = space({"path": str(tmp_path), "min_free_gb": 1})["filesystems"]
    assert filesystem["free_gb"] == 100.0
    free(tmp_path, 10.04)
    [filesystem] = space({"path": str(tmp_path), "min_free_gb": 1})["filesystems"]
    assert filesystem["free_gb"] == 10.0
    free(tmp_path, 0.36)
    [filesystem] = space({"path": str(tmp_path), "min_free_gb": 1})["filesystems"]
    assert filesystem["free_gb"] == 0.4


def test_paths_on_one_filesystem_add_up_and_the_shortfall_names_each_with_its_why(tmp_path: Path, free):
    """A path that does not exist yet counts on the filesystem of its nearest existing ancestor."""
    free(tmp_path, 10)
    cuda = tmp_path / "usr" / "local" / "cuda-11.8"
    result = space(
        {"path": str(cuda), "min_free_gb": 4, "why": "cuda_prefix; preflight_disk_cuda_gb"},
        {"path": str(tmp_path), "min_free_gb": 7},
    )
    assert not cuda.exists(), "the module only reads"
    assert result["filesystems"] == [
        {"mount": mount_of(tmp_path), "free_gb": 10.0, "needed_gb": 11.0, "paths": [str(cuda), str(tmp_path)]}
    ]
    assert result["shortfalls"] == [
        "%s has 10.0 GiB free, needs 11.0 GiB for %s 4.0 GiB (cuda_prefix; preflight_disk_cuda_gb), %s 7.0 GiB"
        % (mount_of(tmp_path), cuda, tmp_path)
    ]


@pytest.mark.parametrize("proc_first", [True, False])
def test_each_filesystem_is_judged_on_its_own_sorted_by_mount_point(tmp_path: Path, free, proc_first: bool):
    """/proc is a filesystem of its own on every Linux host: its requirement neither adds to the one
    on tmp_path's filesystem nor hides its shortfall, whatever the order the requirements come in."""
    free(tmp_path, 10)
    free("/proc", 3)
    ours = [{"path": str(tmp_path / "a"), "min_free_gb": 6}, {"path": str(tmp_path / "b"), "min_free_gb": 5}]
    proc = [{"path": "/proc/verl-p40-not-there", "min_free_gb": 2}]
    result = space(*(proc + ours if proc_first else ours + proc))
    mounts = sorted([mount_of(tmp_path), "/proc"])
    assert [fs["mount"] for fs in result["filesystems"]] == mounts
    by_mount = {fs["mount"]: fs for fs in result["filesystems"]}
    assert by_mount["/proc"] == {
        "mount": "/proc",
        "free_gb": 3.0,
        "needed_gb": 2.0,
        "paths": ["/proc/verl-p40-not-there"],
    }
    assert by_mount[mount_of(tmp_path)]["needed_gb"] == 11.0
    assert by_mount[mount_of(tmp_path)]["paths"] == [str(tmp_path / "a"), str(tmp_path / "b")]
    [shortfall] = result["shortfalls"]
    assert shortfall.startswith("%s has 10.0 GiB free, needs 11.0 GiB for " % mount_of(tmp_path))


def test_check_mode_reports_the_same(tmp_path: Path, free):
    """Preflight runs in check mode too (--check): it must still see a shortfall."""
    free(tmp_path, 2)
    requirement = {"path": str(tmp_path), "min_free_gb": 3}
    checked = space(requirement, check=True)
    assert checked == space(requirement)
    assert checked["_rc"] == 0 and len(checked["shortfalls"]) == 1


def test_a_relative_path_is_refused(tmp_path: Path):
    """A relative path would be measured from wherever the module runs: not the path the user meant."""
    refused = space({"path": str(tmp_path), "min_free_gb": 1}, {"path": "var/cache/verl-p40", "min_free_gb": 1})
    assert refused["_rc"] == 1 and refused["msg"] == "requirement path 'var/cache/verl-p40' must be absolute"
    assert "filesystems" not in refused


@pytest.mark.parametrize(
    "args, missing",
    [
        ({}, "requirements"),
        ({"requirements": [{"path": "/"}]}, "min_free_gb found in requirements"),
        ({"requirements": [{"min_free_gb": 1}]}, "path found in requirements"),
    ],
)
def test_a_requirement_without_its_path_or_size_is_refused(args: dict, missing: str):
    """Not read as no requirement, or as 0 GiB: a role that forgot one hears of it."""
    refused = in_process(disk_space, args)
    assert refused["_rc"] == 1 and refused["msg"] == "missing required arguments: " + missing


def test_through_ansible(tmp_path: Path):
    """The same module as a task runs it (argument spec, transport, its own Python)."""
    done = run_module("disk_space", {"requirements": [{"path": str(tmp_path / "new"), "min_free_gb": 0}]})
    assert done["_rc"] == 0 and done["shortfalls"] == [] and done["filesystems"][0]["paths"] == [str(tmp_path / "new")]
    refused = run_module("disk_space", {"requirements": [{"path": "relative", "min_free_gb": 0}]})
    assert refused["_rc"] != 0 and "must be absolute" in refused["msg"]


def test_memory_is_memtotal_in_mib_as_ansibles_fact_and_none_when_unreadable(tmp_path: Path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemFree:  1024 kB\nMemTotal:       16385023 kB\nSwapTotal: 0 kB\n")
    assert disk_space.memory_mb(str(meminfo)) == 16000  # 16385023 // 1024
    meminfo.write_text("MemFree:  1024 kB\n")
    assert disk_space.memory_mb(str(meminfo)) is None
    meminfo.write_text("MemTotal: lots\n")
    assert disk_space.memory_mb(str(meminfo)) is None
    assert disk_space.memory_mb(str(tmp_path / "absent")) is None


def test_the_cpus_are_the_affinity_mask_else_the_count(monkeypatch):
    def affinity(pid):
        if pid != 0:  # 0: this process; another pid is another process's mask
            raise ProcessLookupError(pid)
        return {0, 2, 5}

    monkeypatch.setattr(disk_space.os, "sched_getaffinity", affinity, raising=False)
    monkeypatch.setattr(disk_space.os, "cpu_count", lambda: 7)
    assert disk_space.cpus() == 3

    def refused(pid):
        raise OSError("no affinity here")

    monkeypatch.setattr(disk_space.os, "sched_getaffinity", refused, raising=False)
    monkeypatch.setattr(disk_space.os, "cpu_count", lambda: 7)
    assert disk_space.cpus() == 7
    monkeypatch.setattr(disk_space.os, "cpu_count", lambda: None)
    assert disk_space.cpus() == 1


def test_a_run_reports_this_hosts_memory_and_cpus(tmp_path: Path):
    done = space({"path": str(tmp_path / "new"), "min_free_gb": 0})
    assert done["memory_mb"] == disk_space.memory_mb() and done["cpus"] == len(os.sched_getaffinity(0))
    assert done["memory_mb"] > 0
