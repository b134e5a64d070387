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


# A made-up model small enough to count by hand: per layer, an MLP of 4 x 8 x 3 = 96 parameters and
# attention of 4 x (2x2 + 2x2x2 + 2x2) = 64, plus embedding and LM head 10 x 4 x 2 = 80: 240.
TINY = {
    "hidden_size": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 8,
    "num_hidden_layers": 1,
    "vocab_size": 10,
}


def test_forward_flops_counted_by_hand():
    assert train_report.dense_parameters(TINY) == 240
    # 2 x 240 x 6 tokens, plus attention: 4 x (6 / 3 sequences) x 3^2 x head_dim 2 x 2 heads x 1 layer.
    assert train_report.forward_flops(TINY, 6, 3) == 2880 + 288
    # Without a sequence length, no attention term.
    assert train_report.forward_flops(TINY, 6, 0) == 2880


def test_flops_of_more_layers_and_of_a_head_size_the_config_leaves_out():
    # Two layers: twice the per-layer parameters (2 x 160 + 80) and twice the attention term.
    two = dict(TINY, num_hidden_layers=2)
    assert train_report.dense_parameters(two) == 400
    assert train_report.forward_flops(two, 6, 3) == 2 * 400 * 6 + 2 * 288
    # Without head_dim it is hidden // heads, as verl's counter has it: 5 // 2 = 2. Per layer an MLP of
    # 5 x 8 x 3 = 120 and attention of 5 x (2x2 + 2x2x2 + 2x2) = 80, plus 10 x 5 x 2 = 100.
    odd = dict(TINY, hidden_size=5)
    assert train_report.dense_parameters(odd) == 300
    # 2 x 300 x 6 tokens, plus 4 x 2 sequences x 3^2 x head_dim 2 x 2 heads.
    assert train_report.forward_flops(odd, 6, 3) == 3600 + 288


def test_phase_rates_counted_by_hand():
    """Seconds chosen so that each rate is a round number of TFLOP/s (3168 FLOPs a forward)."""
    metrics = {
        "perf/total_num_tokens": 6,
        "prompt_length/mean": 1,
        "response_length/mean": 2,
        "timing_s/gen": 3.168e-9,  # one forward: 1 TFLOP/s
        "timing_s/reward": 1,  # no model FLOPs: the reward, advantages, validation and checkpoint
        "timing_s/adv": 1,
        "timing_s/testing": 1,
        "timing_s/save_checkpoint": 1,
        "timing_s/old_log_prob": 1.584e-9,  # one forward
        "timing_s/ref": 3.168e-9,  # one forward
        "timing_s/values": 6.336e-9,  # one forward
        "timing_s/update_critic": 3.168e-9,  # three forwards' worth, times 2 PPO epochs
        "timing_s/update_actor": 6.336e-9,  # the same
        "timing_s/step": 5.0688e-8,  # all of them: 16 forwards
    }
    exact = {"rel": 1e-14, "abs": 0}
    assert train_report.phase_tflops(metrics, TINY, ppo_epochs=2) == pytest.approx(
        {
            "timing_s/gen": 1.0,
            "timing_s/old_log_prob": 2.0,
            "timing_s/ref": 1.0,
            "timing_s/values": 0.5,
            "timing_s/update_critic": 6.0,
            "timing_s/update_actor": 3.0,
            "timing_s/step": 1.0,
        },
        **exact,
    )
    # A phase not timed (0 s or absent), and no step time: no rate for them.
    rates = train_report.phase_tflops(dict(metrics, **{"timing_s/ref": 0, "timing_s/step": 0}), TINY, ppo_epochs=2)
    assert "timing_s/ref" not in rates and "timing_s/step" not in rates
    # Without the sequences' lengths, no attention term: a forward is 2880 FLOPs.
    bare = {"perf/total_num_tokens": 6, "timing_s/gen": 2.88e-9}
    assert train_report.phase_tflops(bare, TINY) == pytest.approx({"timing_s/gen": 1.0}, **exact)
    assert train_report.phase_tflops(dict(metrics, **{"perf/total_num_tokens": 0}), TINY) == {}


