"""The stack_tree module: the one check of every tree a layer may delete, and the delete itself."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import run_module

import stack_tree as st

REPO = Path(__file__).resolve().parents[2]

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


def in_process(args: dict, check: bool = False, diff: bool = False) -> dict:
    """The module's result for `args`, run in this process (milliseconds, where Ansible takes seconds:
    tools/mutate.py runs this file once per mutant); _rc is 0 (exit_json) or 1 (fail_json)."""
    args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        st.main()
    return dict(json.loads(out.getvalue()), _rc=done.value.code)


def module(tmp_path: Path, check: bool = False, **args) -> dict:
    args.setdefault("state_dir", str(tmp_path / "layers"))
    args.setdefault("layer", "cuda")
    return in_process(args, check)


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
    done = in_process(args)
    assert done["_rc"] == 0 and not done["changed"]
    assert [(t["var"], t["exists"], t["ours"]) for t in done["trees"]] == [
        ("cuda_prefix", True, True),
        ("stack_conda_prefix", True, False),
        ("cudnn_prefix", False, False),
    ]
    strict = in_process(dict(args, require_ours=True))
    assert strict["_rc"] != 0 and "stack_conda_prefix = %s" % foreign in strict["msg"]
    bad = in_process(dict(args, trees=[*trees, {"path": "/usr/lib/", "layer": "cudnn", "var": "cudnn_prefix"}]))
    assert bad["_rc"] != 0 and "Set cudnn_prefix to such a path" in bad["msg"]
    assert in_process(dict(args, state="absent"))["_rc"] != 0
    assert "mutually exclusive" in in_process(dict(args, path=str(ours), layer="cuda"))["msg"]


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


# -- each rule once more, in this process: what a mutation of tools/mutate.py changes, a test sees ----


def test_root_and_empty_homes_are_skipped_not_the_end_of_the_list():
    assert "a home directory or one that holds one (/home/alice)" in st.problem(
        "/home/alice", "v", ["/", "", "/home/alice"]
    )


def test_the_claims_file_is_sorted_indented_and_readable_by_all(tmp_path):
    old_umask = os.umask(0o077)
    try:
        module(tmp_path, path=str(tmp_path / "b"), state="present")
        module(tmp_path, path=str(tmp_path / "a"), state="present")
    finally:
        os.umask(old_umask)
    path = tmp_path / "layers" / "trees" / "cuda.json"
    data = json.loads(path.read_text())
    assert data["layer"] == "cuda" and data["made_by"] == "verl-p40"
    assert [claim["path"] for claim in data["trees"]] == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert path.read_text() == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert path.stat().st_mode & 0o777 == 0o644


def test_an_earlier_record_names_an_absolute_path_the_layer_installed(tmp_path):
    def record(details: dict):
        (tmp_path / "cuda.json").write_text(json.dumps({"details": details}))
        return st.legacy_record(str(tmp_path), "cuda", "prefix")

    assert record({"adopted": False, "prefix": "/opt/x//y/"}) == "/opt/x/y"
    assert record({"adopted": False, "prefix": 5}) is None
    assert record({"adopted": False, "prefix": "opt/x"}) is None
    assert record({"adopted": True, "prefix": "/opt/x"}) is None
    assert record({"prefix": "/opt/x"}) is None


def test_an_earlier_marker_is_read_up_to_4096_bytes(tmp_path):
    tree = tmp_path / "cuda-11.8"
    tree.mkdir()
    for size, ours in ((4096, True), (4097, False)):
        text = '{"layer": "cuda"}'
        (tree / st.MARKER).write_text(" " * (size - len(text)) + text)  # cut short, the JSON does not end
        assert st.legacy_marker(st.Tree(str(tree)), "cuda") is ours, size


def test_an_earlier_record_of_a_file_or_of_another_path(tmp_path):
    layers = tmp_path / "layers"
    layers.mkdir()
    # A file an earlier version recorded (not a directory): ours, and unlinked.
    target = tmp_path / "cuda.run"
    target.write_text("x")
    (layers / "cuda.json").write_text(json.dumps({"details": {"prefix": str(target), "adopted": False}}))
    assert st.is_ours(st.Tree(str(target)), "cuda", str(layers))
    deleted = module(tmp_path, path=str(target), state="absent")
    assert deleted["_rc"] == 0 and deleted["changed"] and not target.exists()
    # Nothing there: never ours, though the record names it.
    assert not st.is_ours(st.Tree(str(target)), "cuda", str(layers))
    # A record naming another path makes no other tree ours.
    other = tmp_path / "other"
    (other / "bin").mkdir(parents=True)
    assert not st.is_ours(st.Tree(str(other)), "cuda", str(layers))


def test_a_move_needs_a_source_that_is_there_and_a_target_that_is_not(tmp_path):
    layers = tmp_path / "layers"
    layers.mkdir()
    gone = tmp_path / "gone"
    (layers / "cuda.json").write_text(json.dumps({"details": {"prefix": str(gone), "adopted": False}}))
    missing = module(tmp_path, path=str(tmp_path / "prefix"), src=str(gone), state="present")
    assert missing["_rc"] == 1 and missing["msg"] == "%s is not a tree of the cuda layer's, so it is not moved." % gone
    staging = tmp_path / "staging"
    module(tmp_path, path=str(staging), state="present")
    (tmp_path / "prefix").mkdir()
    onto = module(tmp_path, path=str(tmp_path / "prefix"), src=str(staging), state="present")
    assert onto["_rc"] == 1 and onto["msg"] == "%s is there already; %s is not moved onto it." % (
        tmp_path / "prefix",
        staging,
    )


def test_a_move_reports_a_change_and_a_diff_only_when_asked(tmp_path):
    staging = tmp_path / "staging"
    module(tmp_path, path=str(staging), state="present")
    identity = [staging.stat().st_dev, staging.stat().st_ino]
    args = dict(state_dir=str(tmp_path / "layers"), layer="cuda", path=str(tmp_path / "prefix"), src=str(staging))
    args["state"] = "present"
    shown = in_process(args, check=True, diff=True)
    assert shown["changed"] and shown["ours"] and (staging.is_dir() and not (tmp_path / "prefix").exists())
    assert shown["diff"]["before"] == {"path": str(tmp_path / "prefix"), "state": "absent", "claim": None}
    assert shown["diff"]["after"] == {
        "path": str(tmp_path / "prefix"),
        "state": "directory",
        "claim": {"path": str(tmp_path / "prefix"), "resolved": str(staging), "id": identity},
    }
    moved = in_process(args)
    assert moved["_rc"] == 0 and moved["changed"] and moved["ours"] and "diff" not in moved
    assert (tmp_path / "prefix").is_dir() and not staging.exists()


def test_a_relative_path_is_refused_naming_the_variable(tmp_path):
    result = module(tmp_path, path="opt/cuda", var="cuda_prefix", state="absent")
    assert result["_rc"] == 1 and result["msg"] == "cuda_prefix 'opt/cuda' must be an absolute path."


def test_a_directory_swapped_for_a_link_while_a_tree_is_emptied_is_unlinked_not_followed(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    for name in ("one", "two"):
        (tree / name / "inner").mkdir(parents=True)
    (tree / "file").write_text("x")
    real_scandir = os.scandir

    class Listed:
        """scandir's entries as read; then both directories become links, before they are opened."""

        def __init__(self, fd):
            with real_scandir(fd) as entries:
                self.entries = [(entry, entry.is_dir(follow_symlinks=False)) for entry in entries]
            for name in ("one", "two"):
                if (tree / name).is_dir():
                    os.rename(tree / name, tmp_path / ("was-" + name))
                    (tree / name).symlink_to(outside)

        def __enter__(self):
            return [entry for entry, _ in self.entries]

        def __exit__(self, *exc):
            return False

    fd = os.open(str(tree), st.DIR_FLAGS)
    try:
        monkeypatch.setattr(st.os, "scandir", Listed)
        st.remove_tree(fd)
    finally:
        monkeypatch.setattr(st.os, "scandir", real_scandir)
        os.close(fd)
    assert list(tree.iterdir()) == [] and (outside / "keep").is_dir()


