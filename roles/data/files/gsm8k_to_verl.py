#!/usr/bin/env python3
"""Convert GSM8K into verl's RL parquet format: OUT/train.parquet and OUT/test.parquet.

    python roles/data/files/gsm8k_to_verl.py --source /data/gsm8k --out /var/lib/verl-p40/data/gsm8k
    python roles/data/files/gsm8k_to_verl.py --hub --out DIR [--hf-endpoint URL] [--tokenizer MODEL_DIR]

Sources:
  --source DIR  a local copy of the dataset, for offline hosts: the hub
                repository's layout (main/train-00000-of-00001.parquet ...),
                a datasets save_to_disk() directory (train/*.arrow ...), a
                datasets cache directory (gsm8k-train.arrow ...), or
                train.jsonl/test.jsonl; each row needs `question` and `answer`.
  --hub         openai/gsm8k (config main) through the `datasets` package, which
                is imported only here; HF_ENDPOINT (or --hf-endpoint) selects a mirror.

A row of the output (verl's RL dataset; data_source picks verl's gsm8k scorer):
  data_source  "openai/gsm8k"
  prompt       [{"role": "user", "content": <question> + " " + INSTRUCTION}]
  ability      "math"
  reward_model {"style": "rule", "ground_truth": <the number after the last "####">}
  extra_info   {"split", "index", "answer", "question"}
Ground truths lose "," and "$", as verl's scorer strips them from the model's
answer before comparing strings. A row without a numeric "#### N" answer
stops the conversion: nothing is dropped silently.

The outputs are validated before they replace anything: schema, row counts
(equal to the source's, and to --expect-*-rows when given), every ground
truth a number. Prompts longer than --max-prompt-length are reported, not
dropped: counted exactly with --tokenizer MODEL_DIR (the model's chat
template, as verl applies it), else estimated from their length in characters.

Idempotent: OUT/.gsm8k_to_verl.json records a fingerprint of the sources
(file hashes, or the hub name/config/revision, so an up-to-date hub copy
needs no network) and options, and the outputs' hashes; when both still
match, nothing is read or written. When the inputs changed but a file comes
out byte for byte as it was, it is left alone and does not count as a change.
The last stdout line is JSON for Ansible:
{"changed": ..., "rows": ..., "prompt_length": ..., "failed": true on errors}.
Exit status: 0 done or up to date, 1 bad data or failed validation, 2 bad usage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import pyarrow as pa
import pyarrow.parquet as pq

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPLITS = ("train", "test")
STATE_FILE = ".gsm8k_to_verl.json"
# Bump when the rows written change shape or content: forces a rewrite.
FORMAT_VERSION = 1

# Estimate without a tokenizer. Qwen2 tokenizes every digit on its own and
# GSM8K is full of numbers, so 3 characters a token errs on the long side;
# the chat template (Qwen's default system prompt, role markers) adds ~40.
CHARS_PER_TOKEN = 3
CHAT_TEMPLATE_TOKENS = 40

HUB_NAME = "openai/gsm8k"
HUB_CONFIG = "main"

SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("split", pa.string()),
                    ("index", pa.int64()),
                    ("answer", pa.string()),
                    ("question", pa.string()),
                ]
            ),
        ),
    ]
)

# What verl's strict gsm8k scorer can extract after "#### " (minus "," and "$").
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")
# Where a local copy keeps each split, most specific first; the first pattern
# with matches wins, so formats are never mixed.
_LOCAL_PATTERNS = (
    "{split}-*.parquet",
    "{split}.parquet",
    "{split}/*.parquet",
    "{split}/*.arrow",
    "{split}-*.arrow",
    "{split}.arrow",
    # The `datasets` cache: <name>-<split>.arrow, or <name>-<split>-00000-of-00002.arrow when sharded.
    "*-{split}.arrow",
    "*-{split}-[0-9]*-of-[0-9]*.arrow",
    "{split}.jsonl",
    "{split}-*.jsonl",
    "{split}.json",
)


class ConversionError(Exception):
    """Bad source data or an output that fails validation (exit status 1)."""


# -- reading sources ---------------------------------------------------------


def local_split_files(root: Path) -> dict[str, list[Path]]:
    """The files that hold each split under a local dataset directory."""
    if not root.is_dir():
        raise ConversionError(f"{root} is not a directory")
    bases = [base for base in (root / HUB_CONFIG, root / "data", root) if base.is_dir()]
    found: dict[str, list[Path]] = {}
    for split in SPLITS:
        for base in bases:
            for pattern in _LOCAL_PATTERNS:
                files = sorted(base.glob(pattern.format(split=split)))
                if files:
                    found[split] = files
                    break
            if split in found:
                break
        else:
            tried = ", ".join(pattern.format(split=split) for pattern in _LOCAL_PATTERNS)
            raise ConversionError(
                f"no {split} split under {root} (looked in {', '.join(str(b) for b in bases)} for {tried})"
            )
    return found


def _read_arrow(path: Path) -> pa.Table:
    # datasets writes the streaming format; plain Arrow files use the file format.
    with pa.memory_map(str(path)) as source:
        try:
            return pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            return pa.ipc.open_file(source).read_all()


def _read_file(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".arrow":
        return _read_arrow(path).to_pylist()
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_rows(files: Iterable[Path], split: str) -> list[tuple[str, str]]:
    """(question, answer) pairs of one split, in file order."""
    rows: list[tuple[str, str]] = []
    for path in files:
        for number, record in enumerate(_read_file(path)):
            if not isinstance(record.get("question"), str) or not isinstance(record.get("answer"), str):
                raise ConversionError(f"{path} row {number}: needs string columns 'question' and 'answer'")
            rows.append((record["question"], record["answer"]))
    if not rows:
        raise ConversionError(f"the {split} split is empty")
    return rows


def load_hub(name: str, config: str, revision: Optional[str]) -> dict[str, list[tuple[str, str]]]:
    """Both splits from the hub (or the mirror in HF_ENDPOINT) through `datasets`."""
    try:
        import datasets  # only this source needs it; local conversion runs without it
    except ImportError as error:
        raise ConversionError(
            f"the hub source needs the `datasets` package ({error}); run this in the training "
            "env, or download the dataset elsewhere and use --source DIR"
        ) from error
    try:
        loaded = datasets.load_dataset(name, config, revision=revision)
    except Exception as error:  # network, auth and missing-dataset errors all land here
        endpoint = os.environ.get("HF_ENDPOINT") or "the default hub"
        raise ConversionError(
            f"could not load {name} ({config}) from {endpoint}: {error}. Set HF_ENDPOINT (--hf-endpoint) "
            "to a reachable mirror, or copy the dataset to this host and use --source DIR"
        ) from error
    return {split: [(row["question"], row["answer"]) for row in loaded[split]] for split in SPLITS}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# -- converting --------------------------------------------------------------


def ground_truth(answer: str) -> str:
    """The number after the last '####', normalized the way verl's scorer reads answers."""
    if "####" not in answer:
        raise ValueError("no '####' in the answer")
    value = answer.rsplit("####", 1)[1].strip().replace(",", "").replace("$", "")
    if not _NUMBER.fullmatch(value):
        raise ValueError(f"'#### {value}' is not a number")
    return value


