"""roles/data/files/gsm8k_to_verl.py (the data role copies it to the host) on the GSM8K-format fixture (tests/fixtures/gsm8k_fixture.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from packaging.markers import Marker

import gsm8k_fixture
import gsm8k_to_verl as g

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def convert(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, dict[str, Any]]:
    """Run the converter in-process; return its exit status and the JSON summary line."""
    status = g.main(list(argv))
    lines = capsys.readouterr().out.strip().splitlines()
    return status, json.loads(lines[-1])


def final_number(answer: str) -> str:
    return answer.split("####")[-1].strip()


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, dict[str, list[dict[str, str]]]]:
    root = tmp_path / "gsm8k"
    return root, gsm8k_fixture.write_fixture(root)


def test_conversion_matches_verls_rl_format(source, tmp_path: Path, capsys):
    root, rows = source
    out = tmp_path / "out"
    status, summary = convert(capsys, "--source", str(root), "--out", str(out))
    assert status == 0
    assert summary["changed"] is True
    assert summary["rows"] == {"train": 32, "test": 8}
    for split in ("train", "test"):
        table = pq.read_table(out / f"{split}.parquet")
        assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        assert table.schema.field("prompt").type == pa.list_(
            pa.struct([("role", pa.string()), ("content", pa.string())])
        )
        assert table.schema.field("extra_info").type.field("index").type == pa.int64()
        for index, (row, source_row) in enumerate(zip(table.to_pylist(), rows[split])):
            assert row["data_source"] == "openai/gsm8k"
            assert row["ability"] == "math"
            assert row["prompt"] == [{"role": "user", "content": source_row["question"] + " " + INSTRUCTION}]
            assert row["reward_model"] == {"style": "rule", "ground_truth": final_number(source_row["answer"])}
            float(row["reward_model"]["ground_truth"])
            assert row["extra_info"] == {
                "split": split,
                "index": index,
                "answer": source_row["answer"],
                "question": source_row["question"],
            }
        assert g.validate_output(out / f"{split}.parquet", split, len(rows[split])) == []


@pytest.mark.parametrize("fmt", ["arrow", "jsonl"])
def test_other_local_layouts_give_the_same_files(fmt: str, source, tmp_path: Path, capsys):
    root, _ = source
    convert(capsys, "--source", str(root), "--out", str(tmp_path / "from-parquet"))
    other = tmp_path / fmt
    gsm8k_fixture.write_fixture(other, fmt)
    status, _ = convert(capsys, "--source", str(other), "--out", str(tmp_path / f"from-{fmt}"))
    assert status == 0
    for split in ("train", "test"):
        assert (tmp_path / f"from-{fmt}" / f"{split}.parquet").read_bytes() == (
            tmp_path / "from-parquet" / f"{split}.parquet"
        ).read_bytes()


def test_datasets_cache_layout_is_found(tmp_path: Path, capsys):
    saved = tmp_path / "saved"
    gsm8k_fixture.write_fixture(saved, "arrow")
    cache = tmp_path / "cache" / "openai___gsm8k" / "main" / "0.0.0" / "abc123"
    cache.mkdir(parents=True)
    for split in ("train", "test"):
        (saved / split / "data-00000-of-00001.arrow").rename(cache / f"gsm8k-{split}.arrow")
    status, summary = convert(capsys, "--source", str(cache), "--out", str(tmp_path / "out"))
    assert status == 0 and summary["rows"] == {"train": 32, "test": 8}


def test_second_run_changes_nothing(source, tmp_path: Path, capsys):
    root, _ = source
    out = tmp_path / "out"
    convert(capsys, "--source", str(root), "--out", str(out))
    before = {path.name: path.stat().st_mtime_ns for path in out.glob("*.parquet")}
    status, summary = convert(capsys, "--source", str(root), "--out", str(out))
    assert status == 0 and summary["changed"] is False
    assert summary["rows"] == {"train": 32, "test": 8}
    assert {path.name: path.stat().st_mtime_ns for path in out.glob("*.parquet")} == before


def test_changed_source_or_damaged_output_converts_again(source, tmp_path: Path, capsys):
    root, _ = source
    out = tmp_path / "out"
    convert(capsys, "--source", str(root), "--out", str(out))

    gsm8k_fixture.write_fixture(root, seed=7)  # new problems, same layout
    assert convert(capsys, "--source", str(root), "--out", str(out))[1]["changed"] is True

    (out / "test.parquet").unlink()
    assert convert(capsys, "--source", str(root), "--out", str(out))[1]["changed"] is True

    with (out / "train.parquet").open("ab") as handle:
        handle.write(b"junk")
    status, summary = convert(capsys, "--source", str(root), "--out", str(out))
    assert summary["changed"] is True
    assert g.validate_output(out / "train.parquet", "train", 32) == []

    assert convert(capsys, "--source", str(root), "--out", str(out))[1]["changed"] is False


def test_overlong_prompts_are_reported_not_dropped(source, tmp_path: Path, capsys):
    root, rows = source
    limit = 110
    expected = [
        (split, index)
        for split in ("train", "test")
        for index, row in enumerate(rows[split])
        if g.character_estimate([{"content": row["question"] + " " + INSTRUCTION}]) > limit
    ]
    assert 0 < len(expected) < 40, "the fixture should have prompts on both sides of the limit"
    status, summary = convert(
        capsys, "--source", str(root), "--out", str(tmp_path / "out"), "--max-prompt-length", str(limit)
    )
    assert status == 0
    report = summary["prompt_length"]
    assert report["overlong"] == len(expected)
    assert report["limit"] == limit and report["measure"].startswith("estimated tokens")
    assert [(item["split"], item["index"]) for item in report["overlong_rows"]] == expected[:20]
    assert summary["rows"] == {"train": 32, "test": 8}

    status, _ = convert(
        capsys,
        "--source",
        str(root),
        "--out",
        str(tmp_path / "out"),
        "--max-prompt-length",
        str(limit),
        "--fail-on-overlong",
    )
    assert status == 1


def test_tokenizer_counts_the_chat_template(source, tmp_path: Path, capsys, monkeypatch):
    class Tokenizer:
        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            assert add_generation_prompt is True and tokenize is False
            return "<user> " + messages[0]["content"] + " <assistant>"

        def __call__(self, text, add_special_tokens):
            return {"input_ids": text.split()}

    fake = types.SimpleNamespace(AutoTokenizer=types.SimpleNamespace(from_pretrained=lambda path: Tokenizer()))
    monkeypatch.setitem(sys.modules, "transformers", fake)
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text("{}")
    root, rows = source
    status, summary = convert(capsys, "--source", str(root), "--out", str(tmp_path / "out"), "--tokenizer", str(model))
    assert status == 0
    words = max(
        len(("<user> " + row["question"] + " " + INSTRUCTION + " <assistant>").split()) for row in rows["train"]
    )
    assert summary["prompt_length"]["max"]["train"] == words
    assert summary["prompt_length"]["measure"].startswith("tokens (")


def test_answer_without_a_number_stops_the_conversion(tmp_path: Path, capsys):
    root = tmp_path / "gsm8k"
    rows = gsm8k_fixture.write_fixture(root, "jsonl")
    rows["train"][3]["answer"] = "She has some pencils left.\n#### five"
    with (root / "train.jsonl").open("w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows["train"])
    out = tmp_path / "out"
    status, summary = convert(capsys, "--source", str(root), "--out", str(out))
    assert status == 1 and summary["failed"] is True
    assert "train[3]" in summary["msg"]
    assert not (out / "train.parquet").exists() and not (out / "test.parquet").exists()


@pytest.mark.parametrize(
    "answer, truth",
    [
        ("So 3 + 4 = 7.\n#### 7", "7"),
        ("#### 1,234", "1234"),
        ("#### $18", "18"),
        ("#### -3", "-3"),
        ("first #### 2 then\n#### 2.5", "2.5"),
    ],
)
def test_ground_truth_reads_like_verls_scorer(answer: str, truth: str):
    assert g.ground_truth(answer) == truth


@pytest.mark.parametrize("answer", ["no marker 7", "#### seven", "####", "#### 1 2"])
def test_ground_truth_refuses_non_numbers(answer: str):
    with pytest.raises(ValueError):
        g.ground_truth(answer)


def test_row_count_expectation(source, tmp_path: Path, capsys):
    root, _ = source
    status, summary = convert(
        capsys,
        "--source",
        str(root),
        "--out",
        str(tmp_path / "out"),
        "--expect-train-rows",
        "7473",
        "--expect-test-rows",
        "8",
    )
    assert status == 1
    assert "train split has 32 rows, expected 7473" in summary["msg"]


def test_validation_catches_a_bad_file(source, tmp_path: Path, capsys):
    root, _ = source
    out = tmp_path / "out"
    convert(capsys, "--source", str(root), "--out", str(out))
    table = pq.read_table(out / "test.parquet").to_pylist()
    table[2]["reward_model"]["ground_truth"] = "seven"
    pq.write_table(pa.Table.from_pylist(table, schema=g.SCHEMA), out / "test.parquet")
    assert any("ground truth 'seven'" in problem for problem in g.validate_output(out / "test.parquet", "test", 8))
    assert any("expected 9" in problem for problem in g.validate_output(out / "test.parquet", "test", 9))
    pq.write_table(pa.table({"prompt": ["a"]}), out / "test.parquet")
    assert "schema" in g.validate_output(out / "test.parquet", "test", 8)[0]


def test_local_source_does_not_import_datasets(source, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # any import of it now fails
    root, _ = source
    assert convert(capsys, "--source", str(root), "--out", str(tmp_path / "out"))[0] == 0


def test_hub_source_uses_the_endpoint_and_is_idempotent_offline(source, tmp_path: Path, capsys, monkeypatch):
    _, rows = source
    calls = []

    def load_dataset(name, config, revision=None):
        import os

        calls.append((name, config, revision, os.environ.get("HF_ENDPOINT")))
        return rows

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    out = tmp_path / "out"
    status, summary = convert(capsys, "--hub", "--hf-endpoint", "https://mirror.invalid", "--out", str(out))
    assert status == 0 and summary["changed"] is True
    assert calls == [("openai/gsm8k", "main", None, "https://mirror.invalid")]
    assert summary["source"] == "hub:openai/gsm8k/main@default"
    # Up to date: the hub is not asked again.
    status, summary = convert(capsys, "--hub", "--hf-endpoint", "https://mirror.invalid", "--out", str(out))
    assert summary["changed"] is False and len(calls) == 1


def test_hub_without_datasets_says_what_to_do(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    status, summary = convert(capsys, "--hub", "--out", str(tmp_path / "out"))
    assert status == 1
    assert "`datasets`" in summary["msg"] and "--source DIR" in summary["msg"]


def test_missing_split_is_named(tmp_path: Path, capsys):
    root = tmp_path / "gsm8k"
    gsm8k_fixture.write_fixture(root, "jsonl")
    (root / "test.jsonl").unlink()
    status, summary = convert(capsys, "--source", str(root), "--out", str(tmp_path / "out"))
    assert status == 1 and "no test split" in summary["msg"]


def test_cli_prints_one_json_line(source, tmp_path: Path):
    root, _ = source
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "roles" / "data" / "files" / "gsm8k_to_verl.py"),
            "--source",
            str(root),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert json.loads(line)["changed"] is True


def pins(path: Path, python: str = "3.11") -> dict[str, str]:
    """name -> version of each `name==version` line of a requirements file (hash lines skipped) whose
    marker holds on that Python (the control venv's lock is universal: numpy has a line for 3.13+)."""
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s\\;]+)\s*(?:;([^\\]*))?", line)
        if match and (
            not match.group(3)
            or Marker(match.group(3)).evaluate({"python_version": python, "python_full_version": python + ".0"})
        ):
            found[match.group(1).lower()] = match.group(2)
    return found


def test_the_converter_s_packages_are_tested_at_the_env_s_versions():
    # The converter runs in the env (the data layer's python); these tests run in the control
    # node's venv. Its pins of what the converter imports are the env lock's, so a test that
    # passes here passes there (on Python 3.11 and 3.12: numpy 1.26.4 has no wheel for 3.13).
    env = pins(REPO / "roles" / "verl" / "files" / "requirements-verl-0.4.1.txt", python="3.10")
    tests = pins(REPO / "requirements.txt")
    for name in ("pyarrow", "numpy"):
        assert tests[name] == env[name], f"requirements.txt pins {name} {tests[name]}, the env's lock {env[name]}"
