"""The launcher's estimate of a step's seconds on the host's card (filter_plugins/step_time.py): the
measured runs it rests on, each figure held to the file its run wrote; the arithmetic; when it gives
none; and what train.sh and docs/training.md show of it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import render  # tools/render.py (pytest.ini's pythonpath)
import step_time  # filter_plugins/step_time.py
import yaml
from ansible.errors import AnsibleFilterError
from conftest import REPO

DEFAULTS = REPO / "roles/stack/defaults/main"
RUNS = yaml.safe_load((DEFAULTS / "model_architectures.yml").read_text())["stack_train_preset_runs"]
PRESETS = yaml.safe_load((DEFAULTS / "model_architectures.yml").read_text())["stack_train_presets"]
CARDS = yaml.safe_load((DEFAULTS / "gpu_profiles.yml").read_text())["stack_gpu_cards"]
P40 = CARDS["Tesla P40"]["fp32_tflops"]


def settings(name: str, **changes: object) -> dict:
    run = RUNS[name]
    base = {key: run[key] for key in step_time.MATCHED}
    return {**base, "model": "/home/verl/verl-p40/models/" + run["model"].split("/")[-1], **changes}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_run_is_what_its_files_say(name: str):
    """step_seconds, step_tflops and the card's peak from the run report in the evidence file; the
    batch and the lengths from the run's own train log; the algorithm from the preset it stands for."""
    run = RUNS[name]
    assert set(RUNS) == set(PRESETS)
    text = (REPO / run["evidence"]).read_text()
    plain = re.search(r"plain steps \(\d+\): mean ([\d.]+)", text)
    whole = re.search(r"whole step +([\d.]+) TFLOP/s", text)
    peak = re.search(r"model FLOP/s and share of the peak \(1 x (.+), float32: ([\d.]+) TFLOP/s\)", text)
    assert plain and whole and peak, run["evidence"]
    assert float(plain.group(1)) == run["step_seconds"] and float(whole.group(1)) == run["step_tflops"]
    assert (peak.group(1), float(peak.group(2))) == (run["card"], run["peak_tflops"])
    assert CARDS[run["card"]]["fp32_tflops"] == run["peak_tflops"]
    stem = re.sub(r"-(summary|report-h100)\.txt$", "", run["evidence"])
    log = (REPO / (stem + "-train.log")).read_text()
    assert "'train_batch_size': %d," % run["batch_size"] in log
    assert "'max_prompt_length': %d," % run["prompt_length"] in log
    assert "'max_response_length': %d," % run["response_length"] in log
    preset = PRESETS[name]
    for key in ("model", "adv_estimator", "rollout_n", "use_kl_loss", "lora_rank"):
        assert preset[key] == run[key], (name, key)


def test_the_estimate_scales_the_run_to_the_batch_and_the_cards_peak():
    # 3B on a P40 at the preset's batch 32: the run's 110.7 s at batch 8 on a 67 TFLOP/s card.
    found = step_time.step_estimate(RUNS, "qwen3b-grpo-lora", settings("qwen3b-grpo-lora", batch_size=32), P40)
    assert found["seconds"] == pytest.approx(110.7 * 4 * 67 / 11.76)
    assert found["step_tflop"] == pytest.approx(3.92 * 110.7 * 4)
    assert found["share"] == pytest.approx(3.92 / 67) and found["run"] == "qwen3b-grpo-lora"
    assert found["why_not"] == ""
    # FLOPs over the share of this card's peak: the same figure.
    assert found["step_tflop"] / (found["share"] * P40) == pytest.approx(found["seconds"])
    # Without a preset, the run whose model and algorithm the settings are; its batch scales.
    default = step_time.step_estimate(RUNS, "", settings("qwen05b-ppo-full", batch_size=128), P40)
    assert default["run"] == "qwen05b-ppo-full" and default["seconds"] == pytest.approx(20.0 * 2 * 67 / 11.76)


