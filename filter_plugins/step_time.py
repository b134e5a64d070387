"""How long a training step would take on the host's card: an estimate from a run measured on the
device (tests/gpu), never a measurement on that card.

``step_estimate(runs, preset, settings, card_tflops, precision, n_gpus)``: the run measured for the
preset (stack_train_preset_runs), or, without a preset, for the preset whose model and algorithm the
settings are, scaled to the settings' batch and to the card's peak:

    seconds = run's plain step x (batch / run's batch) x (run card's peak / this card's peak)

that is, the step's model FLOPs (the run report's accounting, roles/train/files/train_report.py)
at the share of the peak the run reached (its MFU). It assumes the share carries over from the
device's card to this one at the same shapes; generation, most of a LoRA step, is bound by
memory bandwidth more than by FLOPs, and a P40 has less of it for its FLOPs than an H100 or H200,
so the real step may well be slower. Only for one GPU, float32, and the run's prompt and response
lengths; otherwise no estimate, and ``why_not`` says which (a fixed text: no input reaches it).
"""

from __future__ import annotations

import posixpath
from typing import Any

from ansible.errors import AnsibleFilterError

# The settings a run's step time depends on besides the batch, which the estimate scales by.
MATCHED = ("adv_estimator", "rollout_n", "use_kl_loss", "lora_rank", "prompt_length", "response_length")
RUN_KEYS = ("model", "card", "peak_tflops", "batch_size", "step_seconds", "step_tflops", "evidence") + MATCHED


def _run(runs: dict[str, Any], name: str) -> dict[str, Any]:
    run = runs[name]
    missing = [key for key in RUN_KEYS if key not in (run or {})]
    if missing:
        raise AnsibleFilterError("stack_train_preset_runs.%s lacks %s" % (name, ", ".join(missing)))
    return run


def _same(run: dict[str, Any], settings: dict[str, Any]) -> bool:
    model = posixpath.basename(str(settings.get("model", "")).rstrip("/"))
    return model == posixpath.basename(str(run["model"])) and all(
        str(run[key]).lower() == str(settings.get(key)).lower() for key in MATCHED
    )


def step_estimate(
    runs: dict[str, Any],
    preset: str,
    settings: dict[str, Any],
    card_tflops: float,
    precision: str = "float32",
    n_gpus: int = 1,
) -> dict[str, Any]:
    """The estimate: {seconds, step_tflop, share, run, why_not}; seconds is None where there is none."""
    none = {"seconds": None, "step_tflop": None, "share": None, "run": None}
    runs = runs or {}
    if preset:
        if preset not in runs:
            return dict(none, why_not="no run measured for this preset")
        name, run = preset, _run(runs, preset)
        if not _same(run, settings):
            return dict(none, why_not="the settings are not those of the preset's measured run")
    else:
        found = [name for name in runs if _same(_run(runs, name), settings)]
        if not found:
            return dict(none, why_not="no measured run has these settings (a preset's have one)")
        name, run = found[0], runs[found[0]]
    if int(n_gpus) != 1:
        return dict(none, why_not="runs were measured on one GPU only")
    if precision != "float32":
        return dict(none, why_not="runs were measured in float32 only")
    if not card_tflops or float(card_tflops) <= 0:
        return dict(none, why_not="the card's peak is not known (stack_gpu_cards)")
    batch = int(settings.get("batch_size") or 0)
    if batch <= 0:
        raise AnsibleFilterError("step_estimate: batch_size %r is not a positive number" % settings.get("batch_size"))
    scale = batch / int(run["batch_size"])
    return {
        "seconds": float(run["step_seconds"]) * scale * float(run["peak_tflops"]) / float(card_tflops),
        "step_tflop": float(run["step_tflops"]) * float(run["step_seconds"]) * scale,
        "share": float(run["step_tflops"]) / float(run["peak_tflops"]),
        "run": name,
        "why_not": "",
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"step_estimate": step_estimate}