def test_the_phase_means_say_which_steps_they_are_over():
    lines, _ = train_report.report(LOG.read_text())
    assert "seconds per phase (mean over plain steps; share of a step)" in lines
    # Only a step with validation: its phases are the mean over all steps.
    only = "step:1 - timing_s/step:40.0 - timing_s/gen:10.0 - timing_s/testing:8.0\n"
    lines, _ = train_report.report(only)
    assert "seconds per phase (mean over steps; share of a step)" in lines
    assert "  generate (rollout)        10.00  25.0%" in lines and "  validation                 8.00       " in lines


def tiny_step(number: int, gen: str, extra: str = "") -> str:
    """A step of TINY (3168 FLOPs a forward) whose phases take 1 TFLOP/s worth of seconds or more."""
    return (
        f"step:{number} - perf/total_num_tokens:6 - prompt_length/mean:1 - response_length/mean:2"
        f" - timing_s/gen:{gen} - timing_s/update_actor:3.168e-09 - timing_s/step:1.2672e-08{extra}\n"
    )


def test_flops_lines_counted_by_hand():
    lines, _ = train_report.report(tiny_step(1, "3.168e-09"), TINY, "Tesla P40", 10, 2)
    at = lines.index("model FLOP/s and share of the peak (2 x Tesla P40, float32: 20 TFLOP/s)")
    # generate: 3168 FLOPs in 3.168e-9 s; the update three forwards' worth; the step all 4 over its time.
    assert lines[at + 1 :] == [
        "  generate (rollout)         1.00 TFLOP/s    5.0% of peak",
        "  actor update               3.00 TFLOP/s   15.0% of peak",
        "  whole step                 1.00 TFLOP/s    5.0% of peak",
        "  (verl's own perf/mfu/actor is 0 here: its table does not know this card)",
    ]
    # Two steps: the mean of their rates; no peak, so no share; verl's MFU there, so no note.
    text = tiny_step(1, "3.168e-09") + tiny_step(2, "1.056e-09", " - perf/mfu/actor:0.3")
    lines, _ = train_report.report(text, TINY)
    at = lines.index(
        "model FLOP/s (1 GPU(s): peak unknown, so no share; train.sh passes it for cards in stack_gpu_cards)"
    )
    assert lines[at + 1 :] == [
        "  generate (rollout)         2.00 TFLOP/s",
        "  actor update               3.00 TFLOP/s",
        "  whole step                 1.00 TFLOP/s",
    ]


def svg_of(steps: dict) -> ElementTree.Element:
    return ElementTree.fromstring(train_report.svg_plot(steps, "run"))


def test_plot_places_each_point_on_its_axes():
    """The plot area is x 70-650 (800 wide, 70 and 150 margins), each panel 260 high from y 40 and
    350: the first step on the left edge, the last on the right, each panel's range spanning it."""
    steps = {n: {"critic/score/mean": (n - 1) / 2, "timing_s/step": 10.0 * n} for n in (1, 2, 3)}
    svg = svg_of(steps)
    assert svg.get("height") == "660"
    points = {c.find(SVG + "title").text: (c.get("cx"), c.get("cy")) for c in svg.iter(SVG + "circle")}
    assert points == {
        "training reward, step 1: 0": ("70.0", "300.0"),
        "training reward, step 2: 0.5": ("360.0", "170.0"),
        "training reward, step 3: 1": ("650.0", "40.0"),
        "step, step 1: 10": ("70.0", "610.0"),
        "step, step 2: 20": ("360.0", "480.0"),
        "step, step 3: 30": ("650.0", "350.0"),
    }
    assert [p.get("points") for p in svg.iter(SVG + "polyline")] == [
        "70.0,300.0 360.0,170.0 650.0,40.0",
        "70.0,610.0 360.0,480.0 650.0,350.0",
    ]
    labels = [(t.text, t.get("x"), t.get("y")) for t in svg.iter(SVG + "text")]
    # Round ticks: reward every 0.2, seconds every 5, whole steps only; each label 4 px below its line.
    reward_ticks = [("0", "64", "304.0"), ("0.2", "64", "252.0"), ("0.4", "64", "200.0")]
    reward_ticks += [("0.6", "64", "148.0"), ("0.8", "64", "96.0"), ("1", "64", "44.0")]
    assert labels[1:7] == reward_ticks
    assert labels[7:10] == [("1", "70.0", "318"), ("2", "360.0", "318"), ("3", "650.0", "318")]
    assert [label for label in labels if label[1] == "64"][6:] == [
        ("10", "64", "614.0"),
        ("15", "64", "549.0"),
        ("20", "64", "484.0"),
        ("25", "64", "419.0"),
        ("30", "64", "354.0"),
    ]
    assert ("step", "360", "646") in labels and ("generate", "688", "384") in labels


