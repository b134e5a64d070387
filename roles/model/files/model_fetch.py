#!/usr/bin/env python3
"""Fetch a Hugging Face model directory (hub, ModelScope or a local copy) and check it is complete.

    model_fetch.py check DIR
    model_fetch.py fetch --source hub|modelscope|local --name NAME [--revision REV] [--local-path P] --out DIR

A directory is complete when it has config.json, a tokenizer (tokenizer.json, or
tokenizer_config.json with a vocabulary file) and all its weights, each whole:
- with an index (*.safetensors.index.json, else *.bin.index.json), every shard it names;
  without one, every *.safetensors, else every *.bin (shards without their index are incomplete);
- a .safetensors file is exactly as long as its header says (8 + header length + the
  largest data offset), so a download cut off after the header is caught;
- a .bin file is torch's zip format with its central directory at the end and the last
  member's data ending before it (a truncated zip has no directory); legacy pickle .bin
  files cannot be checked and are refused.
`fetch` does nothing when the directory is complete already; otherwise it removes the
damaged weight files (so no client resumes from them) and fetches again.
The last line printed is a JSON summary (changed, complete, missing) for Ansible.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import sys
import zipfile
from pathlib import Path
from typing import Any

VOCAB_FILES = ("vocab.json", "tokenizer.model", "vocab.txt")
# Index files, in the order transformers prefers them: safetensors over torch's pickles.
INDEX_PATTERNS = ("*.safetensors.index.json", "*.bin.index.json")
# safetensors refuses headers above 100 MB; a larger length prefix is garbage, not a header.
MAX_HEADER = 100 * 1024 * 1024
# transformers' shard names: model-00001-of-00002.safetensors, pytorch_model-00001-of-00002.bin.
SHARD_NAME = re.compile(r"-\d{5}-of-\d{5}\.(safetensors|bin)$")


def safetensors_problem(path: Path) -> str | None:
    """Why a .safetensors file is not whole, or None.

    The file is 8 bytes of header length, the JSON header, then the tensors'
    bytes; the header names each tensor's [begin, end) in that data section. So
    the whole file is exactly 8 + header length + the largest end offset. A
    download cut off after the header is shorter than that.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                return "%s has no safetensors header (%d bytes)" % (path.name, size)
            (length,) = struct.unpack("<Q", prefix)
            if length <= 0 or length > MAX_HEADER or 8 + length > size:
                return "%s has no readable safetensors header" % path.name
            header = json.loads(handle.read(length))
    except (OSError, ValueError) as error:
        return "%s has no readable safetensors header (%s)" % (path.name, error)
    if not isinstance(header, dict):
        return "%s has no readable safetensors header" % path.name
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(x, int) and x >= 0 for x in offsets)
            and offsets[0] <= offsets[1]
        ):
            return "%s: tensor %s has no valid data_offsets in its header" % (path.name, name)
        end = max(end, offsets[1])
    expected = 8 + length + end
    if size != expected:
        return "%s is %d bytes; its header says %d (%s)" % (
            path.name,
            size,
            expected,
            "truncated: an interrupted download" if size < expected else "trailing bytes",
        )
    return None


def torch_zip_problem(path: Path) -> str | None:
    """Why a torch .bin checkpoint is not whole, or None.

    torch.save (since torch 1.6) writes a zip archive whose central directory
    sits at the very end: a truncated file has none, and the last member's data
    must end where the directory starts. Legacy pickle checkpoints (not a zip)
    record no length to check against, so they are refused: convert them to
    safetensors. Reads the zip's directory and one local header, not the tensors.
    """
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
        if magic[:1] == b"\x80":  # a pickle protocol marker: torch's legacy format
            return "%s is a legacy torch pickle, which cannot be checked for truncation: convert it to safetensors" % (
                path.name
            )
        with zipfile.ZipFile(path) as archive, path.open("rb") as handle:
            members = archive.infolist()
            if not any(m.filename == "data.pkl" or m.filename.endswith("/data.pkl") for m in members):
                return "%s is a zip but not a torch checkpoint (no data.pkl)" % path.name
            last = max(members, key=lambda m: m.header_offset)
            handle.seek(last.header_offset)
            local = handle.read(30)
            if len(local) < 30 or local[:4] != b"PK\x03\x04":
                return "%s: member %s has no local header where the directory says" % (path.name, last.filename)
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            data_end = last.header_offset + 30 + name_len + extra_len + last.compress_size
            if data_end > archive.start_dir:
                return "%s: member %s runs into the central directory" % (path.name, last.filename)
    except (OSError, zipfile.BadZipFile, struct.error) as error:
        return "%s is truncated or not a torch checkpoint (%s)" % (path.name, error)
    return None


def weight_problem(path: Path) -> str | None:
    """Why one weight file is missing or damaged, or None."""
    if not path.is_file():
        return "weight file %s" % path.name
    if path.name.endswith(".safetensors"):
        return safetensors_problem(path)
    return torch_zip_problem(path)


