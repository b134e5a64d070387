#!/usr/bin/env python3
"""`make setup` and `ansible-playbook site.yml --tags preflight`, end to end, on Debian 11's Python 3.9.

    python tests/setup_proof/run.py [--out docs/setup-proof] [--keep] [--dry-run]

Debian 11's python3 is 3.9; ansible-core 2.19 needs 3.11, so make setup gets a CPython with uv
(tools/setup_python.py, docs/control-node.md). uv downloads python-build-standalone's build from
GitHub, which this machine cannot reach; CI's unit test (tests/unit/test_setup_python.py) follows
that path up to uv's refusal of a stand-in of another sha256. This proof goes the whole way, outside
`make test` (the CPython build takes minutes of both cores):

1. a REAL CPython, built here, stands in for uv's download: the orig tarball of Debian 12's
   source package python3.11 (upstream's CPython 3.11.2, checked by apt against the archive's
   signed Sources index), configured and compiled in a throwaway Debian 11 container (so it runs
   on Debian 11's glibc 2.31), installed under python/ and packed as python-build-standalone's
   install_only tarball is; built once, kept in .cache/setup-proof/;
2. a uv downloads list (UV_PYTHON_DOWNLOADS_JSON_URL, uv's own format) naming only that file
   and its sha256;
3. on a new container of localhost/verl-p40-debian:11 (Debian 11's python3 3.9, no venv, no
   pip; make, the one package it lacks for `make setup`, installed first), a copy of the project
   at HEAD (git archive):
   a. `make setup SETUP_PYTHON_VERSION=3.11` with a downloads list whose sha256 is not the
      file's, uv's Python directory one of its own: uv's wheel is fetched from PyPI and checked
      against requirements.txt's hashes, uv refuses the file, make setup stops with the steps, no
      venv is left;
   b. `make setup SETUP_PYTHON_VERSION=3.11` with the right list: the tool finds no Python
      3.11 to 3.13, takes uv's wheel (fetched from PyPI by the refused run, checked against
      requirements.txt's hashes), `uv python install 3.11` installs the stand-in, the venv is made on it and the lock
      installed with --require-hashes, the collections unpacked;
   c. `ansible-playbook site.yml --tags preflight -e preflight_require_gpu=false` with the
      venv's tools, against the default inventory (localhost): preflight on Debian 11;
4. writes <out>/<date>.json (<date>-2.json and on where one is there): the build, each run's
   seconds, exit status and last lines, and each check by name.

The project is not changed for the proof: SETUP_PYTHON_VERSION is make setup's own variable, and
UV_PYTHON_DOWNLOADS_JSON_URL uv's. PyPI must be reachable from the container (the host's CA
bundle is handed in). Exit status: 0 every check held, 1 a check failed (the result file is still
written), 2 usage error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
from repo import result_path  # noqa: E402 - after the path above

IMAGE = "localhost/verl-p40-debian:11"
SOURCE_PACKAGE = "python3.11"  # Debian 12's source package of CPython 3.11
SOURCE_SUITE = "bookworm"
PYTHON = "3.11"  # make setup's SETUP_PYTHON_VERSION for the proof: the version of the stand-in
CACHE = REPO / ".cache" / "setup-proof"
TARBALL = "cpython-{version}+standin-x86_64-unknown-linux-gnu-install_only.tar.gz"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# Inside the proof container: the stand-in, its downloads lists, the project copy.
SRV = "/srv/setup-proof"
PROJECT = "/root/verl-p40"
REFUSED_DIR = "/tmp/uv-refused"  # uv's Python directory for the refused run

# Runs in a throwaway Debian 11 container, /out mounted: the CPython build (step 1).
BUILD = r"""set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
archive=$(apt-get indextargets --format '$(REPO_URI)' 'Identifier: Packages' 'Origin: Debian' \
  'Codename: bullseye' 'Component: main' | head -n 1)
