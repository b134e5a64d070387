#!/usr/bin/env python3
"""Build the REAL NVIDIA Apex (--cpp_ext --cuda_ext, sm_61) once, through the apex role.

    python tests/apex_proof/run.py [--jobs 2] [--port 18765] [--out docs/apex-proof] [--dry-run]

What it does (docs/apex-proof.md says why, and what this leaves unproven):

1. checks the vendored Apex source (`../shared/vendor/apex-e13873de.tar.gz`, 25.04) against
   its SHA256SUMS and makes a git repository of it (fixed author and dates, tag 25.04),
   served over dumb HTTP by tests/fixtures/mirror.py together with the CI stand-ins;
2. starts a throwaway container from localhost/verl-p40-debian:12 and converges the
   preflight, cuda, conda and torch layers with the CI vars (the cuda layer's toolkit is
   the stand-in runfile carrying Debian 12's real nvcc 11.8.89; torch is PyPI's 2.6.0,
   a CUDA 12.4 build);
3. runs the apex role (`--tags apex`) pointed at that repository with the CUDA extensions
   expected, MAX_JOBS=--jobs, and one proof-only change in the build environment:
   PYTHONPATH holds a sitecustomize that makes torch.version.cuda read "11.8" (torch's
   cpp_extension and Apex's setup.py both refuse an nvcc whose CUDA differs from torch's);
   the container also gets the toolkit's lib64 in ld.so.conf so the role's import check
   finds libcudart.so.11.0 (a cu118 torch brings it itself);
4. writes <out>/<date>.json and <date>.md: each extension module, `cuobjdump --list-elf`
   of each .so, compile minutes (ninja's own logs and the role's Compile task), MAX_JOBS,
   cores, nvcc/gcc/torch versions, what the workaround was, what stays unproven.

The roles are not changed for the proof: only vars (-e) and the container differ.
Exit status: 0 built and every CUDA .so holds sm_61 code, 1 failed (a result file is still
written when the build ran), 2 usage error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests" / "fixtures"), str(REPO / "tests" / "standins")]
from standin_common import sha256_file  # the stand-in builders' own, one copy

TARBALL = "apex-e13873de.tar.gz"
TOP = "apex-e13873de"
UPSTREAM_COMMIT = "e13873debc4699d39c6861074b9a3b2a02327f92"
TAG = "25.04"
REPO_NAME = "apex-e13873de.git"
IMAGE = os.environ.get("STACK_TEST_IMAGE", "localhost/verl-p40-debian:12")
ARCH = "6.1"
TORCH_CUDA_PRETEND = "11.8"
SITE_DIR = "/opt/apex-proof/site"
# The stand-in toolkit has no Thrust/CUB/libcu++ (NVIDIA's runfile does, under include/);
# torch's c10/util/complex.h includes <thrust/complex.h> in every nvcc compile. The proof
# adds Debian 12's packages of them (main component, /usr/include, which the host compiler
# searches after the toolkit's include/). The first run without them failed there.
TEMPLATE_LIBS = ["libthrust-dev", "libcub-dev", "libcu++-dev"]
STANDINS = REPO / ".cache" / "standins"
PY_STANDINS = REPO / ".cache" / "standins-python"
VARS_FILES = [STANDINS / "standins.yml", PY_STANDINS / "standins_python.yml", REPO / "tests/fixtures/ci-vars.yml"]
# Where the role defaults put things (roles/stack/defaults/main/stack.yml, roles/*/defaults).
CUDA_PREFIX = "/usr/local/cuda-11.8"
ENV_PYTHON = "/opt/miniforge3/envs/verl-env/bin/python"
APEX_SRC = "/home/verl/verl-p40/apex"
APEX_LOG = "/home/verl/verl-p40/logs/apex-build.log"
WHEEL_CACHE = "/var/cache/verl-p40/apex-wheels"
# What Apex 25.04's setup.py builds with --cpp_ext --cuda_ext on CUDA 11.8 (no other flags).
EXPECTED_MODULES = [
    "apex_C",
    "amp_C",
    "syncbn",
    "fused_layer_norm_cuda",
    "mlp_cuda",
    "fused_dense_cuda",
    "scaled_upper_triang_masked_softmax_cuda",
    "generic_scaled_masked_softmax_cuda",
    "scaled_masked_softmax_cuda",
    "scaled_softmax_cuda",
    "fused_rotary_positional_embedding",
    "fused_weight_gradient_mlp_cuda",
]

# Loaded by every Python process of the build (PYTHONPATH); only torch.version changes.
SITECUSTOMIZE = '''\
"""APEX PROOF ONLY (tests/apex_proof/run.py), never part of a role or a real host.

