"""tools/setup_python.py: the Python make setup builds the control venv with, on every supported OS.

The pieces on this host (the lock's uv pin, the wheel for this machine, the search order), the
Makefile's call, a real search from an older Python, and on the Debian 11 image (its own Python
3.9, no python3-venv, no network) the whole path: nothing usable, uv's wheel from a local index
checked against requirements.txt, `uv python install 3.12` from a local mirror that serves a
stand-in build (uv refuses it: its sha256 is not the real build's; GitHub cannot be reached here,
so no real CPython is got), then the exact steps.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import setup_python as sp

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "setup_python.py"

IMAGE = "localhost/verl-p40-debian:11"
UV_CACHE = REPO / ".cache" / "setup"


def test_the_lock_pins_uv_with_the_hash_of_every_file():
    version, hashes = sp.locked((REPO / "requirements.txt").read_text(), "uv")
    assert version == "0.13.9" and len(hashes) >= 10
    with pytest.raises(ValueError, match="not pinned with hashes"):
        sp.locked("uv==0.13.9\n", "uv")


def test_the_wheel_for_this_machine():
    name = "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert sp.wheel_fits(name, "x86_64", (2, 31))
    assert not sp.wheel_fits(name, "x86_64", (2, 12))
    assert not sp.wheel_fits(name, "aarch64", (2, 31))
    assert not sp.wheel_fits(name, "x86_64", None)  # musl
    assert sp.wheel_fits("uv-0.13.9-py3-none-musllinux_1_1_x86_64.whl", "x86_64", None)
    assert not sp.wheel_fits("uv-0.13.9.tar.gz", "x86_64", (2, 31))


def interpreter(bin_dir: Path, name: str, version: tuple[int, int, int], venv: bool = True) -> Path:
    """A stand-in interpreter: answers the tool's probe, nothing else."""
    path = bin_dir / name
    answer = json.dumps({"version": list(version), "executable": str(path), "venv": venv})
    path.write_text("#!/bin/sh\necho '%s'\n" % answer)
    path.chmod(0o755)
    return path


def run_tool(*args: str, path: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=path)
    return subprocess.run([python, str(TOOL), *args], capture_output=True, text=True, env=env, check=False, timeout=120)


