#!/usr/bin/env python3
"""Fetch a Hugging Face model directory (hub, ModelScope or a local copy) and check it is complete.

    model_fetch.py check DIR
    model_fetch.py fetch --source hub|modelscope|local --name NAME [--revision REV] [--local-path P] --out DIR

A directory is complete when it has config.json, a tokenizer (tokenizer.json, or
tokenizer_config.json with a vocabulary file) and its weights: every shard a
*.safetensors.index.json names, or at least one *.safetensors / *.bin file, each with a
readable safetensors header. `fetch` does nothing when the directory is complete already.
The last line printed is a JSON summary (changed, complete, missing) for Ansible.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
from pathlib import Path
from typing import Any

VOCAB_FILES = ("vocab.json", "tokenizer.model", "vocab.txt")


def safetensors_ok(path: Path) -> bool:
    """The file starts with a length-prefixed JSON header, as safetensors files do."""
    try:
        with path.open("rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            if size <= 0 or size > 100 * 1024 * 1024:
                return False
            json.loads(handle.read(size))
        return True
    except (OSError, ValueError, struct.error):
        return False


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
    indexes = sorted(directory.glob("*.safetensors.index.json"))
    if indexes:
        shards = set(json.loads(indexes[0].read_text()).get("weight_map", {}).values())
        missing += sorted("weight shard %s" % s for s in shards if not safetensors_ok(directory / s))
    else:
        weights = sorted(directory.glob("*.safetensors"))
        if weights:
            missing += ["a readable %s" % w.name for w in weights if not safetensors_ok(w)]
        elif not sorted(directory.glob("*.bin")):
            missing.append("weights (*.safetensors or *.bin)")
    return missing


def fetch(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    if not missing_parts(out) and not args.force:
        return {"changed": False, "complete": True, "missing": [], "msg": "%s is complete" % out}
    out.mkdir(parents=True, exist_ok=True)
    if args.source == "local":
        source = Path(args.local_path)
        if missing_parts(source):
            raise SystemExit("model_fetch: %s is not a complete model directory: %s"
                             % (source, "; ".join(missing_parts(source))))
        shutil.copytree(source, out, dirs_exist_ok=True)
    elif args.source == "hub":
        from huggingface_hub import snapshot_download  # only this path needs it

        snapshot_download(repo_id=args.name, revision=args.revision, local_dir=str(out))
    else:
        from modelscope import snapshot_download as ms_download  # only this path needs it

        ms_download(args.name, revision=args.revision, local_dir=str(out))
    missing = missing_parts(out)
    return {"changed": True, "complete": not missing, "missing": missing, "msg": "fetched into %s" % out}


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
            % (args.name, args.source + (" at " + endpoint if endpoint else ""), type(exc).__name__, exc))
    print(json.dumps(summary))
    return 0 if summary["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
