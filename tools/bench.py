#!/usr/bin/env python3
"""Benchmark the converge of site.yml into a fresh container, through ansible-runner.

Prints, per scenario (cold converge, no-op rerun, one-layer rebuilds), the wall time and,
from ansible-runner's event stream, each layer's task count, changed count and seconds.
Needs the local images and stand-ins (`make bench` builds them and serves the mirror).

Ansible reaches the container two ways: Podman's connection (what Molecule uses; every
module call costs several `podman` commands, and it cannot pipeline) and SSH with
pipelining and a persistent control connection to an sshd in the container (how a real P40
host is reached). The no-op rerun is timed over both.

    python tools/bench.py [--image localhost/verl-p40-debian:12] [--keep] [--results docs/bench]
    python tools/bench.py --table docs/bench/<date>.json    # docs/benchmarks.md's tables from a results file

Each run writes its results (per scenario: wall seconds, changed count, per-layer rows; the
machine's core count and the date) to `<results>/<date>.json`; docs/benchmarks.md's tables are printed from
that file by `--table`, so every figure there can be traced to the run that measured it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import ansible_runner
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import sshd  # noqa: E402
from prepare_host import prepare  # noqa: E402

# Roles that run on behalf of a layer (included from its tasks): their tasks count for that layer.
# The stack role's are the layer protocol's (roles/stack/tasks/), which every layer imports.
HELPER_ROLES = {"stack", "stack_artifact"}
TASK_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")
VARS_FILES = [
    ROOT / ".cache/standins/standins.yml",
    ROOT / ".cache/standins-python/standins_python.yml",
    ROOT / "tests/fixtures/ci-vars.yml",
]


def layer_table(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Tasks, changed tasks and seconds per layer, from ansible-runner's event stream.

    A task belongs to its role (tasks outside any role to "play"); a helper role's tasks count
    for the layer that ran last before it, the one that called it. A looped task counts once
    (its per-item events are not counted), its seconds are the task's own.
    """
    table: dict[str, dict[str, Any]] = {}
    layer = "play"
    for event in events:
        if event.get("event") not in TASK_EVENTS:
            continue
        data = event.get("event_data", {})
        role = data.get("role") or "play"
        if role not in HELPER_ROLES:
            layer = role
        row = table.setdefault(layer, {"tasks": 0, "changed": 0, "seconds": 0.0})
        row["tasks"] += 1
        row["changed"] += 1 if data.get("res", {}).get("changed") else 0
        row["seconds"] = round(row["seconds"] + float(data.get("duration") or 0.0), 3)
    return table


def markdown_table(results: dict[str, Any]) -> str:
    """docs/benchmarks.md's benchmark tables, from a results file that main() wrote."""
    lines = ["| run | wall | changed |", "|---|---|---|"]
    for res in results["scenarios"]:
        lines.append("| %s | %.1f s | %d |" % (res["name"], res["wall"], res["changed"]))
    layers = list(results["scenarios"][0]["layers"]) if results["scenarios"] else []
    lines += [
        "",
        "| layer | " + " | ".join(res["name"] for res in results["scenarios"]) + " |",
        "|---" * (len(results["scenarios"]) + 1) + "|",
    ]
    for layer in layers:
        cells = []
        for res in results["scenarios"]:
            row = res["layers"].get(layer)
            cells.append("%.1f s, %d changed" % (row["seconds"], row["changed"]) if row else "-")
        lines.append("| %s | %s |" % (layer, " | ".join(cells)))
    return "\n".join(lines) + "\n"


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        # Other work on the machine slows every figure: the 1-minute load average as the run ended.
        "load_average": round(os.getloadavg()[0], 2),
    }


def compact(event: dict[str, Any]) -> dict[str, Any]:
    """What layer_table reads of an event, for --events files and the unit test's fixture."""
    data = event.get("event_data", {})
    kept = {key: data[key] for key in ("role", "task", "task_action", "duration") if key in data}
    if "res" in data:
        kept["res"] = {"changed": bool(data["res"].get("changed"))}
    return {"event": event.get("event"), "event_data": kept}