def prompt_text(question: str) -> str:
    return f"{question.strip()} {INSTRUCTION}"


def make_row(split: str, index: int, question: str, answer: str) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": prompt_text(question)}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def convert(split: str, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """All rows of a split, or ConversionError naming every row without a numeric answer."""
    if not pairs:
        raise ConversionError(f"the {split} split is empty")
    rows, bad = [], []
    for index, (question, answer) in enumerate(pairs):
        try:
            rows.append(make_row(split, index, question, answer))
        except ValueError as error:
            bad.append(f"{split}[{index}]: {error}")
    if bad:
        shown = "; ".join(bad[:10]) + (f"; and {len(bad) - 10} more" if len(bad) > 10 else "")
        raise ConversionError(f"{len(bad)} rows have no numeric '#### N' answer: {shown}")
    return rows


# -- prompt length -----------------------------------------------------------


def character_estimate(messages: list[dict[str, str]]) -> int:
    text = "".join(message["content"] for message in messages)
    return math.ceil(len(text) / CHARS_PER_TOKEN) + CHAT_TEMPLATE_TOKENS


def tokenizer_measure(model_dir: Path) -> Callable[[list[dict[str, str]]], int]:
    """Prompt length in tokens the way verl's RLHFDataset counts it."""
    try:
        from transformers import AutoTokenizer
    except ImportError as error:
        raise ConversionError(f"--tokenizer needs the transformers package ({error})") from error
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    def measure(messages: list[dict[str, str]]) -> int:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return measure


def length_report(
    rows: dict[str, list[dict[str, Any]]], limit: int, measure: Callable[[list[dict[str, str]]], int], measure_name: str
) -> dict[str, Any]:
    longest: dict[str, int] = {}
    overlong: list[dict[str, Any]] = []
    for split, split_rows in rows.items():
        lengths = [measure(row["prompt"]) for row in split_rows]
        longest[split] = max(lengths)
        overlong += [{"split": split, "index": i, "length": n} for i, n in enumerate(lengths) if n > limit]
    return {
        "measure": measure_name,
        "limit": limit,
        "max": longest,
        "overlong": len(overlong),
        "overlong_rows": overlong[:20],
    }


# -- validating and writing --------------------------------------------------


