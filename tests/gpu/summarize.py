#!/usr/bin/env python3
"""Read a verl run's log (and the memory hook's records) and say what the run proved.

    python3 tests/gpu/summarize.py smoke  --log train.log --checkpoints DIR [--steps 12 --test-step 10 --save-step 10]
    python3 tests/gpu/summarize.py memory --log train.log --mem-log mem.jsonl [--smi smi.csv] [--cap-gib 24]

verl's console logger prints one line per step, `step:N - key:value - ...`
(Ray prefixes it with the worker's name). smoke checks that the last step
was logged, that the validation step carries val-* scores and that the
checkpoint step left a global_step_N directory with actor and critic
shards; memory turns the hooks/sitecustomize.py records into the peak GPU
memory per role and seconds per step, against the cap. Prints a report;
exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "roles" / "train" / "files"))
import train_report  # noqa: E402  (the users' run report; one parser of verl's step lines)

# How torch's FSDP warns that it kept a state_dict entry whose clone() failed (here: out of memory).
CLONE_WARNING = "Failed to clone() tensor with name"
TIMING_KEYS = (
    "timing_s/step",
    "timing_s/gen",
    "timing_s/old_log_prob",
    "timing_s/ref",
    "timing_s/values",
    "timing_s/update_critic",
    "timing_s/update_actor",
    "timing_s/testing",
    "timing_s/save_checkpoint",
)


def step_metrics(log: Path) -> dict[int, dict[str, float]]:
    return train_report.step_metrics(log.read_text(errors="replace"))


def timing_lines(steps: dict[int, dict[str, float]]) -> list[str]:
    lines = []
    for step, metrics in sorted(steps.items()):
        parts = [f"{key.split('/')[-1]} {metrics[key]:.2f}" for key in TIMING_KEYS if key in metrics]
        lines.append(f"  step {step:>2}: " + ", ".join(parts))
    return lines


def smoke(args: argparse.Namespace) -> int:
    steps = step_metrics(args.log)
    problems = []
    print(f"steps logged: {sorted(steps) or 'none'}")
    if args.steps not in steps:
        problems.append(f"step {args.steps} was not logged")
    val = {k: v for k, v in steps.get(args.test_step, {}).items() if k.startswith("val-")}
    if val:
        print(f"validation at step {args.test_step}:")
        for key, value in sorted(val.items()):
            print(f"  {key} = {value:.4f}")
    else:
        problems.append(f"no val-* metrics at step {args.test_step}")
    for step in sorted(steps):
        keys = ("critic/score/mean", "response_length/mean", "actor/pg_loss", "critic/vf_loss", "actor/entropy")
        shown = ", ".join(f"{k} {steps[step][k]:.3f}" for k in keys if k in steps[step])
        print(f"  step {step:>2}: {shown}")
    print("seconds (timing_s):")
    print("\n".join(timing_lines(steps)))
    folder = args.checkpoints / f"global_step_{args.save_step}"
    if folder.is_dir():
        print(f"checkpoint {folder}:")
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            print(f"  {path.relative_to(folder)}  {path.stat().st_size} B")
        for role in ("actor", "critic"):
            if not list((folder / role).glob("model_world_size_*_rank_0.pt")):
                problems.append(f"{folder}/{role} holds no model shard")
    else:
        problems.append(f"no checkpoint directory {folder}")
    tracker = args.checkpoints / "latest_checkpointed_iteration.txt"
    if tracker.is_file():
        print(f"{tracker.name}: {tracker.read_text().strip()}")
    for problem in problems:
        print(f"FAILED: {problem}")
    print("smoke: " + ("PASSED" if not problems else "FAILED"))
    return 1 if problems else 0


def memory(args: argparse.Namespace) -> int:
    text = args.mem_log.read_text() if args.mem_log.is_file() else ""
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    caps = [e for e in events if e["event"] == "cap"]
    failed_caps = [e for e in events if e["event"] == "cap_failed"]
    calls = [e for e in events if e["event"] == "call" and e.get("peak_allocated_gib") is not None]
    print("allocator caps applied (per CUDA process):")
    for cap in caps:
        print(
            f"  pid {cap['pid']}: {cap['cap_gib']} GiB of {cap['total_gib']} GiB (fraction {cap['fraction']}) "
            f"- {cap['argv'][:80]}"
        )
    problems = [f"cap failed in pid {e['pid']}: {e['error']}" for e in failed_caps]
    if not caps:
        problems.append("no process applied the cap")
    roles: dict[str, dict[str, float]] = {}
    for call in calls:
        role = roles.setdefault(
            call["role"],
            {
                "calls": 0,
                "peak_allocated_gib": 0.0,
                "peak_reserved_gib": 0.0,
                "resident_before_gib": 0.0,
                "seconds_max": 0.0,
            },
        )
        role["calls"] += 1
        role["peak_allocated_gib"] = max(role["peak_allocated_gib"], call["peak_allocated_gib"])
        role["peak_reserved_gib"] = max(role["peak_reserved_gib"], call["peak_reserved_gib"])
        role["resident_before_gib"] = max(role["resident_before_gib"], call.get("before_gib") or 0.0)
        role["seconds_max"] = max(role["seconds_max"], call["seconds"])
    print("peak GPU memory per role (GiB; on one GPU verl runs every role in one process):")
    print(f"  {'role':28} {'calls':>5} {'resident':>9} {'peak alloc':>10} {'peak resv':>9} {'max s':>7}")
    for name, role in sorted(roles.items(), key=lambda item: -item[1]["peak_reserved_gib"]):
        print(
            f"  {name:28} {role['calls']:>5} {role['resident_before_gib']:>9.2f} {role['peak_allocated_gib']:>10.2f} "
            f"{role['peak_reserved_gib']:>9.2f} {role['seconds_max']:>7.1f}"
        )
    if not any(name.startswith("ref") for name in roles):
        print("  (no ref calls: verl builds a reference model only for a KL loss or KL penalty)")
    peak_alloc = max((r["peak_allocated_gib"] for r in roles.values()), default=0.0)
    peak_resv = max((r["peak_reserved_gib"] for r in roles.values()), default=0.0)
    print(f"process peak: allocated {peak_alloc:.2f} GiB, reserved {peak_resv:.2f} GiB, cap {args.cap_gib} GiB")
    if args.smi and args.smi.is_file():
        used = []
        for line in args.smi.read_text().splitlines():
            try:
                used.append(float(line.split(",")[-1]))
            except ValueError:
                pass
        if used:
            print(
                f"nvidia-smi memory.used peak (whole GPU, CUDA context included): {max(used):.0f} MiB "
                f"= {max(used) / 1024:.2f} GiB over {len(used)} samples"
            )
    steps = step_metrics(args.log)
    print(f"steps logged: {sorted(steps) or 'none'}")
    print("seconds (timing_s):")
    print("\n".join(timing_lines(steps)))
    plain = [
        m["timing_s/step"]
        for s, m in sorted(steps.items())
        if "timing_s/step" in m and "timing_s/testing" not in m and "timing_s/save_checkpoint" not in m
    ]
    if plain:
        print(f"seconds per plain step (no validation/checkpoint): {', '.join(f'{s:.1f}' for s in plain)}")
    if args.steps not in steps:
        problems.append(f"step {args.steps} was not logged (out of memory under the cap, or another failure)")
    # FSDP's state_dict() warns when a tensor's clone() runs out of memory and keeps the tensor itself:
    # what a save under the hooks' P40_SAVE_HEADROOM_GIB cap is meant to show, not a failure.
    short = [line for line in args.log.read_text(errors="replace").splitlines() if "out of memory" in line.lower()]
    clones = [line for line in short if CLONE_WARNING in line]
    if clones:
        print(f"clone() out of memory in a checkpoint's state_dict, kept by FSDP (a warning): {len(clones)} line(s)")
        # With one process the kept tensor is the whole parameter; with more, a shard FSDP frees after
        # the call: the fallback is not known to be safe there (docs/memory.md).
        if len({cap["pid"] for cap in caps}) > 1:
            problems.append("clone() fell back to the parameter itself with more than one GPU process")
    if len(short) > len(clones):
        problems.append("the log reports CUDA out of memory")
    for problem in problems:
        print(f"FAILED: {problem}")
    fits = not problems and peak_resv <= args.cap_gib
    print(f"memory: {'FITS' if fits else 'DOES NOT FIT'} under {args.cap_gib} GiB per process")
    return 0 if fits else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("smoke")
    s.add_argument("--log", type=Path, required=True)
    s.add_argument("--checkpoints", type=Path, required=True, help="trainer.default_local_dir")
    s.add_argument("--steps", type=int, default=12)
    s.add_argument("--test-step", type=int, default=10)
    s.add_argument("--save-step", type=int, default=10)
    m = sub.add_parser("memory")
    m.add_argument("--log", type=Path, required=True)
    m.add_argument("--mem-log", type=Path, required=True)
    m.add_argument("--smi", type=Path)
    m.add_argument("--cap-gib", type=float, default=24.0)
    m.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    return smoke(args) if args.mode == "smoke" else memory(args)


if __name__ == "__main__":
    sys.exit(main())