def test_plot_of_one_step_puts_it_mid_panel_on_the_left():
    svg = svg_of({5: {"critic/score/mean": 0.25, "timing_s/step": 7.0}})
    points = {c.find(SVG + "title").text: (c.get("cx"), c.get("cy")) for c in svg.iter(SVG + "circle")}
    assert points == {"training reward, step 5: 0.25": ("70.0", "170.0"), "step, step 5: 7": ("70.0", "480.0")}
    labels = [(t.text, t.get("x"), t.get("y")) for t in svg.iter(SVG + "text")]
    assert ("0.25", "64", "174.0") in labels and ("7", "64", "484.0") in labels and ("5", "70.0", "628") in labels


def plain_steps(*numbers: int, seconds: float = 60.0) -> str:
    return "".join(f"step:{n} - timing_s/step:{seconds} - timing_s/gen:10.0\n" for n in numbers)


@pytest.mark.parametrize(
    "text, left",
    [
        # Running, 3 of 10 done at 60 s a step: 7 x 60 s.
        ("Total training steps: 10\n" + plain_steps(1, 2, 3), "  about 7 min left"),
        # Hours from an hour on: 997 x 60 s.
        ("Total training steps: 1000\n" + plain_steps(1, 2, 3), "  about 16.6 h left"),
        ("Total training steps: 63\n" + plain_steps(1, 2, 3), "  about 1.0 h left"),
        # One step left: its seconds are the time left. Whole minutes (89 s is 1.48 min, 91 s 1.52),
        # up to just under an hour; tenths of an hour from 3600 s (3779 s is 1.0497 h, 3781 s 1.0503).
        ("Total training steps: 2\n" + plain_steps(1, seconds=89.0), "  about 1 min left"),
        ("Total training steps: 2\n" + plain_steps(1, seconds=91.0), "  about 2 min left"),
        ("Total training steps: 2\n" + plain_steps(1, seconds=3599.0), "  about 60 min left"),
        ("Total training steps: 2\n" + plain_steps(1, seconds=3779.0), "  about 1.0 h left"),
        ("Total training steps: 2\n" + plain_steps(1, seconds=3781.0), "  about 1.1 h left"),
        # Ended, all done, the total unknown, or no plain step to go by: no estimate.
        ("Total training steps: 10\n" + plain_steps(1, 2, 3) + "train.sh: exit status 1\n", None),
        ("Total training steps: 3\n" + plain_steps(1, 2, 3), None),
        (plain_steps(1, 2, 3), None),
        ("Total training steps: 10\nstep:1 - timing_s/step:60.0 - timing_s/testing:5.0\n", None),
    ],
)
def test_the_time_left_is_estimated_only_while_steps_are_left(text, left):
    lines, _ = train_report.report(text)
    estimates = [line for line in lines if line.startswith("  about ")]
    if left is None:
        assert estimates == []
    else:
        assert estimates == [left + " at the plain-step pace (validation and checkpoints extra)"]


def test_a_resumed_run_s_last_total_and_exit_status_count():
    text = "Total training steps: 5\ntrain.sh exit status 1\nTotal training steps: 8\ntrain.sh: exit status 0\n"
    assert train_report.run_state(text) == (8, 0)
    assert train_report.run_state("nothing yet\n") == (None, None)


