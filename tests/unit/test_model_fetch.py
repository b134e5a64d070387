"""tools/model_fetch.py: when a model directory is complete, and what happens when it is not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
import model_fetch  # noqa: E402
import tiny_model  # noqa: E402


def tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "tools" / "model_fetch.py"), *args],
                          capture_output=True, text=True, env={"HF_ENDPOINT": "http://127.0.0.1:9", "PATH": "/usr/bin:/bin"})


def test_fixture_is_complete(tmp_path):
    tiny_model.write(tmp_path / "m")
    assert model_fetch.missing_parts(tmp_path / "m") == []


@pytest.mark.parametrize("damage, missing", [
    (lambda d: (d / "config.json").unlink(), "config.json"),
    (lambda d: (d / "tokenizer.json").unlink(), "a tokenizer"),
    (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 4), "a readable model.safetensors"),
    (lambda d: (d / "model.safetensors").unlink(), "weights"),
])
def test_incomplete_directories(tmp_path, damage, missing):
    tiny_model.write(tmp_path / "m")
    damage(tmp_path / "m")
    assert any(part.startswith(missing) for part in model_fetch.missing_parts(tmp_path / "m"))


def test_sharded_index_needs_every_shard(tmp_path):
    model = tmp_path / "m"
    tiny_model.write(model)
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    assert model_fetch.missing_parts(model) == ["weight shard model-00002-of-00002.safetensors"]


def test_local_copy_then_nothing_to_do(tmp_path):
    tiny_model.write(tmp_path / "src")
    first = tool("fetch", "--source", "local", "--local-path", str(tmp_path / "src"), "--out", str(tmp_path / "out"))
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.splitlines()[-1])["changed"] is True
    second = tool("fetch", "--source", "local", "--local-path", str(tmp_path / "src"), "--out", str(tmp_path / "out"))
    assert json.loads(second.stdout.splitlines()[-1]) == {"changed": False, "complete": True, "missing": [],
                                                         "msg": "%s is complete" % (tmp_path / "out")}


def test_incomplete_local_source_is_refused(tmp_path):
    (tmp_path / "src").mkdir()
    run = tool("fetch", "--source", "local", "--local-path", str(tmp_path / "src"), "--out", str(tmp_path / "out"))
    assert run.returncode != 0
    assert "is not a complete model directory" in run.stderr and "config.json" in run.stderr


def test_unreachable_hub_says_how_to_pre_seed(tmp_path):
    run = tool("fetch", "--source", "hub", "--name", "Qwen/Qwen2.5-0.5B-Instruct", "--out", str(tmp_path / "out"))
    assert run.returncode != 0
    assert "could not download Qwen/Qwen2.5-0.5B-Instruct" in run.stderr
    assert "model_source: local" in run.stderr and "model_local_path" in run.stderr