The proof builds with nvcc 11.8 against PyPI's torch 2.6.0, a CUDA 12.4 build. torch's
cpp_extension and Apex's setup.py both stop on that mismatch, so in the build's processes
torch.version.cuda reads "%(cuda)s", what a torch 2.6.0+cu118 reports. Nothing else changes.
"""

import importlib.abc
import importlib.machinery
import sys


class _TorchVersionAsCu118(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch.version":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            module.real_cuda = module.cuda
            module.cuda = "%(cuda)s"

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _TorchVersionAsCu118())
''' % {"cuda": TORCH_CUDA_PRETEND}

# Run in the container after the build: ninja's logs per extension (compile seconds).
NINJA_SCRIPT = r"""
import glob, json, os, sys
out = {}
for log in sorted(glob.glob(sys.argv[1] + "/build/temp.*/**/.ninja_log", recursive=True)):
    ext = os.path.basename(os.path.dirname(log))
    steps = []
    for line in open(log):
        if line.startswith("#"):
            continue
        start, end, _mtime, target = line.split("\t")[:4]
        steps.append((int(start), int(end), target))
    out[ext] = {
        "objects": len(steps),
        "cpu_seconds": round(sum(e - s for s, e, _ in steps) / 1000, 1),
        "wall_seconds": round(max((e for _, e, _ in steps), default=0) / 1000, 1),
        "slowest": sorted(([t.rsplit("/", 1)[-1], round((e - s) / 1000, 1)] for s, e, t in steps),
                          key=lambda x: -x[1])[:3],
    }
print(json.dumps(out))
"""

# Run in the container: unpack the wheel, list the extension modules and their device code.
ELF_SCRIPT = r"""
import glob, json, os, subprocess, sys, zipfile
wheel, cuobjdump, dest = sys.argv[1:4]
if wheel.endswith(".whl"):
    zipfile.ZipFile(wheel).extractall(dest)
else:  # a build directory: the modules linked so far
    dest = wheel
found = []
for so in sorted(set(glob.glob(dest + "/**/*.so", recursive=True))):
    proc = subprocess.run([cuobjdump, "--list-elf", so], capture_output=True, text=True)
    found.append({
        "module": os.path.basename(so).split(".")[0],
        "path": os.path.relpath(so, dest),
        "bytes": os.path.getsize(so),
        "list_elf_rc": proc.returncode,
        "list_elf": (proc.stdout + proc.stderr).strip().splitlines(),
    })
print(json.dumps(found))
"""

IMPORT_SCRIPT = r"""
import importlib, json, sys
import torch
res = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        res[name] = "ok"
    except Exception as exc:
        res[name] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(res))
