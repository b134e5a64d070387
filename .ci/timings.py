#!/usr/bin/env python3
"""Summarise .ci/run's step timings; with --out, write them as JSON (docs/testing.md's CI figures).

    python3 .ci/timings.py STEPS_FILE [--out docs/ci/<date>.json]

STEPS_FILE has one "name seconds [load]" line per step (load: the 1-minute load average when
the step ended, so a figure measured on a busy machine says so). The JSON says where and when it ran: the
machine's core count and memory, the date, the commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path


def read_steps(text: str) -> list[dict[str, object]]:
    steps = []
    for line in text.splitlines():
        if line.strip():
            fields = line.split()
            step: dict[str, object] = {"step": fields[0], "seconds": int(fields[1])}
            if len(fields) > 2:
                step["load_average"] = float(fields[2])
            steps.append(step)
    return steps


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("steps")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    steps = read_steps(Path(args.steps).read_text())
    total = sum(int(step["seconds"]) for step in steps)
    for step in steps:
        load = " (load %.1f)" % step["load_average"] if "load_average" in step else ""
        print("ci: %-12s %6.1f min%s" % (step["step"], int(step["seconds"]) / 60, load))
    print("ci: %-12s %6.1f min" % ("total", total / 60))
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout
        record = {
            "what": "bash .ci/run, step by step",
            "date": datetime.date.today().isoformat(),
            "commit": commit.strip(),
            "machine": {"cores": os.cpu_count(), "memory_gib": memory_gib()},
            "steps": steps,
            "total_seconds": total,
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
        print("ci: timings written to %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
