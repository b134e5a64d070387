"""The stack_tree module: the one check of every tree a layer may delete, and the delete itself."""

from __future__ import annotations

import json
import os
import pwd
import sys
from pathlib import Path

import pytest
from conftest import run_module

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "library"))
import stack_tree as st  # noqa: E402

NOBODY = pwd.getpwnam("nobody")
HOMES = ["/root", "/home/alice", "/home/verl", "/nonexistent"]


@pytest.mark.parametrize(
    "path, why",
    [
        ("/", "system directory"),
        ("/usr", "system directory"),
        ("/usr/lib", "system directory"),
        ("/usr/local", "system directory"),
        ("/etc/profile.d", "system directory"),
        ("/var/lib", "system directory"),
        ("/srv", "system directory"),
        ("/data", "less than two levels deep"),
        ("/home/alice", "home directory"),
        ("/home/verl", "home directory"),
    ],
)
def test_refused_paths(path, why):
    assert why in st.problem(path, "cuda_prefix", HOMES)


@pytest.mark.parametrize(
    "path", ["/usr/local/cuda-11.8", "/opt/miniforge3", "/opt/cudnn/8.9.7.29-cuda11", "/home/verl/verl-p40/verl"]
)
def test_accepted_paths(path):
    assert st.problem(path, "cuda_prefix", HOMES) is None


def test_home_parents_are_refused():
    assert "home directory or one that holds one (/srv/users/bob)" in st.problem(
        "/srv/users", "stack_conda_prefix", ["/srv/users/bob"]
    )


def module(tmp_path: Path, check: bool = False, **args) -> dict:
    args.setdefault("state_dir", str(tmp_path / "layers"))
    args.setdefault("layer", "cuda")
    return run_module("stack_tree", args, check)


@pytest.mark.parametrize("spelling", ["//", "/", "/usr/lib/", "/usr/../usr/lib", "/./etc"])
def test_module_refuses_any_spelling_of_a_system_directory(tmp_path, spelling):
    result = module(tmp_path, path=spelling, var="cuda_prefix", state="absent")
    assert result["_rc"] != 0
    assert "cuda_prefix resolves to" in result["msg"] and "Set cuda_prefix to such a path" in result["msg"]


def test_module_refuses_a_link_to_a_system_directory(tmp_path):
    (tmp_path / "prefix").symlink_to("/usr/lib")
    result = module(tmp_path, path=str(tmp_path / "prefix"), state="absent")
    assert result["_rc"] != 0 and "resolves to /usr/lib, a system directory" in result["msg"]
    assert Path("/usr/lib").is_dir()


def test_foreign_tree_stops_and_stays(tmp_path):
    tree = tmp_path / "cuda-11.8"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "nvcc").write_text("the user's own\n")
    for state in ("absent", "present"):
        result = module(tmp_path, path=str(tree), var="cuda_prefix", state=state)
        assert result["_rc"] != 0 and "holds something this project did not make" in result["msg"]
        assert "set cuda_prefix to another path" in result["msg"]
    assert (tree / "bin" / "nvcc").read_text() == "the user's own\n"
    assert module(tmp_path, path=str(tree), require_ours=True)["_rc"] != 0
    assert module(tmp_path, path=str(tree))["_rc"] == 0  # a plain check only validates the path


def claims(tmp_path: Path, layer: str = "cuda") -> list[dict]:
    path = tmp_path / "layers" / "trees" / (layer + ".json")
    return json.loads(path.read_text())["trees"] if path.exists() else []