"""


def say(msg: str) -> None:
    print("[apex-proof %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def check_vendor(vendor: Path) -> Path:
    """The tarball, checked against the SHA256SUMS next to it."""
    tarball = vendor / TARBALL
    sums = vendor / "SHA256SUMS"
    if not tarball.is_file() or not sums.is_file():
        raise SystemExit("missing %s or %s: give --vendor DIR (the shared vendor directory)" % (tarball, sums))
    pinned = {line.split()[1]: line.split()[0] for line in sums.read_text().splitlines() if line.strip()}
    if pinned.get(TARBALL) != sha256_file(tarball):
        raise SystemExit("%s does not match its sha256 in %s" % (tarball, sums))
    return tarball


def git_env() -> dict[str, str]:
    """Fixed identity and dates: the same tarball always gives the same commit."""
    when = "2025-04-11T00:00:00+00:00"  # upstream's 25.04 commit date
    return dict(
        os.environ,
        GIT_AUTHOR_NAME="apex-proof",
        GIT_AUTHOR_EMAIL="apex-proof@localhost",
        GIT_COMMITTER_NAME="apex-proof",
        GIT_COMMITTER_EMAIL="apex-proof@localhost",
        GIT_AUTHOR_DATE=when,
        GIT_COMMITTER_DATE=when,
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_CONFIG_NOSYSTEM="1",
    )


def make_repo(tarball: Path, serve_dir: Path) -> str:
    """A bare repository of the tarball's tree under serve_dir; returns its commit."""
    env = git_env()
    bare = serve_dir / REPO_NAME
    shutil.rmtree(bare, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="data")
        src = Path(tmp) / TOP
        git = ["git", "-C", str(src)]
        subprocess.run([*git, "init", "-q", "-b", "main"], check=True, env=env)
        subprocess.run([*git, "add", "-A"], check=True, env=env)
        message = "Apex %s: the tree of upstream commit %s (from %s)" % (TAG, UPSTREAM_COMMIT, TARBALL)
        subprocess.run([*git, "commit", "-q", "-m", message], check=True, env=env)
        subprocess.run([*git, "tag", TAG], check=True, env=env)
        commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, env=env, capture_output=True, text=True)
        subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True, env=env)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True, env=env)
    return commit.stdout.strip()


def apex_vars(port: int, commit: str, jobs: int) -> dict[str, Any]:
    """The -e vars of the apex run: the real source, CUDA extensions expected, and the
    proof-only PYTHONPATH (the role's own apex_build_environment hook)."""
    return {
        "apex_repo_url": "http://127.0.0.1:%d/%s" % (port, REPO_NAME),
        "apex_commit": commit,
        "apex_version_label": TAG,
        "apex_cuda_extensions_expected": True,
        "apex_max_jobs": jobs,
        "apex_build_environment": {"PYTHONPATH": SITE_DIR},
    }


def playbook_command(inventory: Path, tags: str, extra: dict[str, Any] | None) -> list[str]:
    files = [arg for path in VARS_FILES for arg in ("-e", "@%s" % path)]
    command = ["ansible-playbook", "-i", str(inventory), str(REPO / "site.yml"), *files, "--tags", tags]
    if extra:
        command += ["-e", json.dumps(extra, sort_keys=True)]
    return command


def write_inventory(workdir: Path, container: str) -> Path:
    inv = workdir / "inventory"
    inv.mkdir(parents=True, exist_ok=True)
    hosts = inv / "hosts.yml"
    hosts.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {
                        container: {
                            "ansible_connection": "containers.podman.podman",
                            "ansible_python_interpreter": "/usr/bin/python3",
                        }
                    }
                }
            },
            indent=1,
        )
    )
    return hosts


def podman_sh(container: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", "exec", container, "sh", "-c", command], capture_output=True, text=True, check=check
    )


