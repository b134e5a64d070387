"""module_utils/stack_files: every state file, lock and patched file is written durably.

The broken cases: a rename without a fsync of the file (a crash leaves an empty file under the
new name) or of its directory (a crash takes the rename back), and a rewrite that turns a
link into a file, drops the mode or hands a user's file to root.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import tempfile
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


NOBODY = pwd.getpwnam("nobody")


def test_a_link_swapped_in_for_the_temporary_file_is_not_followed(tmp_path, monkeypatch):
    """The attack on root's write: between the temporary file's creation and its chmod, its name
    is swapped for a link to a file of root's. Broken case: os.chmod(tmp) followed the link and
    made that file 0644 (/etc/shadow, in the review). The mode is now set through the descriptor."""
    victim = tmp_path / "shadow"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    state = tmp_path / "layers"
    state.mkdir()
    real = os.fsync

    def swap(fd: int) -> None:
        for name in os.listdir(state):
            if name.endswith(".tmp"):
                os.unlink(state / name)
                os.symlink(victim, state / name)
        real(fd)

    monkeypatch.setattr(stack_files.os, "fsync", swap)
    stack_files.atomic_write(str(state / "cuda.json"), "{}\n")
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600 and victim.read_text() == "secret\n"


def test_root_writes_its_records_only_where_no_one_else_can(tmp_path):
    users = tmp_path / "miniforge3"
    users.mkdir()
    os.chown(users, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(stack_files.UnsafePath, match="owned by uid %d" % NOBODY.pw_uid):
        stack_files.atomic_write(str(users / ".verl-p40-tree"), "{}\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(stack_files.UnsafePath, match="writable by everyone"):
        stack_files.atomic_write(str(shared / "lock"), "{}\n")
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(stack_files.UnsafePath, match="is a link"):
        stack_files.atomic_write(str(link / "cuda.json"), "{}\n")
    assert os.listdir(users) == [] and os.listdir(shared) == []


@pytest.fixture
def users_tree():
    """A directory of the user's that the user can reach (pytest's tmp_path is root's, 0700)."""
    base = Path(tempfile.mkdtemp(prefix="verl-p40-test-"))
    base.chmod(0o755)
    tree = base / "build"
    tree.mkdir()
    os.chown(tree, NOBODY.pw_uid, NOBODY.pw_gid)
    yield tree
    shutil.rmtree(base)


def test_a_file_is_taken_from_a_users_tree_with_that_users_rights(tmp_path, users_tree):
    tree = users_tree
    wheel = tree / "apex-0.1-cp310-cp310-linux_x86_64.whl"
    wheel.write_bytes(b"PK wheel bytes")
    os.chown(wheel, NOBODY.pw_uid, NOBODY.pw_gid)
    cache = tmp_path / "cache"
    digest, size = stack_files.take_as(str(wheel), NOBODY.pw_uid, NOBODY.pw_gid, str(cache), wheel.name)
    assert (digest, size) == (hashlib.sha256(b"PK wheel bytes").hexdigest(), 14)
    taken = cache / wheel.name
    assert taken.read_bytes() == b"PK wheel bytes" and taken.stat().st_uid == 0
    assert stat.S_IMODE(taken.stat().st_mode) == 0o644


@pytest.mark.parametrize("plant", ["link", "fifo", "root-only", "hardlink"])
def test_what_the_user_plants_in_place_of_the_file_is_refused(tmp_path, users_tree, plant):
    """A link to a root-only file, a FIFO (a read would hang the run) or a root-only file in the
    user's tree: nothing is read or copied. Broken cases: a copy by path as root (follows the link,
    reads the root-only file) or an open without O_NONBLOCK (hangs on the FIFO)."""
    tree = users_tree
    secret = tree.parent / "secret"
    secret.write_text("root only\n")
    secret.chmod(0o600)
    planted = tree / "apex.whl"
    if plant == "link":
        planted.symlink_to(secret)
    elif plant == "fifo":
        os.mkfifo(planted)
    elif plant == "hardlink":
        os.link(secret, planted)
    else:
        planted.write_text("root only\n")
        planted.chmod(0o600)
    cache = tmp_path / "cache"
    with pytest.raises((stack_files.UnsafePath, PermissionError)):
        stack_files.take_as(str(planted), NOBODY.pw_uid, NOBODY.pw_gid, str(cache), "apex.whl")
    assert not (cache / "apex.whl").exists()
    assert os.geteuid() == 0 and os.getegid() == 0  # root again after the user's open