[ -n "$archive" ] || { echo "apt names no Debian archive for bullseye" >&2; exit 1; }
echo "deb-src $archive @SUITE@ main" > /etc/apt/sources.list.d/setup-proof-src.list
apt-get update -qq
apt-get install -y -qq --no-install-recommends dpkg-dev gcc make xz-utils libssl-dev zlib1g-dev \
  libffi-dev libbz2-dev liblzma-dev libsqlite3-dev libreadline-dev uuid-dev libncursesw5-dev \
  libgdbm-dev >/dev/null
mkdir -p /tmp/src && cd /tmp/src
apt-get source --download-only -qq @PACKAGE@/@SUITE@ >/dev/null
orig=$(ls @PACKAGE@_*.orig.tar.*)
tar xf "$orig"
cd Python-*/
./configure --prefix=/tmp/stage/python --with-ensurepip=no >/tmp/configure.log 2>&1 \
  || { tail -n 30 /tmp/configure.log; exit 1; }
make -j "$(nproc)" >/tmp/make.log 2>&1 || { tail -n 40 /tmp/make.log; exit 1; }
make install >/tmp/install.log 2>&1 || { tail -n 40 /tmp/install.log; exit 1; }
version=$(/tmp/stage/python/bin/python3 -c 'import platform; print(platform.python_version())')
/tmp/stage/python/bin/python3 -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, readline, venv, ensurepip'
missing=$(grep -A3 'necessary bits to build these optional modules were not found' /tmp/make.log || true)
tarball=/out/@TARBALL@
tar -C /tmp/stage -czf "$tarball.part" python && mv "$tarball.part" "$tarball"
python3 - "$version" "$orig" "$tarball" "$missing" <<'EOF'
import hashlib, json, os, sys
version, orig, tarball, missing = sys.argv[1:]
def sha(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()
json.dump({"version": version, "orig": orig, "orig_sha256": sha("/tmp/src/" + orig),
           "file": os.path.basename(tarball), "sha256": sha(tarball), "size": os.path.getsize(tarball),
           "modules_not_built": missing.strip()}, open("/out/build.json", "w"), indent=2)
EOF
"""


def build_script() -> str:
    return (
        BUILD.replace("@SUITE@", SOURCE_SUITE)
        .replace("@PACKAGE@", SOURCE_PACKAGE)
        .replace("@TARBALL@", TARBALL.format(version="$version"))
    )


def build_key() -> str:
    """What the cached build depends on: the script and the image."""
    image = podman("image", "inspect", "--format", "{{.Id}}", IMAGE, check=False).stdout.strip()
    return hashlib.sha256((build_script() + image).encode()).hexdigest()


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check)


def build_python(cache: Path) -> dict[str, Any]:
    """The stand-in CPython (step 1), from the cache when the script and the image are unchanged."""
    key = build_key()
    record = cache / "build.json"
    if record.is_file():
        built = json.loads(record.read_text())
        if built.get("key") == key and (cache / built["file"]).is_file():
            built["cached"] = True
            return built
    cache.mkdir(parents=True, exist_ok=True)
    say("building CPython from Debian %s's %s in a Debian 11 container (minutes)" % (SOURCE_SUITE, SOURCE_PACKAGE))
    start = time.monotonic()
    done = subprocess.run(
        ["podman", "run", "--rm", "--network", "host", "-v", "%s:/out:Z" % cache, IMAGE, "bash", "-c", build_script()],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit("the CPython build failed (exit %d):\n%s%s" % (done.returncode, done.stdout, done.stderr))
    built = json.loads(record.read_text())
    built.update(key=key, seconds=round(time.monotonic() - start, 1))
    record.write_text(json.dumps(built, indent=2) + "\n")
    built["cached"] = False
    return built


def downloads(built: dict[str, Any], sha256: str | None = None) -> dict[str, Any]:
    """uv's downloads list (the format of its download-metadata.json) naming the stand-in only."""
    major, minor, patch = (int(part) for part in built["version"].split("."))
    return {
        "cpython-%s-linux-x86_64-gnu" % built["version"]: {
            "name": "cpython",
            "arch": {"family": "x86_64", "variant": None},
            "os": "linux",
            "libc": "gnu",
            "major": major,
            "minor": minor,
            "patch": patch,
            "prerelease": "",
            "url": "file://%s/%s" % (SRV, built["file"]),
            "sha256": sha256 or built["sha256"],
            "variant": None,
            "build": "standin",
        }
    }


def setup_command(downloads_list: str, install_dir: str = "") -> str:
    """make setup as a Debian 11 user runs it, but for the proof's variables (uv's Python directory
    of its own for the refused run, so that nothing of it can serve the next)."""
    return "cd %s && %sUV_PYTHON_DOWNLOADS_JSON_URL=%s make setup SETUP_PYTHON_VERSION=%s" % (
        PROJECT,
        "UV_PYTHON_INSTALL_DIR=%s " % install_dir if install_dir else "",
        downloads_list,
        PYTHON,
    )


PREFLIGHT = (
    "cd %s && . .venv/bin/activate && ansible-playbook site.yml --tags preflight -e preflight_require_gpu=false"
    % (PROJECT)
)


def say(message: str) -> None:
    print("setup-proof: " + message, file=sys.stderr, flush=True)


def tail(text: str, lines: int = 25) -> list[str]:
    return text.splitlines()[-lines:]


class Container:
    """A new container of the Debian 11 image, sharing the host's network, removed after."""

    def __init__(self, keep: bool) -> None:
        self.name = "verl-p40-setup-proof-%d" % os.getpid()
        self.keep = keep

    def __enter__(self) -> Container:
        podman("run", "-d", "--network", "host", "--name", self.name, "--init", IMAGE, "sleep", "infinity")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.keep:
            say("kept: podman exec -it %s bash" % self.name)
        else:
            podman("rm", "-f", "-t", "0", self.name, check=False)

    def sh(self, command: str) -> dict[str, Any]:
        start = time.monotonic()
        env = ["-e", "SSL_CERT_FILE=%s" % CA_BUNDLE, "-e", "PIP_CERT=%s" % CA_BUNDLE, "-e", "HOME=/root"]
        done = podman("exec", *env, self.name, "bash", "-c", "{ %s\n} 2>&1" % command, check=False)
        output = done.stdout + done.stderr  # podman's own errors, if any, after the command's
        return {"rc": done.returncode, "seconds": round(time.monotonic() - start, 1), "output": output}

    def put(self, source: Path, target: str) -> None:
        podman("cp", str(source), "%s:%s" % (self.name, target))


def measure(built: dict[str, Any], cache: Path, keep: bool) -> dict[str, Any]:
    """Steps 3a to 3c on a new container; what each run printed and left."""
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch, Container(keep) as host:
        work = Path(scratch)
        (work / "right.json").write_text(json.dumps(downloads(built), indent=2))
        (work / "wrong.json").write_text(json.dumps(downloads(built, sha256="0" * 64), indent=2))
        archive = work / "project.tar"
        subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), "HEAD"], check=True)
        host.sh("mkdir -p %s %s" % (SRV, PROJECT))
        for path in (cache / built["file"], work / "right.json", work / "wrong.json"):
            host.put(path, SRV + "/")
        host.put(archive, "/tmp/project.tar")
        host.put(Path(CA_BUNDLE), CA_BUNDLE)
        found["os"] = host.sh(". /etc/os-release && echo $PRETTY_NAME; python3 -V")["output"].strip()
        found["make"] = host.sh(
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make"
            " >/dev/null && make --version | head -n 1"
        )
        host.sh("tar -C %s -xf /tmp/project.tar" % PROJECT)
        found["wrong"] = host.sh(setup_command(SRV + "/wrong.json", REFUSED_DIR))
        found["venv_after_wrong"] = host.sh("test -e %s/.venv && echo yes || echo no" % PROJECT)["output"].strip()
        found["setup"] = host.sh(setup_command(SRV + "/right.json"))
        found["venv"] = host.sh(
            "%s/.venv/bin/python -c 'import sys, platform; print(platform.python_version(), sys._base_executable)';"
            " %s/.venv/bin/ansible --version | head -n 1; %s/.venv/bin/python -m pip freeze" % ((PROJECT,) * 3)
        )
        found["preflight"] = host.sh(PREFLIGHT)
        found["setup_again"] = host.sh(setup_command(SRV + "/right.json"))
    return found


