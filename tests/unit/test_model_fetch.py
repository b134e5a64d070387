"""roles/model/files/model_fetch.py (the model role copies it to the host): when a model directory is complete, and what happens when it is not.

What the check catches (each has a test below that fails on a header-only check):
a model.safetensors cut off after its header (or with bytes after its data), a shard an
index names that is missing or truncated, a torch .bin (zip) cut off anywhere (its central
directory is gone) and a legacy pickle .bin, which cannot be checked and is refused.
"""

from __future__ import annotations

import json
import struct
import subprocess
import zipfile
import sys
from pathlib import Path

import pytest

import model_fetch
import tiny_model

REPO = Path(__file__).resolve().parents[2]


def tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "roles" / "model" / "files" / "model_fetch.py"), *args],
        capture_output=True,
        text=True,
        env={"HF_ENDPOINT": "http://127.0.0.1:9", "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_fixture_is_complete(tmp_path):
    tiny_model.write(tmp_path / "m")
    assert model_fetch.missing_parts(tmp_path / "m") == []


@pytest.mark.parametrize(
    "damage, missing",
    [
        (lambda d: (d / "config.json").unlink(), "config.json"),
        (lambda d: (d / "tokenizer.json").unlink(), "a tokenizer"),
        (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 4), "model.safetensors has no safetensors header"),
        (lambda d: (d / "model.safetensors").unlink(), "weights"),
    ],
)
def test_incomplete_directories(tmp_path, damage, missing):
    tiny_model.write(tmp_path / "m")
    damage(tmp_path / "m")
    assert any(part.startswith(missing) for part in model_fetch.missing_parts(tmp_path / "m"))


def test_sharded_index_needs_every_shard(tmp_path):
    model = tmp_path / "m"
    tiny_model.write(model)
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )
    assert model_fetch.missing_parts(model) == ["weight file model-00002-of-00002.safetensors"]


def test_local_copy_then_nothing_to_do(tmp_path):
    tiny_model.write(tmp_path / "src")
    first = tool("fetch", "--source", "local", "--local-path", str(tmp_path / "src"), "--out", str(tmp_path / "out"))
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.splitlines()[-1])["changed"] is True
    second = tool("fetch", "--source", "local", "--local-path", str(tmp_path / "src"), "--out", str(tmp_path / "out"))
    assert json.loads(second.stdout.splitlines()[-1]) == {
        "changed": False,
        "complete": True,
        "missing": [],
        "msg": "%s is complete" % (tmp_path / "out"),
        "hf_token": False,
    }


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


def test_the_hub_token_reaches_the_client_and_nothing_else(tmp_path, monkeypatch, capsys):
    """stack_hf_token reaches the tool as a 0600 file named by HF_TOKEN_PATH (never argv or the
    environment's values): the hub client gets it, the summary says only that one was given."""
    secret = "hf_s3cret"
    (tmp_path / "token").write_text(secret + "\n")
    seen = {}

    def snapshot_download(repo_id, revision, local_dir, token):
        seen["token"] = token
        tiny_model.write(Path(local_dir))

    monkeypatch.setitem(sys.modules, "huggingface_hub", type(sys)("huggingface_hub"))
    monkeypatch.setattr(sys.modules["huggingface_hub"], "snapshot_download", snapshot_download, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "token"))
    assert model_fetch.main(["fetch", "--source", "hub", "--name", "org/gated", "--out", str(tmp_path / "out")]) == 0
    assert seen["token"] == secret
    printed = capsys.readouterr().out
    assert json.loads(printed.splitlines()[-1])["hf_token"] is True and secret not in printed
    # A token file that cannot be read stops the fetch with its path, not a hub error.
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(SystemExit, match="cannot read the Hugging Face token file"):
        model_fetch.main(["fetch", "--source", "hub", "--name", "org/gated", "--out", str(tmp_path / "o2")])


# -- whole files, not only readable headers -----------------------------------


