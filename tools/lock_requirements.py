#!/usr/bin/env python3
"""Resolve each requirement set of the project into a lock that pip installs with --require-hashes.

    python tools/lock_requirements.py              # resolve every set, write each lock
    python tools/lock_requirements.py --check      # resolve every set afresh and compare; write nothing
    python tools/lock_requirements.py FILE.in ...  # only these sets (one of your own too)

A set is a small input file, FILE.in: the packages asked for, pinned where a version matters, with
a comment saying why. Its lock is FILE.txt beside it: every package the resolver picked, each
`name==version` with the sha256 of every file of that release on the index (every wheel, for every
Python and platform, and the sdist), so a mirror that serves another file under a locked version
is refused by pip, and a package missing from the lock cannot slip in.

The resolver is uv (`uv pip compile --generate-hashes`), the version requirements.txt pins (another
one is refused: its output may differ). The input's own header gives uv's options, so the input
alone says how it resolves:

    # lock: --python-version 3.10 --exclude-newer 2026-12-01T00:00:00Z
    # lock-leave-out: torch

`lock:` lines are uv's options (a set for Python 3.11 and newer takes --universal --python-version
3.11). --exclude-newer is required: uv then ignores every file uploaded after that moment, so the
same input resolves to the same lock on any later day; move the date to take newer releases,
to a day a week or two back (a mirror of the index can list a release days after its upload).
`lock-leave-out:` names packages another step installs: the lock leaves them out, with every package
only they need (the env's set leaves out torch, which the torch layer installs from the PyTorch
index, and so torch's CUDA wheels), and its header says so.

Every set (SETS, in this order: a set may constrain itself by an earlier set's lock with
`-c ...txt`) is resolved afresh, without the lock as a preference. --check compares each lock with
that fresh resolve and fails naming the file and the first package that differs (`make lint` runs
it; it needs the index).

Exit status: 0 written or up to date, 1 a lock differs, lacks a hash or its set does not resolve,
2 usage error (no uv, another uv than the pinned one, an input without --exclude-newer).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Every set of the project, in resolve order (the apex set is constrained by the verl set's lock).
SETS = (
    "requirements.in",  # the control node's venv (make setup), with requirements-test.in
    "requirements-collections.in",  # the `ansible` bundle wheel the control venv's collections come from
    "roles/verl/files/requirements-verl-0.4.1.in",  # the env: verl's set (the verl layer)
    "roles/apex/files/requirements-apex-build.in",  # the env: Apex's build tools (the apex layer)
)
# The lock that pins uv itself: the resolver of every set is that uv.
UV_PIN_LOCK = "requirements.txt"

PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(?P<version>[^\s;\\]+)(?P<marker>\s*;[^\\]*)?")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
OPTIONS = re.compile(r"^#\s*lock:(.*)$", re.M)
LEAVE_OUT = re.compile(r"^#\s*lock-leave-out:(.*)$", re.M)
# Options the tool sets itself: the lock goes where the tool writes it, with its own header.
OWN_OPTIONS = ("-o", "--output-file", "--no-header", "--generate-hashes", "--custom-compile-command")

Resolver = Callable[[Path, list[str]], str]


class LockError(Exception):
    """A set that cannot be resolved or a lock that cannot be read; the message says which."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Entry:
    """One package of a lock: its requirement line (name==version ; marker), hashes, dependents."""

    name: str
    requirement: str
    hashes: tuple[str, ...]
    via: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def entries(text: str) -> list[Entry]:
    """The packages of a lock, in order. Comment lines outside a package belong to none; a package's
    continuation lines (its hashes) and its `# via` annotation (uv's, on one line or as a list) are its own."""
    found: list[Entry] = []
    current: Entry | None = None
    in_via = False
    for line in text.splitlines():
        stripped = line.strip()
        if current is not None and line.startswith((" ", "\t")) and stripped:
            current.lines.append(line)
            comment = stripped.lstrip("#").strip()
            if not stripped.startswith("#"):
                current.hashes += tuple(HASH.findall(stripped))
            elif comment.startswith("via"):
                in_via = True
                current.via += [via.strip() for via in comment[3:].split(",") if via.strip()]
            elif in_via:
                current.via.append(comment)
            continue
        current, in_via = None, False
        if not stripped or stripped.startswith("#"):
            continue
        requirement = HASH.sub("", line.rstrip("\\")).strip()
        match = PIN.match(requirement)
        if not match:
            raise LockError("%r is not a name==version pin: a lock holds exact pins only" % stripped)
        current = Entry(canonical(match["name"]), requirement, tuple(HASH.findall(line)), [], [line])
        found.append(current)
    return found