def test_the_first_python_from_311_to_313_with_venv_is_taken(tmp_path: Path):
    interpreter(tmp_path, "python3", (3, 9, 2))
    interpreter(tmp_path, "python3.11", (3, 11, 2), venv=False)
    twelve = interpreter(tmp_path, "python3.12", (3, 12, 3))
    interpreter(tmp_path, "python3.13", (3, 13, 0))
    done = run_tool("--uv", "no", path=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(twelve)
    assert "python3: Python 3.9.2" in done.stderr and "older than 3.11" in done.stderr
    assert "sudo apt-get install python3.11-venv" in done.stderr
    # PYTHON named on make's command line is the only one tried
    only = run_tool("--python", "python3", "--only", "--uv", "auto", path=str(tmp_path))
    assert only.returncode == 1 and "python3.12" not in only.stdout
    assert "make setup SETUP_UV=yes" in only.stderr


def test_nothing_usable_and_uv_refused_gives_the_steps_for_the_os(tmp_path: Path):
    interpreter(tmp_path, "python3", (3, 10, 12))
    interpreter(tmp_path, "python3.14", (3, 14, 0))
    release = tmp_path / "os-release"
    release.write_text('PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n')
    done = run_tool("--uv", "no", "--os-release", str(release), path=str(tmp_path))
    assert done.returncode == 1 and done.stdout == ""
    assert "the default inventory is localhost, so Ubuntu 22.04.5 LTS is the control node" in done.stderr
    assert "1. sudo apt-get install python3.11 python3.11-venv" in done.stderr
    assert "make setup PYTHON=python3.11" in done.stderr
    assert "make setup SETUP_UV=yes" in done.stderr and "UV_PYTHON_INSTALL_MIRROR" in done.stderr
    assert "a managed host needs only Python 3.8" in done.stderr
    assert run_tool("--uv-python", "3.9", path=str(tmp_path)).returncode == 2


def test_make_setup_asks_the_tool_and_passes_python_only_when_named():
    def dry(*args: str) -> str:
        done = subprocess.run(
            ["make", "--no-print-directory", "-n", "-W", "requirements.txt", "setup", *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        )
        return done.stdout.splitlines()[0]

    default = dry()
    assert "python3 tools/setup_python.py --python 'python3'  --uv 'auto' --uv-python '3.12'" in default
    assert '"$python" -m venv --clear .venv' in default
    named = dry("PYTHON=python3.12", "SETUP_UV=no", "SETUP_PYTHON_VERSION=3.13")
    assert "--python 'python3.12' --only --uv 'no' --uv-python '3.13'" in named
    makefile = (REPO / "Makefile").read_text()
    assert "--require-hashes -r requirements.txt" in makefile


def real_python(minor: int) -> str | None:
    """A real interpreter of 3.<minor> on this machine: on PATH, or pyenv's."""
    found = shutil.which("python3.%d" % minor)
    if found and subprocess.run([found, "-c", "pass"], capture_output=True, check=False).returncode == 0:
        return found
    versions = sorted(Path("/root/.pyenv/versions").glob("3.%d.*/bin/python3.%d" % (minor, minor)))
    return str(versions[-1]) if versions else None


def test_the_tool_runs_on_python_38():
    """Ubuntu 20.04's python3 is 3.8: the tool's syntax is 3.8's, and where this machine has a real 3.8
    (pyenv's), it runs there, with a real 3.9 as python3 and a real 3.12 on PATH, and takes the 3.12."""
    import ast

    ast.parse(TOOL.read_text(), feature_version=(3, 8))
    pythons = {minor: real_python(minor) for minor in (8, 9, 12)}
    if not all(pythons.values()):
        return  # the Debian 11 test below runs it on a real 3.9
    bin_dir = Path(os.environ.get("TMPDIR", "/tmp")) / ("setup-python-%d" % os.getpid())
    shutil.rmtree(bin_dir, ignore_errors=True)
    bin_dir.mkdir()
    try:
        (bin_dir / "python3").symlink_to(pythons[9])
        (bin_dir / "python3.12").symlink_to(pythons[12])
        done = run_tool("--uv", "no", path=str(bin_dir), python=pythons[8])
        assert done.returncode == 0, done.stderr
        assert os.path.realpath(done.stdout.strip()) == os.path.realpath(pythons[12])
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)
    assert "python3: Python 3.9." in done.stderr


# --- on the Debian 11 image ----------------------------------------------------------------------

SERVER = r"""
import http.server, os, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/mirror/"):
            print("MIRROR " + self.path, file=sys.stderr, flush=True)
            data = open("/srv/standin.tar.gz", "rb").read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        super().do_GET()
    def log_message(self, *args):
        pass
os.chdir("/srv")
http.server.ThreadingHTTPServer(("127.0.0.1", 8765), Handler).serve_forever()
"""

STANDIN = r"""
import io, tarfile
with tarfile.open("/srv/standin.tar.gz", "w:gz") as archive:
    data = b"#!/bin/sh\necho stand-in\n"
    info = tarfile.TarInfo("python/bin/python3.12")
    info.size, info.mode = len(data), 0o755
    archive.addfile(info, io.BytesIO(data))
"""

SCRIPT = r"""
set -u
exec 2>&1
python3 -V
mkdir -p /srv/index/uv
cp /wheels/*.whl /srv/index/uv/
wheel=$(basename /srv/index/uv/*.whl)
echo "<a href=\"$wheel\">$wheel</a>" > /srv/index/uv/index.html
python3 -c "$STANDIN"
python3 -c "$SERVER" 2>/tmp/mirror.log &
sleep 1
echo "== refused"
python3 /repo/tools/setup_python.py --uv no --cache /tmp/cache; echo "rc=$?"
echo "== uv"
UV_HTTP_RETRIES=0 UV_PYTHON_INSTALL_MIRROR=http://127.0.0.1:8765/mirror \
  python3 /repo/tools/setup_python.py --index-url http://127.0.0.1:8765/index --cache /tmp/cache; echo "rc=$?"
cat /tmp/mirror.log
echo "== found"
cat > /usr/local/bin/python3.12 <<'STANDIN'
#!/bin/sh
echo '{"version": [3, 12, 16], "executable": "/usr/local/bin/python3.12", "venv": true}'
STANDIN
chmod +x /usr/local/bin/python3.12
python3 /repo/tools/setup_python.py; echo "rc=$?"
"""


def uv_wheel() -> Path:
    """uv's wheel for this machine, as make setup would fetch it (cached under .cache/setup)."""
    UV_CACHE.mkdir(parents=True, exist_ok=True)
    version = sp.locked((REPO / "requirements.txt").read_text(), "uv")[0]
    pattern = "uv-%s-*_%s.whl" % (version, platform.machine())
    wheels = sorted(UV_CACHE.glob(pattern))
    if not wheels:
        try:
            sp.pinned_uv(UV_CACHE, sp.DEFAULT_INDEX, (REPO / "requirements.txt").read_text())
        except RuntimeError as error:
            pytest.fail("cannot fetch uv's wheel from PyPI (make setup's index): %s" % error)
        wheels = sorted(UV_CACHE.glob(pattern))
    with zipfile.ZipFile(wheels[-1]) as archive:
        assert any(name.endswith(".data/scripts/uv") for name in archive.namelist())
    return wheels[-1]


def test_debian_11_python_39_uv_from_the_lock_and_the_steps(tmp_path: Path):
    env = dict(os.environ, CONTAINERS_CONF=os.environ.get("CONTAINERS_CONF", str(REPO / ".cache" / "containers.conf")))
    present = subprocess.run(["podman", "image", "exists", IMAGE], env=env, check=False)
    if present.returncode != 0:
        pytest.fail("%s is missing: make images builds it" % IMAGE)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    shutil.copy(uv_wheel(), wheels)
    command = [
        "podman", "run", "--rm", "--network", "none",
        "-v", "%s:/repo:ro" % REPO, "-v", "%s:/wheels:ro" % wheels,
        "-e", "SERVER=" + SERVER, "-e", "STANDIN=" + STANDIN,
        IMAGE, "bash", "-c", SCRIPT,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    refused, uv, found = out.split("== refused")[1].split("== uv")[0], *out.split("== uv")[1].split("== found")
    assert "Python 3.9.2" in out
    # Debian 11: python3 is 3.9, no python3.1x package, and the tool says what to do
    assert "not usable: python3: Python 3.9.2 (/usr/bin/python3), older than 3.11" in refused
    assert "Debian GNU/Linux 11 (bullseye) is the control node" in refused
    assert "make setup SETUP_UV=yes" in refused and "rc=1" in refused
    # uv: the wheel from the (local) index, accepted by requirements.txt's hashes, uv runs on Debian 11
    # and asks the mirror for CPython 3.12; the stand-in's sha256 is not the real build's: refused
    assert "downloading uv-0.13.9-" in uv
    assert "getting CPython 3.12 with /tmp/cache/uv-0.13.9/uv" in uv
    assert "MIRROR /mirror/" in uv and "cpython-3.12." in uv and "install_only" in uv
    assert "Hash mismatch" in uv
    assert "let uv reach its download: UV_PYTHON_INSTALL_MIRROR=" in uv and "rc=1" in uv
    # a Python 3.12 on PATH (a stand-in answering the probe) is taken, by the tool on 3.9
    assert found.strip().splitlines()[-2:] == ["/usr/local/bin/python3.12", "rc=0"], found


@pytest.mark.parametrize(
    ("variables", "said", "not_said"),
    [
        ({}, "downloads a python-build-standalone build from " + sp.PYTHON_DOWNLOADS, "UV_PYTHON_DOWNLOADS_JSON_URL"),
        (
            {"UV_PYTHON_INSTALL_MIRROR": "http://mirror.test/pbs"},
            "build from http://mirror.test/pbs (UV_PYTHON_INSTALL_MIRROR), checked against the sha256 uv carries",
            "UV_PYTHON_DOWNLOADS_JSON_URL",
        ),
        (
            # uv's own list of downloads replaces its table and its sha256s (make setup-proof's stand-in)
            {"UV_PYTHON_DOWNLOADS_JSON_URL": "/srv/list.json", "UV_PYTHON_INSTALL_MIRROR": "http://mirror.test/pbs"},
            "downloads the build the list /srv/list.json (UV_PYTHON_DOWNLOADS_JSON_URL) names, checked against the"
            " sha256 it gives",
            "uv carries",
        ),
    ],
)
def test_the_tool_says_where_uv_downloads_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variables, said, not_said
):
    for name in ("UV_PYTHON_DOWNLOADS_JSON_URL", "UV_PYTHON_INSTALL_MIRROR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\necho 'no download' >&2\nexit 1\n")
    uv.chmod(0o755)
    with pytest.raises(RuntimeError, match="uv python install 3.11"):
        sp.uv_python(uv, "3.11")
    err = capsys.readouterr().err
    assert said in err and not_said not in err
