"""module_utils/stack_files: every state file, lock and patched file is written durably.

The broken cases: a rename without a fsync of the file (a crash leaves an empty file under the
new name) or of its directory (a crash takes the rename back), and a rewrite that turns a
link into a file, drops the mode or hands a user's file to root.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "module_utils"))
import stack_files  # noqa: E402


@pytest.fixture
def fsynced(monkeypatch):
    """The paths of what os.fsync was called on, in order."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        seen.append(os.readlink("/proc/self/fd/%d" % fd))
        real(fd)

    monkeypatch.setattr(stack_files.os, "fsync", spy)
    return seen


def test_a_state_file_and_its_directory_are_fsynced(tmp_path, fsynced):
    path = tmp_path / "layers" / "cuda.json"
    assert stack_files.atomic_write(str(path), '{"status": "complete"}\n')
    assert path.read_text() == '{"status": "complete"}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    # The data first (through the temporary file renamed into place), then the directory entry.
    assert len(fsynced) == 2
    assert fsynced[0].startswith(str(path.parent) + "/.cuda.json-")
    assert fsynced[1] == str(path.parent)
    assert sorted(os.listdir(path.parent)) == ["cuda.json"]


def test_exclusive_writes_only_once(tmp_path):
    path = tmp_path / "lock.json"
    assert stack_files.atomic_write(str(path), "first\n", 0o600, exclusive=True)
    assert not stack_files.atomic_write(str(path), "second\n", 0o600, exclusive=True)
    assert path.read_text() == "first\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["lock.json"]


def test_a_patched_file_keeps_its_link_and_mode(tmp_path, fsynced):
    target = tmp_path / "real" / "fsdp_workers.py"
    target.parent.mkdir()
    target.write_text("old\n")
    target.chmod(0o755)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    stack_files.replace_keeping(str(link), b"new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert fsynced[-1] == str(target.parent)
    # A file that was not there is created 0644.
    fresh = tmp_path / "real" / "record.json"
    stack_files.replace_keeping(str(fresh), b"{}\n")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "record.json"
    path.write_text("old\n")

    def broken(fd: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(stack_files.os, "fsync", broken)
    with pytest.raises(OSError):
        stack_files.replace_keeping(str(path), b"new\n")
    assert path.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["record.json"]
