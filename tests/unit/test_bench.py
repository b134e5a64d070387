"""tools/bench.py: the per-layer accounting on a recorded event stream, its command line, and
docs/benchmarks.md's tables against the results file they were taken from."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

import bench

SAMPLES = REPO / "tests" / "unit" / "samples" / "bench"
RESULTS = sorted((REPO / "docs" / "bench").glob("*.json"))


def load_events(name: str) -> list[dict]:
    return [json.loads(line) for line in (SAMPLES / name).read_text().splitlines() if line.strip()]


def event(kind: str, role: str | None, changed: bool = False, duration: float = 1.0) -> dict:
    data: dict = {"duration": duration, "res": {"changed": changed}}
    if role:
        data["role"] = role
    return {"event": kind, "event_data": data}


def test_helper_role_counts_for_the_layer_that_called_it():
    events = [
        event("playbook_on_start", None),
        event("runner_on_ok", None, duration=0.5),
        event("runner_on_ok", "cuda", duration=2.0),
        event("runner_item_on_ok", "stack_artifact"),  # a loop's item: the task's own event counts
        event("runner_on_ok", "stack_artifact", changed=True, duration=3.0),
        event("runner_on_skipped", "stack_artifact", duration=0.0),
        event("runner_on_ok", "cudnn", changed=True, duration=1.5),
    ]
    table = bench.layer_table(events)
    assert list(table) == ["play", "cuda", "cudnn"]
    assert table["cuda"] == {"tasks": 3, "changed": 1, "seconds": 5.0}
    assert table["cudnn"] == {"tasks": 1, "changed": 1, "seconds": 1.5}
    assert table["play"] == {"tasks": 1, "changed": 0, "seconds": 0.5}


def test_layer_table_on_a_recorded_converge():
    # Real events of `--tags cuda -e rebuild=cuda` (bench --events), compacted by bench.compact.
    events = load_events("rebuild-cuda.jsonl")
    table = bench.layer_table(events)
    assert "stack_artifact" not in table  # the runfile download counts for cuda
    assert any(e["event_data"].get("role") == "stack_artifact" for e in events)
    tasks = [e for e in events if e["event"] in bench.TASK_EVENTS]
    assert sum(row["tasks"] for row in table.values()) == len(tasks)
    assert sum(row["changed"] for row in table.values()) == sum(
        1 for e in tasks if e["event_data"].get("res", {}).get("changed")
    )
    # Only the cuda layer changes when only the cuda layer is rebuilt.
    assert table["cuda"]["changed"] > 0
    assert all(row["changed"] == 0 for layer, row in table.items() if layer != "cuda")


def test_compact_keeps_what_the_table_reads():
    raw = {
        "event": "runner_on_ok",
        "stdout": "ok: [host]",
        "event_data": {"role": "cuda", "task": "t", "duration": 1.25, "res": {"changed": True, "stdout": "x" * 100}},
    }
    assert bench.compact(raw) == {
        "event": "runner_on_ok",
        "event_data": {"role": "cuda", "task": "t", "duration": 1.25, "res": {"changed": True}},
    }
    assert bench.layer_table([raw]) == bench.layer_table([bench.compact(raw)])


def test_command_line():
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "bench.py"), "--help"], capture_output=True, text=True, check=True
    )
    for option in ("--image", "--keep", "--results", "--events", "--table"):
        assert option in done.stdout
    # What `make bench` passes, bench accepts.
    line = next(x for x in (REPO / "Makefile").read_text().splitlines() if "tools/bench.py" in x)
    options = [word for word in line.split() if word.startswith("--")]
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "bench.py"), *options, "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_benchmarks_table_is_the_latest_results_file(capsys):
    assert RESULTS, "no docs/bench/<date>.json: docs/benchmarks.md's figures must come from one"
    latest = RESULTS[-1]
    assert bench.main(["--table", str(latest)]) == 0
    table = capsys.readouterr().out
    readme = (REPO / "docs" / "benchmarks.md").read_text()
    assert table in readme, "docs/benchmarks.md's tables differ from %s: paste `python tools/bench.py --table %s`" % (
        latest.name,
        latest.relative_to(REPO),
    )
    assert "docs/bench/%s" % latest.name in readme
    record = json.loads(latest.read_text())
    assert record["machine"]["cores"] >= 1 and record["machine"]["date"] == latest.stem
