"""roles/data/files/gsm8k_to_verl.py (the data role copies it to the host) on the GSM8K-format fixture (tests/fixtures/gsm8k_fixture.py)."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import time
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
            # As a real tokenizer: special tokens add a BOS that the chat template's text already implies.
            return {"input_ids": (["<s>"] if add_special_tokens else []) + text.split()}

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


def convert_logged(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, dict[str, Any], str]:
    """As convert, with what the converter wrote to stderr."""
    status = g.main(list(argv))
    captured = capsys.readouterr()
    return status, json.loads(captured.out.strip().splitlines()[-1]), captured.err


def test_summary_message_says_whether_the_outputs_changed(source, tmp_path: Path, capsys):
    root, _ = source
    out = tmp_path / "out"
    status, summary = convert(capsys, "--source", str(root), "--out", str(out))
    assert (status, summary["changed"], summary["msg"]) == (0, True, "converted")
    status, summary = convert(capsys, "--source", str(root), "--out", str(out))
    assert (status, summary["changed"], summary["msg"]) == (0, False, "outputs are up to date")
    # Converted again, the same rows give the same bytes: not a change.
    status, summary = convert(capsys, "--source", str(root), "--out", str(out), "--force")
    assert (status, summary["changed"]) == (0, False)
    assert summary["msg"] == "converted; the outputs came out as they were"
    assert sorted(path.name for path in out.iterdir()) == [".gsm8k_to_verl.json", "test.parquet", "train.parquet"]


def test_outputs_are_world_readable(source, tmp_path: Path, capsys):
    # Written through mkstemp (mode 0600); the trainer may run as another user.
    root, _ = source
    out = tmp_path / "out"
    convert(capsys, "--source", str(root), "--out", str(out))
    for name in ("train.parquet", "test.parquet", ".gsm8k_to_verl.json"):
        assert (out / name).stat().st_mode & 0o777 == 0o644, name


def test_output_directory_and_its_parents_are_created(source, tmp_path: Path, capsys):
    root, _ = source
    out = tmp_path / "var" / "lib" / "gsm8k"
    status, summary = convert(capsys, "--source", str(root), "--out", str(out))
    assert status == 0 and summary["rows"] == {"train": 32, "test": 8}
    assert (out / "train.parquet").is_file() and (out / "test.parquet").is_file()


def open_descriptors() -> dict[str, str]:
    """This process's open descriptors and what each names (the listing's own one left out)."""
    found = {}
    for fd in Path("/proc/self/fd").iterdir():
        try:
            found[fd.name] = os.readlink(fd)
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return found


def test_a_run_leaves_no_file_descriptor_open(source, tmp_path: Path, capsys):
    root, _ = source
    # Descriptors an earlier test left to the garbage collector are closed first: one closed during the
    # run would hide a descriptor the run leaves open (make unit failed here once, 14 against 15).
    gc.collect()
    before = open_descriptors()
    assert convert(capsys, "--source", str(root), "--out", str(tmp_path / "out"))[0] == 0
    # What stays open once the run has settled: pyarrow reads and writes on threads of its own, and CI
    # once counted one descriptor more just after the run (15 against 14) that no run here left open.
    # A descriptor the run leaks is still open a second later, and is named.
    for _ in range(20):
        gc.collect()
        left = {fd: name for fd, name in open_descriptors().items() if before.get(fd) != name}
        if not left:
            break
        time.sleep(0.05)
    assert left == {}


def test_messages_on_stderr(source, tmp_path: Path, capsys):
    root, _ = source
    out = tmp_path / "out"
    status, summary, err = convert_logged(capsys, "--source", str(root), "--out", str(out))
    assert status == 0
    lengths = summary["prompt_length"]
    assert err == (
        f"gsm8k_to_verl.py: converted: {{'train': 32, 'test': 8}} rows in {out}; "
        f"longest prompt {lengths['max']} {lengths['measure']}\n"
    )
    status, summary, err = convert_logged(capsys, "--source", str(tmp_path / "nowhere"), "--out", str(out))
    assert status == 1
    assert err == f"gsm8k_to_verl.py: {summary['msg']}\n"


def test_overlong_prompts_are_named_on_stderr(source, tmp_path: Path, capsys):
    root, _ = source
    status, summary, err = convert_logged(
        capsys, "--source", str(root), "--out", str(tmp_path / "out"), "--max-prompt-length", "0"
    )
    assert status == 0
    report = summary["prompt_length"]
    assert report["overlong"] == 40
    warning = err.splitlines()[1]
    assert warning == (
        f"gsm8k_to_verl.py: 40 prompts are longer than 0 ({report['measure']}), "
        f"e.g. {report['overlong_rows'][:3]}. verl stops at such a prompt "
        "unless data.filter_overlong_prompts=True or data.max_prompt_length is raised."
    )


def test_failure_summary_is_not_a_change(tmp_path: Path, capsys):
    status, summary = convert(capsys, "--source", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))
    assert status == 1
    assert summary == {"changed": False, "failed": True, "msg": f"{tmp_path / 'nowhere'} is not a directory"}


def test_usage_errors_exit_2(source, tmp_path: Path, capsys):
    root, _ = source
    for argv in (["--out", str(tmp_path / "out")], ["--source", str(root)]):
        with pytest.raises(SystemExit) as exited:
            g.main(argv)
        assert exited.value.code == 2
        assert "required" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_help_describes_the_converter(capsys):
    with pytest.raises(SystemExit) as exited:
        g.main(["--help"])
    assert exited.value.code == 0
    assert "Convert GSM8K into verl's RL parquet format" in capsys.readouterr().out


def test_default_prompt_budget_is_512(source, tmp_path: Path, capsys):
    root, _ = source
    status, summary = convert(capsys, "--source", str(root), "--out", str(tmp_path / "out"))
    assert status == 0 and summary["prompt_length"]["limit"] == 512


def test_character_estimate_is_a_third_of_the_characters_plus_the_template():
    assert g.character_estimate([{"role": "user", "content": "x" * 30}]) == 10 + 40
    assert g.character_estimate([{"role": "user", "content": "x" * 31}]) == 11 + 40
    assert g.character_estimate([{"role": "system", "content": "ab"}, {"role": "user", "content": "c"}]) == 1 + 40


def test_a_prompt_exactly_at_the_budget_is_not_overlong(source, tmp_path: Path, capsys):
    root, _ = source
    out = tmp_path / "out"
    longest = max(convert(capsys, "--source", str(root), "--out", str(out))[1]["prompt_length"]["max"].values())
    report = convert(capsys, "--source", str(root), "--out", str(out), "--max-prompt-length", str(longest))[1][
        "prompt_length"
    ]
    assert report["overlong"] == 0 and report["overlong_rows"] == []
    report = convert(capsys, "--source", str(root), "--out", str(out), "--max-prompt-length", str(longest - 1))[1][
        "prompt_length"
    ]
    assert report["overlong"] >= 1


def test_overlong_report_lists_the_first_20_rows(source, tmp_path: Path, capsys):
    root, _ = source
    status, summary = convert(capsys, "--source", str(root), "--out", str(tmp_path / "out"), "--max-prompt-length", "0")
    assert status == 0
    report = summary["prompt_length"]
    assert report["overlong"] == 40
    assert [(item["split"], item["index"]) for item in report["overlong_rows"]] == [("train", i) for i in range(20)]


@pytest.mark.parametrize("bad, more", [(10, ""), (11, "; and 1 more"), (13, "; and 3 more")])
def test_rows_without_a_number_are_named_up_to_10(bad: int, more: str):
    pairs = [("How many?", "no marker")] * bad + [("How many?", "#### 4")] * 2
    with pytest.raises(g.ConversionError) as error:
        g.convert("train", pairs)
    shown = "; ".join(f"train[{i}]: no '####' in the answer" for i in range(10))
    assert str(error.value) == f"{bad} rows have no numeric '#### N' answer: {shown}{more}"


def test_row_without_string_columns_is_refused(tmp_path: Path, capsys):
    root = tmp_path / "gsm8k"
    rows = gsm8k_fixture.write_fixture(root, "jsonl")
    rows["train"][3]["answer"] = 42
    with (root / "train.jsonl").open("w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows["train"])
    status, summary = convert(capsys, "--source", str(root), "--out", str(tmp_path / "out"))
    assert status == 1
    assert summary["msg"] == f"{root / 'train.jsonl'} row 3: needs string columns 'question' and 'answer'"


def test_first_matching_layout_wins(source, tmp_path: Path, capsys):
    # A stray train.jsonl beside the hub's parquet files is not read: formats are never mixed.
    root, rows = source
    other = gsm8k_fixture.write_fixture(tmp_path / "other", "jsonl", seed=5)
    for split in ("train", "test"):
        (tmp_path / "other" / f"{split}.jsonl").rename(root / "main" / f"{split}.jsonl")
    assert other["train"] != rows["train"]
    out = tmp_path / "out"
    assert convert(capsys, "--source", str(root), "--out", str(out))[0] == 0
    questions = [row["extra_info"]["question"] for row in pq.read_table(out / "train.parquet").to_pylist()]
    assert questions == [row["question"] for row in rows["train"]]


def test_arrow_file_format_is_read(source, tmp_path: Path, capsys):
    # datasets writes the Arrow streaming format; a file written with pyarrow's new_file is the file format.
    root, rows = source
    plain = tmp_path / "plain"
    plain.mkdir()
    for split in ("train", "test"):
        table = pq.read_table(root / "main" / f"{split}-00000-of-00001.parquet")
        with pa.OSFile(str(plain / f"{split}.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    status, summary = convert(capsys, "--source", str(plain), "--out", str(tmp_path / "out"))
    assert status == 0 and summary["rows"] == {"train": 32, "test": 8}
    questions = [row["extra_info"]["question"] for row in pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()]
    assert questions == [row["question"] for row in rows["test"]]


def test_tokenizer_without_transformers_says_so(source, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    root, _ = source
    model = tmp_path / "model"
    model.mkdir()
    status, summary = convert(capsys, "--source", str(root), "--out", str(tmp_path / "out"), "--tokenizer", str(model))
    assert status == 1
    assert summary["msg"].startswith("--tokenizer needs the transformers package")


@pytest.mark.parametrize("endpoint", [None, "https://mirror.invalid"])
def test_hub_failure_names_the_endpoint(endpoint, tmp_path: Path, capsys, monkeypatch):
    def load_dataset(name, config, revision=None):
        raise ConnectionError("unreachable")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    argv = ["--hub", "--out", str(tmp_path / "out")] + (["--hf-endpoint", endpoint] if endpoint else [])
    status, summary = convert(capsys, *argv)
    assert status == 1
    assert summary["msg"].startswith(
        f"could not load openai/gsm8k (main) from {endpoint or 'the default hub'}: unreachable. Set HF_ENDPOINT"
    )
    assert not (tmp_path / "out").exists()


def test_validation_names_each_bad_field(tmp_path: Path):
    pairs = [(f"Question {i}?", f"#### {i}") for i in range(8)]
    rows = g.convert("test", pairs)
    rows[0]["data_source"] = "other"
    rows[1]["prompt"] = rows[1]["prompt"] * 2
    rows[2]["prompt"][0]["role"] = "system"
    rows[3]["prompt"][0]["content"] = ""
    rows[4]["reward_model"]["style"] = "model"
    rows[5]["extra_info"]["split"] = "train"
    rows[6]["extra_info"]["index"] = 99
    path = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=g.SCHEMA), path)
    assert g.validate_output(path, "test", 8) == [
        "test.parquet row 0: data_source 'other'",
        "test.parquet row 1: prompt should be one non-empty user message",
        "test.parquet row 2: prompt should be one non-empty user message",
        "test.parquet row 3: prompt should be one non-empty user message",
        "test.parquet row 4: reward_model.style 'model'",
        "test.parquet row 5: extra_info split/index train/5",
        "test.parquet row 6: extra_info split/index test/99",
    ]


def test_validation_stops_after_20_problems(tmp_path: Path):
    rows = g.convert("test", [(f"Question {i}?", f"#### {i}") for i in range(30)])
    for row in rows:
        row["data_source"] = "other"
    path = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=g.SCHEMA), path)
    assert g.validate_output(path, "test", 30) == [f"test.parquet row {i}: data_source 'other'" for i in range(21)] + [
        "... (stopped after 20)"
    ]


def test_unreadable_output_is_a_problem_not_a_crash(tmp_path: Path):
    path = tmp_path / "train.parquet"
    path.write_bytes(b"not parquet")
    (problem,) = g.validate_output(path, "train", 32)
    assert problem.startswith(f"{path}: unreadable (")


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
