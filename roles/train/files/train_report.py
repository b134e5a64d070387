#!/usr/bin/env python3
"""Report on a verl training log: progress, seconds per step and phase, reward, share of the card's peak.

    train.sh --report [LOG]          # on a host: the newest log, with the card's peak filled in
    python3 roles/train/files/train_report.py LOG [--model-config config.json] [--card NAME --peak-tflops 11.76]
                                                 [--gpus 1] [--ppo-epochs 1] [--plot LOG.svg]

It reads what verl's console logger prints, one line per step
(`step:N - key:value - ...`), so it works on a finished log and on one that
is still being written. It prints:

- steps done (of the total verl announced), whether the run ended and how;
- seconds per step, plain steps apart from those with validation or a
  checkpoint, and the mean seconds of each phase (generation, log-probs,
  values, updates, validation, checkpoint) with its share of a plain step;
- the training reward (critic/score/mean) and the mean response length per
  step, and the validation scores where there are some;
- where the run ran out of GPU memory: the step, the role whose call ran out
  (verl's worker method in the Ray error), torch's message, and the sizes to
  lower, with the values the run had (from the config verl printed) and the
  launcher's variable for each;
- with the model's config.json: model FLOP/s per phase and per step, and,
  with the card's peak (--peak-tflops), how close that is to the card's
  limit. verl 0.4.1 reports perf/mfu/* as 0 for any card its table lacks,
  a P40 among them; the peaks per card are in stack_gpu_cards
  (roles/stack/defaults/main/gpu_profiles.yml), and train.sh passes the host's.

Model FLOPs are counted as verl's flops_counter counts them for Qwen2/Llama:
2 x (dense parameters, embedding and LM head included) per token plus
4 x seq^2 x head_dim x heads per layer for attention, forward only; an
update is three forwards' worth (forward and backward), times ppo_epochs.
Tokens are the step's valid tokens (perf/total_num_tokens); per-sequence
lengths are taken as the mean prompt plus mean response length. The padding
that runs without remove-padding also compute is not counted, so this is
the useful share of the card.

With --plot it also writes an SVG of the reward and the step time over
steps, drawn by this file itself: it needs nothing but Python's standard
library (no matplotlib, which the env's lock does not hold), so it runs with
the env's Python or any other. Exit status 0, or 1 when the log holds no step.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

STEP_LINE = re.compile(r"step:(\d+) - (.*)$")
TOTAL_STEPS = re.compile(r"Total training steps: (\d+)")
EXIT_LINE = re.compile(r"train\.sh:? exit status (\d+)")

# verl 0.4.1's timing_s keys, in the order a step runs them; (key, label, model
# forwards' worth of FLOPs it computes per token: 1 forward, 3 with backward).
PHASES = (
    ("timing_s/gen", "generate (rollout)", 1),
    ("timing_s/reward", "reward", 0),
    ("timing_s/old_log_prob", "actor old log-prob", 1),
    ("timing_s/ref", "ref log-prob", 1),
    ("timing_s/values", "critic values", 1),
    ("timing_s/adv", "advantages", 0),
    ("timing_s/update_critic", "critic update", 3),
    ("timing_s/update_actor", "actor update", 3),
    ("timing_s/testing", "validation", 0),
    ("timing_s/save_checkpoint", "checkpoint", 0),
)
UPDATES = ("timing_s/update_critic", "timing_s/update_actor")
OCCASIONAL = ("timing_s/testing", "timing_s/save_checkpoint")


# An out-of-memory error, and the worker call it came from as Ray names it (ray::WorkerDict.<role>_<method>()).
OOM_LINE = re.compile(r"torch\.OutOfMemoryError: (CUDA out of memory\..*)$|CUDA out of memory\.")
WORKER_CALL = re.compile(r"RayTaskError\(OutOfMemoryError\): ray::WorkerDict\.(\w+)\(\)")
# verl 0.4.1's worker methods (longest first: compute_ref_log_prob before compute_log_prob), what each
# computes, and the memory knob of train_memory_fixed (filter_plugins/memory.py) that sizes it.
OOM_ROLES = (
    ("generate_sequences", "the rollout (HF generate)", "rollout"),
    ("compute_ref_log_prob", "the reference model's log-probs", "log_prob"),
    ("compute_log_prob", "the actor's old log-probs", "log_prob"),
    ("update_actor", "the actor update", "actor"),
    ("compute_values", "the critic's values", "critic"),
    ("update_critic", "the critic update", "critic"),
    ("init_model", "loading the models", ""),
    ("save_checkpoint", "the checkpoint's save", ""),
)
# Ray's colours, and the prefix of a worker's or the driver's console line.
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RAY_PREFIX = re.compile(r"^(?:\x1b\[[0-9;]*m)?\([\w]+ pid=\d+(?:, ip=[^)]*)?\)(?:\x1b\[[0-9;]*m)? ?")


def run_config(text: str) -> dict[str, Any] | None:
    """The config verl prints at the start (a Python dict over many prefixed lines), or None."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        body = RAY_PREFIX.sub("", line)
        if not body.startswith("{'actor_rollout_ref'"):
            continue
        parts, depth = [], 0
        for line in lines[start:]:
            body = RAY_PREFIX.sub("", line)
            parts.append(body)
            depth += body.count("{") - body.count("}")
            if depth <= 0:
                break
        try:
            found = ast.literal_eval("\n".join(parts))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        return found if isinstance(found, dict) else None
    return None


