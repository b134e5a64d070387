#!/usr/bin/env python3
"""Pin every package of a requirements file by hash: the lock pip installs with --require-hashes.

    python tools/lock_requirements.py roles/verl/files/requirements-verl-0.4.1.txt [...]
    python tools/lock_requirements.py --check FILE [...]     # exit 1 when a lock is not what the index says
    python tools/lock_requirements.py --index-url URL FILE   # another index (PEP 691 JSON simple API)

Each line `name==version` of FILE gets one `--hash=sha256:...` for every file the index holds of
that exact release (every wheel, for every Python and platform, and the sdist), the way
`pip-compile --generate-hashes` writes them, so the same lock installs on Python 3.10 and 3.11,
Debian 11 and 12. Comments and the order of the pins stay; hashes already there are replaced.
A mirror that serves a different file for the same version is then refused by pip.

The file must already be the whole set (this tool pins, it does not resolve): pip's
--require-hashes refuses to install any package that is not in it.

The index comes from pip itself (its default index's simple API) unless --index-url names one.
Exit status: 0 written (or, with --check, up to date), 1 a lock is out of date or a release is
not on the index, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, canonicalize_name
from packaging.utils import parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)(?P<rest>\s*;[^\\]*)?")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
Fetch = Callable[[str, str], list[dict]]


def default_index() -> str:
    from pip._internal.models.index import PyPI  # pip's own default, named nowhere else here

    return PyPI.simple_url


def index_files(index_url: str) -> Fetch:
    """A fetcher of a project's files (filename, hashes) from a PEP 691 JSON simple index."""

    def fetch(name: str, _version: str) -> list[dict]:
        url = "%s/%s/" % (index_url.rstrip("/"), canonicalize_name(name))
        request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)["files"]

    return fetch


def file_version(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None


def release_hashes(files: list[dict], version: str) -> list[str]:
    """The sha256 of every file of exactly that release (wheels and sdist), sorted."""
    wanted = Version(version)
    return sorted(
        {
            f["hashes"]["sha256"]
            for f in files
            if file_version(f["filename"]) == wanted and "sha256" in f.get("hashes", {})
        }
    )


def parse(text: str) -> list[tuple[str, str]]:
    """The file as items: ("raw", a comment or blank line) or ("pin", a requirement without its hashes).

    A pin's continuation lines (its hashes) are part of it and are dropped here."""
    items: list[tuple[str, str]] = []
    logical: list[str] = []
    for line in text.splitlines():
        logical.append(line.rstrip("\\").rstrip())
        if line.rstrip().endswith("\\"):
            continue
        joined = " ".join(part.strip() for part in logical)
        logical = []
        requirement = HASH.sub("", joined).strip()
        if PIN.match(requirement):
            items.append(("pin", re.sub(r"\s+", " ", requirement)))
        elif requirement.startswith("-") or (requirement and not requirement.startswith("#")):
            raise ValueError("%r is not a name==version pin: a lock holds exact pins only" % joined.strip())
        else:
            items.append(("raw", joined if joined.strip() else ""))
    return items


def pins(text: str) -> dict[str, list[str]]:
    """The pins of a lock and the hashes each carries (offline: what the file says)."""
    found: dict[str, list[str]] = {}
    logical = ""
    for line in text.splitlines() + [""]:
        logical += " " + line.rstrip("\\")
        if line.rstrip().endswith("\\"):
            continue
        match = PIN.match(logical.strip())
        if match:
            found["%s==%s" % (match["name"], match["version"])] = HASH.findall(logical)
        logical = ""
    return found


def render(items: list[tuple[str, str]], hashes: dict[str, list[str]]) -> str:
    out = []
    for kind, value in items:
        if kind == "raw":
            out.append(value)
            continue
        lines = [value + " \\"] + ["    --hash=sha256:%s \\" % digest for digest in hashes[value]]
        lines[-1] = lines[-1][: -len(" \\")]
        out.extend(lines)
    return "\n".join(out) + "\n"


def lock(text: str, fetch: Fetch) -> str:
    items = parse(text)
    hashes: dict[str, list[str]] = {}
    for kind, value in items:
        if kind != "pin":
            continue
        match = PIN.match(value)
        found = release_hashes(fetch(match["name"], match["version"]), match["version"])
        if not found:
            raise LookupError("%s==%s: the index has no file of that release" % (match["name"], match["version"]))
        hashes[value] = found
    return render(items, hashes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="compare with the index, write nothing")
    parser.add_argument("--index-url", default="", help="a PEP 691 JSON simple index (default: pip's)")
    args = parser.parse_args(argv)
    fetch = index_files(args.index_url or default_index())
    status = 0
    for path in args.files:
        if not path.is_file():
            parser.error("%s is not a file" % path)
        text = path.read_text()
        try:
            locked = lock(text, fetch)
        except (ValueError, LookupError) as exc:
            print("%s: %s" % (path, exc), file=sys.stderr)
            status = 1
            continue
        count = len(pins(locked))
        if args.check:
            if locked != text:
                print("%s: out of date; run python tools/lock_requirements.py %s" % (path, path), file=sys.stderr)
                status = 1
            else:
                print("%s: %d pins, every hash what the index holds" % (path, count))
        elif locked != text:
            path.write_text(locked)
            print("%s: %d pins locked" % (path, count))
        else:
            print("%s: %d pins, unchanged" % (path, count))
    return status


if __name__ == "__main__":
    sys.exit(main())
