"""Tests of the CUDA 11.8 / cuDNN stand-ins built by tests/standins/standins.py.

The stand-ins are built (or reused) through the tool's own CLI into
$VERL_P40_STANDINS or <repo>/.cache/standins.  A cold build downloads ~1.6 GB
from Debian's archive and PyPI and takes about 1.5 minutes on 2 cores; a warm
one takes well under a second.  The tests skip only when the tool reports
that a package source is unreachable (its exit status 3).
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

import standins

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tests" / "standins" / "standins.py"
# The flags the cuda role passes to NVIDIA's runfile.
ROLE_FLAGS = ("--silent", "--toolkit", "--override", "--no-opengl-libs", "--no-man-page")
RUN_TIMEOUT = 300
EM_CUDA = 190  # ELF e_machine of NVIDIA cubins


def _standins_dir() -> Path:
    return Path(os.environ.get("VERL_P40_STANDINS") or REPO / ".cache" / "standins")


def _build(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), "build", "--out", str(out)],
        text=True,
        capture_output=True,
        timeout=1800,
        check=False,
    )


@pytest.fixture(scope="session")
def standins_dir() -> Path:
    out = _standins_dir()
    proc = _build(out)
    if proc.returncode == standins.EXIT_UNREACHABLE:
        lines = proc.stderr.strip().splitlines() or [""]
        why = next((line for line in lines if "ERROR:" in line), lines[0])
        pytest.skip(
            f"the stand-ins cannot be built, a package source is unreachable: {why[:300]} ... {lines[-1][:300]}"
        )
    if proc.returncode != 0:
        pytest.fail(f"building the stand-ins failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return out


@pytest.fixture(scope="session")
def standin_vars(standins_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((standins_dir / standins.VARS_FILE).read_text())
    return data


def _clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without variables that change nvcc's flags."""
    env = {k: v for k, v in os.environ.items() if k not in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN")}
    env.update(extra)
    return env


def run_installer(
    runfile: Path, args: Sequence[str], *, via_sh: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = (["sh", str(runfile)] if via_sh else [str(runfile)]) + list(args)
    return subprocess.run(
        cmd, text=True, capture_output=True, timeout=RUN_TIMEOUT, env=env or _clean_env(), check=False
    )


def nvcc(prefix: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(prefix / "bin" / "nvcc"), *args],
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=RUN_TIMEOUT,
        env=_clean_env(),
        check=False,
    )


def gcc_major(compiler: str) -> int | None:
    path = shutil.which(compiler)
    if path is None:
        return None
    out = subprocess.run(
        [path, "-dumpfullversion", "-dumpversion"], text=True, capture_output=True, check=False
    ).stdout.strip()
    return int(out.split(".")[0]) if out.split(".")[0].isdigit() else None


def installer_log() -> Path:
    return Path("/var/log/cuda-installer.log")


# --------------------------------------------------------------------------
# The vars file and the tool itself


def test_vars_file_matches_the_built_files(standins_dir: Path, standin_vars: dict[str, Any]) -> None:
    entries = {
        "cuda_runfile": standin_vars["standin_artifacts"]["cuda_runfile"],
        "cudnn_archive": standin_vars["standin_artifacts"]["cudnn_archive"],
        "failing": standin_vars["standin_cuda_runfile_failing"],
    }
    assert entries["cuda_runfile"]["file"] == standins.RUNFILE
    assert entries["failing"]["file"] == standins.RUNFILE_FAILING
    assert entries["cudnn_archive"]["file"] == standins.CUDNN_FILE
    for name, entry in entries.items():
        path = standins_dir / entry["file"]
        assert path.is_file(), f"{name}: {path} missing"
        assert path.stat().st_size == entry["size"], name
        assert standins.sha256_file(path) == entry["sha256"], f"{name}: sha256 differs"
    expected = standin_vars["standin_cudnn_expected_version"]
    assert expected == {"wheel": "8.9.6", "minimal": "8.9.7"}[standin_vars["standin_cudnn_source"]]
    # The cudnn role expects cudnn_version.h to match the artifact's version.
    version = entries["cudnn_archive"]["version"]
    assert ".".join(version.split(".")[:3]) == expected


def test_second_build_reuses_the_cache(standins_dir: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in standins_dir.iterdir() if p.is_file()}
    proc = _build(standins_dir)
    assert proc.returncode == 0, proc.stderr
    after = {p.name: p.stat().st_mtime_ns for p in standins_dir.iterdir() if p.is_file()}
    assert after == before, "an unchanged build rewrote its outputs"


def test_runfiles_are_makeself_archives(standins_dir: Path) -> None:
    for name in (standins.RUNFILE, standins.RUNFILE_FAILING):
        path = standins_dir / name
        assert path.stat().st_mode & stat.S_IXUSR, f"{name} is not executable"
        head = path.read_bytes()[:4096]
        assert head.startswith(b"#!/bin/sh") and b"Makeself" in head, name
        check = subprocess.run(
            ["sh", str(path), "--check"], text=True, capture_output=True, timeout=RUN_TIMEOUT, check=False
        )
        assert check.returncode == 0, check.stdout + check.stderr


# --------------------------------------------------------------------------
# The installer


@pytest.fixture(scope="module")
def installed(standins_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in runfile run with the role's flags into a fresh prefix."""
    root = tmp_path_factory.mktemp("cuda")
    prefix, work = root / "cuda-11.8", root / "work"
    work.mkdir()
    proc = run_installer(standins_dir / standins.RUNFILE, [*ROLE_FLAGS, f"--toolkitpath={prefix}", f"--tmpdir={work}"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return prefix


def test_install_gives_nvcc_11_8(installed: Path, tmp_path: Path) -> None:
    proc = nvcc(installed, "--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "release 11.8, V11.8.89" in proc.stdout


def test_install_writes_version_json(installed: Path) -> None:
    doc = json.loads((installed / "version.json").read_text())
    assert doc["cuda"]["name"] == "CUDA SDK"
    assert doc["cuda"]["version"].startswith("11.8.")
    assert doc["cuda"]["version"] == "11.8.20220929"
    assert doc["cuda_nvcc"]["version"] == "11.8.89"


def test_install_has_the_runfile_layout(installed: Path) -> None:
    for rel in (
        "bin/nvcc",
        "bin/nvcc.profile",
        "bin/crt/link.stub",
        "bin/ptxas",
        "bin/fatbinary",
        "bin/cudafe++",
        "bin/nvlink",
        "bin/bin2c",
        "nvvm/bin/cicc",
        "nvvm/libdevice/libdevice.10.bc",
        "include/cuda_runtime.h",
        "include/crt/host_config.h",
        "lib64/libcudart.so",
        "lib64/libcudart.so.11.0",
        "lib64/libcudart_static.a",
        "STANDIN-README.md",
    ):
        assert (installed / rel).exists(), rel
    assert (installed / "lib64").is_symlink() and (installed / "include").is_symlink()
    assert os.path.realpath(installed / "lib64/libcudart.so").endswith("libcudart.so.11.8.89")
    # TOP is the install dir: nvcc.profile must not point into Debian's /usr paths.
    profile = (installed / "bin/nvcc.profile").read_text()
    assert re.search(r"^TOP\s*=\s*\$\(_HERE_\)/\.\.", profile, re.M), profile
    assert "/usr/lib/nvidia-cuda-toolkit" not in profile
    # Readable by everyone, like NVIDIA's tree (makeself runs under umask 077).
    assert (installed / "bin/nvcc").stat().st_mode & 0o005 == 0o005
    assert (installed / "targets").stat().st_mode & 0o005 == 0o005


def test_install_writes_the_log(installed: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can write /var/log/cuda-installer.log")
    log = installer_log().read_text()
    assert f"Installation complete: CUDA Toolkit 11.8.0 (stand-in) in {installed}" in log


def test_installpath_is_an_alias(standins_dir: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    # Run it as an executable too, as `./cuda_....run` users do.
    proc = run_installer(
        standins_dir / standins.RUNFILE,
        ["--silent", "--toolkit", "--override", f"--installpath={prefix}"],
        via_sh=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (prefix / "bin/nvcc").is_file() and (prefix / "version.json").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no options given"),
        (["--toolkit", "--override"], "--silent is required"),
        (["--silent", "--override"], "installs --toolkit only"),
        (["--silent", "--toolkit", "--override", "--bogus"], "Unknown option: --bogus"),
        (["--silent", "--toolkit", "--override", "--samples"], "Unknown option: --samples"),
        (["--silent", "--toolkit", "--driver"], "toolkit only"),
        (["--silent", "--toolkit", "--override", "--toolkitpath"], "Unknown option: --toolkitpath"),
    ],
)
def test_refuses_bad_options(standins_dir: Path, tmp_path: Path, args: list[str], message: str) -> None:
    prefix = tmp_path / "cuda"
    with_path = [*args, f"--toolkitpath={prefix}"] if args else args
    proc = run_installer(standins_dir / standins.RUNFILE, with_path)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert not prefix.exists(), "a refused install must not touch the install path"


def _fake_gcc(bindir: Path, version: str) -> dict[str, str]:
    bindir.mkdir()
    gcc = bindir / "gcc"
    gcc.write_text(f"#!/bin/sh\necho {version}\n")
    gcc.chmod(0o755)
    return _clean_env(PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")


def test_refuses_gcc_12_without_override(standins_dir: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    env = _fake_gcc(tmp_path / "bin", "12.2.0")
    proc = run_installer(standins_dir / standins.RUNFILE, ["--silent", "--toolkit", f"--toolkitpath={prefix}"], env=env)
    assert proc.returncode != 0
    assert "Failed to verify gcc version" in proc.stderr
    assert not (prefix / "bin/nvcc").exists()
    if os.geteuid() == 0:
        assert "unsupported compiler version: 12.2.0" in installer_log().read_text()


def test_accepts_gcc_11_without_override(standins_dir: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    env = _fake_gcc(tmp_path / "bin", "11.3.0")
    proc = run_installer(standins_dir / standins.RUNFILE, ["--silent", "--toolkit", f"--toolkitpath={prefix}"], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (prefix / "version.json").is_file()


def test_tmpdir_is_where_it_unpacks(standins_dir: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # TMPDIR points nowhere: the install works only if --tmpdir is honoured.
    env = _clean_env(TMPDIR=str(tmp_path / "missing"))
    proc = run_installer(
        standins_dir / standins.RUNFILE, [*ROLE_FLAGS, f"--toolkitpath={tmp_path / 'a'}", f"--tmpdir={work}"], env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_installer(
        standins_dir / standins.RUNFILE,
        [*ROLE_FLAGS, f"--toolkitpath={tmp_path / 'b'}", f"--tmpdir={tmp_path / 'missing'}"],
    )
    assert proc.returncode != 0
    assert not (tmp_path / "b" / "bin").exists()


def test_failing_variant_leaves_a_partial_tree(standins_dir: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "cuda-11.8"
    proc = run_installer(standins_dir / standins.RUNFILE_FAILING, [*ROLE_FLAGS, f"--toolkitpath={prefix}"])
    assert proc.returncode != 0
    assert "Installation failed" in proc.stderr
    # Half-built: headers, cudart and an nvcc that answers --version ...
    assert (prefix / "include/cuda_runtime.h").is_file()
    assert (prefix / "lib64/libcudart.so").exists()
    assert (prefix / "bin/nvcc").is_file()
    assert "V11.8.89" in nvcc(prefix, "--version", cwd=tmp_path).stdout
    # ... but no compiler back end and no version.json.
    for missing in ("nvvm/bin/cicc", "bin/ptxas", "version.json"):
        assert not (prefix / missing).exists(), missing
    if os.geteuid() == 0:
        assert "[ERROR]: Install of cuda-nvcc failed" in installer_log().read_text()
    # The good installer over the half-built tree completes it.
    proc = run_installer(standins_dir / standins.RUNFILE, [*ROLE_FLAGS, f"--toolkitpath={prefix}"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for present in ("nvvm/bin/cicc", "bin/ptxas", "version.json"):
        assert (prefix / present).exists(), present


# --------------------------------------------------------------------------
# The installed nvcc really compiles for the P40 (sm_61)

KERNEL = """\
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""

HOST_PROGRAM = """\
#include <cstdio>
#include <cuda_runtime.h>
__global__ void fill(int* p) { *p = 61; }
int main() {
  int version = 0;
  cudaError_t err = cudaRuntimeGetVersion(&version);
  std::printf("cudart built, runtime query: %d (error %d)\\n", version, (int)err);
  return 0;
}
"""


def test_nvcc_builds_sm61_cubin_with_gcc11(installed: Path, tmp_path: Path) -> None:
    if shutil.which("g++-11") is None:
        pytest.skip("g++-11 is not installed (apt-get install g++-11)")
    (tmp_path / "k.cu").write_text(KERNEL)
    proc = nvcc(installed, "-ccbin", "g++-11", "-cubin", "-arch=sm_61", "k.cu", "-o", "k.cubin", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    elf = (tmp_path / "k.cubin").read_bytes()
    assert elf[:4] == b"\x7fELF"
    e_machine = struct.unpack_from("<H", elf, 18)[0]
    e_flags = struct.unpack_from("<I", elf, 48)[0]  # ELF64 header: e_flags at 48
    assert e_machine == EM_CUDA
    assert e_flags & 0xFF == 61, f"cubin is for sm_{e_flags & 0xFF}, e_flags={e_flags:#x}"
    assert b"axpy" in elf


def test_nvcc_links_a_host_program_with_gcc11(installed: Path, tmp_path: Path) -> None:
    if shutil.which("g++-11") is None:
        pytest.skip("g++-11 is not installed (apt-get install g++-11)")
    (tmp_path / "app.cu").write_text(HOST_PROGRAM)
    proc = nvcc(installed, "-ccbin", "g++-11", "-arch=sm_61", "app.cu", "-o", "app", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # No GPU here: the query fails, but the program (static cudart) runs.
    run = subprocess.run([str(tmp_path / "app")], text=True, capture_output=True, timeout=60, check=False)
    assert run.returncode == 0 and "cudart built" in run.stdout


def test_nvcc_refuses_gcc_12(installed: Path, tmp_path: Path) -> None:
    major = gcc_major("g++")
    if major is None:
        pytest.skip("no g++ on PATH")
    if major <= 11:
        pytest.skip(f"the default g++ is {major}; the check is about g++ > 11")
    (tmp_path / "k.cu").write_text(KERNEL)
    proc = nvcc(installed, "-cubin", "-arch=sm_61", "k.cu", "-o", "k.cubin", cwd=tmp_path)
    assert proc.returncode != 0
    assert "unsupported GNU version" in proc.stdout + proc.stderr


# --------------------------------------------------------------------------
# The stored .xz container the cuDNN archive comes in


@pytest.mark.parametrize("size", [0, 1, 200, 65535, 65536, 65537, 3 * 65536 + 7])
def test_stored_xz_is_read_by_xz_and_python(size: int) -> None:
    """Every chunk-boundary case: Python's lzma and xz itself read back the same bytes. Checked by
    hand against mutants of write_xz_stored, each refused by one of them: the block or the index
    unpadded (200 bytes is the size whose index needs padding), the CRC32 of the last chunk only,
    the index's sizes or the footer's backward size off by one, a chunk's size written unreduced."""
    data = os.urandom(size)
    out = io.BytesIO()
    standins.write_xz_stored(io.BytesIO(data), out)
    assert lzma.decompress(out.getvalue(), format=lzma.FORMAT_XZ) == data
    done = subprocess.run(["xz", "--decompress", "--stdout"], input=out.getvalue(), capture_output=True, check=False)
    assert done.returncode == 0 and done.stdout == data, done.stderr


def test_stored_xz_checks_its_data() -> None:
    """The CRC32 is the data's: a changed byte is refused by both readers."""
    out = io.BytesIO()
    standins.write_xz_stored(io.BytesIO(b"cudnn" * 40000), out)
    damaged = bytearray(out.getvalue())
    damaged[len(damaged) // 2] ^= 1
    with pytest.raises(lzma.LZMAError):
        lzma.decompress(bytes(damaged))
    assert subprocess.run(["xz", "--test"], input=bytes(damaged), capture_output=True, check=False).returncode != 0


# --------------------------------------------------------------------------
# The cuDNN archive


@pytest.fixture(scope="module")
def cudnn(standins_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The archive unpacked once (by xz: the wheel-based one is 1.1 GB
    unpacked, removed again afterwards) plus its member list.  Everything is
    unpacked because NVIDIA's libcudnn.so.8 loads its sub-libraries as soon
    as it is used."""
    dest = tmp_path_factory.mktemp("cudnn")
    members: dict[str, tarfile.TarInfo] = {}
    xz = subprocess.Popen(["xz", "-dc", str(standins_dir / standins.CUDNN_FILE)], stdout=subprocess.PIPE)
    assert xz.stdout is not None
    with tarfile.open(fileobj=xz.stdout, mode="r|") as tar:
        for info in tar:
            members[info.name] = info
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12
                tar.extract(info, dest, filter="data")
            else:
                tar.extract(info, dest)
    xz.stdout.close()
    assert xz.wait() == 0
    yield {"members": members, "root": dest / standins.CUDNN_TOP}
    shutil.rmtree(dest, ignore_errors=True)


def test_cudnn_archive_has_the_real_layout(cudnn: dict[str, Any]) -> None:
    top = standins.CUDNN_TOP
    names = cudnn["members"]
    assert all(n == top or n.startswith(top + "/") for n in names), "stray top-level entries"
    for d in ("include", "lib"):
        assert names[f"{top}/{d}"].isdir()
    assert names[f"{top}/include/cudnn.h"].isfile()
    assert names[f"{top}/include/cudnn_version.h"].isfile()
    assert names[f"{top}/lib/libcudnn.so"].issym()
    assert names[f"{top}/lib/libcudnn.so.8"].issym()
    note = "\n".join(
        (cudnn["root"] / n).read_text() for n in ("LICENSE", "STANDIN-README.txt") if (cudnn["root"] / n).exists()
    )
    assert "STAND-IN" in note


def test_cudnn_version_header(cudnn: dict[str, Any], standin_vars: dict[str, Any]) -> None:
    header = (cudnn["root"] / "include/cudnn_version.h").read_text()
    found = {m: re.search(rf"^#define CUDNN_{m}\s+(\d+)", header, re.M) for m in ("MAJOR", "MINOR", "PATCHLEVEL")}
    assert all(found.values()), header
    version = ".".join(found[m].group(1) for m in ("MAJOR", "MINOR", "PATCHLEVEL"))  # type: ignore[union-attr]
    assert version == standin_vars["standin_cudnn_expected_version"]
    real = os.path.realpath(cudnn["root"] / "lib/libcudnn.so")
    assert real.endswith(f"libcudnn.so.{version}")


def test_cudnn_library_reports_the_header_version(cudnn: dict[str, Any], tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    root = cudnn["root"]
    (tmp_path / "v.c").write_text(
        '#include <stdio.h>\n#include <stddef.h>\n#include "cudnn_version.h"\n'
        "size_t cudnnGetVersion(void);\n"
        'int main(void) { printf("%zu %d\\n", cudnnGetVersion(), CUDNN_VERSION);\n'
        "  return cudnnGetVersion() == CUDNN_VERSION ? 0 : 1; }\n"
    )
    build = subprocess.run(
        ["cc", "v.c", f"-I{root}/include", f"-L{root}/lib", "-lcudnn", f"-Wl,-rpath,{root}/lib", "-o", "v"],
        cwd=tmp_path,
        text=True,
        capture_output=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "v")], text=True, capture_output=True, timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


# --- the driver runfile stand-in (tests/standins/standin_driver.py) ------------------------------


@pytest.fixture(scope="module")
def driver_runfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("driver-standin")
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "standins" / "standin_driver.py"), "build", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    entry = yaml.safe_load((out / "standin_driver.yml").read_text())["standin_driver_runfile"]
    path = out / entry["file"]
    assert entry["version"] == "580.105.08" and entry["size"] == path.stat().st_size
    assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    return path


def run_driver(runfile: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    log = tmp_path / "installer.log"
    done = subprocess.run(
        ["sh", str(runfile), "--tmpdir=" + str(tmp_path), "--log-file-name=" + str(log), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return done, log.read_text() if log.exists() else ""


def test_the_driver_standin_refuses_what_nvidia_installer_refuses(driver_runfile: Path, tmp_path: Path):
    done, _ = run_driver(driver_runfile, tmp_path, "--silent", "--no-such-option")
    assert done.returncode == 1 and "ERROR: Invalid commandline" in done.stderr
    done, log = run_driver(driver_runfile, tmp_path, "--dkms", "-m=kernel")
    assert done.returncode == 1 and "runs with --silent only" in log
    done, log = run_driver(driver_runfile, tmp_path, "--silent", "--dkms", "-m=kernel", "--kernel-name=0.0.0-none")
    assert done.returncode == 1
    assert "Unable to find the kernel source tree" in log and "/lib/modules/0.0.0-none/build" in log
    assert (
        "options: --tmpdir=%s --log-file-name=%s --silent --dkms -m=kernel --kernel-name=0.0.0-none"
        % (
            tmp_path,
            tmp_path / "installer.log",
        )
        in log
    )