def validate_output(path: Path, split: str, expected_rows: int) -> list[str]:
    """Problems with one written parquet file; [] when verl can train on it."""
    try:
        table = pq.read_table(path)
    except Exception as error:  # pyarrow raises several types for unreadable files
        return [f"{path}: unreadable ({error})"]
    problems = []
    if not table.schema.equals(SCHEMA):
        problems.append(f"{path}: schema is {table.schema}, expected {SCHEMA}")
        return problems
    if table.num_rows != expected_rows:
        problems.append(f"{path}: {table.num_rows} rows, expected {expected_rows}")
    for position, row in enumerate(table.to_pylist()):
        where = f"{path.name} row {position}"
        if row["data_source"] != DATA_SOURCE:
            problems.append(f"{where}: data_source {row['data_source']!r}")
        prompt = row["prompt"] or []
        if len(prompt) != 1 or prompt[0]["role"] != "user" or not prompt[0]["content"]:
            problems.append(f"{where}: prompt should be one non-empty user message")
        if row["reward_model"]["style"] != "rule":
            problems.append(f"{where}: reward_model.style {row['reward_model']['style']!r}")
        truth = row["reward_model"]["ground_truth"]
        try:
            float(truth)
        except (TypeError, ValueError):
            problems.append(f"{where}: ground truth {truth!r} is not a number")
        if row["extra_info"]["split"] != split or row["extra_info"]["index"] != position:
            problems.append(
                f"{where}: extra_info split/index {row['extra_info']['split']}/{row['extra_info']['index']}"
            )
        if len(problems) > 20:
            problems.append("... (stopped after 20)")
            break
    return problems


def _atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """Write through a temporary file in the same directory; return the temporary path."""
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(handle)
    temporary = Path(name)
    write(temporary)
    return temporary


def write_outputs(
    out: Path, rows: dict[str, list[dict[str, Any]]], expected: dict[str, int]
) -> tuple[dict[str, dict[str, Any]], bool]:
    """Write, validate, then move both files into place; nothing moves unless both pass.

    Returns the outputs and whether any file's content changed: a file that
    comes out byte for byte as it was is left alone.
    """
    out.mkdir(parents=True, exist_ok=True)
    staged: dict[str, Path] = {}
    try:
        for split, split_rows in rows.items():
            table = pa.Table.from_pylist(split_rows, schema=SCHEMA)
            staged[split] = _atomic_write(out / f"{split}.parquet", lambda p, t=table: pq.write_table(t, p))
            problems = validate_output(staged[split], split, expected[split])
            if problems:
                raise ConversionError("; ".join(problems))
        written, changed = {}, False
        for split, temporary in staged.items():
            target = out / f"{split}.parquet"
            digest = _sha256(temporary)
            if not target.is_file() or _sha256(target) != digest:
                temporary.chmod(0o644)
                os.replace(temporary, target)
                changed = True
            written[split] = {"path": str(target), "sha256": digest, "rows": len(rows[split])}
        return written, changed
    finally:
        for temporary in staged.values():
            temporary.unlink(missing_ok=True)


def _read_state(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}


def up_to_date(out: Path, fingerprint: str) -> Optional[dict[str, Any]]:
    """The recorded state when the outputs are those the same inputs produced, else None."""
    state = _read_state(out)
    if state.get("fingerprint") != fingerprint:
        return None
    for split in SPLITS:
        target = out / f"{split}.parquet"
        recorded = state.get("outputs", {}).get(split, {})
        if not target.is_file() or _sha256(target) != recorded.get("sha256"):
            return None
    return state