def container_python(container: str, python: str, script: str, *args: str) -> Any:
    proc = subprocess.run(
        ["podman", "exec", container, python, "-c", script, *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return {"error": (proc.stdout + proc.stderr).strip()[-2000:]}
    return json.loads(proc.stdout)


def play(command: list[str], log: Path, port: int) -> tuple[int, float]:
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
        VERL_P40_MIRROR_PORT=str(port),
    )
    say("running %s (log %s)" % (" ".join(command[:2] + command[-4:]), log))
    t0 = time.monotonic()
    with log.open("w") as fh:
        rc = subprocess.run(command, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO, check=False).returncode
    return rc, time.monotonic() - t0


def task_seconds(log_text: str, task: str) -> float | None:
    """profile_tasks' recap line of a task: 'Apex | Compile (...) ---- 1234.56s', or, when the
    task's name is too long for the dashes, 'Apex | Compile (...)  1234.56s'."""
    match = re.search(re.escape(task) + r"[^\n]*?[\s-]([0-9]+\.[0-9]+)s[ \t]*$", log_text, re.M)
    return float(match.group(1)) if match else None


def output_line(container: str, command: str) -> str:
    """The first line a command prints in the container ('' if none)."""
    lines = podman_sh(container, command, check=False)
    return next(iter((lines.stdout + lines.stderr).strip().splitlines()), "")


def collect(container: str, workdir: Path) -> dict[str, Any]:
    """Everything the result file says about the build, read from the container."""
    facts: dict[str, Any] = {}
    facts["nvcc"] = output_line(container, CUDA_PREFIX + "/bin/nvcc --version | grep release")
    facts["host_compiler"] = podman_sh(container, "cat /var/lib/verl-p40/layers/cuda.json", check=False).stdout.strip()
    try:
        facts["host_compiler"] = json.loads(facts["host_compiler"])["details"]["host_compiler"]
    except (ValueError, KeyError):
        pass
    facts["host_compiler_version"] = output_line(container, "%s --version" % facts["host_compiler"])
    facts["torch"] = container_python(
        container,
        ENV_PYTHON,
        "import json, torch; print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda}))",
    )
    facts["template_libs"] = podman_sh(
        container, "dpkg-query -W %s" % " ".join(TEMPLATE_LIBS), check=False
    ).stdout.split("\n")[:-1]
    facts["ninja"] = container_python(container, "python3", NINJA_SCRIPT, APEX_SRC)
    wheels = podman_sh(container, "ls %s/*/apex-*.whl 2>/dev/null" % WHEEL_CACHE, check=False).stdout.split()
    facts["wheel"] = wheels[0].rsplit("/", 1)[-1] if wheels else None
    facts["extensions"] = (
        container_python(container, "python3", ELF_SCRIPT, wheels[0], CUDA_PREFIX + "/bin/cuobjdump", "/tmp/apex-whl")
        if wheels
        else []
    )
    facts["imports"] = container_python(container, ENV_PYTHON, IMPORT_SCRIPT, *EXPECTED_MODULES)
    subprocess.run(["podman", "cp", container + ":" + APEX_LOG, str(workdir / "apex-build.log")], check=False)
    if (workdir / "apex-build.log").is_file():
        facts["build_log"] = log_facts((workdir / "apex-build.log").read_text(errors="replace"))
    return facts


def render(path: Path, play_log: Path | None = None) -> int:
    """The .md of a result again, after the script's text about what stays unproven changed, or
    with the Compile task's seconds read from the run's own apex play log (`play_log`) where
    the result has none (an older parser missed profile_tasks' line for a long task name)."""
    result = json.loads(path.read_text())
    before = json.dumps(result, sort_keys=True)
    if result.get("unproven") != UNPROVEN:
        result["unproven"] = UNPROVEN
        result["unproven_updated_utc"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    if play_log is not None and result.get("compile_task_seconds") is None:
        seconds = task_seconds(play_log.read_text(errors="replace"), "Apex | Compile")
        if seconds is None:
            raise SystemExit("%s has no profile_tasks line of the Compile task" % play_log)
        result["compile_task_seconds"] = seconds
        result["compile_minutes"] = round(seconds / 60, 1)
        result["compile_task_seconds_from"] = "%s, read again by --render --play-log" % play_log.name
    if json.dumps(result, sort_keys=True) != before:
        path.write_text(json.dumps(result, indent=1) + "\n")
    path.with_suffix(".md").write_text(markdown(result))
    say("wrote %s" % path.with_suffix(".md"))
    return 0


def snapshot(container: str, out: Path) -> int:
    """How far a build still running in the container got: the objects ninja finished, the
    modules linked so far and their device code. Not a result: the build is not done."""
    now = dt.datetime.now(dt.timezone.utc)
    built = container_python(
        container,
        "python3",
        ELF_SCRIPT,
        output_line(container, "ls -d %s/build/lib.*" % APEX_SRC),
        CUDA_PREFIX + "/bin/cuobjdump",
        "-",
    )
    log = podman_sh(container, "cat %s" % APEX_LOG, check=False).stdout
    taken = {
        "taken_utc": now.isoformat(timespec="seconds"),
        "status": "build still running: a snapshot, not a result",
        "machine": {"cores": os.cpu_count(), "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()]},
        "ninja": container_python(container, "python3", NINJA_SCRIPT, APEX_SRC),
        "linked": built,
        "extension_being_built": (re.findall(r"building '(\w+)' extension", log) or ["-"])[-1],
        "build_log": log_facts(log),
    }
    out.mkdir(parents=True, exist_ok=True)
    stem = out / (now.strftime("%Y-%m-%d") + "-snapshot")
    stem.with_suffix(".json").write_text(json.dumps(taken, indent=1) + "\n")
    lines = [
        "# Apex proof build: snapshot of a running build, %s" % taken["taken_utc"],
        "",
        "Written by `tests/apex_proof/run.py --snapshot`; the build was still running. "
        "Load average (1, 5, 15 min): %s on %s cores." % (taken["machine"]["loadavg_1_5_15"], os.cpu_count()),
        "",
        "Extension being built: `%s`. Linked so far:" % taken["extension_being_built"],
        "",
        "| module | cuobjdump --list-elf |",
        "|---|---|",
    ]
    for ext in built if isinstance(built, list) else []:
        lines.append("| `%s` | %s |" % (ext["module"], "<br>".join("`%s`" % x for x in ext["list_elf"]) or "-"))
    lines += ["", "ninja, per extension: `%s`" % json.dumps(taken["ninja"])]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    say("wrote %s.json and .md" % stem)
    return 0


def log_facts(text: str) -> dict[str, Any]:
    """What the build log says about the nvcc calls: the -gencode pairs and the host compiler."""
    nvcc_lines = [line for line in text.splitlines() if "/bin/nvcc " in line]
    return {
        "nvcc_commands": len(nvcc_lines),
        "gencode": sorted(set(re.findall(r"arch=compute_\d+,code=\w+", "\n".join(nvcc_lines)))),
        "ccbin": sorted(set(re.findall(r"-ccbin\s+(\S+)", "\n".join(nvcc_lines)))),
        "warnings": len(re.findall(r"\bwarning\b", text)),
        "lines": text.count("\n"),
    }


def elf_archs(lines: list[str]) -> list[str]:
    """The sm_XX of each ELF cuobjdump lists ('ELF file    1: name.sm_61.cubin')."""
    return sorted(set(re.findall(r"\.(sm_\d+)\.cubin", "\n".join(lines))))


def verdict(facts: dict[str, Any]) -> dict[str, Any]:
    exts = facts.get("extensions") or []
    if isinstance(exts, dict):  # the helper failed
        exts = []
    built = sorted(e["module"] for e in exts)
    missing = [m for m in EXPECTED_MODULES if m not in built]
    cuda = [e for e in exts if e["module"] != "apex_C"]
    without = [e["module"] for e in cuda if "sm_61" not in elf_archs(e["list_elf"])]
    return {"built": built, "missing": missing, "cuda_without_sm_61": without, "ok": not missing and not without}


UNPROVEN = [
    "The kernels never ran: no GPU here; FusedLayerNorm against LayerNorm (the role's GPU check) was skipped.",
    "The ABI of the real torch 2.6.0+cu118: the extensions were compiled against the headers and linked "
    "against the libraries of PyPI's torch 2.6.0 (a CUDA 12.4 build) that only claimed CUDA 11.8 in "
    "the build processes; the same torch source, but not the cu118 binary a P40 host runs.",
    "Imports here load libcudart 11.8 next to torch's CUDA 12 libraries (cuBLAS 12 resolves "
    "the cuBLAS calls of mlp_cuda and fused_dense_cuda): an import that works here says the "
    "symbols resolve, not that the mix would run.",
    "The toolkit is the CI stand-in's: NVIDIA's nvcc 11.8.89, cicc, ptxas and headers as Debian "
    "12 packages them, not the runfile's own files; Thrust, CUB and libcu++ (which torch's headers "
    "include) are Debian 12's packages, not the versions the runfile bundles.",
    "Only the default --cpp_ext --cuda_ext set: Apex's optional extensions (--distributed_adam, "
    "--xentropy, ...) were not built; the role does not ask for them.",
]


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Apex proof build, %s" % result["date"],
        "",
        "Written by `tests/apex_proof/run.py` (`make apex-proof`); the JSON next to this file has every figure.",
        "",
        "- Ran: through the apex role (`--tags apex`%s), in a throwaway container from `%s` on %s "
        "(%d cores, %s GiB)"
        % (
            ", rerun in a container kept from an earlier try" if result.get("reused_container") else "",
            result["image"],
            result["machine"]["host"],
            result["machine"]["cores"],
            result["machine"]["mem_gib"],
        ),
        "- Source: `%s` (Apex %s, upstream %s), sha256 `%s`"
        % (TARBALL, TAG, UPSTREAM_COMMIT, result["tarball_sha256"]),
        "- nvcc: `%s`; host compiler `%s` (`%s`)"
        % (
            result["facts"].get("nvcc"),
            result["facts"].get("host_compiler"),
            result["facts"].get("host_compiler_version"),
        ),
        "- torch in the env: `%s`" % json.dumps(result["facts"].get("torch")),
        "- MAX_JOBS=%d; -gencode pairs in the build log's nvcc calls: %s"
        % (result["max_jobs"], ", ".join((result["facts"].get("build_log") or {}).get("gencode", [])) or "-"),
        "- Result: **%s** (apex play exit %s)"
        % ("built, sm_61 in every CUDA .so" if result["verdict"]["ok"] else "FAILED", result["apex_play_rc"]),
        "- Compile: the role's Compile task %s s (%s min); the apex play %.0f s; converge to torch %.0f s"
        % (
            result["compile_task_seconds"],
            result["compile_minutes"],
            result["apex_play_seconds"],
            result["base_play_seconds"],
        ),
        "- Mismatch workaround (proof only): %s" % result["workaround"],
        "",
        "| module | .so bytes | cuobjdump --list-elf | ninja objects | compile CPU s |",
        "|---|---|---|---|---|",
    ]
    ninja = result["facts"].get("ninja") or {}
    for ext in result["facts"].get("extensions") or []:
        nj = ninja.get(ext["module"], {}) if isinstance(ninja, dict) else {}
        lines.append(
            "| `%s` | %d | %s | %s | %s |"
            % (
                ext["module"],
                ext["bytes"],
                "<br>".join("`%s`" % x for x in ext["list_elf"]) or "-",
                nj.get("objects", "-"),
                nj.get("cpu_seconds", "-"),
            )
        )
    lines += [
        "",
        "Imports in the env (proof container): `%s`" % json.dumps(result["facts"].get("imports")),
        "",
        "## Unproven",
        "",
    ]
    lines += ["- %s" % item for item in result["unproven"]]
    if not result["verdict"]["ok"]:
        lines += [
            "",
            "## Failure",
            "",
            "Missing: %s; without sm_61: %s" % (result["verdict"]["missing"], result["verdict"]["cuda_without_sm_61"]),
            "",
            "```",
            *result.get("log_tail", []),
            "```",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--vendor", type=Path, default=Path(os.environ.get("VERL_P40_VENDOR", REPO.parent / "shared" / "vendor"))
    )
    parser.add_argument("--jobs", type=int, default=2, help="MAX_JOBS for the build (default 2)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("VERL_P40_MIRROR_PORT", "18765")))
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "apex-proof")
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "apex-proof")
    parser.add_argument("--keep", action="store_true", help="leave the container running")
    parser.add_argument(
        "--container",
        help="reuse this container, already converged up to torch by an earlier --keep run "
        "(skips the converge; the container is kept; for trying a fix, not for the evidence)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    parser.add_argument(
        "--snapshot",
        action="store_true",
        help="with --container: record how far a build still running there got "
        "(<out>/<date>-snapshot.json and .md), run nothing",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="write the .md of a result JSON again, with the current list of what stays unproven",
    )
    parser.add_argument(
        "--play-log",
        type=Path,
        metavar="LOG",
        help="with --render: the run's apex play log, for a Compile time the result lacks",
    )
    args = parser.parse_args(argv)
    if args.snapshot and not args.container:
        parser.error("--snapshot needs --container")
    if args.jobs < 1:
        parser.error("--jobs must be 1 or more")

    container = args.container or "verl-p40-apexproof-" + uuid.uuid4().hex[:8]
    keep = args.keep or bool(args.container)
    inventory = args.work / "inventory" / "hosts.yml"
    base = playbook_command(inventory, "preflight,cuda,conda,torch", None)
    apex = playbook_command(inventory, "apex", apex_vars(args.port, "<commit of the tarball's tree>", args.jobs))
    if args.dry_run:
        print("vendor: %s (checked against SHA256SUMS)" % (args.vendor / TARBALL))
        print(
            "repository: %s (tag %s), served on http://127.0.0.1:%d/"
            % (args.work / "serve" / REPO_NAME, TAG, args.port)
        )
        print("container: podman run -d --init --network host --name %s %s sleep infinity" % (container, IMAGE))
        print("base: " + shlex.join(base))
        print(
            "proof-only: %s/sitecustomize.py (torch.version.cuda = %r); %s/lib64 in ld.so.conf; apt-get install %s"
            % (SITE_DIR, TORCH_CUDA_PRETEND, CUDA_PREFIX, " ".join(TEMPLATE_LIBS))
        )
        print("apex: " + shlex.join(apex))
        print("result: %s/<date>.json and .md" % args.out)
        return 0

    if args.snapshot:
        return snapshot(args.container, args.out)
    if args.render:
        return render(args.render, args.play_log)
    for path in VARS_FILES:
        if not path.is_file():
            parser.error("missing %s: run `make standins`" % path)
    tarball = check_vendor(args.vendor)
    args.work.mkdir(parents=True, exist_ok=True)
    serve_dir = args.work / "serve"
    serve_dir.mkdir(exist_ok=True)
    commit = make_repo(tarball, serve_dir)
    say("repository %s, commit %s" % (serve_dir / REPO_NAME, commit))
    apex = playbook_command(inventory, "apex", apex_vars(args.port, commit, args.jobs))

    from mirror import serve  # noqa: PLC0415 - tests/fixtures, on sys.path (above)
    from prepare_host import prepare  # noqa: PLC0415

    server = serve([str(serve_dir), str(STANDINS), str(PY_STANDINS)], args.port)
    started = dt.datetime.now(dt.timezone.utc)
    load_start = os.getloadavg()
    if not args.container:
        subprocess.run(
            ["podman", "run", "-d", "--init", "--network", "host", "--name", container, IMAGE, "sleep", "infinity"],
            check=True,
            capture_output=True,
        )
    base_s = 0.0
    try:
        say("container %s" % container)
        write_inventory(args.work, container)
        if not args.container:
            prepare(container)
            base_rc, base_s = play(base, args.work / "base-play.log", args.port)
            if base_rc != 0:
                say("converging up to torch failed: see %s" % (args.work / "base-play.log"))
                return 1
        # Proof-only: the sitecustomize, and the toolkit's cudart on the loader's path.
        podman_sh(container, "mkdir -p %s" % SITE_DIR)
        (args.work / "sitecustomize.py").write_text(SITECUSTOMIZE)
        subprocess.run(
            ["podman", "cp", str(args.work / "sitecustomize.py"), container + ":" + SITE_DIR + "/"], check=True
        )
        podman_sh(
            container,
            "chmod -R a+rX /opt/apex-proof && echo %s/lib64 > /etc/ld.so.conf.d/apex-proof.conf && ldconfig"
            % CUDA_PREFIX,
        )
        podman_sh(container, "apt-get install -y -qq %s >/dev/null" % " ".join(TEMPLATE_LIBS))
        # A reused container keeps the objects of an earlier try: compile everything again.
        podman_sh(container, "rm -rf %s/build" % APEX_SRC)
        apex_rc, apex_s = play(apex, args.work / "apex-play.log", args.port)
        say("apex play exit %d after %.0f s" % (apex_rc, apex_s))
        facts = collect(container, args.work)
    finally:
        server.shutdown()
        if keep:
            say("container %s kept" % container)
        else:
            subprocess.run(["podman", "rm", "-f", "-t", "0", container], capture_output=True, check=False)

    play_log = (args.work / "apex-play.log").read_text(errors="replace")
    compile_s = task_seconds(play_log, "Apex | Compile")
    build_log = args.work / "apex-build.log"
    result: dict[str, Any] = {
        "date": started.strftime("%Y-%m-%d"),
        "started_utc": started.isoformat(timespec="seconds"),
        "path": "role",
        "reused_container": bool(args.container),
        "image": IMAGE,
        "machine": {
            "host": platform.node(),
            "cores": os.cpu_count(),
            # The machine may be shared: the load around the run says how much.
            "loadavg_1_5_15_at_start": [round(x, 2) for x in load_start],
            "loadavg_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()],
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        },
        "tarball": TARBALL,
        "tarball_sha256": sha256_file(tarball),
        "upstream_commit": UPSTREAM_COMMIT,
        "proof_repo_commit": commit,
        "arch_list": ARCH,
        "max_jobs": args.jobs,
        "base_play_seconds": round(base_s, 1),
        "apex_play_rc": apex_rc,
        "apex_play_seconds": round(apex_s, 1),
        "compile_task_seconds": compile_s,
        "compile_minutes": round(compile_s / 60, 1) if compile_s else None,
        "workaround": "PYTHONPATH=%s (apex_build_environment) with a sitecustomize that sets torch.version.cuda to "
        "%r in the build's processes; %s/lib64 in the container's ld.so.conf for the import check; "
        "Debian 12's %s in the container (the stand-in toolkit lacks Thrust/CUB/libcu++)"
        % (SITE_DIR, TORCH_CUDA_PRETEND, CUDA_PREFIX, ", ".join(TEMPLATE_LIBS)),
        "facts": facts,
        "unproven": UNPROVEN,
    }
    result["verdict"] = verdict(facts)
    if not result["verdict"]["ok"]:
        tail = play_log.splitlines()[-40:]
        if build_log.is_file():
            log = build_log.read_text(errors="replace").splitlines()
            errors = [line[:300] for line in log if re.search(r"error|FAILED", line)][:20]
            tail = [
                "--- apex play ---",
                *tail,
                "--- build log, errors ---",
                *errors,
                "--- build log, end ---",
                *[line[:300] for line in log[-30:]],
            ]
        result["log_tail"] = tail
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / result["date"]
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    say("wrote %s.json and .md: %s" % (stem, "ok" if result["verdict"]["ok"] else "FAILED"))
    return 0 if result["verdict"]["ok"] and apex_rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