def _get(config: dict[str, Any] | None, *keys: str) -> Any:
    for key in keys:
        if not isinstance(config, dict):
            return None
        config = config.get(key)
    return config


def _smaller(value: Any) -> int | None:
    return max(1, int(value) // 2) if isinstance(value, int) and not isinstance(value, bool) and value > 1 else None


def oom_lines(text: str, steps: dict[int, dict[str, float]]) -> list[str]:
    """Where the run ran out of GPU memory and what to lower; [] where it did not."""
    text = ANSI.sub("", text)
    message = next((m for m in map(OOM_LINE.search, text.splitlines()) if m), None)
    if message is None:
        return []
    call = next((m.group(1) for m in map(WORKER_CALL.search, text.splitlines()) if m), "")
    method, what, knob = next(((m, w, k) for m, w, k in OOM_ROLES if call.endswith(m)), ("", "", ""))
    step = (max(steps) if steps else 0) + 1
    where = f"{what}, verl's {call}()" if what else (f"verl's {call}()" if call else "a call the log does not name")
    lines = ["", f"out of GPU memory in step {step}: {where}"]
    if message.group(1):
        lines.append("  torch: " + message.group(1)[:240])
    config = run_config(text)
    actor = _get(config, "actor_rollout_ref", "actor") or {}
    rollout = _get(config, "actor_rollout_ref", "rollout") or {}
    critic = _get(config, "critic") or {}
    ref = _get(config, "actor_rollout_ref", "ref") or {}
    lower: list[str] = []
    if knob == "rollout":
        now = rollout.get("micro_batch_size")
        if _smaller(now):
            lower.append(f"train_rollout_micro_batch_size: {_smaller(now)} (prompts per generate() call, now {now})")
        response = _get(config, "data", "max_response_length")
        if response:
            lower.append(f"a shorter train_max_response_length (now {response})")
    elif knob == "log_prob":
        now = (ref if method == "compute_ref_log_prob" else rollout).get("log_prob_micro_batch_size_per_gpu")
        if _smaller(now):
            lower.append(f"train_memory_fixed: {{log_prob: {_smaller(now)}}} (now {now} a GPU)")
    elif knob in ("actor", "critic"):
        section = actor if knob == "actor" else critic
        model = _get(config, "actor_rollout_ref", "model") if knob == "actor" else critic.get("model")
        now = section.get("ppo_micro_batch_size_per_gpu")
        if _smaller(now):
            lower.append(f"train_memory_fixed: {{{knob}: {_smaller(now)}}} (now {now} a GPU)")
        if _get(model, "enable_gradient_checkpointing") is False:
            lower.append(f"train_memory_fixed: {{{knob}_checkpointing: true}}")
        offload = (
            _get(section, "fsdp_config", "optimizer_offload")
            if knob == "actor"
            else _get(model, "fsdp_config", "optimizer_offload")
        )
        if offload is False:
            lower.append(f"train_memory_fixed: {{{knob}_optimizer_offload: true}}")
    elif method == "init_model":
        lower.append(
            "the weights alone do not fit: LoRA (train_lora_rank), more GPUs, or a smaller model (docs/memory.md)"
        )
    if lower:
        lines.append("  lower: " + "; or ".join(lower))
    elif knob:
        lines.append("  nothing left to lower here: a smaller model, LoRA or more GPUs (docs/memory.md)")
    lines.append(
        "  (the memory plan sized these for the card with its margin; a size pinned lower is still checked at render time)"
    )
    return lines


def step_metrics(text: str) -> dict[int, dict[str, float]]:
    """step number -> {metric: value} for every `step:N - ...` line (the last one wins)."""
    steps: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        match = STEP_LINE.search(line)
        if not match:
            continue
        metrics = {}
        for item in match.group(2).split(" - "):
            key, sep, value = item.rpartition(":")
            if sep:
                try:
                    metrics[key.strip()] = float(value)
                except ValueError:
                    pass
        steps[int(match.group(1))] = metrics
    return steps


def run_state(text: str) -> tuple[int | None, int | None]:
    """(total steps verl announced, train.sh's exit status), each None when not (yet) in the log."""
    total = TOTAL_STEPS.findall(text)
    ended = EXIT_LINE.findall(text)
    return (int(total[-1]) if total else None, int(ended[-1]) if ended else None)


def dense_parameters(config: dict[str, Any]) -> int:
    """Parameters that matmuls touch per token, as verl's Qwen2/Llama counter has them."""
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv_heads = config.get("num_key_value_heads") or heads
    mlp = hidden * config["intermediate_size"] * 3
    attention = hidden * (heads * head_dim + 2 * kv_heads * head_dim + heads * head_dim)
    return (mlp + attention) * config["num_hidden_layers"] + config["vocab_size"] * hidden * 2


def forward_flops(config: dict[str, Any], tokens: float, seqlen: float) -> float:
    """FLOPs of one forward over ``tokens`` valid tokens in sequences of ``seqlen``."""
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    sequences = tokens / seqlen if seqlen else 0.0
    attention = 4 * sequences * seqlen * seqlen * head_dim * heads * config["num_hidden_layers"]
    return 2 * dense_parameters(config) * tokens + attention


def phase_tflops(metrics: dict[str, float], config: dict[str, Any], ppo_epochs: int = 1) -> dict[str, float]:
    """Model TFLOP/s of each timed phase of one step, and of the whole step ('timing_s/step')."""
    tokens = metrics.get("perf/total_num_tokens")
    if not tokens:
        return {}
    seqlen = metrics.get("prompt_length/mean", 0.0) + metrics.get("response_length/mean", 0.0)
    forward = forward_flops(config, tokens, seqlen)
    rates, total = {}, 0.0
    for key, _, forwards in PHASES:
        seconds = metrics.get(key)
        if not forwards or not seconds:
            continue
        flops = forward * forwards * (ppo_epochs if key in UPDATES else 1)
        total += flops
        rates[key] = flops / seconds / 1e12
    if metrics.get("timing_s/step"):
        rates["timing_s/step"] = total / metrics["timing_s/step"] / 1e12
    return rates


def is_plain(metrics: dict[str, float]) -> bool:
    return not any(key in metrics for key in OCCASIONAL)


def report(
    text: str,
    config: dict[str, Any] | None = None,
    card: str = "",
    peak_tflops: float = 0.0,
    gpus: int = 1,
    ppo_epochs: int = 1,
    precision: str = "float32",
) -> tuple[list[str], dict[int, dict[str, float]]]:
    """The report's lines, and the steps they came from."""
    steps = step_metrics(text)
    total, status = run_state(text)
    lines = []
    done = sorted(steps)
    progress = f"{len(done)} step{'s' if len(done) != 1 else ''} logged"
    if done:
        progress += f" (last: step {done[-1]}" + (f" of {total})" if total else ")")
    if status is None:
        progress += "; still running, or stopped without train.sh's exit line"
    else:
        progress += f"; ended with exit status {status}"
    lines.append(progress)
    lines.extend(oom_lines(text, steps))
    if not steps:
        return lines, steps

    plain = {n: m for n, m in steps.items() if is_plain(m) and "timing_s/step" in m}
    occasional = {n: m for n, m in steps.items() if not is_plain(m) and "timing_s/step" in m}
    lines.append("")
    lines.append("seconds per step")
    if plain:
        values = [m["timing_s/step"] for m in plain.values()]
        lines.append(
            f"  plain steps ({len(values)}): mean {statistics.mean(values):.1f}, "
            f"median {statistics.median(values):.1f}, min {min(values):.1f}, max {max(values):.1f}"
        )
    if occasional:
        shown = ", ".join(f"step {n} {m['timing_s/step']:.1f}" for n, m in sorted(occasional.items()))
        lines.append(f"  with validation or checkpoint: {shown}")
    if plain and total and status is None and done[-1] < total:
        left = (total - done[-1]) * statistics.mean(m["timing_s/step"] for m in plain.values())
        when = f"{left / 3600:.1f} h" if left >= 3600 else f"{left / 60:.0f} min"
        lines.append(f"  about {when} left at the plain-step pace (validation and checkpoints extra)")

    lines.append("")
    basis = plain or steps
    step_mean = statistics.mean(m.get("timing_s/step", 0.0) for m in basis.values())
    lines.append(f"seconds per phase (mean over {'plain ' if plain else ''}steps; share of a step)")
    for key, label, _ in PHASES:
        source = steps if key in OCCASIONAL else basis
        values = [m[key] for m in source.values() if key in m]
        if not values:
            continue
        mean = statistics.mean(values)
        share = f"{mean / step_mean:5.1%}" if step_mean and key not in OCCASIONAL else "     "
        lines.append(f"  {label:22} {mean:8.2f}  {share}")

    lines.append("")
    lines.append("per step: reward (critic/score/mean), response length (mean), seconds")
    for number, metrics in sorted(steps.items()):
        score = metrics.get("critic/score/mean")
        length = metrics.get("response_length/mean")
        seconds = metrics.get("timing_s/step")
        parts = [
            f"reward {score:7.3f}" if score is not None else "reward       -",
            f"length {length:6.1f}" if length is not None else "length      -",
            f"{seconds:7.1f} s" if seconds is not None else "      - s",
        ]
        vals = [f"{k[len('val-core/') :]} {v:.3f}" for k, v in sorted(metrics.items()) if k.startswith("val-core/")]
        if vals:
            parts.append("validation: " + ", ".join(vals))
        lines.append(f"  step {number:>4}: " + "  ".join(parts))

    if config:
        lines.append("")
        lines.extend(_flops_lines(steps, basis, config, card, peak_tflops, gpus, ppo_epochs, precision))
    return lines, steps


def _flops_lines(
    steps: dict[int, dict[str, float]],
    basis: dict[int, dict[str, float]],
    config: dict[str, Any],
    card: str,
    peak_tflops: float,
    gpus: int,
    ppo_epochs: int,
    precision: str,
) -> list[str]:
    rates: dict[str, list[float]] = {}
    for metrics in basis.values():
        for key, value in phase_tflops(metrics, config, ppo_epochs).items():
            rates.setdefault(key, []).append(value)
    if not rates:
        return ["model FLOP/s: the log has no perf/total_num_tokens"]
    peak = peak_tflops * gpus
    where = f"{gpus} x {card}" if card else f"{gpus} GPU(s)"
    if peak:
        head = f"model FLOP/s and share of the peak ({where}, {precision}: {peak:g} TFLOP/s)"
    else:
        head = f"model FLOP/s ({where}: peak unknown, so no share; train.sh passes it for cards in stack_gpu_cards)"
    lines = [head]
    labels = {key: label for key, label, _ in PHASES} | {"timing_s/step": "whole step"}
    for key in [*(k for k, _, _ in PHASES), "timing_s/step"]:
        if key not in rates:
            continue
        value = statistics.mean(rates[key])
        share = f"  {value / peak:6.1%} of peak" if peak else ""
        lines.append(f"  {labels[key]:22} {value:8.2f} TFLOP/s{share}")
    verl_mfu = [m["perf/mfu/actor"] for m in steps.values() if m.get("perf/mfu/actor")]
    if not verl_mfu:
        lines.append("  (verl's own perf/mfu/actor is 0 here: its table does not know this card)")
    return lines


# The picture: an SVG the report writes itself (standard library only), so
# --plot works with nothing but the env's Python; any browser shows it.
SVG_WIDTH, PANEL_HEIGHT = 800, 260
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, GAP = 70, 150, 40, 50
COLOURS = ("#1f77b4", "#ff7f0e")
# (title, y label, [(metric, legend label)]) of each panel, top to bottom.
PANELS = (
    (
        "reward",
        "reward (mean)",
        [("critic/score/mean", "training reward"), ("val-core/openai/gsm8k/reward/mean@1", "validation")],
    ),
    ("time", "seconds", [("timing_s/step", "step"), ("timing_s/gen", "generate")]),
)


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values that span ``low`` to ``high`` (1, 2 or 5 times a power of ten apart)."""
    if high <= low:
        return [low]
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first, last = math.floor(low / step), math.ceil(high / step - 1e-9)
    return [round(index * step, 10) for index in range(first, last + 1)]


def _number(value: float) -> str:
    return f"{value:g}"


def svg_plot(steps: dict[int, dict[str, float]], title: str) -> str | None:
    """An SVG of reward and step time over steps, or None when no step has any of them."""
    numbers = sorted(steps)
    series = [
        [(label, [(n, steps[n][key]) for n in numbers if key in steps[n]]) for key, label in lines]
        for _, _, lines in PANELS
    ]
    if not any(points for panel in series for _, points in panel):
        return None
    plot_width = SVG_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    height = MARGIN_TOP + len(PANELS) * (PANEL_HEIGHT + GAP)
    x_ticks = _ticks(numbers[0], numbers[-1]) if len(numbers) > 1 else [numbers[0]]
    x_ticks = [t for t in x_ticks if t == int(t)] or [numbers[0]]
    x_low, x_high = min(x_ticks[0], numbers[0]), max(x_ticks[-1], numbers[-1])
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{height}" '
        f'viewBox="0 0 {SVG_WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{SVG_WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{SVG_WIDTH / 2:.0f}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
    ]

    def x_at(step: float) -> float:
        return MARGIN_LEFT + (step - x_low) / ((x_high - x_low) or 1) * plot_width

    for index, ((_, y_label, _), panel) in enumerate(zip(PANELS, series)):
        top = MARGIN_TOP + index * (PANEL_HEIGHT + GAP)
        bottom = top + PANEL_HEIGHT
        values = [v for _, points in panel for _, v in points] or [0.0]
        y_ticks = _ticks(min(values), max(values)) if max(values) > min(values) else [min(values)]
        y_low, y_high = min(y_ticks[0], min(values)), max(y_ticks[-1], max(values))
        if y_high == y_low:
            y_low, y_high = y_low - 1, y_high + 1

        def y_at(value: float, top: float = top, y_low: float = y_low, y_high: float = y_high) -> float:
            return top + PANEL_HEIGHT - (value - y_low) / (y_high - y_low) * PANEL_HEIGHT

        out.append(
            f'<rect x="{MARGIN_LEFT}" y="{top}" width="{plot_width}" height="{PANEL_HEIGHT}" '
            'fill="none" stroke="#444"/>'
        )
        for tick in y_ticks:
            if y_low <= tick <= y_high:
                y = y_at(tick)
                out.append(
                    f'<line x1="{MARGIN_LEFT}" y1="{y:.1f}" x2="{MARGIN_LEFT + plot_width}" y2="{y:.1f}" stroke="#ddd"/>'
                )
                out.append(f'<text x="{MARGIN_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_number(tick)}</text>')
        for tick in x_ticks:
            x = x_at(tick)
            out.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 5}" stroke="#444"/>')
            out.append(f'<text x="{x:.1f}" y="{bottom + 18}" text-anchor="middle">{_number(tick)}</text>')
        middle = top + PANEL_HEIGHT / 2
        out.append(
            f'<text x="18" y="{middle:.0f}" text-anchor="middle" transform="rotate(-90 18 {middle:.0f})">'
            f"{escape(y_label)}</text>"
        )
        if index == len(PANELS) - 1:
            out.append(
                f'<text x="{MARGIN_LEFT + plot_width / 2:.0f}" y="{bottom + 36}" text-anchor="middle">step</text>'
            )
        for number, ((label, points), colour) in enumerate(zip(panel, COLOURS)):
            legend_y = top + 16 + number * 18
            legend_x = MARGIN_LEFT + plot_width + 12
            out.append(
                f'<line x1="{legend_x}" y1="{legend_y - 4}" x2="{legend_x + 20}" y2="{legend_y - 4}" '
                f'stroke="{colour}" stroke-width="2"/>'
            )
            out.append(f'<text x="{legend_x + 26}" y="{legend_y}">{escape(label)}</text>')
            if not points:
                continue
            coords = " ".join(f"{x_at(n):.1f},{y_at(v):.1f}" for n, v in points)
            out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
            for n, v in points:
                out.append(
                    f'<circle cx="{x_at(n):.1f}" cy="{y_at(v):.1f}" r="3" fill="{colour}">'
                    f"<title>{escape(label)}, step {n}: {_number(v)}</title></circle>"
                )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def plot(steps: dict[int, dict[str, float]], path: Path, title: str) -> str:
    """Write reward and step time over steps to ``path`` as SVG; return what happened, in words."""
    svg = svg_plot(steps, title)
    if svg is None:
        return "no plot: no step has a reward or a step time"
    try:
        path.write_text(svg)
    except OSError as error:
        return f"no plot: cannot write {path}: {error}"
    return f"plot: {path}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="a train-*.log that train.sh wrote (or any verl console log)")
    parser.add_argument("--model-config", type=Path, help="the model's config.json (for FLOP/s)")
    parser.add_argument("--card", default="", help="the GPU's name, for the report")
    parser.add_argument("--peak-tflops", type=float, default=0.0, help="the card's peak TFLOP/s at the run's precision")
    parser.add_argument("--precision", default="float32", help="the run's compute precision, for the report")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs the run trained on (all nodes)")
    parser.add_argument("--ppo-epochs", type=int, default=1, help="actor/critic ppo_epochs (verl's default 1)")
    parser.add_argument("--plot", type=Path, help="write an SVG of reward and step time here")
    args = parser.parse_args(argv)

    try:
        text = args.log.read_text(errors="replace")
    except OSError as error:
        print(f"train_report.py: cannot read the log: {error}", file=sys.stderr)
        return 1
    config = None
    if args.model_config:
        try:
            config = json.loads(args.model_config.read_text())
        except (OSError, ValueError) as error:
            print(f"train_report.py: no FLOP/s: cannot read {args.model_config}: {error}", file=sys.stderr)
    lines, steps = report(text, config, args.card, args.peak_tflops, args.gpus, args.ppo_epochs, args.precision)
    print(f"{args.log}")
    print("\n".join(lines))
    if not steps:
        return 1
    if args.plot:
        print(plot(steps, args.plot, args.log.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
