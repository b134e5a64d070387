#!/usr/bin/env python3
"""Build the wheelhouse the GPU proof carries to the device machine.

    python3 tests/gpu/wheelhouse.py                 # into .whl/ (git-ignored)
    python3 tests/gpu/wheelhouse.py --out DIR --check-only

The device machine (NVIDIA H200, Python 3.12, torch 2.11 + CUDA 13,
transformers 5.x, no network) runs verl 0.4.1 with the Python packages below
on PYTHONPATH in front of its own. They are what verl 0.4.1 needs beyond that
machine's image, at versions seen to work there (the GPU proof's runs:
tests/gpu/README.md, "Versions", and docs/gpu-proof.md), plus ansible-core so
that the project's own tools/render.py and verl_patch module run there unchanged.

What this script does, every step checked:
  1. `pip download --no-deps --only-binary=:all:` for CPython 3.12 manylinux
     x86_64, one pinned version of each package (WHEELS);
  2. `pip wheel --no-deps` for the two that only publish an sdist (SDIST_ONLY);
     both are pure Python, so the wheel built here is the wheel there;
  3. ray's wheel without its Java jars and the dashboard's web build, with its
     RECORD rewritten to match (about 67 MiB -> 34 MiB; ray runs without
     both, and one device call carries 64 MiB at most);
  4. the verl 0.4.1 sdist (the unit tests' cache, .cache/sdist, or
     downloaded), which run_ppo.sh unpacks, patches and installs;
  5. the dependency closure: every Requires-Dist of every wheel (markers
     evaluated for Python 3.12 on Linux, extras skipped) is either in the
     wheelhouse or in the device image's package list (DEVICE_PACKAGES,
     from the device notes' KINDS.md); the size stays under --max-mib.

Wheels already in DIR with the right name are kept, so a rerun downloads
nothing. Each call of the device tool then names DIR in `carry`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / ".whl"
VERL_SDIST = "verl-0.4.1.tar.gz"

PYTHON_VERSION = "3.12"
# pip matches manylinux tags exactly; these cover the wheels below.
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)

# name==version, one version each (two versions of one package stop the install).
WHEELS = (
    # verl 0.4.1 itself
    "transformers==4.51.3",  # the device has 5.x; verl 0.4.1 predates it
    "tokenizers==0.21.4",  # transformers 4.51.3 wants <0.22; the device has 0.23
    "huggingface_hub==0.36.2",  # transformers 4.51.3 wants <1.0; the device has 1.x
    "tensordict==0.6.2",  # verl 0.4.1 pins <=0.6.2
    "torchdata==0.11.0",  # StatefulDataLoader
    "peft==0.15.2",  # imported by fsdp_workers; a release that knows transformers 4.51
    "hydra-core==1.3.2",
    "omegaconf==2.3.0",
    "codetiming==1.4.0",
    "datasets==3.6.0",
    "dill==0.3.8",  # datasets 3.6.0 wants <0.3.9
    "multiprocess==0.70.16",  # datasets 3.6.0 wants <0.70.17
    "fsspec==2025.3.0",  # datasets 3.6.0 wants <=2025.3.0
    "orjson==3.13.0",  # tensordict
    "ray==2.43.0",  # without the [default] extras: verl needs the core only
    "jsonschema==4.26.0",  # ray
    "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "setuptools==80.9.0",  # verl/__init__.py imports pkg_resources, gone in setuptools 81
    # the project's own tools there: tools/render.py and library/verl_patch.py
    "ansible-core==2.19.14",
    "resolvelib==1.2.1",
)
SDIST_ONLY = (
    "antlr4-python3-runtime==4.9.3",  # hydra-core / omegaconf
    "pylatexenc==2.11",  # verl's math reward helpers
)

# Wheel contents ray runs without: Java workers' jars, the dashboard's web UI.
RAY_STRIP = ("ray/jars/", "ray/dashboard/client/build/")

# The device image's Python packages (KINDS.md, "Python packages already
# there", read 2026-11-17). Requirements found here need not travel.
DEVICE_PACKAGES = frozenset(
    """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings
cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils
execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet
httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax
jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib
mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink
nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip
pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash
yarl zipp
""".split()
)

# Declared requirements that are not needed on the path the proof runs, with why.
NOT_NEEDED = {
    # ansible.parsing.vault imports it inside try/except; only vault files need it.
    "cryptography": "ansible-core: only encrypted (vault) files need it",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name_of(path: Path) -> tuple[str, str]:
    """(canonical project name, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return canonical(name), version


def pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def have(out: Path, requirement: str) -> Path | None:
    name, version = requirement.split("==")
    for path in out.glob("*.whl"):
        if wheel_name_of(path) == (canonical(name), version):
            return path
    return None


def download(out: Path) -> None:
    missing = [req for req in WHEELS if have(out, req) is None]
    if missing:
        platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
        pip(
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            PYTHON_VERSION,
            "--implementation",
            "cp",
            *platforms,
            "--dest",
            str(out),
            *missing,
        )
    for req in SDIST_ONLY:
        if have(out, req) is None:
            pip("wheel", "--quiet", "--no-deps", "--no-binary=:all:", "--wheel-dir", str(out), req)
    absent = [req for req in WHEELS + SDIST_ONLY if have(out, req) is None]
    if absent:
        raise SystemExit(f"wheelhouse.py: pip left no wheel for {', '.join(absent)}")


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def strip_ray(wheel: Path) -> bool:
    """Rewrite ray's wheel without RAY_STRIP; True when something was removed."""
    with zipfile.ZipFile(wheel) as source:
        names = source.namelist()
        if not any(name.startswith(RAY_STRIP) for name in names):
            return False
        (record,) = [name for name in names if name.endswith(".dist-info/RECORD") and name.count("/") == 1]
        kept_lines = [
            line
            for line in source.read(record).decode().splitlines()
            if line and not line.split(",")[0].startswith(RAY_STRIP)
        ]
        fd, tmp = tempfile.mkstemp(suffix=".whl", dir=wheel.parent)
        os.close(fd)
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                if info.filename.startswith(RAY_STRIP) or info.filename == record:
                    continue
                target.writestr(info, source.read(info.filename))
            target.writestr(record, "\n".join(kept_lines) + "\n")
    os.replace(tmp, wheel)
    return True


def verl_sdist(out: Path) -> Path:
    target = out / VERL_SDIST
    if target.is_file():
        return target
    cache = Path(os.environ.get("VERL_P40_CACHE") or REPO / ".cache" / "sdist")
    if not (cache / VERL_SDIST).is_file():
        cache.mkdir(parents=True, exist_ok=True)
        pip("download", "--quiet", "--no-deps", "--no-binary=:all:", "--dest", str(cache), "verl==0.4.1")
    shutil.copyfile(cache / VERL_SDIST, target)
    return target


def requirements_of(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        text = archive.read(metadata).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def closure_problems(out: Path) -> list[str]:
    try:
        from packaging.requirements import Requirement
    except ImportError:  # a bare interpreter: pip vendors the same module
        from pip._vendor.packaging.requirements import Requirement

    environment = {
        "python_version": PYTHON_VERSION,
        "python_full_version": PYTHON_VERSION + ".3",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }
    carried = {wheel_name_of(path)[0]: path for path in out.glob("*.whl")}
    problems = []
    for name, path in sorted(carried.items()):
        for text in requirements_of(path):
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            needed = canonical(requirement.name)
            if needed in NOT_NEEDED:
                continue
            if needed in carried:
                version = wheel_name_of(carried[needed])[1]
                if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
                    problems.append(f"{name} wants {requirement}, the wheelhouse has {needed} {version}")
            elif needed not in DEVICE_PACKAGES:
                problems.append(f"{name} wants {requirement}: neither carried nor on the device")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="wheelhouse directory (default .whl)")
    parser.add_argument("--max-mib", type=float, default=60.0, help="refuse a wheelhouse larger than this")
    parser.add_argument("--check-only", action="store_true", help="download nothing; check what DIR holds")
    args = parser.parse_args(argv)

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not args.check_only:
        download(out)
        verl_sdist(out)
    for path in out.glob("ray-*.whl"):
        if strip_ray(path):
            print(f"wheelhouse.py: stripped {', '.join(RAY_STRIP)} from {path.name}")

    wanted = {canonical(req.split("==")[0]) for req in WHEELS + SDIST_ONLY}
    strays = [path.name for path in out.glob("*.whl") if wheel_name_of(path)[0] not in wanted]
    problems = [f"{name} is not in WHEELS or SDIST_ONLY; remove it" for name in strays]
    names = [wheel_name_of(path)[0] for path in out.glob("*.whl")]
    problems += [f"two wheels of {name}" for name in sorted({n for n in names if names.count(n) > 1})]
    problems += [f"{req}: missing" for req in WHEELS + SDIST_ONLY if have(out, req) is None]
    if not (out / VERL_SDIST).is_file():
        problems.append(f"{VERL_SDIST}: missing")
    problems += closure_problems(out)

    files = sorted(p for p in out.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    for path in files:
        print(f"{path.stat().st_size / 2**20:8.2f} MiB  {path.name}")
    print(f"{total / 2**20:8.2f} MiB  total in {out}")
    if total > args.max_mib * 2**20:
        problems.append(f"{total / 2**20:.1f} MiB is over --max-mib {args.max_mib}")
    for problem in problems:
        print(f"wheelhouse.py: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