def weight_files(directory: Path) -> tuple[list[Path], list[str]]:
    """The weight files the model loads from, and problems with the index naming them.

    With an index, every shard it names (transformers loads all of them); else
    every *.safetensors, else every *.bin.
    """
    for pattern in INDEX_PATTERNS:
        indexes = sorted(directory.glob(pattern))
        if not indexes:
            continue
        try:
            weight_map = json.loads(indexes[0].read_text()).get("weight_map")
        except (OSError, ValueError, AttributeError) as error:
            return [], ["a readable %s (%s)" % (indexes[0].name, error)]
        if not isinstance(weight_map, dict) or not weight_map:
            return [], ["a weight_map in %s" % indexes[0].name]
        shards = sorted(set(map(str, weight_map.values())))
        outside = [s for s in shards if Path(s).name != s]
        if outside:
            return [], ["%s names shards outside the directory: %s" % (indexes[0].name, ", ".join(outside))]
        return [directory / s for s in shards], []
    weights = sorted(directory.glob("*.safetensors")) or sorted(directory.glob("*.bin"))
    # Shards without their index: transformers cannot load them, and a missing shard would go unseen.
    shards = [w.name for w in weights if SHARD_NAME.search(w.name)]
    if shards:
        return weights, ["the index (*.index.json) of the sharded weights %s" % ", ".join(shards)]
    return weights, []


def missing_parts(directory: Path) -> list[str]:
    """What a model directory lacks, in words; empty when it is complete."""
    if not directory.is_dir():
        return ["the directory %s" % directory]
    missing = []
    if not (directory / "config.json").is_file():
        missing.append("config.json")
    has_fast = (directory / "tokenizer.json").is_file()
    has_slow = (directory / "tokenizer_config.json").is_file() and any((directory / f).is_file() for f in VOCAB_FILES)
    if not (has_fast or has_slow):
        missing.append("a tokenizer (tokenizer.json, or tokenizer_config.json with %s)" % "/".join(VOCAB_FILES))
    weights, index_problems = weight_files(directory)
    missing += index_problems
    if not weights and not index_problems:
        missing.append("weights (*.safetensors or *.bin, or the shards an *.index.json names)")
    missing += [problem for problem in map(weight_problem, weights) if problem]
    return missing


def damaged_weights(directory: Path) -> list[Path]:
    """Weight files that are there but not whole: a fetch removes them, so no client keeps them."""
    if not directory.is_dir():
        return []
    weights, _ = weight_files(directory)
    return [path for path in weights if path.is_file() and weight_problem(path)]


def hub_token() -> str | None:
    """The Hugging Face token from the 0600 file HF_TOKEN_PATH names (the model layer writes it
    from stack_hf_token), or None. Read here and given to the hub client, never printed."""
    path = os.environ.get("HF_TOKEN_PATH", "")
    if not path:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise SystemExit("model_fetch: cannot read the Hugging Face token file %s (%s)" % (path, exc.strerror)) from exc
    return token or None


def fetch(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    token = hub_token()
    if not missing_parts(out) and not args.force:
        return {
            "changed": False,
            "complete": True,
            "missing": [],
            "msg": "%s is complete" % out,
            "hf_token": token is not None,
        }
    out.mkdir(parents=True, exist_ok=True)
    for damaged in damaged_weights(out):
        damaged.unlink()
    if args.source == "local":
        source = Path(args.local_path)
        if missing_parts(source):
            raise SystemExit(
                "model_fetch: %s is not a complete model directory: %s" % (source, "; ".join(missing_parts(source)))
            )
        shutil.copytree(source, out, dirs_exist_ok=True)
    elif args.source == "hub":
        from huggingface_hub import snapshot_download  # only this path needs it

        snapshot_download(repo_id=args.name, revision=args.revision, local_dir=str(out), token=token)
    else:
        from modelscope import snapshot_download as ms_download  # only this path needs it

        ms_download(args.name, revision=args.revision, local_dir=str(out))
    missing = missing_parts(out)
    summary = {"changed": True, "complete": not missing, "missing": missing, "msg": "fetched into %s" % out}
    # Whether a token was given (for the run's record of what happened), never the token.
    return dict(summary, hf_token=token is not None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check")
    check.add_argument("dir")
    get = sub.add_parser("fetch")
    get.add_argument("--source", choices=["hub", "modelscope", "local"], required=True)
    get.add_argument("--name", default="")
    get.add_argument("--revision", default=None)
    get.add_argument("--local-path", default="")
    get.add_argument("--out", required=True)
    get.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "check":
        missing = missing_parts(Path(args.dir))
        print(json.dumps({"changed": False, "complete": not missing, "missing": missing}))
        return 0 if not missing else 1
    if args.source == "local" and not args.local_path:
        parser.error("--source local needs --local-path")
    try:
        summary = fetch(args)
    except SystemExit:
        raise
    except Exception as exc:  # the hub client's errors are many; all end the same way
        endpoint = os.environ.get("HF_ENDPOINT", "")
        raise SystemExit(
            "model_fetch: could not download %s from %s (%s: %s). Without network access, copy a complete "
            "model directory to the host and set model_source: local and model_local_path, or set "
            "model_hf_endpoint to a reachable mirror."
            % (args.name, args.source + (" at " + endpoint if endpoint else ""), type(exc).__name__, exc)
        ) from exc
    print(json.dumps(summary))
    return 0 if summary["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