def test_claim_then_delete(tmp_path):
    tree = tmp_path / "cuda-11.8"
    claimed = module(tmp_path, path=str(tree), state="present")
    assert claimed["changed"] and tree.is_dir()
    # Root's claim is in its state directory, with the tree's identity; nothing is written in the tree.
    identity = [tree.stat().st_dev, tree.stat().st_ino]
    assert claims(tmp_path) == [{"path": str(tree), "resolved": str(tree), "id": identity}]
    assert list(tree.iterdir()) == []
    assert not module(tmp_path, path=str(tree), state="present")["changed"]  # idempotent
    (tree / "bin").mkdir()
    checked = module(tmp_path, path=str(tree), require_ours=True)
    assert checked["ours"] and not checked["changed"]
    assert module(tmp_path, check=True, path=str(tree), state="absent")["changed"] and tree.is_dir()
    deleted = module(tmp_path, path=str(tree), state="absent")
    assert deleted["changed"] and not tree.exists()
    assert claims(tmp_path) == []
    assert not module(tmp_path, path=str(tree), state="absent")["changed"]


def test_a_trailing_slash_is_the_same_tree(tmp_path):
    tree = tmp_path / "cuda-11.8"
    assert module(tmp_path, path=str(tree) + "//", state="present")["changed"]
    assert claims(tmp_path)[0]["path"] == str(tree)
    assert module(tmp_path, path=str(tree) + "/", require_ours=True)["ours"]


def test_another_layers_claim_is_foreign(tmp_path):
    tree = tmp_path / "prefix"
    assert module(tmp_path, path=str(tree), state="present", layer="cudnn")["changed"]
    result = module(tmp_path, path=str(tree), state="absent", layer="cuda")
    assert result["_rc"] != 0 and tree.is_dir()


def test_a_claimed_prefix_swapped_for_a_link_is_not_deleted(tmp_path):
    """The attack: the user swaps a claimed prefix (its parent is theirs) for a link to a directory
    of someone else's. Broken case: a check that takes realpath() of the recorded path when it
    checks found the link's target "ours" and deleted it."""
    tree = tmp_path / "miniforge3"
    assert module(tmp_path, path=str(tree), state="present", layer="conda")["_rc"] == 0
    victim = tmp_path / "victim"
    (victim / "data").mkdir(parents=True)
    tree.rmdir()
    tree.symlink_to(victim)
    result = module(tmp_path, path=str(tree), state="absent", layer="conda")
    assert result["_rc"] != 0 and "did not make" in result["msg"]
    assert (victim / "data").is_dir()


def test_a_claimed_prefix_replaced_by_another_directory_is_not_deleted(tmp_path):
    tree = tmp_path / "miniforge3"
    assert module(tmp_path, path=str(tree), state="present", layer="conda")["_rc"] == 0
    tree.rename(tmp_path / "moved")
    (tree / "keep").mkdir(parents=True)
    result = module(tmp_path, path=str(tree), state="absent", layer="conda")
    assert result["_rc"] != 0 and (tree / "keep").is_dir()


def test_a_link_inside_a_tree_is_removed_not_followed(tmp_path):
    tree = tmp_path / "cuda-11.8"
    assert module(tmp_path, path=str(tree), state="present")["_rc"] == 0
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "file").write_text("keep\n")
    (tree / "lib").mkdir()
    (tree / "lib" / "dir-link").symlink_to(outside / "sub")
    (tree / "file-link").symlink_to(outside / "sub" / "file")
    assert module(tmp_path, path=str(tree), state="absent")["changed"] and not tree.exists()
    assert (outside / "sub" / "file").read_text() == "keep\n"


def test_a_tree_in_another_users_directory_is_deleted_with_that_users_rights(tmp_path):
    """The prefix's parent belongs to the user (a prefix in their home): root deletes with their
    rights only. Broken case: root deleting as root removes what the user could not."""
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    tree = home / "miniforge3"
    assert module(tmp_path, path=str(tree), state="present", layer="conda", owner="nobody")["_rc"] == 0
    assert (tree.stat().st_uid, tree.stat().st_gid) == (NOBODY.pw_uid, NOBODY.pw_gid)
    roots = tree / "roots"
    (roots / "sub").mkdir(parents=True)  # root's, 0755: the user cannot empty it
    result = module(tmp_path, path=str(tree), state="absent", layer="conda")
    assert result["_rc"] != 0 and "with the rights of uid %d" % NOBODY.pw_uid in result["msg"]
    assert (roots / "sub").is_dir()
    os.chown(roots, NOBODY.pw_uid, NOBODY.pw_gid)
    os.chown(roots / "sub", NOBODY.pw_uid, NOBODY.pw_gid)
    assert module(tmp_path, path=str(tree), state="absent", layer="conda")["changed"] and not tree.exists()


