"""The layer_state module: when a layer builds, and what it records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "library"))
import layer_state as ls  # noqa: E402

LAYERS = ["preflight", "cuda", "cudnn", "apex"]


@pytest.mark.parametrize("raw, expected", [
    ("", set()), (None, set()), ("cuda", {"cuda"}), ("cuda, cudnn", {"cuda", "cudnn"}),
    (["cudnn"], {"cudnn"}), ("all", set(LAYERS)),
])
def test_parse_rebuild(raw, expected):
    assert ls.parse_rebuild(raw, LAYERS) == expected


def test_parse_rebuild_refuses_unknown_layers():
    with pytest.raises(ValueError, match="unknown layer.*cdua.*valid names are preflight, cuda"):
        ls.parse_rebuild("cuda,cdua", LAYERS)


@pytest.mark.parametrize("previous, requested, inputs, deps, expected", [
    ({}, False, {"v": 1}, {}, (True, "absent")),
    ({"status": "building"}, False, {"v": 1}, {}, (True, "incomplete")),
    ({"status": "unreadable"}, False, {"v": 1}, {}, (True, "incomplete")),
    ({"status": "complete", "inputs": {"v": 1}, "requires": {}}, True, {"v": 1}, {}, (True, "requested")),
    ({"status": "complete", "inputs": {"v": 1}, "requires": {}}, False, {"v": 2}, {}, (True, "inputs_changed")),
    ({"status": "complete", "inputs": {"v": 1}, "requires": {"cuda": "a"}}, False, {"v": 1}, {"cuda": "b"},
     (True, "dependency_changed")),
    ({"status": "complete", "inputs": {"v": 1}, "requires": {"cuda": "a"}}, False, {"v": 1}, {"cuda": "a"},
     (False, "unchanged")),
])
def test_decide(previous, requested, inputs, deps, expected):
    assert ls.decide(previous, inputs, deps, requested) == expected


def test_outcome():
    assert ls.outcome({}, True) == "built"
    assert ls.outcome({"fingerprint": "x"}, True) == "rebuilt"
    assert ls.outcome({"fingerprint": "x"}, False) == "unchanged"


def test_read_state_treats_garbage_as_incomplete(tmp_path):
    path = tmp_path / "cuda.json"
    path.write_text("{not json")
    assert ls.read_state(str(path)) == {"status": "unreadable"}
    assert ls.read_state(str(tmp_path / "none.json")) == {}


def module(tmp_path: Path, check: bool = False, **args) -> dict:
    """Run the module through Ansible, as a playbook would."""
    args.setdefault("state_dir", str(tmp_path / "layers"))
    args.setdefault("layers", LAYERS)
    command = [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "layer_state",
               "-a", json.dumps(args), "-o"] + (["--check"] if check else [])
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    done = subprocess.run(command + ["-e", "ansible_python_interpreter=" + sys.executable],
                          capture_output=True, text=True, env=env, cwd=REPO)
    out = done.stdout
    payload = json.loads(out[out.index("{"):])
    payload["_rc"] = done.returncode
    return payload


def test_lifecycle_through_ansible(tmp_path):
    inputs = {"version": "11.8.0", "sha256": "ab" * 32}
    first = module(tmp_path, name="cuda", inputs=inputs)
    assert first["build"] and first["reason"] == "absent" and not first["changed"]

    assert module(tmp_path, name="cuda", state="building")["changed"]
    assert json.loads((tmp_path / "layers/cuda.json").read_text())["status"] == "building"
    assert module(tmp_path, name="cuda", inputs=inputs)["reason"] == "incomplete"

    done = module(tmp_path, name="cuda", state="present", inputs=inputs, version="11.8.89")
    assert done["changed"]
    assert done["ansible_facts"]["stack_layer_cuda"] == {"version": "11.8.89", "outcome": "built"}
    cuda_print = done["fingerprint"]

    again = module(tmp_path, name="cuda", inputs=inputs)
    assert not again["build"] and again["reason"] == "unchanged"
    same = module(tmp_path, name="cuda", state="present", inputs=inputs, version="11.8.89", built=False)
    assert not same["changed"] and same["fingerprint"] == cuda_print
    assert same["ansible_facts"]["stack_layer_cuda"]["outcome"] == "unchanged"

    # cudnn builds on cuda: a rebuilt cuda gets a new fingerprint, and cudnn follows.
    module(tmp_path, name="cudnn", state="present", requires=["cuda"], inputs={"v": 1})
    assert module(tmp_path, name="cudnn", requires=["cuda"], inputs={"v": 1})["reason"] == "unchanged"
    assert module(tmp_path, name="cuda", inputs=inputs, rebuild="cuda")["reason"] == "requested"
    rebuilt = module(tmp_path, name="cuda", state="present", inputs=inputs, version="11.8.89")
    assert rebuilt["fingerprint"] != cuda_print
    assert rebuilt["ansible_facts"]["stack_layer_cuda"]["outcome"] == "rebuilt"
    assert module(tmp_path, name="cudnn", requires=["cuda"], inputs={"v": 1})["reason"] == "dependency_changed"

    assert module(tmp_path, name="cuda", inputs={"version": "12.1"})["reason"] == "inputs_changed"


def test_check_mode_writes_nothing(tmp_path):
    result = module(tmp_path, check=True, name="cuda", state="present", inputs={"v": 1})
    assert result["changed"]
    assert not (tmp_path / "layers").exists()


def test_bad_arguments_fail_clearly(tmp_path):
    unknown = module(tmp_path, name="cdua")
    assert unknown["_rc"] != 0 and "unknown layer(s) cdua" in unknown["msg"]
    bad = module(tmp_path, name="cuda", rebuild="cuda,nope")
    assert bad["_rc"] != 0 and "rebuild names unknown layer(s) nope" in bad["msg"]
