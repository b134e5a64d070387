"""The vllm layer's shape on localhost: off, it asks nothing; on without a pinned wheel, it stops first."""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

from conftest import run_play

import mirror

REPO = Path(__file__).resolve().parents[2]
# What a stage playbook gives its layers: the stack role's values (the torch record below is written
# before the role's include brings them) and layer_state's shared arguments.
PLAY = {
    "vars_files": [str(path) for path in sorted((REPO / "roles/stack/defaults/main").glob("*.yml"))],
    "module_defaults": {"layer_state": "{{ stack_layer_args }}"},
}


def vllm_play(tmp_path: Path, **extra: object):
    state = tmp_path / "layers"
    # A stage's layer_state calls check that the host lock names the run (stack_layer_args.lock_file): take it.
    variables = {
        "stack_state_dir": str(state),
        "stack_lock_file": str(tmp_path / "run.lock"),
        "preflight_gpus": [],
        **extra,
    }
    lock = {"name": "The run lock", "host_lock": {"path": "{{ stack_lock_file }}", "run": "{{ lookup('stack_run') }}"}}
    # vllm requires torch: a complete torch record, written the way the torch layer writes one.
    torch = {"name": "A torch record", "layer_state": {"name": "torch", "state": "present", "built": True}}
    task = {"name": "The vllm layer", "ansible.builtin.include_role": {"name": "vllm"}}
    done = run_play(tmp_path, [lock, torch, task], "-e", json.dumps(variables), callback="default", **PLAY)
    return done, state


