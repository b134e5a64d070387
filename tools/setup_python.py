#!/usr/bin/env python3
"""Find the Python that make setup builds the control venv with, or get one with uv.

    python3 tools/setup_python.py                       # make setup runs it; prints the interpreter's path
    python3 tools/setup_python.py --python python3.12 --only
    python3 tools/setup_python.py --uv yes --uv-python 3.12

ansible-core 2.19 needs Python 3.11 or newer on the control node, and requirements.txt is locked
for 3.11 to 3.13; the default inventory is localhost, so the P40 host itself is the control node,
and Ubuntu 20.04 (3.8), 22.04 (3.10) and Debian 11 (3.9) ship an older python3. This tool runs
before the venv exists, on the system's python3 (3.8 or newer, standard library only), and:

1. tries --python (default python3), then python3.11, python3.12 and python3.13 on PATH; the first
   in 3.11..3.13 whose venv and ensurepip import is the answer (with --only, --python alone);
2. else, with --uv auto (the default) or yes, gets one with uv: the uv release pinned in
   requirements.txt, its wheel downloaded from the package index (PIP_INDEX_URL, else PyPI) and
   refused unless its sha256 is one the lock lists, then `uv python install <--uv-python>`, which
   downloads a python-build-standalone CPython (from GitHub; UV_PYTHON_INSTALL_MIRROR names a
   mirror), checked by uv against the sha256 it carries for that build, into uv's Python directory
   (~/.local/share/uv/python; UV_PYTHON_INSTALL_DIR moves it). --uv yes takes that route even where
   the host has a Python; --uv no never does;
3. else stops with what it tried and the exact steps for this OS.

The interpreter's path goes to stdout, everything else to stderr.
Exit status: 0 found (or got), 1 none, 2 usage error.
"""

from __future__ import annotations

import argparse
import hashlib
import html.parser
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.txt"
# ansible-core 2.19 needs 3.11; requirements.txt is resolved for, and installed on, 3.11 to 3.13.
OLDEST = (3, 11)
NEWEST = (3, 13)
SEARCHED = ["python3.%d" % minor for minor in range(OLDEST[1], NEWEST[1] + 1)]
DEFAULT_INDEX = "https://pypi.org/simple"
PYTHON_DOWNLOADS = "https://github.com/astral-sh/python-build-standalone/releases/download"

# What a candidate says of itself; a venv's Python answers with the interpreter it was made from,
# so a .venv/bin/python3 on PATH never becomes the base of the venv make setup clears.
PROBE = r"""
import json, sys
try:
    import ensurepip, venv
    venv_ok = True
except ImportError:
    venv_ok = False
base = getattr(sys, "_base_executable", None) if sys.prefix != sys.base_prefix else None
print(json.dumps({"version": list(sys.version_info[:3]), "executable": base or sys.executable, "venv": venv_ok}))
"""


def say(message: str) -> None:
    print("make setup: " + message, file=sys.stderr, flush=True)


def dotted(version) -> str:
    return ".".join(str(part) for part in version)


class Candidate:
    """One interpreter name or path and what probing it found."""

    def __init__(self, name: str, path: str | None = None, version: tuple | None = None, venv: bool = False):
        self.name, self.path, self.version, self.venv = name, path, version, venv
        self.problem = ""

    @property
    def suitable(self) -> bool:
        return not self.problem

    def describe(self) -> str:
        if self.version is None:
            return "%s: %s" % (self.name, self.problem)
        where = "Python %s (%s)" % (dotted(self.version), self.path)
        return "%s: %s%s" % (self.name, where, ", " + self.problem if self.problem else "")