def test_a_parent_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    tree = shared / "cuda-11.8"
    assert module(tmp_path, path=str(tree), state="present")["_rc"] == 0
    shared.chmod(0o777)
    result = module(tmp_path, path=str(tree), state="absent")
    assert result["_rc"] != 0 and "writable by users other than root" in result["msg"] and tree.is_dir()


def test_a_claimed_tree_moves_with_its_claim(tmp_path):
    staging = tmp_path / "cudnn.partial"
    assert module(tmp_path, path=str(staging), state="present", layer="cudnn")["_rc"] == 0
    (staging / "archive" / "lib").mkdir(parents=True)
    assert module(tmp_path, path=str(staging / "archive"), state="present", layer="cudnn")["_rc"] == 0
    prefix = tmp_path / "cudnn"
    moved = module(tmp_path, path=str(prefix), src=str(staging / "archive"), state="present", layer="cudnn")
    assert moved["changed"] and (prefix / "lib").is_dir() and not (staging / "archive").exists()
    assert sorted(claim["path"] for claim in claims(tmp_path, "cudnn")) == [str(prefix), str(staging)]
    assert module(tmp_path, path=str(prefix), require_ours=True, layer="cudnn")["ours"]
    # Not onto something that is there, and not a tree that is not the layer's.
    (tmp_path / "other").mkdir()
    assert module(tmp_path, path=str(prefix), src=str(tmp_path / "other"), state="present", layer="cudnn")["_rc"]


def test_state_record_counts_as_ours(tmp_path):
    # A tree without a marker: the layer's record names the prefix and says the layer installed it.
    tree = tmp_path / "cuda-11.8"
    (tree / "bin").mkdir(parents=True)
    layers = tmp_path / "layers"
    layers.mkdir()
    record = {"details": {"prefix": str(tree), "host_compiler": "/usr/bin/g++", "adopted": False}}
    (layers / "cuda.json").write_text(json.dumps(record))
    assert module(tmp_path, path=str(tree), state="absent")["changed"] and not tree.exists()
    # Another key of the record (cudnn records the CUDA prefix it links into) does not count.
    (tree / "bin").mkdir(parents=True)
    (layers / "cudnn.json").write_text(json.dumps({"details": {"prefix": "/opt/x", "cuda_prefix": str(tree)}}))
    assert module(tmp_path, path=str(tree), state="absent", layer="cudnn")["_rc"] != 0 and tree.is_dir()


def test_adopted_tree_is_not_ours(tmp_path):
    # A toolkit installed by hand and adopted by the cuda layer: a rebuild must not delete it.
    tree = tmp_path / "cuda-11.8"
    (tree / "bin").mkdir(parents=True)
    layers = tmp_path / "layers"
    layers.mkdir()
    (layers / "cuda.json").write_text(json.dumps({"details": {"prefix": str(tree), "adopted": True}}))
    assert module(tmp_path, path=str(tree), state="absent")["_rc"] != 0 and tree.is_dir()


