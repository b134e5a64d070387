"""The vllm layer's shape on localhost: off, it asks nothing; on without a pinned wheel, it stops first."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_play

REPO = Path(__file__).resolve().parents[2]
# What a stage playbook gives its layers: the stack role's values (the torch record below is written
# before the role's include brings them) and layer_state's shared arguments.
PLAY = {
    "vars_files": [str(path) for path in sorted((REPO / "roles/stack/defaults/main").glob("*.yml"))],
    "module_defaults": {"layer_state": "{{ stack_layer_args }}"},
}


def vllm_play(tmp_path: Path, **extra: object):
    state = tmp_path / "layers"
    variables = {"stack_state_dir": str(state), "preflight_gpus": [], **extra}
    # vllm requires torch: a complete torch record, written the way the torch layer writes one.
    torch = {"name": "A torch record", "layer_state": {"name": "torch", "state": "present", "built": True}}
    task = {"name": "The vllm layer", "ansible.builtin.include_role": {"name": "vllm"}}
    done = run_play(tmp_path, [torch, task], "-e", json.dumps(variables), callback="default", **PLAY)
    return done, state


def test_off_it_reads_no_state(tmp_path: Path):
    done, state = vllm_play(tmp_path, vllm_enabled=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Vllm | Read the layer state" not in done.stdout.replace("skipping", "")
    assert not (state / "vllm.json").exists()


def test_on_without_a_pinned_wheel_it_stops_before_building(tmp_path: Path):
    # The manifest pins no sha256 for the vLLM wheel: the query says build, layer.yml's first task refuses.
    done, state = vllm_play(tmp_path, vllm_enabled=True)
    assert done.returncode != 0
    assert "No sha256 is pinned for vllm-" in done.stdout, done.stdout[-3000:]
    assert "Vllm | Read the layer state" in done.stdout
    assert not (state / "vllm.json").exists(), "a refused layer must not be marked building"