def safetensors_file(path: Path, floats: int = 8) -> Path:
    """A safetensors file holding one float32 tensor of `floats` values."""
    data = struct.pack("<%df" % floats, *range(floats))
    header = json.dumps({"w": {"dtype": "F32", "shape": [floats], "data_offsets": [0, len(data)]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def torch_zip(path: Path, payload: bytes = b"\x00" * 4096) -> Path:
    """A file laid out as torch.save writes it (torch >= 1.6): a zip with data.pkl and data/0."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("archive/data/0", payload)
        archive.writestr("archive/version", b"3\n")
    return path


def cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def test_truncated_safetensors_with_its_header_intact(tmp_path):
    model = tmp_path / "m"
    tiny_model.write(model)
    weights = model / "model.safetensors"
    cut(weights, weights.stat().st_size - 4)
    assert model_fetch.safetensors_problem(weights) is not None  # a header-only check passed this
    (problem,) = model_fetch.missing_parts(model)
    assert problem.startswith("model.safetensors is %d bytes; its header says" % weights.stat().st_size)
    assert "truncated" in problem


def test_safetensors_with_trailing_bytes(tmp_path):
    weights = safetensors_file(tmp_path / "model.safetensors")
    assert model_fetch.safetensors_problem(weights) is None
    weights.write_bytes(weights.read_bytes() + b"junk")
    assert "trailing bytes" in model_fetch.safetensors_problem(weights)


def test_safetensors_header_longer_than_the_file(tmp_path):
    weights = safetensors_file(tmp_path / "model.safetensors")
    cut(weights, 20)  # the length prefix survives, the header does not
    assert "no readable safetensors header" in model_fetch.safetensors_problem(weights)


def sharded(model: Path, suffix: str, write) -> list[Path]:
    """Replace the fixture's weights with two shards named by an index."""
    (model / "model.safetensors").unlink()
    names = ["model-0000%d-of-00002.%s" % (i, suffix) for i in (1, 2)]
    index = "model.safetensors.index.json" if suffix == "safetensors" else "pytorch_model.bin.index.json"
    (model / index).write_text(
        json.dumps({"metadata": {}, "weight_map": {"a": names[0], "b": names[1], "c": names[1]}})
    )
    return [write(model / name) for name in names]


def test_sharded_safetensors_complete_and_truncated(tmp_path):
    model = tmp_path / "m"
    tiny_model.write(model)
    shards = sharded(model, "safetensors", safetensors_file)
    assert model_fetch.missing_parts(model) == []
    cut(shards[1], shards[1].stat().st_size - 1)
    (problem,) = model_fetch.missing_parts(model)
    assert problem.startswith("model-00002-of-00002.safetensors is ")


def test_shards_without_their_index(tmp_path):
    # The second shard and the index never arrived: the first shard alone is not a model.
    model = tmp_path / "m"
    tiny_model.write(model)
    shards = sharded(model, "safetensors", safetensors_file)
    (model / "model.safetensors.index.json").unlink()
    shards[1].unlink()
    assert model_fetch.missing_parts(model) == [
        "the index (*.index.json) of the sharded weights model-00001-of-00002.safetensors"
    ]


def test_sharded_bin_checkpoint_needs_every_shard_whole(tmp_path):
    model = tmp_path / "m"
    tiny_model.write(model)
    shards = sharded(model, "bin", torch_zip)
    assert model_fetch.missing_parts(model) == []
    shards[0].unlink()
    assert model_fetch.missing_parts(model) == ["weight file model-00001-of-00002.bin"]
    torch_zip(shards[0])
    cut(shards[1], shards[1].stat().st_size // 2)
    (problem,) = model_fetch.missing_parts(model)
    assert problem.startswith("model-00002-of-00002.bin is truncated or not a torch checkpoint")


def test_an_index_without_a_weight_map(tmp_path):
    model = tmp_path / "m"
    tiny_model.write(model)
    (model / "model.safetensors.index.json").write_text("{}")
    assert model_fetch.missing_parts(model) == ["a weight_map in model.safetensors.index.json"]


@pytest.mark.parametrize("keep", [100, -1, -22])
def test_truncated_bin_checkpoint(tmp_path, keep):
    model = tmp_path / "m"
    tiny_model.write(model)
    (model / "model.safetensors").unlink()
    weights = torch_zip(model / "pytorch_model.bin")
    assert model_fetch.missing_parts(model) == []
    cut(weights, keep if keep > 0 else weights.stat().st_size + keep)
    (problem,) = model_fetch.missing_parts(model)
    assert problem.startswith("pytorch_model.bin is truncated or not a torch checkpoint")


def test_bin_that_is_not_a_torch_checkpoint(tmp_path):
    weights = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(weights, "w") as archive:
        archive.writestr("readme.txt", "hello")
    assert "not a torch checkpoint (no data.pkl)" in model_fetch.torch_zip_problem(weights)
    weights.write_bytes(b"\x80\x02\x8a\x0alegacy torch pickle")
    assert "legacy torch pickle" in model_fetch.torch_zip_problem(weights)


def test_fetch_replaces_a_truncated_copy(tmp_path):
    tiny_model.write(tmp_path / "src")
    out = tmp_path / "out"
    tiny_model.write(out)
    weights = out / "model.safetensors"
    cut(weights, weights.stat().st_size - 4)
    run = tool("fetch", "--source", "local", "--local-path", str(tmp_path / "src"), "--out", str(out))
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.splitlines()[-1])
    assert summary["changed"] is True and summary["complete"] is True
    assert weights.read_bytes() == (tmp_path / "src" / "model.safetensors").read_bytes()
    check = tool("check", str(out))
    assert check.returncode == 0, check.stdout


def test_check_fails_on_a_truncated_copy(tmp_path):
    tiny_model.write(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    cut(weights, weights.stat().st_size - 1)
    check = tool("check", str(tmp_path / "m"))
    assert check.returncode == 1
    assert json.loads(check.stdout)["complete"] is False