def test_an_old_record_that_does_not_say_is_not_ours(tmp_path):
    # Written by a version that adopted trees without saying so: the toolkit there may be the user's.
    tree = tmp_path / "cuda-11.8"
    (tree / "bin").mkdir(parents=True)
    layers = tmp_path / "layers"
    layers.mkdir()
    (layers / "cuda.json").write_text(json.dumps({"details": {"prefix": str(tree), "nvcc": "11.8"}}))
    result = module(tmp_path, path=str(tree), state="absent")
    assert result["_rc"] != 0 and tree.is_dir()
    assert "written by an older version" in result["msg"] and "remove the tree yourself" in result["msg"]
    # A plain foreign tree (no record naming it) gets no such note.
    (layers / "cuda.json").unlink()
    result = module(tmp_path, path=str(tree), state="absent")
    assert result["_rc"] != 0 and "older version" not in result["msg"]


def test_a_tree_unpacked_inside_ours_can_be_claimed(tmp_path):
    staging = tmp_path / "cudnn.partial"
    assert module(tmp_path, path=str(staging), state="present", layer="cudnn")["changed"]
    (staging / "archive" / "lib").mkdir(parents=True)
    assert module(tmp_path, path=str(staging / "archive"), state="present", layer="cudnn")["changed"]
    # Not inside one of ours: refused.
    (tmp_path / "elsewhere" / "lib").mkdir(parents=True)
    assert module(tmp_path, path=str(tmp_path / "elsewhere"), state="present", layer="cudnn")["_rc"] != 0


def test_an_earlier_versions_marker_counts_only_in_a_tree_root_alone_writes(tmp_path):
    """Trees built before claims: the old marker counts where nobody but root can write. Broken case:
    a marker the training user wrote into their own tree made any directory "ours"."""
    tree = tmp_path / "cuda-11.8"
    tree.mkdir()
    (tree / st.MARKER).write_text('{"layer": "cuda", "made_by": "verl-p40"}\n')
    assert module(tmp_path, path=str(tree), require_ours=True)["ours"]
    # Claiming it writes root's claim (check mode predicts it) and nothing into the tree.
    preview = module(tmp_path, check=True, path=str(tree), state="present")
    assert preview["changed"] and claims(tmp_path) == []
    assert module(tmp_path, path=str(tree), state="present")["changed"] and claims(tmp_path)
    assert not module(tmp_path, check=True, path=str(tree), state="present")["changed"]
    # The same marker in a tree the user owns, or written by the user: foreign.
    users = tmp_path / "miniforge3"
    users.mkdir()
    (users / st.MARKER).write_text('{"layer": "conda", "made_by": "verl-p40"}\n')
    os.chown(users, NOBODY.pw_uid, NOBODY.pw_gid)
    assert module(tmp_path, path=str(users), require_ours=True, layer="conda")["_rc"] != 0
    os.chown(users, 0, 0)
    os.chown(users / st.MARKER, NOBODY.pw_uid, NOBODY.pw_gid)
    assert module(tmp_path, path=str(users), require_ours=True, layer="conda")["_rc"] != 0


def test_an_earlier_versions_record_counts_only_under_a_parent_root_alone_writes(tmp_path):
    home = tmp_path / "home"
    (home / "miniforge3" / "bin").mkdir(parents=True)
    layers = tmp_path / "layers"
    layers.mkdir()
    record = {"details": {"prefix": str(home / "miniforge3"), "adopted": False}}
    (layers / "conda.json").write_text(json.dumps(record))
    assert module(tmp_path, path=str(home / "miniforge3"), require_ours=True, layer="conda")["ours"]
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    assert module(tmp_path, path=str(home / "miniforge3"), require_ours=True, layer="conda")["_rc"] != 0


def test_diff_mode_shows_the_claim_and_the_delete(tmp_path):
    tree = tmp_path / "cuda-11.8"
    args = dict(path=str(tree), layer="cuda", state="present", state_dir=str(tmp_path / "layers"))
    assert "diff" not in module(tmp_path, check=True, path=str(tree), state="present")
    preview = run_module("stack_tree", args, True, True)
    assert preview["diff"] == {
        "before": {"path": str(tree), "state": "absent", "claim": None},
        "after": {"path": str(tree), "state": "directory", "claim": {"path": str(tree)}},
    }
    assert not tree.exists()
    claimed = run_module("stack_tree", args, diff=True)
    assert claimed["diff"]["after"] == {"path": str(tree), "state": "directory", "claim": claims(tmp_path)[0]}
    deleted = run_module("stack_tree", dict(args, state="absent"), diff=True)
    assert deleted["diff"] == {
        "before": {"path": str(tree), "state": "directory"},
        "after": {"path": str(tree), "state": "absent"},
    }
    assert not tree.exists()