def probe(name: str) -> Candidate:
    found = shutil.which(name) if os.sep not in name else (name if os.access(name, os.X_OK) else None)
    if not found:
        candidate = Candidate(name)
        candidate.problem = "not found" if os.sep in name else "not on PATH"
        return candidate
    try:
        done = subprocess.run([found, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        candidate = Candidate(name, found)
        candidate.problem = "does not run as a Python (%s -c ... failed)" % found
        return candidate
    candidate = Candidate(name, answer["executable"], tuple(answer["version"]), bool(answer["venv"]))
    version = candidate.version[:2]
    if version < OLDEST:
        candidate.problem = "older than %s" % dotted(OLDEST)
    elif version > NEWEST:
        candidate.problem = "newer than %s, which requirements.txt is locked for" % dotted(NEWEST)
    elif not candidate.venv:
        package = "python%s-venv" % dotted(version)
        candidate.problem = "no venv/ensurepip module (Debian, Ubuntu: sudo apt-get install %s)" % package
    return candidate


def host_candidates(python: str, only: bool) -> list[Candidate]:
    """Each candidate probed, in order, up to and including the first suitable one."""
    names = [python] if only else [python] + [name for name in SEARCHED if name != python]
    tried, seen = [], set()
    for name in names:
        resolved = shutil.which(name) or name
        if os.path.realpath(resolved) in seen:
            continue
        seen.add(os.path.realpath(resolved))
        candidate = probe(name)
        tried.append(candidate)
        if candidate.suitable:
            break
    return tried


# --- uv, from the lock -------------------------------------------------------------------------


def locked(lock_text: str, package: str) -> tuple[str, set[str]]:
    """The version and the sha256 hashes the lock pins for one package."""
    match = re.search(r"^%s==(\S+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})+)" % re.escape(package), lock_text, re.M)
    if not match:
        raise ValueError("%s is not pinned with hashes in %s" % (package, LOCK.name))
    return match.group(1), set(re.findall(r"sha256:([0-9a-f]{64})", match.group(2)))


class Links(html.parser.HTMLParser):
    """The file links of a PEP 503 simple-index page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.links.append(href)


def glibc() -> tuple[int, int] | None:
    name, version = platform.libc_ver()
    if name != "glibc" or not re.match(r"\d+\.\d+", version):
        return None
    return tuple(int(part) for part in version.split(".")[:2])


def wheel_fits(filename: str, machine: str, libc: tuple[int, int] | None) -> bool:
    """A wheel of this machine's architecture whose manylinux (glibc) or musllinux tag fits the host."""
    if not filename.endswith(".whl"):
        return False
    platforms = filename[: -len(".whl")].split("-")[-1].split(".")
    for tag in platforms:
        if not tag.endswith("_" + machine):
            continue
        if tag.startswith("manylinux") and libc:
            legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
            head = tag[: -len(machine) - 1]
            needs = legacy.get(head)
            numbers = re.match(r"manylinux_(\d+)_(\d+)$", head)
            if numbers:
                needs = (int(numbers.group(1)), int(numbers.group(2)))
            if needs and needs <= libc:
                return True
        if tag.startswith("musllinux") and libc is None:
            return True
    return False


def fetch(url: str, timeout: int = 120) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "verl-p40-setup", "Accept": "text/html"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (an http(s) index URL)
        return response.read()


def redacted(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += ":%d" % parts.port
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def pinned_uv(cache: Path, index: str, lock_text: str) -> Path:
    """The uv binary of the release the lock pins, from a wheel whose sha256 the lock lists."""
    version, hashes = locked(lock_text, "uv")
    target = cache / ("uv-" + version)
    binary = target / "uv"
    page_url = index.rstrip("/") + "/uv/"
    machine, libc = platform.machine(), glibc()
    try:
        parser = Links()
        parser.feed(fetch(page_url).decode("utf-8", "replace"))
    except OSError as error:
        raise RuntimeError("cannot read the package index %s: %s" % (redacted(page_url), error)) from error
    wheels = []
    for href in parser.links:
        filename = urllib.parse.unquote(urllib.parse.urlsplit(href).path.rsplit("/", 1)[-1])
        if filename.startswith("uv-%s-" % version) and wheel_fits(filename, machine, libc):
            wheels.append((filename, urllib.parse.urljoin(page_url, href.split("#", 1)[0])))
    if not wheels:
        raise RuntimeError(
            "the index %s has no uv %s wheel for %s (%s)"
            % (redacted(page_url), version, machine, "glibc %s" % dotted(libc) if libc else "musl")
        )
    filename, url = wheels[0]
    wheel = cache / filename
    if not wheel.is_file() or hashlib.sha256(wheel.read_bytes()).hexdigest() not in hashes:
        say("downloading %s from %s" % (filename, redacted(page_url)))
        try:
            data = fetch(url, timeout=600)
        except OSError as error:
            raise RuntimeError("cannot download %s: %s" % (filename, error)) from error
        digest = hashlib.sha256(data).hexdigest()
        if digest not in hashes:
            raise RuntimeError(
                "%s from %s has sha256 %s, which is none of the %d hashes %s pins for uv==%s: refused"
                % (filename, redacted(page_url), digest, len(hashes), LOCK.name, version)
            )
        cache.mkdir(parents=True, exist_ok=True)
        partial = wheel.with_name(wheel.name + ".part")
        partial.write_bytes(data)
        partial.replace(wheel)
    member = "uv-%s.data/scripts/uv" % version
    with zipfile.ZipFile(wheel) as archive:
        try:
            data = archive.read(member)
        except KeyError as error:
            raise RuntimeError("%s holds no %s" % (filename, member)) from error
    target.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name("uv.part")
    partial.write_bytes(data)
    partial.chmod(0o755)
    partial.replace(binary)
    return binary


def uv_python(uv: Path, version: str) -> Candidate:
    """`uv python install <version>`, then the interpreter uv manages for it, probed."""
    mirror = os.environ.get("UV_PYTHON_INSTALL_MIRROR")
    listed = os.environ.get("UV_PYTHON_DOWNLOADS_JSON_URL")
    if listed:
        # uv's own variable: a downloads list of the user's (URLs and sha256s) replaces uv's.
        source = "the build the list %s (UV_PYTHON_DOWNLOADS_JSON_URL) names, checked against the sha256 it gives" % (
            redacted(listed)
        )
    else:
        source = "a python-build-standalone build from %s, checked against the sha256 uv carries for it" % (
            redacted(mirror) + " (UV_PYTHON_INSTALL_MIRROR)" if mirror else PYTHON_DOWNLOADS
        )
    say(
        "getting CPython %s with %s: `uv python install %s` downloads %s, into uv's Python directory (%s)"
        % (version, uv, version, source, os.environ.get("UV_PYTHON_INSTALL_DIR") or "~/.local/share/uv/python")
    )
    install = subprocess.run([str(uv), "python", "install", version], capture_output=True, text=True, check=False)
    if install.returncode != 0:
        tail = "\n".join(("uv: " + line) for line in install.stderr.strip().splitlines()[-12:])
        raise RuntimeError("`uv python install %s` failed (exit %d):\n%s" % (version, install.returncode, tail))
    find = subprocess.run(
        [str(uv), "python", "find", "--managed-python", "--no-project", version],
        capture_output=True,
        text=True,
        check=False,
    )
    path = find.stdout.strip().splitlines()[-1] if find.returncode == 0 and find.stdout.strip() else ""
    if not path:
        raise RuntimeError("uv installed CPython %s but `uv python find` does not name it: %s" % (version, find.stderr))
    candidate = probe(path)
    candidate.name = "uv's CPython %s" % version
    if not candidate.suitable:
        raise RuntimeError(candidate.describe())
    return candidate


# --- the refusal -------------------------------------------------------------------------------


def os_release(path: str = "/etc/os-release") -> dict[str, str]:
    values = {}
    try:
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition("=")
            values[key] = value.strip().strip('"')
    except OSError:
        pass
    return values


def steps(
    release: dict[str, str], tried: list[Candidate], uv_version: str, uv_python_version: str, uv_failed: bool
) -> str:
    """What to do next, for this OS, as commands."""
    name = release.get("PRETTY_NAME") or "this host"
    lines = [
        "ansible-core 2.19 needs Python %s to %s on the control node, with its venv module; the default"
        " inventory is localhost, so %s is the control node." % (dotted(OLDEST), dotted(NEWEST), name),
        "Do one of these, then run make setup again:",
    ]
    number = 0

    def step(text: str) -> None:
        nonlocal number
        number += 1
        lines.append("  %d. %s" % (number, text))

    no_venv = [c for c in tried if c.version and OLDEST <= c.version[:2] <= NEWEST and not c.venv]
    for candidate in no_venv:
        step(
            "sudo apt-get install python%s-venv   (%s lacks it), then: make setup PYTHON=%s"
            % (dotted(candidate.version[:2]), candidate.name, candidate.name)
        )
    distro, version = release.get("ID"), release.get("VERSION_ID")
    if distro == "ubuntu" and version == "22.04" and not no_venv:
        step(
            "sudo apt-get install python3.11 python3.11-venv   (Ubuntu's universe component), then:"
            " make setup PYTHON=python3.11"
        )
    mirror = "UV_PYTHON_INSTALL_MIRROR=<a mirror of %s>" % PYTHON_DOWNLOADS
    if uv_failed:
        step(
            "let uv reach its download: %s make setup   (the mirror holds the file uv asked for above;"
            " PIP_INDEX_URL=<index> for uv's own wheel)" % mirror
        )
    else:
        step(
            "make setup SETUP_UV=yes   (uv %s, hash-locked in requirements.txt, from the package index, downloads"
            " CPython %s from GitHub, or from %s)" % (uv_version, uv_python_version, mirror)
        )
    step(
        "install a Python %s to %s with its venv module yourself and name it: make setup PYTHON=/path/to/python3.12"
        % (dotted(OLDEST), dotted(NEWEST))
    )
    step(
        "run Ansible from another machine with Python %s+ and put this host in its inventory"
        " (inventory/hosts.yml, the p40 group): a managed host needs only Python 3.8" % dotted(OLDEST)
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="python3", help="the Python to try first (default python3)")
    parser.add_argument("--only", action="store_true", help="try --python alone (make setup PYTHON=...)")
    parser.add_argument(
        "--uv",
        choices=["auto", "yes", "no"],
        default="auto",
        help="get a Python with uv: auto (when none found), yes (always), no",
    )
    parser.add_argument("--uv-python", default="3.12", help="the CPython version uv gets (default 3.12)")
    parser.add_argument("--uv-bin", default="", help="a uv binary to use instead of the pinned wheel's")
    parser.add_argument("--cache", default=str(REPO / ".cache" / "setup"), help="where the uv wheel and binary go")
    parser.add_argument("--index-url", default=os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX)
    parser.add_argument("--requirements", default=str(LOCK), help="the lock that pins uv (default requirements.txt)")
    parser.add_argument("--os-release", default="/etc/os-release", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if (
        not re.match(r"^3\.\d+(\.\d+)?$", args.uv_python)
        or not OLDEST <= tuple(map(int, args.uv_python.split(".")[:2])) <= NEWEST
    ):
        parser.error(
            "--uv-python %r: give a version from %s to %s, such as 3.12"
            % (args.uv_python, dotted(OLDEST), dotted(NEWEST))
        )

    tried = [] if args.uv == "yes" else host_candidates(args.python, args.only)
    for candidate in tried:
        if not candidate.suitable:
            say("not usable: " + candidate.describe())
    if tried and tried[-1].suitable:
        say("the control venv's Python: %s" % tried[-1].describe())
        print(tried[-1].path)
        return 0

    lock_text = Path(args.requirements).read_text()
    uv_version = locked(lock_text, "uv")[0]
    uv_failed = False
    if args.uv != "no" and not (args.only and args.uv == "auto"):
        if args.uv == "auto":
            say(
                "no usable Python %s to %s on this host; SETUP_UV=auto: getting one with uv (SETUP_UV=no refuses)"
                % (dotted(OLDEST), dotted(NEWEST))
            )
        try:
            uv = Path(args.uv_bin) if args.uv_bin else pinned_uv(Path(args.cache), args.index_url, lock_text)
            got = uv_python(uv, args.uv_python)
        except (RuntimeError, OSError, ValueError) as error:
            say("uv could not get a Python: %s" % error)
            uv_failed = True
        else:
            say("the control venv's Python: %s" % got.describe())
            print(got.path)
            return 0
    say(
        "no Python to build the control venv with.\n"
        + steps(os_release(args.os_release), tried, uv_version, args.uv_python, uv_failed)
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