def test_a_panel_whose_first_series_is_empty_still_draws_the_second():
    svg = svg_of({3: {"val-core/openai/gsm8k/reward/mean@1": 0.5}, 4: {"val-core/openai/gsm8k/reward/mean@1": 0.75}})
    titles = [c.find(SVG + "title").text for c in svg.iter(SVG + "circle")]
    assert titles == ["validation, step 3: 0.5", "validation, step 4: 0.75"]
    assert len(list(svg.iter(SVG + "polyline"))) == 1


def test_a_value_that_is_no_number_is_left_out():
    steps = train_report.step_metrics("step:1 - actor/lr:1e-06 - note:n/a - timing_s/step:3.5 - plain text\n")
    assert steps == {1: {"actor/lr": 1e-06, "timing_s/step": 3.5}}


def test_what_cannot_be_read_or_written_is_said(tmp_path: Path, capsys):
    assert train_report.main([str(tmp_path / "none.log")]) == 1
    assert capsys.readouterr().err.startswith("train_report.py: cannot read the log: ")
    log = tmp_path / "train.log"
    log.write_text(plain_steps(1, 2))
    # A model config that is missing or no JSON: the report goes on without FLOP/s.
    (tmp_path / "bad.json").write_text("{not json")
    for config in ("none.json", "bad.json"):
        assert train_report.main([str(log), "--model-config", str(tmp_path / config)]) == 0
        out, err = capsys.readouterr()
        assert err.startswith(f"train_report.py: no FLOP/s: cannot read {tmp_path / config}: ")
        assert "2 steps logged" in out and "FLOP/s" not in out
    # A plot that cannot be written: said, and the exit status stays 0.
    assert train_report.main([str(log), "--plot", str(tmp_path / "no" / "dir" / "x.svg")]) == 0
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .startswith(f"no plot: cannot write {tmp_path / 'no' / 'dir' / 'x.svg'}: ")
    )


@pytest.mark.parametrize(
    "span, ticks",
    [
        ((0, 1), [0, 0.2, 0.4, 0.6, 0.8, 1]),
        ((10, 30), [10, 15, 20, 25, 30]),
        ((1, 3), [1, 1.5, 2, 2.5, 3]),
        ((0, 97), [0, 20, 40, 60, 80, 100]),  # the last tick past the highest value
        ((-0.5, 0.5), [-0.6, -0.4, -0.2, 0, 0.2, 0.4, 0.6]),
        # Round decimals also far from 0, where index x 0.1 alone is off in the 11th decimal.
        ((100000, 100000.5), [100000, 100000.1, 100000.2, 100000.3, 100000.4, 100000.5]),
        # Still distinct ticks for a span of a billionth.
        ((0, 1e-9), [0, 2e-10, 4e-10, 6e-10, 8e-10, 1e-9]),
        ((0, 1, 10), [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1]),
        ((3, 3), [3]),
        ((2, 1), [2]),
    ],
)
def test_ticks_are_round_and_span_the_values(span, ticks):
    assert train_report._ticks(*span) == ticks


def test_the_plot_s_layout_is_the_recorded_one():
    """The whole SVG of three steps with every series, against tests/fixtures/train_report_plot.svg (checked
    by eye when recorded: ticks on round values inside each panel, labels beside their lines, the legend
    right of the panels, a point per value). A change of layout changes that file too, on purpose."""
    steps = {
        1: {"critic/score/mean": 0.0, "timing_s/step": 10.0, "timing_s/gen": 4.0},
        2: {"critic/score/mean": 0.5, "timing_s/step": 20.0, "timing_s/gen": 6.0},
        3: {
            "critic/score/mean": 1.0,
            "timing_s/step": 30.0,
            "timing_s/gen": 8.0,
            "val-core/openai/gsm8k/reward/mean@1": 0.8,
        },
    }
    recorded = (REPO / "tests" / "fixtures" / "train_report_plot.svg").read_text()
    assert train_report.svg_plot(steps, "run & <1>") == recorded