def unhashed(text: str) -> list[str]:
    """The pins of a lock that carry no --hash (pip refuses the whole install with one of them)."""
    return [entry.requirement for entry in entries(text) if not entry.hashes]


def read_input(text: str) -> tuple[list[str], list[str]]:
    """uv's options and the names to leave out, as the input's `# lock:` lines give them."""
    options = [option for line in OPTIONS.findall(text) for option in shlex.split(line)]
    own = [option for option in options if option.split("=")[0] in OWN_OPTIONS]
    if own:
        raise ValueError("the tool sets %s itself; leave it out of the `# lock:` lines" % ", ".join(own))
    if not any(option.split("=")[0] == "--exclude-newer" for option in options):
        raise ValueError("no --exclude-newer in its `# lock:` lines: without a date it resolves differently tomorrow")
    leave_out = [name for line in LEAVE_OUT.findall(text) for name in re.split(r"[\s,]+", line.strip()) if name]
    return options, leave_out


def only_needed_by(found: list[Entry], roots: list[str]) -> set[str]:
    """The roots and every package that only they (and what only they need) depend on, from uv's
    `# via` annotations. A package an input asks for (`-r`) is never among them; a constraint
    (`-c`) asks for nothing."""
    out = {canonical(root) for root in roots}
    grown = True
    while grown:
        grown = False
        for entry in found:
            if entry.name in out:
                continue
            dependents = [via for via in entry.via if not via.startswith("-c ")]
            if dependents and all(not via.startswith("-") and canonical(via) in out for via in dependents):
                out.add(entry.name)
                grown = True
    return out


def header(source: str, options: list[str], uv_version: str, leave: list[str], left_out: list[str]) -> list[str]:
    lines = [
        "# Generated by tools/lock_requirements.py from %s; edit that file and rerun the tool." % source,
        "# Resolver: uv %s, uv pip compile --generate-hashes %s %s"
        % (uv_version, " ".join(shlex.quote(option) for option in options), source),
    ]
    if left_out:
        lines.append(
            "# Not in this lock: %s and what only %s needs; another step installs them (%s says which):"
            % (", ".join(leave), "it" if len(leave) == 1 else "they", source)
        )
        lines += ["#   " + line for line in textwrap.wrap(" ".join(left_out), 96, break_on_hyphens=False)]
    return lines


def render(source: str, options: list[str], leave: list[str], uv_version: str, resolved: str) -> str:
    found = entries(resolved)
    drop = only_needed_by(found, leave) if leave else set()
    kept = [entry for entry in found if entry.name not in drop]
    left_out = sorted({entry.name for entry in found if entry.name in drop})
    lines = header(source, options, uv_version, leave, left_out)
    for entry in kept:
        lines += entry.lines
    return "\n".join(lines) + "\n"


def _versions(group: list[Entry]) -> str:
    return ", ".join(entry.requirement for entry in group)


def first_difference(locked: str, fresh: str) -> str | None:
    """None when the lock is the fresh resolve; else what differs first, by package name."""
    if locked == fresh:
        return None
    old: dict[str, list[Entry]] = {}
    new: dict[str, list[Entry]] = {}
    for text, by_name in ((locked, old), (fresh, new)):
        for entry in entries(text):
            by_name.setdefault(entry.name, []).append(entry)
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name, []), new.get(name, [])
        if [(e.requirement, e.hashes) for e in before] == [(e.requirement, e.hashes) for e in after]:
            continue
        if not before:
            return "%s: not in the lock; the input resolves to %s" % (name, _versions(after))
        if not after:
            return "%s: the lock has %s; the input no longer resolves to it" % (name, _versions(before))
        if [e.requirement for e in before] != [e.requirement for e in after]:
            return "%s: the lock has %s; the input resolves to %s" % (name, _versions(before), _versions(after))
        return "%s: the lock's hashes are not those the index lists for that release" % _versions(before)
    old_lines, new_lines = locked.splitlines(), fresh.splitlines()
    for number, (a, b) in enumerate(zip(old_lines, new_lines), 1):
        if a != b:
            return "line %d: the lock has %r; the tool writes %r" % (number, a, b)
    return "line %d: the lock and the tool's output differ in length" % (min(len(old_lines), len(new_lines)) + 1)


