"""The stack_tree module: the one check of every tree a layer may delete, and the delete itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_module

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "library"))
import stack_tree as st  # noqa: E402

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


def test_claim_then_delete(tmp_path):
    tree = tmp_path / "cuda-11.8"
    claimed = module(tmp_path, path=str(tree), state="present")
    assert claimed["changed"] and (tree / st.MARKER).is_file()
    assert not module(tmp_path, path=str(tree), state="present")["changed"]  # idempotent
    (tree / "bin").mkdir()
    checked = module(tmp_path, path=str(tree), require_ours=True)
    assert checked["ours"] and not checked["changed"]
    assert module(tmp_path, check=True, path=str(tree), state="absent")["changed"] and tree.is_dir()
    deleted = module(tmp_path, path=str(tree), state="absent")
    assert deleted["changed"] and not tree.exists()
    assert not module(tmp_path, path=str(tree), state="absent")["changed"]


def test_another_layers_marker_is_foreign(tmp_path):
    tree = tmp_path / "prefix"
    assert module(tmp_path, path=str(tree), state="present", layer="cudnn")["changed"]
    result = module(tmp_path, path=str(tree), state="absent", layer="cuda")
    assert result["_rc"] != 0 and tree.is_dir()


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


def test_check_mode_predicts_a_marker_rewrite(tmp_path):
    # A marker of the layer in an older spelling: the tree is ours, and a real run rewrites the marker.
    tree = tmp_path / "cuda-11.8"
    tree.mkdir()
    (tree / st.MARKER).write_text('{"layer": "cuda"}\n')
    preview = module(tmp_path, check=True, path=str(tree), state="present")
    assert preview["changed"] and (tree / st.MARKER).read_text() == '{"layer": "cuda"}\n'
    assert module(tmp_path, path=str(tree), state="present")["changed"]
    assert not module(tmp_path, check=True, path=str(tree), state="present")["changed"]


def test_diff_mode_shows_the_claim_and_the_delete(tmp_path):
    tree = tmp_path / "cuda-11.8"
    marker = st.marker_text("cuda")
    assert "diff" not in module(tmp_path, check=True, path=str(tree), state="present")
    preview = run_module(
        "stack_tree", dict(path=str(tree), layer="cuda", state="present", state_dir=str(tmp_path)), True, True
    )
    assert preview["diff"] == {
        "before": {"path": str(tree), "state": "absent", "marker": ""},
        "after": {"path": str(tree), "state": "directory", "marker": marker},
    }
    assert not tree.exists()
    claimed = run_module(
        "stack_tree", dict(path=str(tree), layer="cuda", state="present", state_dir=str(tmp_path)), diff=True
    )
    assert claimed["diff"] == preview["diff"] and (tree / st.MARKER).read_text() == marker
    deleted = run_module(
        "stack_tree", dict(path=str(tree), layer="cuda", state="absent", state_dir=str(tmp_path)), diff=True
    )
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
