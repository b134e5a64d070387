"""The stack_links module, run in this process (tests/fixtures/module_run.py), and once through Ansible:
the cudnn layer's links into the CUDA tree, made in one call."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_module
from module_run import in_process

import stack_links


def links(tmp_path: Path, *names: str) -> list[dict]:
    (tmp_path / "cudnn").mkdir(exist_ok=True)
    (tmp_path / "cuda").mkdir(exist_ok=True)
    return [{"src": str(tmp_path / "cudnn" / name), "dest": str(tmp_path / "cuda" / name)} for name in names]


def test_links_are_made_then_left_as_they_are(tmp_path: Path):
    wanted = links(tmp_path, "cudnn.h", "libcudnn.so.8")
    made = in_process(stack_links, {"links": wanted})
    assert made["_rc"] == 0 and made["changed"] and made["changed_links"] == [link["dest"] for link in wanted]
    assert [os.readlink(link["dest"]) for link in wanted] == [link["src"] for link in wanted]
    again = in_process(stack_links, {"links": wanted})
    assert again["_rc"] == 0 and not again["changed"] and again["changed_links"] == []


def test_another_link_or_a_file_is_replaced_and_only_it(tmp_path: Path):
    wanted = links(tmp_path, "a.h", "b.h", "c.h")
    os.symlink(wanted[0]["src"], wanted[0]["dest"])  # already right
    os.symlink("/elsewhere/b.h", wanted[1]["dest"])  # another target
    Path(wanted[2]["dest"]).write_text("a copy, not a link")
    done = in_process(stack_links, {"links": wanted})
    assert done["changed_links"] == [wanted[1]["dest"], wanted[2]["dest"]]
    assert [os.readlink(link["dest"]) for link in wanted] == [link["src"] for link in wanted]
    assert sorted(os.listdir(tmp_path / "cuda")) == ["a.h", "b.h", "c.h"]  # no temporary link left


def test_a_link_to_a_directory_is_replaced_not_followed(tmp_path: Path):
    """The attack a follow would allow: dest points into a directory someone else chose; the new link
    must replace dest itself, never land inside the directory it points at."""
    (wanted,) = links(tmp_path, "libcudnn.so")
    victim = tmp_path / "victim"
    victim.mkdir()
    os.symlink(victim, wanted["dest"])
    done = in_process(stack_links, {"links": [wanted]})
    assert done["changed"] and os.readlink(wanted["dest"]) == wanted["src"]
    assert list(victim.iterdir()) == []


def test_a_stale_temporary_link_is_replaced(tmp_path: Path, monkeypatch):
    (wanted,) = links(tmp_path, "cudnn.h")
    monkeypatch.setattr(stack_links.os, "getpid", lambda: 4242)
    os.symlink("/left/by/a/killed/run", wanted["dest"] + ".stack-links-4242")
    assert in_process(stack_links, {"links": [wanted]})["changed"]
    assert os.readlink(wanted["dest"]) == wanted["src"]
    assert not os.path.lexists(wanted["dest"] + ".stack-links-4242")


def test_check_mode_says_what_would_change_and_writes_nothing(tmp_path: Path):
    wanted = links(tmp_path, "a.h", "b.h")
    os.symlink("/elsewhere/b.h", wanted[1]["dest"])
    done = in_process(stack_links, {"links": wanted}, check=True, diff=True)
    assert done["changed"] and done["changed_links"] == [link["dest"] for link in wanted]
    assert not os.path.lexists(wanted[0]["dest"]) and os.readlink(wanted[1]["dest"]) == "/elsewhere/b.h"
    assert done["diff"]["before"] == "%s -> (nothing)\n%s -> /elsewhere/b.h\n" % (wanted[0]["dest"], wanted[1]["dest"])
    assert done["diff"]["after"] == "".join("%s -> %s\n" % (link["dest"], link["src"]) for link in wanted)
    assert "diff" not in in_process(stack_links, {"links": wanted}, check=True)


def test_a_directory_a_missing_directory_or_a_relative_dest_changes_nothing(tmp_path: Path):
    wanted = links(tmp_path, "a.h")
    (tmp_path / "cuda" / "lib64").mkdir()
    bad = [
        {"src": "/x", "dest": str(tmp_path / "cuda" / "lib64")},
        {"src": "/x", "dest": str(tmp_path / "absent" / "a.h")},
        {"src": "/x", "dest": "relative/a.h"},
    ]
    for one in bad:
        refused = in_process(stack_links, {"links": wanted + [one]})
        assert refused["_rc"] == 1 and refused["msg"].startswith("stack_links changed nothing: "), one
        assert not os.path.lexists(wanted[0]["dest"])
    messages = [in_process(stack_links, {"links": [one]})["msg"] for one in bad]
    assert "lib64 is a directory, not a link or a file" in messages[0]
    assert "the directory of %s does not exist" % bad[1]["dest"] in messages[1]
    assert "relative/a.h is not an absolute path" in messages[2]


def test_a_link_that_cannot_be_made_fails_with_the_path(tmp_path: Path, monkeypatch):
    (wanted,) = links(tmp_path, "a.h")

    def refused(src, dest):
        raise PermissionError(13, "Permission denied", dest)

    monkeypatch.setattr(stack_links.os, "replace", refused)
    done = in_process(stack_links, {"links": [wanted]})
    assert done["_rc"] == 1 and done["msg"].startswith(
        "stack_links could not link %s to %s: " % (wanted["dest"], wanted["src"])
    )
    assert not os.path.lexists(wanted["dest"]) and os.listdir(tmp_path / "cuda") == []


def test_through_ansible(tmp_path: Path):
    (wanted,) = links(tmp_path, "a.h")
    done = run_module("stack_links", {"links": [wanted]})
    assert done["_rc"] == 0 and done["changed"] and os.readlink(wanted["dest"]) == wanted["src"]


def test_the_diff_names_a_file_that_a_link_replaces(tmp_path: Path):
    (wanted,) = links(tmp_path, "a.h")
    Path(wanted["dest"]).write_text("a copy")
    done = in_process(stack_links, {"links": [wanted]}, check=True, diff=True)
    assert done["diff"]["before"] == "%s -> (a file)\n" % wanted["dest"]


@pytest.mark.parametrize(
    "args, missing",
    [({}, "links"), ({"links": [{"dest": "/x"}]}, "src"), ({"links": [{"src": "/x"}]}, "dest")],
)
def test_links_and_each_ones_src_and_dest_are_required(args: dict, missing: str):
    refused = in_process(stack_links, args)
    assert refused["_rc"] == 1 and "missing required arguments: " + missing in refused["msg"]
