"""Tests for tests/apex_proof/run.py, the real Apex build (`make apex-proof`).

The build itself takes half an hour and a container; these check its command line (a dry
run, and `make -n apex-proof`), the proof-only torch.version.cuda workaround against a
fake torch package, the repository it makes of the vendored tarball, and how it judges
cuobjdump's output.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from repo import REPO, load_file

SCRIPT = REPO / "tests" / "apex_proof" / "run.py"


proof = load_file(SCRIPT, "apex_proof_run")


def dry_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, cwd=REPO, check=False
    )


def apex_vars_of(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("apex: "))
    return json.loads(line.rsplit(" -e ", 1)[1].strip("'").replace("'\"'\"'", "'"))


def test_dry_run_converges_to_torch_then_runs_the_apex_role_with_cuda_extensions():
    done = dry_run("--port", "18999", "--jobs", "1")
    assert done.returncode == 0, done.stderr
    lines = {line.split(": ", 1)[0]: line for line in done.stdout.splitlines()}
    assert "--tags preflight,cuda,conda,torch" in lines["base"]
    assert "--tags apex" in lines["apex"]
    assert "tests/fixtures/ci-vars.yml" in lines["apex"]
    extra = apex_vars_of(done.stdout)
    assert extra["apex_cuda_extensions_expected"] is True
    assert extra["apex_max_jobs"] == 1
    assert extra["apex_repo_url"] == "http://127.0.0.1:18999/apex-e13873de.git"
    assert extra["apex_build_environment"] == {"PYTHONPATH": proof.SITE_DIR}
    # The proof changes vars and the container, never a role default.
    assert "roles/" not in done.stdout


def test_dry_run_refuses_zero_jobs():
    done = dry_run("--jobs", "0")
    assert done.returncode == 2
    assert "--jobs must be 1 or more" in done.stderr


@pytest.fixture
def fake_torch(tmp_path: Path) -> Path:
    """A torch package whose version module says what PyPI's torch 2.6.0 says."""
    pkg = tmp_path / "pkgs" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from torch.version import __version__\nfrom torch import version\n")
    (pkg / "version.py").write_text('__version__ = "2.6.0+cu124"\ncuda = "12.4"\n')
    return tmp_path / "pkgs"


def torch_cuda(pythonpath: list[Path]) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, pythonpath)))
    code = "import torch; print(torch.version.cuda, getattr(torch.version, 'real_cuda', '-'), torch.__version__)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout


def test_sitecustomize_makes_torch_report_cuda_11_8(fake_torch: Path, tmp_path: Path):
    assert torch_cuda([fake_torch]) == "12.4 - 2.6.0+cu124\n"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(proof.SITECUSTOMIZE)
    assert torch_cuda([site, fake_torch]) == "11.8 12.4 2.6.0+cu124\n"


def vendor_dir(tmp_path: Path, content: bytes = b"print('setup')\n") -> Path:
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    tarball = vendor / proof.TARBALL
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo(proof.TOP + "/setup.py")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    (vendor / "SHA256SUMS").write_text("%s  %s\n" % (digest, proof.TARBALL))
    return vendor


def test_vendor_tarball_is_checked(tmp_path: Path):
    vendor = vendor_dir(tmp_path)
    assert proof.check_vendor(vendor) == vendor / proof.TARBALL
    (vendor / "SHA256SUMS").write_text("%s  %s\n" % ("0" * 64, proof.TARBALL))
    with pytest.raises(SystemExit, match="does not match"):
        proof.check_vendor(vendor)


def test_repository_of_the_tarball_is_tagged_and_reproducible(tmp_path: Path):
    tarball = proof.check_vendor(vendor_dir(tmp_path))
    first = proof.make_repo(tarball, tmp_path / "a")
    second = proof.make_repo(tarball, tmp_path / "b")
    assert first == second  # fixed author and dates: the same tree, the same commit
    bare = tmp_path / "a" / proof.REPO_NAME
    assert (bare / "info" / "refs").is_file()  # dumb HTTP needs update-server-info
    tags = subprocess.run(
        ["git", "-C", str(bare), "tag", "--points-at", first], capture_output=True, text=True, check=True
    )
    assert tags.stdout.split() == [proof.TAG]
    files = subprocess.run(
        ["git", "-C", str(bare), "ls-tree", "--name-only", first], capture_output=True, text=True, check=True
    )
    assert files.stdout.split() == ["setup.py"]


