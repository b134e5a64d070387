"""roles/train/files/train_report.py (train.sh --report; the train role copies it to the host) on logs recorded by the GPU proof (tests/gpu/results)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml
from conftest import REPO

import train_report

RESULTS = REPO / "tests" / "gpu" / "results"
# The memory proof with the computed HF rollout micro-batch (64): 3 steps, validation
# and checkpoint at step 3, on an H200 capped at 24 GiB (tests/gpu/README.md).
LOG = RESULTS / "memory-24gib-computed-train.log"
# The same proof with the former fixed micro-batch of 16.
LOG_16 = RESULTS / "memory-24gib-train.log"
QWEN05B = yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "model_architectures.yml").read_text())[
    "stack_model_architectures"
]["Qwen2.5-0.5B-Instruct"]
CARDS = yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "gpu_profiles.yml").read_text())[
    "stack_gpu_cards"
]
# verl 0.4.1's peak for an H200 (verl/utils/flops_counter.py), which its perf/mfu/* divide by.
VERL_H200_TFLOPS = 989
SVG = "{http://www.w3.org/2000/svg}"


def test_steps_and_state_of_a_finished_run():
    lines, steps = train_report.report(LOG.read_text())
    assert sorted(steps) == [1, 2, 3]
    assert lines[0] == "3 steps logged (last: step 3 of 3); ended with exit status 0"
    assert steps[2]["timing_s/step"] == 20.56


def test_seconds_per_step_and_phase():
    text = "\n".join(train_report.report(LOG.read_text())[0])
    # Plain steps 1 and 2 (29.94 and 20.56 s); step 3 also validated and saved.
    assert "plain steps (2): mean 25.2, median 25.2, min 20.6, max 29.9" in text
    assert "with validation or checkpoint: step 3 43.0" in text
    # Generation: (8.84 + 6.85) / 2 s a plain step, 31% of it.
    assert "generate (rollout)         7.84  31.1%" in text
    assert "validation                 8.23" in text
    assert "checkpoint                13.46" in text


def test_generation_time_against_the_fixed_micro_batch_of_16():
    def mean_gen(path: Path) -> float:
        steps = train_report.step_metrics(path.read_text())
        plain = [m["timing_s/gen"] for m in steps.values() if train_report.is_plain(m)]
        return sum(plain) / len(plain)

    assert mean_gen(LOG_16) > 3 * mean_gen(LOG)


def test_reward_and_response_length_per_step():
    lines, _ = train_report.report(LOG.read_text())
    rows = [line for line in lines if line.startswith("  step ")]
    assert rows[0] == "  step    1: reward   0.000  length  256.0     29.9 s"
    assert rows[2].endswith("validation: openai/gsm8k/reward/mean@1 0.000")


def test_a_running_log_says_so_and_estimates_what_is_left(tmp_path: Path):
    text = LOG.read_text()
    cut = text.index("step:3 - ")
    lines, steps = train_report.report(text[: text.rindex("\n", 0, cut)])
    assert sorted(steps) == [1, 2]
    assert lines[0] == "2 steps logged (last: step 2 of 3); still running, or stopped without train.sh's exit line"
    assert "  about 0 min left at the plain-step pace (validation and checkpoints extra)" in lines


def test_dense_parameters_as_verl_counts_them():
    # 24 x (3 x 896 x 4864 + 896 x (896 + 128 + 128 + 896)) + 2 x 151936 x 896
    assert train_report.dense_parameters(QWEN05B) == 630_095_872


def test_update_flops_agree_with_verl_s_own_mfu_on_a_card_it_knows():
    # On the H200 verl's perf/mfu/actor and perf/mfu/critic are not 0; times its
    # peak they are verl's model TFLOP/s of the updates (timed inside the
    # worker). After step 1's warm-up ours (timed by the trainer) agree within 10%.
    for path in (LOG, LOG_16):
        for number, metrics in train_report.step_metrics(path.read_text()).items():
            if number == 1:
                continue
            ours = train_report.phase_tflops(metrics, QWEN05B)
            for role in ("actor", "critic"):
                verl = metrics[f"perf/mfu/{role}"] * VERL_H200_TFLOPS
                assert ours[f"timing_s/update_{role}"] == pytest.approx(verl, rel=0.10), (path.name, number, role)


def test_share_of_a_p40_s_peak():
    # The same log read as if from a P40: the report divides by the P40's fp32 peak.
    peak = CARDS["Tesla P40"]["fp32_tflops"]
    lines, steps = train_report.report(LOG.read_text(), QWEN05B, "Tesla P40", peak, gpus=1)
    text = "\n".join(lines)
    assert "model FLOP/s and share of the peak (1 x Tesla P40, float32: 11.76 TFLOP/s)" in text
    plain = [m for m in steps.values() if train_report.is_plain(m)]
    actor = sum(train_report.phase_tflops(m, QWEN05B)["timing_s/update_actor"] for m in plain) / len(plain)
    assert f"  {'actor update':22} {actor:8.2f} TFLOP/s  {actor / peak:6.1%} of peak" in lines
    # Two GPUs double the peak the run is measured against.
    two = "\n".join(train_report.report(LOG.read_text(), QWEN05B, "Tesla P40", peak, gpus=2)[0])
    assert "2 x Tesla P40, float32: 23.52 TFLOP/s" in two


def test_verl_s_zero_mfu_is_explained(tmp_path: Path):
    # What a P40's log holds: verl's table lacks the card, so perf/mfu/* are 0.
    text = re.sub(r"perf/mfu/actor:[0-9.]+", "perf/mfu/actor:0.000", LOG.read_text())
    lines, _ = train_report.report(text, QWEN05B, "Tesla P40", 11.76)
    assert "  (verl's own perf/mfu/actor is 0 here: its table does not know this card)" in lines
    lines, _ = train_report.report(LOG.read_text(), QWEN05B, "NVIDIA H200", 67)
    assert not [line for line in lines if "verl's own" in line]


def test_unknown_peak_and_no_config():
    lines, _ = train_report.report(LOG.read_text(), QWEN05B, "Tesla K80", 0.0)
    assert any("peak unknown, so no share" in line for line in lines)
    assert not any("of peak" in line for line in lines)
    lines, _ = train_report.report(LOG.read_text())
    assert not any("FLOP/s" in line for line in lines)


def test_cli_on_a_recorded_log(tmp_path: Path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(QWEN05B))
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "roles" / "train" / "files" / "train_report.py"),
            str(LOG),
            "--model-config",
            str(config),
        ]
        + ["--card", "Tesla P40", "--peak-tflops", "11.76"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(LOG)
    assert "of peak" in done.stdout
    empty = tmp_path / "empty.log"
    empty.write_text("Ray started\n")
    done = subprocess.run(
        [sys.executable, str(REPO / "roles" / "train" / "files" / "train_report.py"), str(empty)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "0 steps logged" in done.stdout


def test_plot_writes_an_svg_of_reward_and_time(tmp_path: Path):
    steps = train_report.step_metrics(LOG.read_text())
    out = tmp_path / "x.svg"
    assert train_report.plot(steps, out, "train <1> & 2") == f"plot: {out}"
    svg = ElementTree.parse(out).getroot()
    assert svg.tag == SVG + "svg"
    texts = [element.text for element in svg.iter(SVG + "text")]
    assert "train <1> & 2" in texts
    assert {"training reward", "validation", "step", "generate", "reward (mean)", "seconds"} <= set(texts)
    # One line per series, one point per step that has the metric: reward, time and
    # generation at steps 1-3, validation at step 3 only.
    assert len(list(svg.iter(SVG + "polyline"))) == 4
    points = [element.find(SVG + "title").text for element in svg.iter(SVG + "circle")]
    assert len(points) == 3 + 1 + 3 + 3
    assert "step, step 2: 20.56" in points


def test_plot_of_steps_without_reward_or_time_says_so(tmp_path: Path):
    assert train_report.plot({1: {"actor/lr": 1e-6}}, tmp_path / "x.svg", "x") == (
        "no plot: no step has a reward or a step time"
    )
    assert not (tmp_path / "x.svg").exists()


def test_report_and_plot_run_on_the_standard_library_alone(tmp_path: Path):
    # train.sh --report runs the env's Python, whose packages are the env's lock
    # (roles/verl/files/requirements-verl-0.4.1.txt, without matplotlib). -S -I: no
    # site-packages at all, so whatever the report needs is Python's own.
    out = tmp_path / "train.log.svg"
    done = subprocess.run(
        [sys.executable, "-S", "-I", str(REPO / "roles" / "train" / "files" / "train_report.py"), str(LOG)]
        + ["--plot", str(out)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"plot: {out}"
    assert ElementTree.parse(out).getroot().tag == SVG + "svg"
