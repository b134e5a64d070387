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


# -- survivors of the mutation run (issue 30) ---------------------------------


def fake_hub(monkeypatch, download) -> None:
    """huggingface_hub with `download` as its snapshot_download (no network, no package needed)."""
    monkeypatch.setitem(sys.modules, "huggingface_hub", type(sys)("huggingface_hub"))
    monkeypatch.setattr(sys.modules["huggingface_hub"], "snapshot_download", download, raising=False)


def test_a_missing_directory_is_named_and_has_nothing_to_remove(tmp_path):
    assert model_fetch.missing_parts(tmp_path / "none") == ["the directory %s" % (tmp_path / "none")]
    assert model_fetch.damaged_weights(tmp_path / "none") == []
    check = tool("check", str(tmp_path / "none"))
    assert check.returncode == 1 and json.loads(check.stdout)["missing"] == ["the directory %s" % (tmp_path / "none")]


def test_damaged_weights_are_removed_before_the_client_fetches(tmp_path, monkeypatch, capsys):
    """A client that finds a partial file may resume from it: the fetch removes it first."""
    out = tmp_path / "out"
    tiny_model.write(out)
    weights = out / "model.safetensors"
    cut(weights, weights.stat().st_size - 4)
    assert model_fetch.damaged_weights(out) == [weights]
    seen = {}

    def snapshot_download(repo_id, revision, local_dir, token):
        seen["left"] = (Path(local_dir) / "model.safetensors").exists()
        seen["config"] = (Path(local_dir) / "config.json").exists()
        tiny_model.write(Path(local_dir))

    fake_hub(monkeypatch, snapshot_download)
    monkeypatch.delenv("HF_TOKEN_PATH", raising=False)
    assert model_fetch.main(["fetch", "--source", "hub", "--name", "org/m", "--out", str(out)]) == 0
    # The damaged weights are gone, the whole files stay.
    assert seen == {"left": False, "config": True}
    assert json.loads(capsys.readouterr().out)["complete"] is True


