"""The stack_take module, run in this process (tests/fixtures/module_run.py): the Apex wheel the training
user built, taken into root's cache with its sha256, branch by branch.

What a later run trusts is a file under its name with a sum beside it that `sha256sum -c` accepts; a
refusal caches nothing under that name. test_through_ansible (and test_module_docs) run the module as a task.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import run_module
from module_run import in_process

import stack_take

WHEEL = b"PK\x03\x04 an apex wheel, built by the training user\n" * 1000


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """The wheel in the user's build tree."""
    src = tmp_path / "home" / "apex.dist" / "apex-0.1-cp310-cp310-linux_x86_64.whl"
    src.parent.mkdir(parents=True)
    src.write_bytes(WHEEL)
    return src


def take(src: Path, dest: Path, check: bool = False, **extra) -> dict:
    return in_process(stack_take, dict({"src": str(src), "user": "root", "dest": str(dest)}, **extra), check=check)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_wheel_is_cached_with_a_sum_sha256sum_accepts(tmp_path: Path, built: Path):
    dest = tmp_path / "cache" / "apex-wheels" / "0123abcd"
    taken = take(built, dest)
    name = built.name
    digest = hashlib.sha256(WHEEL).hexdigest()
    assert taken == {"_rc": 0, "changed": True, "path": str(dest / name), "sha256": digest, "bytes": len(WHEEL)}
    assert (dest / name).read_bytes() == WHEEL
    assert (dest / (name + ".sha256")).read_text() == "%s  %s\n" % (digest, name)
    assert sorted(os.listdir(dest)) == [name, name + ".sha256"], "no .partial or temporary file is left"
    assert mode_of(dest / name) == mode_of(dest / (name + ".sha256")) == 0o644
    assert mode_of(dest) == 0o755
    checked = subprocess.run(
        ["sha256sum", "-c", name + ".sha256"], cwd=dest, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # A rebuilt wheel replaces both.
    built.write_bytes(b"rebuilt")
    again = take(built, dest)
    assert again["sha256"] == hashlib.sha256(b"rebuilt").hexdigest() and again["bytes"] == 7
    assert (dest / name).read_bytes() == b"rebuilt"
    assert (dest / (name + ".sha256")).read_text().startswith(again["sha256"] + "  ")


@pytest.mark.parametrize("mode", ["0600", "600", 0o600])
def test_its_name_sum_suffix_and_mode_are_the_callers(tmp_path: Path, built: Path, mode):
    """A mode is octal text, or a number as YAML reads an unquoted 0600 (384), as Ansible's file
    modules take it."""
    dest = tmp_path / "cache"
    taken = take(built, dest, name="apex.whl", sum_suffix=".sum", mode=mode)
    assert taken["_rc"] == 0 and taken["path"] == str(dest / "apex.whl")
    assert sorted(os.listdir(dest)) == ["apex.whl", "apex.whl.sum"]
    assert (dest / "apex.whl.sum").read_text() == "%s  apex.whl\n" % hashlib.sha256(WHEEL).hexdigest()
    assert mode_of(dest / "apex.whl") == mode_of(dest / "apex.whl.sum") == 0o600


def test_check_mode_reports_the_copy_and_touches_nothing(tmp_path: Path, built: Path):
    dest = tmp_path / "cache"
    looked = take(built, dest, check=True)
    assert looked == {"_rc": 0, "changed": True, "path": str(dest / built.name), "sha256": "", "bytes": 0}
    assert not dest.exists()


@pytest.mark.parametrize("name", ["sub/apex.whl", ".", ".."])
def test_a_name_that_is_no_file_name_is_refused(tmp_path: Path, built: Path, name: str):
    """A name with a slash, or . or .., would write outside the cache directory or over it."""
    dest = tmp_path / "cache"
    refused = take(built, dest, name=name)
    assert refused["_rc"] == 1 and refused["msg"] == "stack_take: name '%s' is not a file name" % name
    assert not dest.exists()


def test_an_unknown_user_is_refused(tmp_path: Path, built: Path):
    dest = tmp_path / "cache"
    refused = take(built, dest, user="verl-p40-no-such-user")
    assert refused["_rc"] == 1 and refused["msg"] == "stack_take: no user verl-p40-no-such-user"
    assert not dest.exists()


@pytest.mark.parametrize("missing", ["src", "user", "dest"])
def test_a_task_without_its_src_user_or_dest_is_refused(tmp_path: Path, built: Path, missing: str):
    """None of the three has a default that could stand in: which file, as whom, into which cache."""
    args = {"src": str(built), "user": "root", "dest": str(tmp_path / "cache")}
    del args[missing]
    refused = in_process(stack_take, args)
    assert refused["_rc"] == 1 and refused["msg"] == "missing required arguments: " + missing
    assert not (tmp_path / "cache").exists()


def refused_with_nothing_cached(taken: dict, src: Path, dest: Path, why: str) -> None:
    assert taken["_rc"] == 1 and taken["sha256"] == "" and taken["bytes"] == 0
    assert taken["msg"].startswith("%s was not taken into %s: " % (src, dest)), taken["msg"]
    assert why in taken["msg"] and "Nothing was cached." in taken["msg"]
    assert not (dest / src.name).exists() and not (dest / (src.name + ".sha256")).exists()


def test_a_link_a_directory_or_a_missing_file_is_not_taken(tmp_path: Path, built: Path):
    """A link the user put in the wheel's place is not followed, even to a file root can read; only a
    plain file is taken."""
    dest = tmp_path / "cache"
    link = built.parent / "swapped.whl"
    secret = tmp_path / "root-only"
    secret.write_text("root's")
    link.symlink_to(secret)
    refused_with_nothing_cached(take(link, dest), link, dest, "%s is a link" % link)
    refused_with_nothing_cached(take(built.parent, dest), built.parent, dest, "%s is not a plain file" % built.parent)
    missing = built.parent / "missing.whl"
    refused_with_nothing_cached(take(missing, dest), missing, dest, "No such file or directory")


def test_a_file_the_user_cannot_read_is_not_taken(tmp_path: Path, built: Path):
    """Opened with the user's rights: root reading it for them would copy what they may not see."""
    built.chmod(0o600)  # root's, in a tree only root can enter
    dest = tmp_path / "cache"
    refused_with_nothing_cached(take(built, dest, user="nobody"), built, dest, "Permission denied")


def test_the_name_appears_only_once_its_sum_is_written(tmp_path: Path, built: Path, monkeypatch):
    """A run killed or failing between the copy and its sum leaves no name a later run would trust."""
    dest = tmp_path / "cache"

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(stack_take, "write_at", full)
    refused_with_nothing_cached(take(built, dest), built, dest, "No space left on device")
    monkeypatch.undo()
    assert take(built, dest)["_rc"] == 0
    assert sorted(os.listdir(dest)) == [built.name, built.name + ".sha256"]


def test_a_cache_directory_another_user_owns_is_refused(tmp_path: Path, built: Path):
    """Root writes only where nobody else can swap the directory under it (the cache, and every
    directory above it)."""
    dest = tmp_path / "cache"
    dest.mkdir()
    os.chown(dest, 1, 1)
    refused_with_nothing_cached(take(built, dest), built, dest, "%s is owned by uid 1" % dest)
    assert os.listdir(dest) == []


def test_run_by_another_user_than_root_the_cache_is_that_users_own(tmp_path: Path, built: Path, monkeypatch):
    """Only root's run is held to a root-only cache (another user cannot make one): run by uid 1, the
    module takes the file into a directory of uid 1's, and the second opening of it (for the sum and
    the rename) asks what take_as's did, so the pair is cached and no .partial is left behind."""
    dest = tmp_path / "cache"
    dest.mkdir()
    os.chown(dest, 1, 1)
    monkeypatch.setattr(os, "geteuid", lambda: 1)
    taken = take(built, dest)
    assert taken["_rc"] == 0 and taken["sha256"] == hashlib.sha256(WHEEL).hexdigest(), taken
    assert sorted(os.listdir(dest)) == [built.name, built.name + ".sha256"]


def test_through_ansible(tmp_path: Path, built: Path):
    """The same module as a task runs it (argument spec, transport, its own Python)."""
    dest = tmp_path / "cache"
    done = run_module("stack_take", {"src": str(built), "user": "root", "dest": str(dest)})
    assert done["_rc"] == 0 and done["sha256"] == hashlib.sha256(WHEEL).hexdigest()
    assert (dest / built.name).read_bytes() == WHEEL