def shown(path: Path) -> str:
    """A path as the messages show it: relative to the project where it lies in it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def find_uv() -> str:
    """The uv beside this Python (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.is_file() else (shutil.which("uv") or "")


def uv_version(uv: str) -> str:
    done = subprocess.run([uv, "--version"], capture_output=True, text=True, check=False)
    parts = done.stdout.split()
    return parts[1] if done.returncode == 0 and len(parts) > 1 else ""


def pinned_uv(repo: Path) -> str:
    lock = repo / UV_PIN_LOCK
    for entry in entries(lock.read_text()) if lock.is_file() else []:
        if entry.name == "uv":
            return PIN.match(entry.requirement)["version"]
    return ""


def uv_resolver(uv: str) -> Resolver:
    def resolve(source: Path, options: list[str]) -> str:
        command = [uv, "pip", "compile", "--quiet", "--no-header", "--generate-hashes", *options, source.name]
        # The interpreter only builds sdists' metadata: uv takes the one it finds, never a download.
        environment = {"UV_PYTHON_DOWNLOADS": "never", **os.environ}
        done = subprocess.run(command, cwd=source.parent, env=environment, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise LockError("uv could not resolve it (exit %d): %s" % (done.returncode, done.stderr.strip()[-2000:]))
        return done.stdout

    return resolve


def lock_set(source: Path, resolve: Resolver, version: str) -> str:
    """The lock text of one set: resolved afresh, the packages to leave out dropped, our header."""
    options, leave = read_input(source.read_text())
    text = render(source.name, options, leave, version, resolve(source, options))
    missing = unhashed(text)
    if missing:
        raise LockError("the resolver wrote no hash for %s" % ", ".join(missing))
    return text


def main(argv: list[str] | None = None, resolve: Resolver | None = None, version: str = "") -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="*", type=Path, help="the sets' input files (default: every set, SETS)")
    parser.add_argument("--check", action="store_true", help="resolve afresh and compare with each lock; write nothing")
    args = parser.parse_args(argv)
    sources = [path.resolve() for path in args.inputs] or [REPO / name for name in SETS]
    for source in sources:
        if source.suffix != ".in" or not source.is_file():
            parser.error("%s is not an input file (FILE.in)" % source)
    if resolve is None:
        uv = find_uv()
        if not uv:
            parser.error("no uv beside %s or on PATH (make setup installs it)" % sys.executable)
        version, wanted = uv_version(uv), pinned_uv(REPO)
        if wanted and version != wanted:
            parser.error(
                "%s is uv %s; the locks are what uv %s writes (%s): run make setup" % (uv, version, wanted, UV_PIN_LOCK)
            )
        resolve = uv_resolver(uv)
    status = 0
    for source in sources:
        target, name = source.with_suffix(".txt"), shown(source)
        try:
            fresh = lock_set(source, resolve, version)
        except ValueError as exc:
            parser.error("%s: %s" % (name, exc))
        except LockError as exc:
            print("%s: %s" % (name, exc), file=sys.stderr)
            status = 1
            continue
        count = len(entries(fresh))
        packages = "%d package%s" % (count, "" if count == 1 else "s")
        if args.check:
            try:
                difference = first_difference(target.read_text(), fresh) if target.is_file() else "there is no lock"
            except LockError as exc:
                difference = str(exc)
            if difference:
                print(
                    "%s: not what %s resolves to: %s; run python tools/lock_requirements.py %s"
                    % (shown(target), source.name, difference, name),
                    file=sys.stderr,
                )
                status = 1
            else:
                print("%s: %s, what %s resolves to" % (shown(target), packages, source.name))
        elif not target.is_file() or target.read_text() != fresh:
            target.write_text(fresh)
            print("%s: %s locked" % (shown(target), packages))
        else:
            print("%s: %s, unchanged" % (shown(target), packages))
    return status


if __name__ == "__main__":
    sys.exit(main())