def test_help_starts_with_what_the_report_is(capsys):
    with pytest.raises(SystemExit) as stopped:
        train_report.main(["--help"])
    assert stopped.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the description
    assert "Report on a verl training log: progress, seconds per step and phase" in out


def test_the_command_line_s_defaults_and_options(tmp_path: Path, capsys):
    log = tmp_path / "train.log"
    log.write_text(tiny_step(1, "3.168e-09"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    # Defaults: 1 GPU, peak unknown, 1 PPO epoch.
    assert train_report.main([str(log), "--model-config", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "model FLOP/s (1 GPU(s): peak unknown, so no share; train.sh passes it for cards in stack_gpu_cards)" in out
    assert "  actor update               3.00 TFLOP/s" in out
    argv = [str(log), "--model-config", str(config), "--card", "Tesla P40", "--peak-tflops", "10", "--gpus", "2"]
    assert train_report.main(argv + ["--ppo-epochs", "2", "--precision", "bfloat16"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "model FLOP/s and share of the peak (2 x Tesla P40, bfloat16: 20 TFLOP/s)" in out
    assert "  actor update               6.00 TFLOP/s   30.0% of peak" in out


def test_the_report_s_sections_each_have_a_heading_after_a_blank_line():
    text = (
        "Total training steps: 3\n" + tiny_step(1, "3.168e-09") + tiny_step(2, "3.168e-09", " - timing_s/testing:1.5")
    )
    lines, _ = train_report.report(text, TINY, "Tesla P40", 10)
    assert [line for line in lines if not line.startswith("  ")] == [
        "2 steps logged (last: step 2 of 3); still running, or stopped without train.sh's exit line",
        "",
        "seconds per step",
        "",
        "seconds per phase (mean over plain steps; share of a step)",
        "",
        "per step: reward (critic/score/mean), response length (mean), seconds",
        "",
        "model FLOP/s and share of the peak (1 x Tesla P40, float32: 10 TFLOP/s)",
    ]
    # The time left closes its section; the next heading follows a blank line.
    at = lines.index("  about 0 min left at the plain-step pace (validation and checkpoints extra)")
    assert lines[at + 1 : at + 3] == ["", "seconds per phase (mean over plain steps; share of a step)"]


def test_steps_without_a_step_time_get_phase_means_but_no_shares():
    lines, _ = train_report.report("step:1 - timing_s/gen:10.0\nstep:2 - timing_s/gen:20.0 - critic/score/mean:0.5\n")
    assert lines[lines.index("seconds per phase (mean over steps; share of a step)") + 1] == (
        "  generate (rollout)        15.00       "
    )


def test_plot_axes_run_from_the_round_tick_below_the_first_value_to_the_one_above_the_last():
    """Steps 1 and 9 get x ticks every 2 from 0 to 10, so the plot area's 580 px are 58 a step; rewards
    0 and 0.9 get y ticks every 0.2 up to 1, so 0.9 sits a tenth of the panel (26 px) below its top."""
    svg = svg_of(
        {1: {"critic/score/mean": 0.0, "timing_s/step": 10.0}, 9: {"critic/score/mean": 0.9, "timing_s/step": 12.0}}
    )
    points = {c.find(SVG + "title").text: (c.get("cx"), c.get("cy")) for c in svg.iter(SVG + "circle")}
    assert points["training reward, step 1: 0"] == ("128.0", "300.0")
    assert points["training reward, step 9: 0.9"] == ("592.0", "66.0")
    labels = [(t.text, t.get("x"), t.get("y")) for t in svg.iter(SVG + "text")]
    x_ticks = [label for label in labels if label[2] == "318"]
    assert x_ticks == [(str(n), f"{70 + 58 * n:.1f}", "318") for n in (0, 2, 4, 6, 8, 10)]
    assert ("1", "64", "44.0") in labels


def test_plot_of_a_panel_without_values_has_one_tick_at_0_mid_panel():
    svg = svg_of({1: {"timing_s/step": 7.0}, 2: {"timing_s/step": 9.0}})
    labels = [(t.text, t.get("x"), t.get("y")) for t in svg.iter(SVG + "text")]
    # The reward panel (y 40-300) is empty: its one y tick is 0, in its middle.
    assert [label for label in labels if label[1] == "64" and float(label[2]) < 300] == [("0", "64", "174.0")]


# Three runs that ran out of GPU memory on purpose (tests/gpu/results/oom05b-*: Qwen2.5-0.5B's
# architecture, the launcher's plan for a 22 GiB card, the allocator capped lower, on an H100):
# each in another role, verl's Ray error naming the worker call.
OOM_RUNS = {
    "rollout": (
        "the rollout (HF generate), verl's actor_rollout_generate_sequences()",
        "lower: train_rollout_micro_batch_size: 32 (prompts per generate() call, now 64);"
        " or a shorter train_max_response_length (now 256)",
        "Tried to allocate 608.00 MiB",
    ),
    "logprob": (
        "the actor's old log-probs, verl's actor_rollout_compute_log_prob()",
        "lower: train_memory_fixed: {log_prob: 7} (now 15 a GPU)",
        "Tried to allocate 6.52 GiB",
    ),
    "update": (
        "the actor update, verl's actor_rollout_update_actor()",
        "lower: train_memory_fixed: {actor: 2} (now 4 a GPU)",
        "Tried to allocate 150.00 MiB",
    ),
}


@pytest.mark.parametrize("run", sorted(OOM_RUNS))
def test_an_out_of_memory_names_the_step_the_role_and_what_to_lower(run: str):
    where, lower, torch_says = OOM_RUNS[run]
    text = (RESULTS / f"oom05b-{run}-train.log").read_text()
    lines, steps = train_report.report(text)
    assert steps == {} and lines[0] == "0 steps logged; ended with exit status 1"
    assert lines[2] == f"out of GPU memory in step 1: {where}"
    assert lines[3].startswith("  torch: CUDA out of memory. " + torch_says)
    assert lines[4] == "  " + lower


def test_the_config_verl_printed_is_read_back():
    config = train_report.run_config((RESULTS / "oom05b-update-train.log").read_text())
    assert config["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"] == 4
    assert config["actor_rollout_ref"]["rollout"]["log_prob_micro_batch_size_per_gpu"] == 2  # the run's override
    assert config["critic"]["ppo_micro_batch_size_per_gpu"] == 4
    assert train_report.run_config("no config here") is None


def test_what_to_lower_follows_the_run_s_settings():
    """Checkpointing and optimizer offload off are named too; a micro-batch of 1 is not halved; a
    step already logged makes the failing one the next; a log without an OOM has no such lines."""
    config = {
        "actor_rollout_ref": {
            "actor": {"ppo_micro_batch_size_per_gpu": 1, "fsdp_config": {"optimizer_offload": False}},
            "model": {"enable_gradient_checkpointing": False},
        },
        "critic": {"ppo_micro_batch_size_per_gpu": 8, "model": {"enable_gradient_checkpointing": True}},
    }
    printed = "\n".join("(TaskRunner pid=7) " + line for line in repr(config).splitlines())
    oom = "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor() (pid=9)\n"
    oom += "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    step = "step:3 - timing_s/step:10.0\n"
    lines = train_report.oom_lines(printed + "\n" + step + oom, train_report.step_metrics(step))
    assert lines[1] == "out of GPU memory in step 4: the actor update, verl's actor_rollout_update_actor()"
    assert lines[3] == (
        "  lower: train_memory_fixed: {actor_checkpointing: true}; or train_memory_fixed: {actor_optimizer_offload: true}"
    )
    critic = oom.replace("actor_rollout_update_actor", "critic_update_critic")
    assert "lower: train_memory_fixed: {critic: 4} (now 8 a GPU)" in "\n".join(
        train_report.oom_lines(printed + "\n" + critic, {})
    )
    ref = oom.replace("actor_rollout_update_actor", "actor_rollout_compute_ref_log_prob")
    assert "the reference model's log-probs" in train_report.oom_lines(ref, {})[1]
    assert train_report.oom_lines(printed + step, {}) == []
