#!/usr/bin/env python3
"""What a verl checkout holds that a rebuild would lose, as one JSON line on stdout.

    local_changes.py DIR [COMMIT]

Local work is: commits on top of COMMIT (the commit the verl layer recorded; another commit
checked out counts too), tracked files that differ from that commit other than by the patch
layer's own edits (a file whose sha256 is the one .verl_p40_patch/record.json says the patch
wrote), and untracked files that git does not ignore (the patch's record and the editable
install's build files aside). Run as the checkout's owner, with the standard library only.
Prints {"exists": bool, "foreign": bool, "head": str, "commits": [...], "edited": [...],
"untracked": [...]}: "foreign" is something at DIR that is not a git checkout (a rebuild must
not move or delete it).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

PATCH_DIR = ".verl_p40_patch"
# What `pip install -e` and Python write into a checkout, whether or not its .gitignore says so.
BUILD_FILES = (".egg-info/", "__pycache__/", ".pyc", "build/", ".eggs/")


def git(root: str, *args: str) -> str:
    return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, check=True).stdout


def patched_hashes(root: str) -> dict[str, str]:
    """The files the patch layer changed, and the sha256 it left each with."""
    try:
        with open(os.path.join(root, PATCH_DIR, "record.json"), encoding="utf-8") as handle:
            files = json.load(handle).get("files") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {rel: entry.get("patched_sha256", "") for rel, entry in files.items() if isinstance(entry, dict)}


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_changes(root: str, commit: str = "") -> dict:
    found: dict = {
        "exists": os.path.isdir(os.path.join(root, ".git")),
        "foreign": os.path.lexists(root) and not os.path.isdir(os.path.join(root, ".git")),
        "head": "",
        "commits": [],
        "edited": [],
        "untracked": [],
    }
    if not found["exists"]:
        return found
    found["head"] = git(root, "rev-parse", "HEAD").strip()
    if commit and found["head"] != commit:
        ahead = subprocess.run(
            ["git", "-C", root, "log", "--format=%h %s", commit + "..HEAD"], capture_output=True, text=True, check=False
        )
        found["commits"] = (
            ahead.stdout.splitlines()
            if ahead.returncode == 0 and ahead.stdout.strip()
            else ["HEAD is %s, not the recorded %s" % (found["head"], commit)]
        )
    patched = patched_hashes(root)
    entries = git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all").split("\0")
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if len(entry) < 4:
            continue
        status, rel = entry[:2], entry[3:]
        if status[0] in "RC":  # a rename names its source next
            index += 1
        if status == "??":
            if not rel.startswith(PATCH_DIR + "/") and not any(
                part in rel or rel.endswith(part) for part in BUILD_FILES
            ):
                found["untracked"].append(rel)
            continue
        path = os.path.join(root, rel)
        if rel in patched and os.path.isfile(path) and sha256_of(path) == patched[rel]:
            continue
        found["edited"].append(rel)
    return found


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(local_changes(argv[1], argv[2] if len(argv) == 3 else "")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