def test_deleting_with_the_owner_s_rights_reports_success_and_failure(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    tree = home / "miniforge3"
    module(tmp_path, path=str(tree), state="present", layer="conda", owner="nobody")
    (tree / "roots" / "sub").mkdir(parents=True)
    failed = module(tmp_path, path=str(tree), state="absent", layer="conda")
    assert failed["_rc"] == 1 and failed["msg"].startswith(
        "%s (path = %s): %s could not be deleted with the rights of uid %d, who owns %s. Nothing more was changed."
        % (tree, tree, tree, NOBODY.pw_uid, home)
    )
    os.chown(tree / "roots", NOBODY.pw_uid, NOBODY.pw_gid)
    os.chown(tree / "roots" / "sub", NOBODY.pw_uid, NOBODY.pw_gid)
    pid = os.getpid()
    done = module(tmp_path, path=str(tree), state="absent", layer="conda")
    assert os.getpid() == pid  # the child that deleted ended there, whatever happened in it
    assert done["_rc"] == 0 and done["changed"] and not tree.exists()


def test_the_owner_s_rights_are_theirs_alone_not_root_s_groups(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    tree = home / "miniforge3"
    module(tmp_path, path=str(tree), state="present", layer="conda", owner="nobody")
    shared = tree / "root-group"
    (shared / "sub").mkdir(parents=True)
    shared.chmod(0o775)  # root's group may write it; the user may not
    groups = os.getgroups()
    os.setgroups([0])  # root in its own group, as on most hosts: the child must drop it
    try:
        result = module(tmp_path, path=str(tree), state="absent", layer="conda")
    finally:
        os.setgroups(groups)
    assert result["_rc"] == 1 and (shared / "sub").is_dir()


def test_root_deletes_in_its_own_directory_itself(tmp_path):
    # A tree swapped for another directory under a root-owned parent: root's own check names it.
    tree = tmp_path / "miniforge3"
    module(tmp_path, path=str(tree), state="present", layer="conda")
    tree.rename(tmp_path / "moved")
    (tree / "keep").mkdir(parents=True)
    result = st.Tree(str(tree))
    result.stat = (tmp_path / "moved").stat()
    with pytest.raises(st.UnsafePath, match="%s changed since it was checked" % tree):
        st.delete(result)
    assert (tree / "keep").is_dir()


def test_a_claimed_directory_is_made_0755_with_its_parents(tmp_path):
    old_umask = os.umask(0o022)
    try:
        tree = tmp_path / "opt" / "cuda"
        assert module(tmp_path, path=str(tree), state="present")["ours"]
        scratch = tmp_path / "cache" / "scratch" / "x"
        module(tmp_path, path=str(scratch), state="present", private=True)
    finally:
        os.umask(old_umask)
    for made in (tree, tree.parent, scratch.parent, scratch.parent.parent):
        assert made.stat().st_mode & 0o777 == 0o755, made
    assert scratch.stat().st_mode & 0o777 == 0o700


def test_private_scratch_in_check_mode_is_judged_as_a_real_run_would(tmp_path):
    users = tmp_path / "users"
    users.mkdir()
    os.chown(users, NOBODY.pw_uid, NOBODY.pw_gid)
    refused = module(tmp_path, check=True, path=str(users / "scratch"), state="present", private=True)
    assert (
        refused["_rc"] == 1
        and "a directory above it is another user's, a link, or writable by others" in refused["msg"]
    )
    # A parent not there yet: a real run would make it root's.
    fresh = module(tmp_path, check=True, path=str(tmp_path / "new" / "scratch"), state="present", private=True)
    assert fresh["_rc"] == 0 and fresh["changed"] and not (tmp_path / "new").exists()


def test_a_claimed_tree_that_drifted_is_put_back(tmp_path):
    tree = tmp_path / "miniforge3"
    module(tmp_path, path=str(tree), state="present", owner="nobody")
    assert not module(tmp_path, path=str(tree), state="present", owner="nobody")["changed"]
    os.chown(tree, 0, 0)
    again = module(tmp_path, path=str(tree), state="present", owner="nobody")
    assert (
        again["changed"]
        and again["ours"]
        and (tree.stat().st_uid, tree.stat().st_gid) == (NOBODY.pw_uid, NOBODY.pw_gid)
    )
    scratch = tmp_path / "scratch"
    module(tmp_path, path=str(scratch), state="present", private=True)
    scratch.chmod(0o755)
    assert module(tmp_path, path=str(scratch), state="present", private=True)["changed"]
    assert scratch.stat().st_mode & 0o777 == 0o700
    os.chown(scratch, NOBODY.pw_uid, NOBODY.pw_gid)
    assert module(tmp_path, path=str(scratch), state="present", private=True)["changed"]
    assert (scratch.stat().st_uid, scratch.stat().st_gid) == (0, 0)
    assert not module(tmp_path, path=str(scratch), state="present", private=True)["changed"]


def test_required_arguments(tmp_path):
    assert in_process({"path": str(tmp_path / "x"), "layer": "cuda"})["msg"] == "missing required arguments: state_dir"
    for missing in ("path", "layer"):
        spec = {"path": str(tmp_path / "x"), "layer": "cuda"}
        del spec[missing]
        result = in_process({"state_dir": str(tmp_path), "trees": [spec]})
        assert result["_rc"] == 1 and result["msg"] == "missing required arguments: %s found in trees" % missing


def test_nothing_is_left_open(tmp_path):
    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    tree = tmp_path / "cuda"
    module(tmp_path, path=str(tree), state="present")
    (tree / "lib" / "sub").mkdir(parents=True)
    (tree / st.MARKER).write_text('{"layer": "cuda"}')
    assert st.legacy_marker(st.Tree(str(tree)), "cuda")
    module(tmp_path, path=str(tree), require_ours=True)
    module(tmp_path, path=str(tmp_path / "scratch"), state="present", private=True)
    module(tmp_path, path=str(tmp_path / "scratch"), state="present", private=True, owner="nobody")
    module(tmp_path, path=str(tmp_path / "moved"), src=str(tree), state="present")
    module(tmp_path, path=str(tmp_path / "moved"), state="absent")
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    module(tmp_path, path=str(home / "x"), state="present", owner="nobody")
    module(tmp_path, path=str(home / "x"), state="absent")
    assert descriptors() == before


def test_an_earlier_marker_is_not_read_through_a_link_or_from_a_fifo(tmp_path):
    tree = tmp_path / "cuda-11.8"
    tree.mkdir()
    (tmp_path / "real-marker").write_text('{"layer": "cuda"}')
    (tree / st.MARKER).symlink_to(tmp_path / "real-marker")
    assert not st.legacy_marker(st.Tree(str(tree)), "cuda")
    (tree / st.MARKER).unlink()
    os.mkfifo(tree / st.MARKER)
    assert not st.legacy_marker(st.Tree(str(tree)), "cuda")  # opened without waiting for a writer


def test_a_file_where_a_tree_should_be_is_refused(tmp_path):
    (tmp_path / "cuda").write_text("x")
    result = module(tmp_path, path=str(tmp_path / "cuda"), state="present")
    assert result["_rc"] == 1 and result["msg"].startswith("%s is there but is not a directory. " % (tmp_path / "cuda"))
    assert (tmp_path / "cuda").read_text() == "x"


def test_a_claimed_tree_swapped_while_it_is_claimed_again_is_left_alone(tmp_path, monkeypatch):
    tree = tmp_path / "miniforge3"
    module(tmp_path, path=str(tree), state="present")
    tree.rename(tmp_path / "moved")
    tree.mkdir()
    real_tree = st.Tree

    class Checked(real_tree):
        """What the check saw: the claimed directory, before the swap."""

        def __init__(self, given: str) -> None:
            super().__init__(given)
            if self.path == str(tree):
                self.stat = os.stat(tmp_path / "moved")

    monkeypatch.setattr(st, "Tree", Checked)
    result = module(tmp_path, path=str(tree), state="present", owner="nobody")
    assert result["_rc"] == 1 and "%s changed since it was checked" % tree in result["msg"]
    assert tree.stat().st_uid == 0


def test_a_sticky_parent_others_can_write_is_refused_too(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    tree = shared / "cuda-11.8"
    module(tmp_path, path=str(tree), state="present")
    shared.chmod(0o1777)  # like /tmp: fine above a tree, not as the directory root deletes in
    result = module(tmp_path, path=str(tree), state="absent")
    assert result["_rc"] == 1 and "%s is writable by users other than root" % shared in result["msg"] and tree.is_dir()


def test_a_source_swapped_before_it_is_moved_stays(tmp_path, monkeypatch):
    staging = tmp_path / "staging"
    module(tmp_path, path=str(staging), state="present")
    staging.rename(tmp_path / "was-staging")
    staging.mkdir()
    real_tree = st.Tree

    class Checked(real_tree):
        def __init__(self, given: str) -> None:
            super().__init__(given)
            if self.path == str(staging):
                self.stat = os.stat(tmp_path / "was-staging")

    monkeypatch.setattr(st, "Tree", Checked)
    result = module(tmp_path, path=str(tmp_path / "prefix"), src=str(staging), state="present")
    assert result["_rc"] == 1 and "%s changed since it was checked" % staging in result["msg"]
    assert staging.is_dir() and not (tmp_path / "prefix").exists()