@pytest.mark.parametrize(
    ("preset", "changes", "extra", "why"),
    [
        ("qwen3b-grpo-lora", {"response_length": 512}, {}, "the settings are not those of the preset's measured run"),
        ("nope", {}, {}, "no run measured for this preset"),
        ("", {"lora_rank": 8}, {}, "no measured run has these settings"),
        ("", {"model": "/models/Llama-3.2-1B"}, {}, "no measured run has these settings"),
        ("qwen3b-grpo-lora", {}, {"n_gpus": 2}, "runs were measured on one GPU only"),
        ("qwen3b-grpo-lora", {}, {"precision": "bfloat16"}, "runs were measured in float32 only"),
        ("qwen3b-grpo-lora", {}, {"card_tflops": 0}, "the card's peak is not known"),
    ],
)
def test_no_estimate_where_no_run_stands_for_it(preset: str, changes: dict, extra: dict, why: str):
    args = {"card_tflops": P40, **extra}
    found = step_time.step_estimate(RUNS, preset, settings("qwen3b-grpo-lora", batch_size=32, **changes), **args)
    assert found["seconds"] is None and found["why_not"].startswith(why)
    # A fixed text, echoed by train.sh --dry-run inside double quotes: nothing the shell expands.
    assert not re.search(r'["$`\\]', found["why_not"])


def test_a_run_without_its_figures_or_a_bad_batch_is_refused():
    broken = {"qwen3b-grpo-lora": {key: value for key, value in RUNS["qwen3b-grpo-lora"].items() if key != "evidence"}}
    with pytest.raises(AnsibleFilterError, match="stack_train_preset_runs.qwen3b-grpo-lora lacks evidence"):
        step_time.step_estimate(broken, "qwen3b-grpo-lora", settings("qwen3b-grpo-lora", batch_size=32), P40)
    with pytest.raises(AnsibleFilterError, match="batch_size 0 is not a positive number"):
        step_time.step_estimate(RUNS, "qwen3b-grpo-lora", settings("qwen3b-grpo-lora", batch_size=0), P40)


def rendered(tmp_path: Path, preset: str) -> str:
    variables = {"train_preset": preset, "model_name": PRESETS[preset]["model"]} if preset else {}
    render.render("pascal", tmp_path, variables)
    return (tmp_path / "train.sh").read_text()


@pytest.mark.parametrize("preset", ["", "qwen15b-grpo-lora", "qwen3b-grpo-lora"])
def test_train_sh_shows_the_estimate_for_the_p40(tmp_path: Path, preset: str):
    """Rendered without a host: the profile's reference card, a P40, and the preset's batch."""
    name = preset or "qwen05b-ppo-full"
    batch = PRESETS[name]["batch_size"]
    seconds = round(RUNS[name]["step_seconds"] * batch / RUNS[name]["batch_size"] * RUNS[name]["peak_tflops"] / P40)
    text = rendered(tmp_path, preset)
    assert "  # Estimated seconds per step on this card, about %d: " % seconds in text
    assert 'echo "train.sh: about %d s a step on this card (' % seconds in text


def test_train_sh_says_why_there_is_no_estimate(tmp_path: Path):
    """Settings no measured run has (a longer response): no estimate in the header, and --dry-run's
    plan says why, in a line bash reads as one string."""
    text = rendered(tmp_path / "a", "qwen3b-grpo-lora")
    assert "about 2523 s a step on this card" in text
    render.render("pascal", tmp_path / "b", {"train_max_response_length": 512})
    other = (tmp_path / "b" / "train.sh").read_text()
    assert "# Estimated seconds per step" not in other
    assert (
        "echo \"train.sh: no estimate of a step's seconds: no measured run has these settings (a preset's have one)"
        in other
    )
    done = subprocess.run(["bash", "-n", str(tmp_path / "b" / "train.sh")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_docs_table_is_the_estimate():
    """docs/training.md's table of the presets on one P40: each row's seconds are the filter's."""
    text = (REPO / "docs/training.md").read_text()
    for name, preset in PRESETS.items():
        found = step_time.step_estimate(RUNS, name, settings(name, batch_size=preset["batch_size"]), P40)
        row = [line for line in text.splitlines() if line.startswith("| `%s` |" % name) and "TFLOP" in line]
        assert len(row) == 1, name
        assert "about %d s" % round(found["seconds"]) in row[0], (name, row[0])
        assert "%.0f TFLOP" % found["step_tflop"] in row[0], (name, row[0])