def locked_version(package: str) -> str:
    found = re.search(r"^%s==(\S+)" % re.escape(package), (REPO / "requirements.txt").read_text(), re.M)
    return found.group(1) if found else ""


def checks(built: dict[str, Any], found: dict[str, Any]) -> dict[str, bool]:
    """What must hold, each by name (the result file keeps them all)."""
    venv = found["venv"]["output"].splitlines()
    first = venv[0].split() if venv else ["", ""]
    preflight = found["preflight"]["output"]
    return {
        "the container is Debian 11 on its python3 3.9": "Debian GNU/Linux 11" in found["os"]
        and "Python 3.9." in found["os"],
        "a download of another sha256 is refused, no venv left": found["wrong"]["rc"] != 0
        and "Hash mismatch" in found["wrong"]["output"]
        and found["venv_after_wrong"] == "no",
        "make setup got CPython 3.11 with uv": found["setup"]["rc"] == 0
        and "uv python install %s" % PYTHON in found["setup"]["output"],
        "the venv runs on the stand-in": first[0] == built["version"] and "/uv/python/" in first[-1],
        "the venv holds the lock": "ansible-core==%s" % locked_version("ansible-core") in venv,
        "preflight passed on Debian 11": found["preflight"]["rc"] == 0
        and bool(re.search(r"localhost\s*:.*failed=0", preflight))
        and "Debian 11" in preflight,
        "a second make setup does nothing": found["setup_again"]["rc"] == 0
        and "uv python install" not in found["setup_again"]["output"],
    }