@pytest.mark.parametrize("endpoint", ["", "http://mirror.example:8080"])
def test_a_hub_error_names_the_endpoint_when_one_is_set(tmp_path, monkeypatch, endpoint):
    def snapshot_download(repo_id, revision, local_dir, token):
        raise ConnectionError("refused")

    fake_hub(monkeypatch, snapshot_download)
    monkeypatch.delenv("HF_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    with pytest.raises(SystemExit) as stopped:
        model_fetch.main(["fetch", "--source", "hub", "--name", "org/m", "--out", str(tmp_path / "out")])
    where = "hub at %s" % endpoint if endpoint else "hub"
    assert str(stopped.value).startswith(
        "model_fetch: could not download org/m from %s (ConnectionError: refused)." % where
    )


def test_the_out_directory_is_made_with_its_parents(tmp_path, capsys):
    tiny_model.write(tmp_path / "src")
    out = tmp_path / "models" / "qwen" / "out"
    assert (
        model_fetch.main(["fetch", "--source", "local", "--local-path", str(tmp_path / "src"), "--out", str(out)]) == 0
    )
    assert json.loads(capsys.readouterr().out)["complete"] is True and model_fetch.missing_parts(out) == []


def test_the_command_line_needs_a_command_and_a_local_path(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        model_fetch.main([])
    assert stopped.value.code == 2
    with pytest.raises(SystemExit) as stopped:
        model_fetch.main(["fetch", "--source", "local", "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2 and "--source local needs --local-path" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_fetch_needs_its_out_directory_and_check_changes_nothing(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        model_fetch.main(["fetch", "--source", "hub", "--name", "org/m"])
    assert stopped.value.code == 2 and "--out" in capsys.readouterr().err
    tiny_model.write(tmp_path / "m")
    assert model_fetch.main(["check", str(tmp_path / "m")]) == 0
    assert json.loads(capsys.readouterr().out) == {"changed": False, "complete": True, "missing": []}


def raw_safetensors(path: Path, header: bytes, data: bytes = b"") -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def test_a_zero_header_length_is_no_header(tmp_path):
    weights = raw_safetensors(tmp_path / "model.safetensors", b"", b"\x00" * 32)
    assert model_fetch.safetensors_problem(weights) == "model.safetensors has no readable safetensors header"


@pytest.mark.parametrize(
    "offsets",
    [{"0": 32}, [0, 16, 32], [0], [-1, 32], [0, 32.0], [32, 0]],
    ids=["not a list", "three", "one", "negative", "a float", "begin after end"],
)
def test_invalid_data_offsets_are_named(tmp_path, offsets):
    header = json.dumps({"w": {"dtype": "F32", "shape": [8], "data_offsets": offsets}}).encode()
    weights = raw_safetensors(tmp_path / "model.safetensors", header, b"\x00" * 32)
    assert (
        model_fetch.safetensors_problem(weights)
        == "model.safetensors: tensor w has no valid data_offsets in its header"
    )


def test_the_last_members_local_header_must_be_where_the_directory_says(tmp_path):
    weights = torch_zip(tmp_path / "pytorch_model.bin")
    with zipfile.ZipFile(weights) as archive:
        last = max(archive.infolist(), key=lambda m: m.header_offset)
    data = bytearray(weights.read_bytes())
    data[last.header_offset : last.header_offset + 4] = b"XXXX"
    weights.write_bytes(bytes(data))
    assert model_fetch.torch_zip_problem(weights) == (
        "pytorch_model.bin: member archive/version has no local header where the directory says"
    )


def test_a_weight_map_that_is_not_a_mapping(tmp_path):
    model = tmp_path / "m"
    tiny_model.write(model)
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["model.safetensors"]}))
    assert model_fetch.missing_parts(model) == ["a weight_map in model.safetensors.index.json"]


def test_only_weights_that_are_there_and_damaged_are_removed(tmp_path):
    model = tmp_path / "m"
    tiny_model.write(model)
    shards = sharded(model, "safetensors", safetensors_file)
    shards[0].unlink()
    cut(shards[1], shards[1].stat().st_size - 1)
    assert model_fetch.damaged_weights(model) == [shards[1]]


def test_the_metadata_entry_is_skipped_and_the_tensors_after_it_read(tmp_path):
    header = json.dumps(
        {"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}}
    ).encode()
    weights = raw_safetensors(tmp_path / "model.safetensors", header, b"\x00" * 32)
    assert model_fetch.safetensors_problem(weights) is None
    cut(weights, weights.stat().st_size - 16)
    assert "truncated" in model_fetch.safetensors_problem(weights)


def test_an_unreadable_header_or_file_is_reported_not_raised(tmp_path):
    weights = raw_safetensors(tmp_path / "model.safetensors", b"{not json", b"\x00" * 32)
    assert model_fetch.safetensors_problem(weights).startswith("model.safetensors has no readable safetensors header (")
    weights.unlink()
    weights.mkdir()  # a directory where the file should be: open() fails
    assert model_fetch.safetensors_problem(weights).startswith("model.safetensors has no readable safetensors header (")


@pytest.mark.parametrize(
    "index", ["{not json", '["model.safetensors"]', None], ids=["not json", "a list", "a directory"]
)
def test_an_unreadable_index_is_reported(tmp_path, index):
    model = tmp_path / "m"
    tiny_model.write(model)
    if index is None:
        (model / "model.safetensors.index.json").mkdir()
    else:
        (model / "model.safetensors.index.json").write_text(index)
    (problem,) = model_fetch.missing_parts(model)
    assert problem.startswith("a readable model.safetensors.index.json (")


def test_the_edges_of_a_safetensors_header(tmp_path):
    weights = tmp_path / "model.safetensors"
    # 7 bytes: not even the length prefix.
    weights.write_bytes(b"\x02" + b"\x00" * 6)
    assert model_fetch.safetensors_problem(weights) == "model.safetensors has no safetensors header (7 bytes)"
    # 8 bytes: a prefix that says 0.
    weights.write_bytes(b"\x00" * 8)
    assert model_fetch.safetensors_problem(weights) == "model.safetensors has no readable safetensors header"
    # A one-byte header that is no JSON.
    raw_safetensors(weights, b" ")
    assert model_fetch.safetensors_problem(weights).startswith("model.safetensors has no readable safetensors header (")
    # A file that holds no tensor, exactly as long as its header says: whole.
    raw_safetensors(weights, b"{}")
    assert model_fetch.safetensors_problem(weights) is None
    raw_safetensors(weights, json.dumps({"__metadata__": {"format": "pt"}}).encode())
    assert model_fetch.safetensors_problem(weights) is None
    # The header cut by its last byte.
    cut(weights, weights.stat().st_size - 1)
    assert model_fetch.safetensors_problem(weights) == "model.safetensors has no readable safetensors header"


def test_the_header_length_limit(tmp_path):
    """safetensors refuses headers above 100 MB (here 100 MiB): a longer length prefix is garbage,
    refused without reading it; a header of exactly the limit is read."""
    weights = tmp_path / "model.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}).encode()
    raw_safetensors(weights, header + b" " * (model_fetch.MAX_HEADER - len(header)))
    assert weights.stat().st_size == 8 + 100 * 1024 * 1024
    assert model_fetch.safetensors_problem(weights) is None
    # One byte more, in a (sparse) file long enough to hold it.
    with weights.open("wb") as handle:
        handle.write(struct.pack("<Q", 100 * 1024 * 1024 + 1))
        handle.truncate(8 + 100 * 1024 * 1024 + 1)
    assert model_fetch.safetensors_problem(weights) == "model.safetensors has no readable safetensors header"


def test_a_local_header_cut_short_by_the_end_of_the_file(tmp_path):
    """The directory points the last member 29 bytes before the end, at bytes that begin like a local
    header (the zip's comment here): fewer than its 30 bytes are there, and that is the problem named."""
    weights = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(weights, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("archive/version", b"3\n")
        archive.comment = b"PK\x03\x04" + b"\x00" * 25
    data = bytearray(weights.read_bytes())
    last_entry = data.rfind(b"PK\x01\x02")  # the central directory's entry of archive/version
    struct.pack_into("<I", data, last_entry + 42, len(data) - 29)
    weights.write_bytes(bytes(data))
    assert model_fetch.torch_zip_problem(weights) == (
        "pytorch_model.bin: member archive/version has no local header where the directory says"
    )


def test_a_last_member_one_byte_into_the_central_directory(tmp_path):
    # torch.save pads each member's local header with an extra field (alignment): one here too.
    weights = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(weights, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        version = zipfile.ZipInfo("archive/version")
        version.extra = b"FB\x0c\x00" + b"Z" * 12
        archive.writestr(version, b"3\n")
    assert model_fetch.torch_zip_problem(weights) is None
    data = bytearray(weights.read_bytes())
    last_entry = data.rfind(b"PK\x01\x02")  # archive/version's entry: its compressed size, one more
    (size,) = struct.unpack_from("<I", data, last_entry + 20)
    struct.pack_into("<I", data, last_entry + 20, size + 1)
    weights.write_bytes(bytes(data))
    assert model_fetch.torch_zip_problem(weights) == (
        "pytorch_model.bin: member archive/version runs into the central directory"
    )


def test_an_index_naming_shards_outside_the_directory(tmp_path):
    model = tmp_path / "m"
    tiny_model.write(model)
    weight_map = {"a": "model.safetensors", "b": "../other/model.safetensors"}
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert model_fetch.missing_parts(model) == [
        "model.safetensors.index.json names shards outside the directory: ../other/model.safetensors"
    ]


@pytest.mark.parametrize("first", ["{not json", "{}", json.dumps({"weight_map": {"a": "../x.safetensors"}})])
def test_of_two_indexes_the_first_by_name_is_read(tmp_path, first):
    """The same directory always gets the same answer: a.safetensors.index.json before model.…"""
    model = tmp_path / "m"
    tiny_model.write(model)
    (model / "a.safetensors.index.json").write_text(first)
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model.safetensors"}}))
    (problem,) = model_fetch.missing_parts(model)
    assert "a.safetensors.index.json" in problem and "model.safetensors.index.json" not in problem


def test_a_fetch_that_leaves_the_directory_incomplete_exits_1(tmp_path, monkeypatch, capsys):
    def snapshot_download(repo_id, revision, local_dir, token):
        (Path(local_dir) / "config.json").write_text("{}")  # the client stopped after one file

    fake_hub(monkeypatch, snapshot_download)
    monkeypatch.delenv("HF_TOKEN_PATH", raising=False)
    # The client is given a directory that is there (its parents made), here one it writes into as it is.
    assert model_fetch.main(["fetch", "--source", "hub", "--name", "org/m", "--out", str(tmp_path / "a" / "out")]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert (
        summary["changed"] is True and summary["complete"] is False and summary["missing"][0].startswith("a tokenizer")
    )


def test_a_header_that_is_not_an_object(tmp_path):
    weights = raw_safetensors(tmp_path / "model.safetensors", b"[]")
    assert model_fetch.safetensors_problem(weights) == "model.safetensors has no readable safetensors header"


@pytest.mark.parametrize("source", ["hub", "modelscope"])
def test_the_name_and_revision_reach_the_client(tmp_path, monkeypatch, capsys, source):
    calls = []

    def hub(repo_id, revision, local_dir, token):
        calls.append((repo_id, revision, local_dir))
        tiny_model.write(Path(local_dir))

    def modelscope(model_id, revision, local_dir):
        calls.append((model_id, revision, local_dir))
        tiny_model.write(Path(local_dir))

    fake_hub(monkeypatch, hub)
    monkeypatch.setitem(sys.modules, "modelscope", type(sys)("modelscope"))
    monkeypatch.setattr(sys.modules["modelscope"], "snapshot_download", modelscope, raising=False)
    monkeypatch.delenv("HF_TOKEN_PATH", raising=False)
    out = tmp_path / "out"
    argv = ["fetch", "--source", source, "--name", "Qwen/Qwen2.5-0.5B-Instruct", "--revision", "v1", "--out", str(out)]
    assert model_fetch.main(argv) == 0
    assert calls == [("Qwen/Qwen2.5-0.5B-Instruct", "v1", str(out))]
    assert json.loads(capsys.readouterr().out)["complete"] is True
