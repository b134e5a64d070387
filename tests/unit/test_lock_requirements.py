"""tools/lock_requirements.py and the hash-locked requirement files the roles install with --require-hashes.

The broken cases: a pin added to a lock without hashes (pip would refuse the whole install on a
host), a lock the tool would write differently (a hand edit), and a mirror that serves another
file under a locked name and version (pip must refuse it: shown here with pip itself).
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import lock_requirements as lr  # noqa: E402

LOCKS = [REPO / "roles/verl/files/requirements-verl-0.4.1.txt", REPO / "roles/apex/files/requirements-apex-build.txt"]


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_every_pin_of_a_lock_carries_hashes(lock):
    pins = lr.pins(lock.read_text())
    assert len(pins) >= 4
    assert [pin for pin, hashes in pins.items() if not hashes] == []


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_a_lock_is_what_the_tool_writes(lock):
    """Relocked with the hashes it holds, the file comes out byte for byte the same."""
    text = lock.read_text()
    held = lr.pins(text)

    def fetch(name: str, version: str) -> list[dict]:
        (hashes,) = [h for pin, h in held.items() if pin.lower() == ("%s==%s" % (name, version)).lower()]
        return [{"filename": "%s-%s.tar.gz" % (name, version), "hashes": {"sha256": h}} for h in hashes]

    assert lr.lock(text, fetch) == text


def test_lock_takes_every_file_of_the_release_and_only_those():
    files = [
        {"filename": "demo-1.0-py3-none-any.whl", "hashes": {"sha256": "b" * 64}},
        {"filename": "demo-1.0-cp310-cp310-manylinux_2_17_x86_64.whl", "hashes": {"sha256": "a" * 64}},
        {"filename": "demo-1.0.tar.gz", "hashes": {"sha256": "c" * 64}},
        {"filename": "demo-1.0.1-py3-none-any.whl", "hashes": {"sha256": "d" * 64}},
        {"filename": "demo-10.0.tar.gz", "hashes": {"sha256": "e" * 64}},
    ]
    text = "# a comment\n\ndemo==1.0 \\\n    --hash=sha256:%s\n" % ("f" * 64)
    assert lr.lock(text, lambda name, version: files) == (
        "# a comment\n\ndemo==1.0 \\\n"
        "    --hash=sha256:%s \\\n    --hash=sha256:%s \\\n    --hash=sha256:%s\n" % ("a" * 64, "b" * 64, "c" * 64)
    )


def test_lock_refuses_what_is_not_an_exact_pin():
    with pytest.raises(ValueError, match="not a name==version pin"):
        lr.lock("demo>=1.0\n", lambda name, version: [])
    with pytest.raises(LookupError, match="no file of that release"):
        lr.lock("demo==9.9\n", lambda name, version: [])


def test_the_command_line_runs():
    done = subprocess.run(
        [sys.executable, str(REPO / "tools/lock_requirements.py"), "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "--require-hashes" in done.stdout


def fake_wheel(name: str, version: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        info = "%s-%s.dist-info/" % (name, version)
        wheel.writestr(info + "METADATA", "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
        wheel.writestr(info + "WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(info + "RECORD", "")
    return buffer.getvalue()


def test_pip_refuses_another_file_under_a_locked_version(tmp_path):
    """A mirror serves a file named like the locked release but with other bytes: pip, given the
    lock's line with --require-hashes, refuses it; the same line without hashes takes it."""
    pin = "codetiming==1.4.0"
    entry = re.search(r"^codetiming==1\.4\.0( \\\n +--hash=sha256:[0-9a-f]{64})+$", LOCKS[0].read_text(), re.M)[0]
    assert entry.count("--hash=") >= 1
    project = tmp_path / "simple" / "codetiming"
    project.mkdir(parents=True)
    wheel = "codetiming-1.4.0-py3-none-any.whl"
    data = fake_wheel("codetiming", "1.4.0")
    (project / wheel).write_bytes(data)
    (project / "index.html").write_text(
        '<a href="%s#sha256=%s">%s</a>\n' % (wheel, hashlib.sha256(data).hexdigest(), wheel)
    )
    (tmp_path / "locked.txt").write_text(entry + "\n")
    (tmp_path / "unlocked.txt").write_text(pin + "\n")

    def download(requirements: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pip", "--isolated", "download", "--no-deps", "--disable-pip-version-check",
             "--index-url", (tmp_path / "simple").as_uri(), "-d", str(tmp_path / "got"), "-r", requirements, *extra],
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    refused = download(str(tmp_path / "locked.txt"), "--require-hashes")
    assert refused.returncode != 0 and "DO NOT MATCH THE HASHES" in refused.stderr
    taken = download(str(tmp_path / "unlocked.txt"))
    assert taken.returncode == 0, taken.stderr