def test_off_it_reads_no_state(tmp_path: Path):
    done, state = vllm_play(tmp_path, vllm_enabled=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Read the layer state of vllm" not in done.stdout.replace("skipping", "")
    assert not (state / "vllm.json").exists()


def test_on_without_a_pinned_wheel_it_stops_before_building(tmp_path: Path):
    # The manifest pins no sha256 for the vLLM wheel: the query says build, build.yml's first task refuses.
    done, state = vllm_play(tmp_path, vllm_enabled=True)
    assert done.returncode != 0
    assert "No sha256 is pinned for vllm-" in done.stdout, done.stdout[-3000:]
    assert "Read the layer state of vllm" in done.stdout
    assert not (state / "vllm.json").exists(), "a refused layer must not be marked building"


# -- the install, on localhost with a stand-in env: its python logs each call and plays pip and vllm ----

FAKE_PYTHON = r"""#!/bin/sh
# The env's python, a stand-in: logs each call (its argv, and the vllm record as it is at that moment),
# plays `-m pip install` (exit $FAKE_PIP_RC, else writes vllm/__init__.py) and `-c <probe>` (vllm imports
# while @ROOT@/importable exists).
root=@ROOT@
{ echo "ARGV $*"; echo "STATE $(cat @STATE@/vllm.json 2>/dev/null | tr -d '\n')"; } >> "$root/calls.log"
case "$1" in
  -m)
    [ -f "$root/pip_rc" ] && exit "$(cat "$root/pip_rc")"
    for arg in "$@"; do case "$prev" in --requirement) cp "$arg" "$root/requirements.seen";; esac; prev="$arg"; done
    mkdir -p @SITE@/vllm && echo "__version__ = '0.8.5+cu118'" > @SITE@/vllm/__init__.py ;;
  -c)
    [ -f "$root/importable" ] || { echo "ModuleNotFoundError: No module named 'vllm'" >&2; exit 1; }
    echo '{"file": "@SITE@/vllm/__init__.py", "version": "0.8.5+cu118"}' ;;
esac
"""
# Outside a stage playbook: a fixed run id and no host lock (layer_state checks one only when named).
OUTSIDE_A_STAGE = {
    "stack_job_environment": {"VERL_P40_RUN": "unit-run"},
    "stack_layer_args": {
        "state_dir": "{{ stack_state_dir }}",
        "layers": "{{ stack_layer_names }}",
        "rebuild": "",
        "verify": "",
        "run": "unit-run",
        "lock_file": "",
    },
}
LOCK = "aiohttp==3.11.18 \\\n    --hash=sha256:" + "a" * 64 + "\n"


def install_play(tmp_path: Path, previous: dict | None = None, **extra: object):
    """The vllm layer on: a stand-in env, a wheel served by file:// with its sha256, a lock; its stand-in python's calls."""
    env = tmp_path / "env"
    site = env / "lib" / "python3.11" / "site-packages"
    state = tmp_path / "layers"
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"
    text = FAKE_PYTHON.replace("@ROOT@", str(tmp_path)).replace("@STATE@", str(state)).replace("@SITE@", str(site))
    python.write_text(text)
    python.chmod(0o755)
    wheel = tmp_path / "vllm-0.8.5+cu118-cp38-abi3-manylinux1_x86_64.whl"
    wheel.write_bytes(b"a stand-in wheel")
    lock = tmp_path / "vllm-lock.txt"
    lock.write_text(LOCK)
    if previous is not None:
        state.mkdir()
        (state / "vllm.json").write_text(json.dumps({"format": 1, "name": "vllm", **previous}))
    variables = {
        "stack_state_dir": str(state),
        "stack_env_prefix": str(env),
        "conda_python_version": "3.11",
        "stack_cache_dir": str(tmp_path / "cache"),
        "stack_user": "nobody",
        # Nobody to become here: every task runs as the one running the test.
        "ansible_become": False,
        **OUTSIDE_A_STAGE,
        "stack_progress_every": 1,
        "preflight_gpus": [],
        "vllm_enabled": True,
        "stack_artifact_overrides": {
            "vllm_wheel": {"url": wheel.as_uri(), "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
        },
        "vllm_requirements_file": str(lock),
        **extra,
    }
    torch = {"name": "A torch record", "layer_state": {"name": "torch", "state": "present", "built": True}}
    task = {"name": "The vllm layer", "ansible.builtin.include_role": {"name": "vllm"}}
    done = run_play(tmp_path, [torch, task], "-e", json.dumps(variables), callback="default", **PLAY)
    calls = (tmp_path / "calls.log").read_text() if (tmp_path / "calls.log").exists() else ""
    return done, state, calls


def pip_calls(calls: str) -> list[tuple[str, dict]]:
    """Each `-m pip` call: its argv, and the vllm record at that moment."""
    lines = calls.splitlines()
    found = []
    for argv, seen in zip(lines[::2], lines[1::2]):
        if argv.startswith("ARGV -m pip"):
            record = seen[len("STATE ") :]
            found.append((argv, json.loads(record) if record else {}))
    return found


def test_locked_install_marks_step_pip_and_records_after_the_import(tmp_path: Path):
    """Broken cases: the layer was marked building without step pip; pip resolved dependencies (no
    --no-deps, no --require-hashes); it recorded itself without importing vllm."""
    (tmp_path / "importable").touch()
    done, state, calls = install_play(tmp_path)
    assert done.returncode == 0, done.stdout[-4000:]
    ((argv, seen),) = pip_calls(calls)
    assert seen["status"] == "building" and seen["step"] == "pip"
    assert "--no-deps --require-hashes" in argv and "--force-reinstall" not in argv
    wheel_line, *rest = (tmp_path / "requirements.seen").read_text().splitlines()
    assert wheel_line.endswith(".whl --hash=sha256:" + hashlib.sha256(b"a stand-in wheel").hexdigest())
    assert "\n".join(rest).strip() == LOCK.strip()
    assert "-c" in calls.split("ARGV -m pip")[-1], "no import check after pip"
    record = json.loads((state / "vllm.json").read_text())
    assert record["status"] == "complete" and "step" not in record


def test_a_killed_install_is_force_reinstalled(tmp_path: Path):
    """Broken case: a run killed in pip left step pip, and the next run installed without --force-reinstall."""
    (tmp_path / "importable").touch()
    done, state, calls = install_play(tmp_path, previous={"status": "building", "run": "killed-run", "step": "pip"})
    assert done.returncode == 0, done.stdout[-4000:]
    ((argv, _),) = pip_calls(calls)
    assert "--force-reinstall" in argv and "--no-deps --require-hashes" in argv
    assert json.loads((state / "vllm.json").read_text())["status"] == "complete"


def test_without_an_import_it_does_not_record_itself(tmp_path: Path):
    """Broken case: the layer recorded itself complete though the env cannot import vllm."""
    done, state, _ = install_play(tmp_path)
    assert done.returncode != 0
    assert "import vllm' failed" in " ".join(done.stdout.split())
    record = json.loads((state / "vllm.json").read_text())
    assert record["status"] == "building" and record["step"] == "pip"


def test_without_a_lock_it_stops_unless_opted_out(tmp_path: Path):
    """Broken case: a pinned wheel installed with pip resolving vLLM's dependencies, unhashed, unasked."""
    done, state, calls = install_play(tmp_path, vllm_requirements_file="")
    assert done.returncode != 0
    assert "vLLM's dependencies are not locked" in " ".join(done.stdout.split()), done.stdout[-3000:]
    assert calls == "" and not (state / "vllm.json").exists()


def test_the_opt_out_keeps_the_mirror_credentials_off_pip(tmp_path: Path):
    """Broken case: with vllm_allow_unverified, pip got the mirror URL (its token too) on its command line."""
    (tmp_path / "importable").touch()
    served = tmp_path / "mirror"
    served.mkdir()
    (served / "vllm-0.8.5+cu118-cp38-abi3-manylinux1_x86_64.whl").write_bytes(b"an unverified wheel")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # The mirror answers 401 without the credentials: the download gets them, pip never sees them.
    server = mirror.serve([str(served)], port, auth="ci:p5ecret-pass")
    try:
        done, state, calls = install_play(
            tmp_path,
            vllm_requirements_file="",
            vllm_allow_unverified=True,
            stack_artifact_overrides={},
            stack_mirror_url="http://ci:p5ecret-pass@127.0.0.1:%d/?token=q5ecret-token" % port,
        )
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stdout[-4000:]
    ((argv, _),) = pip_calls(calls)
    assert not [secret for secret in ("q5ecret", "p5ecret") if secret in calls + done.stdout + done.stderr]
    assert "--require-hashes" not in argv
    assert (tmp_path / "requirements.seen").read_text().strip() == str(
        tmp_path / "cache" / "unverified" / "vllm-0.8.5+cu118-cp38-abi3-manylinux1_x86_64.whl"
    )
    assert not (tmp_path / "cache" / "unverified" / "vllm-0.8.5+cu118-cp38-abi3-manylinux1_x86_64.whl").exists()
    assert json.loads((state / "vllm.json").read_text())["inputs"]["unverified"] is True