def plan() -> list[str]:
    return [
        "stand-in: CPython from Debian %s's source package %s, built in a container of %s, packed as"
        " python-build-standalone's install_only tarball (%s)" % (SOURCE_SUITE, SOURCE_PACKAGE, IMAGE, TARBALL),
        "container: %s, make installed, the project at HEAD in %s" % (IMAGE, PROJECT),
        "refused: " + setup_command(SRV + "/wrong.json", REFUSED_DIR),
        "setup: " + setup_command(SRV + "/right.json"),
        "preflight: " + PREFLIGHT,
        "again: " + setup_command(SRV + "/right.json"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "setup-proof")
    parser.add_argument("--keep", action="store_true", help="keep the proof container")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = parser.parse_args(argv)
    if args.dry_run:
        print("\n".join(plan()))
        return 0
    built = build_python(CACHE)
    say("stand-in CPython %s, %s (%s)" % (built["version"], built["file"], "cached" if built["cached"] else "built"))
    found = measure(built, CACHE, args.keep)
    held = checks(built, found)
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout
    result = {
        "what": "make setup and preflight on Debian 11's Python 3.9 (tests/setup_proof/run.py)",
        "date": dt.date.today().isoformat(),
        "commit": commit.strip(),
        "machine": {"cores": os.cpu_count(), "kernel": platform.release()},
        "image": IMAGE,
        "standin_python": {key: value for key, value in built.items() if key != "key"},
        "runs": {
            name: {"rc": run["rc"], "seconds": run["seconds"], "last_lines": tail(run["output"])}
            for name, run in found.items()
            if isinstance(run, dict)
        },
        "os": found["os"],
        "checks": held,
        "all_passed": all(held.values()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = result_path(args.out, result["date"])
    path.write_text(json.dumps(result, indent=2) + "\n")
    for name, ok in held.items():
        print("%s %s" % ("ok  " if ok else "FAIL", name))
    print("result: %s" % (path.relative_to(REPO) if path.is_relative_to(REPO) else path))
    return 0 if result["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