def test_several_trees_in_one_check(tmp_path):
    """Preflight's one call: each tree validated as alone; the first bad one fails the task, by name."""
    ours = tmp_path / "cuda-11.8"
    assert module(tmp_path, path=str(ours), state="present")["_rc"] == 0
    foreign = tmp_path / "miniforge3"
    (foreign / "bin").mkdir(parents=True)
    trees = [
        {"path": str(ours), "layer": "cuda", "var": "cuda_prefix"},
        {"path": str(foreign), "layer": "conda", "var": "stack_conda_prefix"},
        {"path": str(tmp_path / "not-yet"), "layer": "cudnn", "var": "cudnn_prefix"},
    ]
    args = {"state_dir": str(tmp_path / "layers"), "trees": trees}
    done = run_module("stack_tree", args)
    assert done["_rc"] == 0 and not done["changed"]
    assert [(t["var"], t["exists"], t["ours"]) for t in done["trees"]] == [
        ("cuda_prefix", True, True),
        ("stack_conda_prefix", True, False),
        ("cudnn_prefix", False, False),
    ]
    strict = run_module("stack_tree", dict(args, require_ours=True))
    assert strict["_rc"] != 0 and "stack_conda_prefix = %s" % foreign in strict["msg"]
    bad = run_module(
        "stack_tree", dict(args, trees=[*trees, {"path": "/usr/lib/", "layer": "cudnn", "var": "cudnn_prefix"}])
    )
    assert bad["_rc"] != 0 and "Set cudnn_prefix to such a path" in bad["msg"]
    assert run_module("stack_tree", dict(args, state="absent"))["_rc"] != 0
    assert "mutually exclusive" in run_module("stack_tree", dict(args, path=str(ours), layer="cuda"))["msg"]


def test_root_scratch_space_is_private_and_under_root_only_directories(tmp_path):
    scratch = tmp_path / "cache" / "scratch" / "cuda-installer"
    made = module(tmp_path, path=str(scratch), state="present", private=True, var="cuda_installer_tmpdir")
    assert made["changed"] and scratch.is_dir() and oct(scratch.stat().st_mode & 0o777) == "0o700"
    assert not module(tmp_path, path=str(scratch), state="present", private=True)["changed"]
    assert module(tmp_path, path=str(scratch), state="absent")["changed"] and not scratch.exists()
    # A directory above it that another user made first, or a link: refused, nothing made through it.
    (tmp_path / "shared").mkdir()
    os.chown(tmp_path / "shared", NOBODY.pw_uid, NOBODY.pw_gid)
    planted = module(tmp_path, path=str(tmp_path / "shared" / "cuda-installer"), state="present", private=True)
    assert planted["_rc"] != 0 and "is owned by uid %d" % NOBODY.pw_uid in planted["msg"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked").symlink_to(elsewhere)
    linked = module(tmp_path, path=str(tmp_path / "linked" / "cuda-installer"), state="present", private=True)
    assert linked["_rc"] != 0 and "reached through a link" in linked["msg"]
    assert list(elsewhere.iterdir()) == [] and list((tmp_path / "shared").iterdir()) == []


def test_a_claim_makes_the_directories_above_it(tmp_path):
    tree = tmp_path / "opt" / "cudnn" / "8.9.7.29-cuda11.partial"
    assert module(tmp_path, path=str(tree), state="present", layer="cudnn")["changed"] and tree.is_dir()