def run(
    name: str,
    workdir: Path,
    inventory: Path,
    extravars: dict[str, Any],
    cmdline: str = "",
    events_dir: Path | None = None,
) -> dict[str, Any]:
    private = workdir / slug(name)
    private.mkdir()
    start = time.monotonic()
    result = ansible_runner.run(
        private_data_dir=str(private),
        playbook=str(ROOT / "site.yml"),
        inventory=str(inventory),
        extravars=extravars,
        cmdline=cmdline,
        quiet=True,
        envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )
    wall = time.monotonic() - start
    events = list(result.events)
    if result.rc != 0:
        tail = [e.get("stdout", "") for e in events[-15:]]
        raise SystemExit("%s failed (rc %s):\n%s" % (name, result.rc, "\n".join(tail)))
    if events_dir is not None:
        events_dir.mkdir(parents=True, exist_ok=True)
        with open(events_dir / ("%s.jsonl" % slug(name)), "w") as handle:
            for event in events:
                if event.get("event") in TASK_EVENTS:
                    handle.write(json.dumps(compact(event), sort_keys=True) + "\n")
    table = layer_table(events)
    return {"name": name, "wall": wall, "changed": sum(int(r["changed"]) for r in table.values()), "layers": table}


def report(results: list[dict[str, Any]]) -> None:
    for res in results:
        print("\n%s: %.1f s wall, %d changed" % (res["name"], res["wall"], res["changed"]))
        print("  %-12s %6s %8s %9s" % ("layer", "tasks", "changed", "seconds"))
        for layer, row in res["layers"].items():
            print("  %-12s %6d %8d %9.1f" % (layer, row["tasks"], row["changed"], row["seconds"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="localhost/verl-p40-debian:12")
    parser.add_argument("--keep", action="store_true", help="keep the container afterwards")
    parser.add_argument(
        "--results",
        default=str(ROOT / "docs" / "bench"),
        help="directory for the results file <date>.json (default: docs/bench)",
    )
    parser.add_argument("--events", metavar="DIR", help="also write each run's task events (compacted) here")
    parser.add_argument(
        "--table", metavar="FILE", help="print docs/benchmarks.md's tables from a results file and exit"
    )
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table(json.loads(Path(args.table).read_text())), end="")
        return 0

    container = "verl-p40-bench-" + uuid.uuid4().hex[:6]
    subprocess.run(
        ["podman", "run", "-d", "--init", "--network", "host", "--name", container, args.image, "sleep", "infinity"],
        check=True,
        capture_output=True,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="verl-p40-bench-") as tmp:
            workdir = Path(tmp)
            (workdir / "inventory").mkdir()
            inventory = workdir / "inventory" / "hosts.yml"
            inventory.write_text(
                yaml.safe_dump(
                    {
                        "all": {
                            "hosts": {
                                container: {
                                    "ansible_connection": "containers.podman.podman",
                                    "ansible_python_interpreter": "/usr/bin/python3",
                                }
                            }
                        }
                    }
                )
            )
            # The same extra-vars files and prepare step as the Molecule scenario.
            files = " ".join("-e @%s" % path for path in VARS_FILES)
            prepare(container)
            ssh_inventory = workdir / "inventory" / "ssh.yml"
            ssh_inventory.write_text(yaml.safe_dump({"all": {"hosts": {container: sshd.start(container, workdir)}}}))
            events = Path(args.events) if args.events else None
            scenarios = [
                ("cold converge (podman connection)", inventory, {}, files),
                ("no-op rerun (podman connection)", inventory, {}, files),
                ("no-op rerun (ssh, pipelining)", ssh_inventory, {}, files),
                ("--tags cuda -e rebuild=cuda (ssh)", ssh_inventory, {"rebuild": "cuda"}, files + " --tags cuda"),
                (
                    "--tags apex -e rebuild=apex, cached wheel (ssh)",
                    ssh_inventory,
                    {"rebuild": "apex"},
                    files + " --tags apex",
                ),
            ]
            results = []
            for name, inv, extravars, cmdline in scenarios:
                print("bench: %s ..." % name, flush=True)
                results.append(run(name, workdir, inv, extravars, cmdline, events))
                print("bench: %s: %.1f s, %d changed" % (name, results[-1]["wall"], results[-1]["changed"]), flush=True)
    finally:
        if not args.keep:
            subprocess.run(["podman", "rm", "-f", "-t", "0", container], capture_output=True, check=False)
    report(results)
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    info = machine()
    path = out / ("%s.json" % info["date"])
    path.write_text(json.dumps({"machine": info, "image": args.image, "scenarios": results}, indent=2) + "\n")
    print("\nresults: %s (docs/benchmarks.md's tables: python tools/bench.py --table %s)" % (path, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