def fingerprint_of(source: dict[str, Any], options: dict[str, Any]) -> str:
    blob = json.dumps(
        {
            "format": FORMAT_VERSION,
            "instruction": INSTRUCTION,
            "data_source": DATA_SOURCE,
            "source": source,
            "options": options,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


# -- command line ------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Convert (or find the outputs up to date); return the summary."""
    out: Path = args.out
    expected_rows = {"train": args.expect_train_rows, "test": args.expect_test_rows}

    if args.source:
        files = local_split_files(args.source)
        source = {
            "kind": "local",
            "files": {
                split: [{"name": str(path.relative_to(args.source)), "sha256": _sha256(path)} for path in paths]
                for split, paths in files.items()
            },
        }
        source_text = f"local:{args.source}"
    else:
        if args.hf_endpoint:
            os.environ["HF_ENDPOINT"] = args.hf_endpoint
        source = {"kind": "hub", "name": args.hub_name, "config": args.hub_config, "revision": args.revision}
        source_text = f"hub:{args.hub_name}/{args.hub_config}@{args.revision or 'default'}"

    tokenizer_id = None
    if args.tokenizer:
        # The tokenizer's files decide the lengths in the report.
        tokenizer_id = {p.name: _sha256(p) for p in sorted(args.tokenizer.glob("tokenizer*")) if p.is_file()}
    options = {"max_prompt_length": args.max_prompt_length, "tokenizer": tokenizer_id, "expect_rows": expected_rows}
    fingerprint = fingerprint_of(source, options)

    state = None if args.force else up_to_date(out, fingerprint)
    if state is not None:
        return {
            "changed": False,
            "source": source_text,
            "outputs": {s: state["outputs"][s]["path"] for s in SPLITS},
            "rows": state["rows"],
            "prompt_length": state["prompt_length"],
            "fingerprint": fingerprint,
            "msg": "outputs are up to date",
        }

    if args.source:
        pairs = {split: read_rows(paths, split) for split, paths in files.items()}
    else:
        pairs = load_hub(args.hub_name, args.hub_config, args.revision)
    for split in SPLITS:
        if expected_rows[split] is not None and len(pairs[split]) != expected_rows[split]:
            raise ConversionError(
                f"the source's {split} split has {len(pairs[split])} rows, expected {expected_rows[split]}"
            )
    rows = {split: convert(split, pairs[split]) for split in SPLITS}

    if args.tokenizer:
        measure, measure_name = tokenizer_measure(args.tokenizer), f"tokens ({args.tokenizer} chat template)"
    else:
        measure = character_estimate
        measure_name = f"estimated tokens (characters / {CHARS_PER_TOKEN} + {CHAT_TEMPLATE_TOKENS}; give --tokenizer for exact counts)"
    report = length_report(rows, args.max_prompt_length, measure, measure_name)

    written, changed = write_outputs(out, rows, {split: len(pairs[split]) for split in SPLITS})
    counts = {split: written[split]["rows"] for split in SPLITS}
    state = {
        "fingerprint": fingerprint,
        "source": source,
        "options": options,
        "outputs": written,
        "rows": counts,
        "prompt_length": report,
    }
    temporary = _atomic_write(out / STATE_FILE, lambda p: p.write_text(json.dumps(state, indent=2) + "\n"))
    temporary.chmod(0o644)
    os.replace(temporary, out / STATE_FILE)
    return {
        "changed": changed,
        "source": source_text,
        "outputs": {s: written[s]["path"] for s in SPLITS},
        "rows": counts,
        "prompt_length": report,
        "fingerprint": fingerprint,
        "msg": "converted" if changed else "converted; the outputs came out as they were",
    }


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--source", type=Path, help="local directory holding the dataset's train and test files")
    source.add_argument("--hub", action="store_true", help="load from the hub with `datasets`")
    parser.add_argument("--hub-name", default=HUB_NAME, help=f"dataset on the hub (default {HUB_NAME})")
    parser.add_argument("--hub-config", default=HUB_CONFIG, help=f"dataset config (default {HUB_CONFIG})")
    parser.add_argument("--revision", help="hub revision (branch, tag or commit) to pin")
    parser.add_argument("--hf-endpoint", help="mirror of the hub; same as setting HF_ENDPOINT")
    parser.add_argument("--out", type=Path, required=True, help="directory for train.parquet and test.parquet")
    parser.add_argument("--tokenizer", type=Path, help="model directory whose tokenizer counts prompt tokens")
    parser.add_argument("--max-prompt-length", type=int, default=512, help="prompt budget in tokens to report against")
    parser.add_argument(
        "--expect-train-rows", type=int, help="fail unless the train split has this many rows (GSM8K: 7473)"
    )
    parser.add_argument(
        "--expect-test-rows", type=int, help="fail unless the test split has this many rows (GSM8K: 1319)"
    )
    parser.add_argument("--fail-on-overlong", action="store_true", help="exit 1 when a prompt is over the budget")
    parser.add_argument("--force", action="store_true", help="convert even when the outputs are up to date")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.source:
        args.source = args.source.resolve()
    try:
        summary = run(args)
    except ConversionError as error:
        print(f"gsm8k_to_verl.py: {error}", file=sys.stderr)
        print(json.dumps({"changed": False, "failed": True, "msg": str(error)}))
        return 1
    lengths = summary["prompt_length"]
    print(
        f"gsm8k_to_verl.py: {summary['msg']}: {summary['rows']} rows in {args.out}; "
        f"longest prompt {lengths['max']} {lengths['measure']}",
        file=sys.stderr,
    )
    status = 0
    if lengths["overlong"]:
        print(
            f"gsm8k_to_verl.py: {lengths['overlong']} prompts are longer than {lengths['limit']} "
            f"({lengths['measure']}), e.g. {lengths['overlong_rows'][:3]}. verl stops at such a prompt "
            "unless data.filter_overlong_prompts=True or data.max_prompt_length is raised.",
            file=sys.stderr,
        )
        status = 1 if args.fail_on_overlong else 0
    print(json.dumps(summary))
    return status


if __name__ == "__main__":
    sys.exit(main())
