#!/usr/bin/env python3
"""Install the Ansible collections the project uses, and only those, into this Python's environment.

    .venv/bin/python tools/install_collections.py            # make setup runs it
    .venv/bin/python tools/install_collections.py --check    # are they there, at the named versions?

requirements.yml names each collection the project uses (Molecule's podman driver and the
`containers.podman.podman` connection of the tools, ansible.posix's profile_tasks callback), at
an exact version, in ansible-galaxy's format: `ansible-galaxy collection install -r requirements.yml`
fetches the same ones from Galaxy. This tool takes them from the `ansible` bundle's wheel instead,
the release files the control venv used to install whole (about 100 collections): pip downloads
that one wheel with --require-hashes, as its lock requirements-collections.txt says (no Galaxy,
which has no hash to pin, and nothing unverified), and the tool unpacks from it only the named
collections into site-packages/ansible_collections/, where ansible-core finds them as it found
the bundle's. A version the bundle does not hold, or a dependency of a collection that
requirements.yml does not name, stops it with the collection's name; nothing is unpacked then.

Exit status: 0 installed (or, with --check, each there at its version), 1 not, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "requirements.yml"
BUNDLE_LOCK = REPO / "requirements-collections.txt"


def wanted(text: str) -> dict[str, str]:
    """name -> exact version of each collection requirements.yml names."""
    data = yaml.safe_load(text) or {}
    items = data.get("collections") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise ValueError("requirements.yml has no `collections:` list")
    found: dict[str, str] = {}
    for item in items:
        name, version = (item.get("name"), str(item.get("version", ""))) if isinstance(item, dict) else (item, "")
        if not isinstance(name, str) or name.count(".") != 1:
            raise ValueError("%r is not a collection (namespace.name)" % (name,))
        if not version or not version[0].isdigit() or any(c in version for c in "<>=!*,"):
            raise ValueError("%s: %r is not an exact version (the bundle holds one of each)" % (name, version))
        found[name] = version
    return found


def manifest(bundle: zipfile.ZipFile, name: str) -> dict:
    namespace, collection = name.split(".")
    try:
        data = bundle.read("ansible_collections/%s/%s/MANIFEST.json" % (namespace, collection))
    except KeyError:
        return {}
    return json.loads(data)["collection_info"]


def problems(bundle: zipfile.ZipFile, collections: dict[str, str]) -> list[str]:
    """What stops the install: a collection the bundle lacks or holds at another version, or a
    dependency of one that requirements.yml does not name."""
    found = []
    for name, version in collections.items():
        info = manifest(bundle, name)
        if not info:
            found.append("%s: not in the bundle" % name)
        elif info["version"] != version:
            found.append("%s: the bundle holds %s, requirements.yml names %s" % (name, info["version"], version))
        for dependency in sorted((info.get("dependencies") or {}) if info else {}):
            if dependency not in collections:
                found.append("%s needs %s, which requirements.yml does not name" % (name, dependency))
    return found


def unpack(bundle: zipfile.ZipFile, collections: dict[str, str], destination: Path) -> None:
    """Each collection's files under destination/<namespace>/<name>/, replacing what was there; a
    member that would land outside its collection's directory stops it before anything is written."""
    for name in collections:
        prefix = "ansible_collections/%s/" % name.replace(".", "/")
        target = destination / name.replace(".", "/")
        members = [m for m in bundle.infolist() if m.filename.startswith(prefix) and not m.is_dir()]
        paths = [(target / member.filename[len(prefix) :]).resolve() for member in members]
        for member, path in zip(members, paths):
            if not path.is_relative_to(target.resolve()):
                raise ValueError("%s: %s leaves the collection's directory" % (name, member.filename))
        shutil.rmtree(target, ignore_errors=True)
        for member, path in zip(members, paths):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bundle.read(member))


def download_bundle(directory: Path) -> Path:
    """The bundle wheel, downloaded by pip with --require-hashes (pip refuses any other file)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--only-binary=:all:", "--require-hashes", "-r", str(BUNDLE_LOCK), "-d", str(directory)],
        check=True,
    )  # fmt: skip
    (wheel,) = directory.glob("ansible-*.whl")
    return wheel


def installed(destination: Path, collections: dict[str, str]) -> list[str]:
    """What is missing or at another version under destination."""
    found = []
    for name, version in collections.items():
        path = destination / name.replace(".", "/") / "MANIFEST.json"
        have = json.loads(path.read_text())["collection_info"]["version"] if path.is_file() else ""
        if have != version:
            found.append("%s: %s, requirements.yml names %s" % (name, have or "not installed", version))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only say whether each is installed at its version")
    args = parser.parse_args(argv)
    destination = Path(sysconfig.get_paths()["purelib"]) / "ansible_collections"
    try:
        collections = wanted(REQUIREMENTS.read_text())
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    if args.check:
        missing = installed(destination, collections)
        for line in missing:
            print("%s: %s" % (destination, line), file=sys.stderr)
        return 1 if missing else 0
    with tempfile.TemporaryDirectory() as scratch:
        try:
            wheel = download_bundle(Path(scratch))
        except (subprocess.CalledProcessError, ValueError) as exc:
            print("the bundle wheel of %s could not be downloaded: %s" % (BUNDLE_LOCK.name, exc), file=sys.stderr)
            return 1
        with zipfile.ZipFile(wheel) as bundle:
            stop = problems(bundle, collections)
            if stop:
                for line in stop:
                    print("%s: %s" % (wheel.name, line), file=sys.stderr)
                return 1
            try:
                unpack(bundle, collections, destination)
            except ValueError as exc:
                print("%s: %s" % (wheel.name, exc), file=sys.stderr)
                return 1
    print("%s: %s, from %s" % (destination, ", ".join("%s %s" % item for item in collections.items()), wheel.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