def extension(module: str, *archs: str) -> dict:
    lines = ["ELF file    %d: %s.%d.%s.cubin" % (i + 1, module, i, arch) for i, arch in enumerate(archs)]
    return {"module": module, "path": module + ".so", "bytes": 1, "list_elf_rc": 0, "list_elf": lines}


def test_verdict_wants_every_module_and_sm_61_in_each_cuda_one():
    exts = [extension("apex_C")] + [extension(m, "sm_61") for m in proof.EXPECTED_MODULES[1:]]
    assert proof.verdict({"extensions": exts})["ok"] is True
    exts[-1] = extension("fused_weight_gradient_mlp_cuda", "sm_70", "sm_80")
    judged = proof.verdict({"extensions": exts})
    assert judged["ok"] is False
    assert judged["cuda_without_sm_61"] == ["fused_weight_gradient_mlp_cuda"]
    judged = proof.verdict({"extensions": exts[:-1]})
    assert judged["missing"] == ["fused_weight_gradient_mlp_cuda"]
    assert proof.verdict({"extensions": {"error": "no wheel"}})["ok"] is False


def test_compile_seconds_come_from_profile_tasks():
    log = (
        "Apex | Install the wheel into the env ------------------------------- 3.21s\n"
        "Apex | Compile (log in /home/verl/verl-p40/logs/apex-build.log) ------ 1834.52s\n"
    )
    assert proof.task_seconds(log, "Apex | Compile") == 1834.52
    assert proof.task_seconds("no recap", "Apex | Compile") is None
    # A name too long for the dashes: profile_tasks pads with spaces only (the 2026-12-02 run).
    long = "apex : Apex | Compile (log in /home/verl/verl-p40/logs/apex-build.log)  1094.05s\n"
    assert proof.task_seconds(long, "Apex | Compile") == 1094.05
    # The task's start line in the play log is not its recap.
    assert proof.task_seconds("TASK [apex : Apex | Compile (log in /x)] ****\n", "Apex | Compile") is None


def test_render_rewrites_the_markdown_of_a_committed_result(tmp_path: Path):
    committed = REPO / "docs" / "apex-proof" / "2026-12-01-first-run-failed.json"
    result = json.loads(committed.read_text())
    result["unproven"] = ["an old text"]
    copy = tmp_path / "result.json"
    copy.write_text(json.dumps(result))
    assert proof.main(["--render", str(copy)]) == 0
    text = copy.with_suffix(".md").read_text()
    assert "**FAILED**" in text
    assert "thrust/complex.h: No such file or directory" in text
    assert "an old text" not in text and proof.UNPROVEN[0] in text
    assert json.loads(copy.read_text())["unproven"] == proof.UNPROVEN


def test_log_facts_read_the_nvcc_calls():
    log = (
        "  [1/2] /usr/local/cuda-11.8/bin/nvcc -c a.cu -gencode=arch=compute_61,code=sm_61 -ccbin /usr/bin/gcc-11\n"
        "  [2/2] /usr/local/cuda-11.8/bin/nvcc -c b.cu -gencode arch=compute_70,code=sm_70 "
        "-gencode=arch=compute_61,code=sm_61 -ccbin /usr/bin/gcc-11\n"
        "a.cu(3): warning #177-D: variable declared but never referenced\n"
    )
    facts = proof.log_facts(log)
    assert facts["nvcc_commands"] == 2
    assert facts["gencode"] == ["arch=compute_61,code=sm_61", "arch=compute_70,code=sm_70"]
    assert facts["ccbin"] == ["/usr/bin/gcc-11"]
    assert facts["warnings"] == 1
