"""Tests for tests/standins/standins_python.py: the Miniforge, Apex and verl stand-ins.

The stand-ins are built once per session into $VERL_P40_PY_STANDINS or
<repo>/.cache/standins-python (a rerun of the builder is a no-op).  The
Apex build tests install torch and compile a C++ extension (about 1.5 minutes).
They run whenever a CPU torch can be installed without a multi-GB download
($VERL_P40_TEST_TORCH, or a CPU wheel in pip's find-links directory) and skip
with that reason otherwise, within the unit tests' skip budget (tests/conftest.py).
They used to need RUN_SLOW=1, which nothing set: they never ran.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

import standins_python

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "tests" / "standins" / "standins_python.py"
INSTALLER = "Miniforge3-24.11.3-0-Linux-x86_64.standin.sh"
APEX_PIP_FLAGS = [
    "-v",
    "--disable-pip-version-check",
    "--no-cache-dir",
    "--no-build-isolation",
    "--config-settings",
    "--build-option=--cpp_ext",
    "--config-settings",
    "--build-option=--cuda_ext",
]
SKIP_LINE = "standin apex: CUDA extensions skipped (no GPU in CI)"


# --------------------------------------------------------------------------
# helpers and fixtures


def run(
    cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, env=env, cwd=cwd, text=True, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False
    )


def git(*args: str, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    done = run(["git", *args], cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(root).parts
    }


@pytest.fixture(scope="session")
def builder() -> ModuleType:
    return standins_python


@pytest.fixture(scope="session")
def standins() -> Path:
    out = Path(os.environ.get("VERL_P40_PY_STANDINS") or REPO / ".cache" / "standins-python")
    done = run([sys.executable, str(BUILDER), "build", "--out", str(out)])
    if done.returncode == 3:
        pytest.skip("PyPI unreachable, the Python stand-ins cannot be built:\n" + done.stderr[-1500:])
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def standin_vars(standins: Path) -> dict:
    return yaml.safe_load((standins / "standins_python.yml").read_text())


@pytest.fixture
def home_env(tmp_path: Path) -> dict[str, str]:
    """The caller's environment with a private HOME (conda writes ~/.conda/environments.txt)."""
    home = tmp_path / "home"
    home.mkdir()
    return {**os.environ, "HOME": str(home)}


def install(
    standins: Path, args: list[str], env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return run(["bash", str(standins / INSTALLER), *args], env=env, cwd=cwd)


@pytest.fixture(scope="module")
def conda_root(standins: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """One installed stand-in conda for the subcommand tests, with its own HOME."""
    base = tmp_path_factory.mktemp("conda")
    env = {**os.environ, "HOME": str(base / "home")}
    (base / "home").mkdir()
    done = install(standins, ["-b", "-p", str(base / "miniforge3")], env)
    assert done.returncode == 0, done.stderr
    return base / "miniforge3", env


def conda(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run([str(root / "bin" / "conda"), *args], env=env)


def host_python_version(root: Path, env: dict[str, str]) -> tuple[int, int, int]:
    """The version of the python3 the installed conda runs on."""
    info = json.loads(conda(root, env, "info", "--json").stdout)
    return tuple(int(v) for v in info["python_version"].split(".")[:3])  # type: ignore[return-value]


def other_minor(version: tuple[int, ...]) -> str:
    return "3.10" if version[:2] != (3, 10) else "3.12"


# --------------------------------------------------------------------------
# the builder and the vars file


def test_rebuild_is_a_fast_noop(standins: Path) -> None:
    installer = standins / INSTALLER
    before = (installer.stat().st_mtime_ns, (standins / "standins_python.yml").read_text())
    done = run([sys.executable, str(BUILDER), "build", "--out", str(standins)])
    assert done.returncode == 0, done.stderr
    assert "building" not in done.stderr, done.stderr
    assert (installer.stat().st_mtime_ns, (standins / "standins_python.yml").read_text()) == before


def test_vars_describe_the_outputs(standins: Path, standin_vars: dict) -> None:
    inst = standin_vars["standin_conda_installer"]
    path = standins / inst["file"]
    assert inst["file"] == INSTALLER
    assert inst["size"] == path.stat().st_size
    assert inst["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    apex = standin_vars["standin_apex"]
    assert Path(apex["repo"]) == standins / apex["name"] == standins / "apex-standin.git"
    assert git("--git-dir", apex["repo"], "rev-parse", f"{apex['tag']}^{{commit}}") == apex["commit"]
    assert git("--git-dir", apex["repo"], "rev-parse", "refs/heads/main") == apex["head"] != apex["commit"]
    assert apex["version"] == "0.1+standin"
    verl = standin_vars["standin_verl"]
    assert Path(verl["repo"]) == standins / verl["name"] == standins / "verl.git"
    assert verl["tag"] == "v0.4.1"
    assert git("--git-dir", verl["repo"], "rev-parse", "v0.4.1^{commit}") == verl["commit"]
    assert verl["upstream_commit"] == "8d9e350ea58c7ad4b50dd14d9dcb50577242c55f" != verl["commit"]
    text = (standins / "standins_python.yml").read_text()
    assert "CONTAINER'S OWN python: its" in text  # the comment the scenarios rely on
    assert standin_vars["standin_conda_python_by_debian"] == {"11": "3.9", "12": "3.11", "13": "3.11"}


def test_installer_bytes_are_reproducible(standins: Path, builder: ModuleType) -> None:
    wheel = standins / "cache" / "python" / "wheels" / builder.PIP_WHEEL
    assert builder.installer_bytes(wheel) == (standins / INSTALLER).read_bytes()


def test_repository_commits_are_reproducible(
    standins: Path, standin_vars: dict, builder: ModuleType, tmp_path: Path
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    pinned, head = builder.build_apex_repo(tmp_path / "apex.git", scratch)
    assert (pinned, head) == (standin_vars["standin_apex"]["commit"], standin_vars["standin_apex"]["head"])
    sdist = builder.find_verl_sdist(standins / "cache" / "python", scratch)
    assert builder.build_verl_repo(sdist, tmp_path / "verl.git", scratch) == standin_vars["standin_verl"]["commit"]


# --------------------------------------------------------------------------
# the Miniforge installer stand-in


def test_installer_batch_install(standins: Path, home_env: dict[str, str], tmp_path: Path) -> None:
    prefix = tmp_path / "miniforge3"
    done = install(standins, ["-b", "-p", str(prefix)], home_env)
    assert done.returncode == 0, done.stderr
    for rel in ("bin/conda", "condabin/conda", "etc/profile.d/conda.sh", ".condarc", "STANDIN-README.txt"):
        assert "STAND-IN" in (prefix / rel).read_text(), rel
    assert os.access(prefix / "bin" / "conda", os.X_OK) and (prefix / "envs").is_dir()
    assert not (prefix / "bin" / "python").exists()  # no base python is faked
    version = run([str(prefix / "bin" / "conda"), "--version"], env=home_env)
    assert (version.returncode, version.stdout) == (0, "conda 24.11.3\n")
    history = (prefix / "conda-meta" / "history").read_text()
    assert f"-b -p {prefix}" in history


def test_installer_relative_prefix_is_the_callers(standins: Path, home_env: dict[str, str], tmp_path: Path) -> None:
    done = install(standins, ["-b", "-p", "rel/mf"], home_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "rel" / "mf" / "bin" / "conda").is_file()


@pytest.mark.parametrize("installed_before", [False, True], ids=["empty-dir", "installation"])
def test_installer_refuses_an_existing_prefix_without_u(
    standins: Path, home_env: dict[str, str], tmp_path: Path, installed_before: bool
) -> None:
    prefix = tmp_path / "miniforge3"
    if installed_before:
        assert install(standins, ["-b", "-p", str(prefix)], home_env).returncode == 0
    else:
        prefix.mkdir()
    before = sorted(p.name for p in prefix.iterdir())
    done = install(standins, ["-b", "-p", str(prefix)], home_env)
    assert done.returncode == 1
    assert f"already exists: '{prefix}'" in done.stderr and "-u" in done.stderr
    assert sorted(p.name for p in prefix.iterdir()) == before


def test_installer_update_keeps_envs_and_condarc(standins: Path, home_env: dict[str, str], tmp_path: Path) -> None:
    prefix = tmp_path / "miniforge3"
    assert install(standins, ["-b", "-p", str(prefix)], home_env).returncode == 0
    (prefix / "envs" / "kept").mkdir()
    (prefix / ".condarc").write_text("channels: [mine]\n")
    (prefix / "bin" / "conda").unlink()
    done = install(standins, ["-b", "-u", "-p", str(prefix)], home_env)
    assert done.returncode == 0, done.stderr
    assert (prefix / "envs" / "kept").is_dir()
    assert (prefix / ".condarc").read_text() == "channels: [mine]\n"
    assert run([str(prefix / "bin" / "conda"), "--version"], env=home_env).returncode == 0
    assert (prefix / "conda-meta" / "history").read_text().count("==> ") == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-b", "-p", "{p}", "-x"], "unknown option -x"),
        (["-b", "-f", "-p", "{p}"], "option -f of the real installer is not supported"),
        (["--help"], "unknown option --help"),
        (["-p", "{p}"], "batch mode only: pass -b"),
        (["-b", "-p", "{p}", "extra"], "unexpected argument: extra"),
        (["-b", "-p"], "option -p needs an argument"),
    ],
)
def test_installer_refuses_bad_flags(
    standins: Path, home_env: dict[str, str], tmp_path: Path, args: list[str], message: str
) -> None:
    prefix = tmp_path / "miniforge3"
    done = install(standins, [a.format(p=prefix) for a in args], home_env)
    assert done.returncode == 2
    assert message in done.stderr
    assert not prefix.exists()


@pytest.mark.skipif(not shutil.which("dash"), reason="no dash")
def test_installer_wants_bash(standins: Path, home_env: dict[str, str], tmp_path: Path) -> None:
    done = run(["dash", str(standins / INSTALLER), "-b", "-p", str(tmp_path / "mf")], env=home_env)
    assert done.returncode == 2 and "run this installer with bash" in done.stderr
    assert not (tmp_path / "mf").exists()


def test_installer_refuses_a_damaged_file(standins: Path, home_env: dict[str, str], tmp_path: Path) -> None:
    damaged = tmp_path / INSTALLER
    data = bytearray((standins / INSTALLER).read_bytes())
    data[-100] ^= 0xFF
    damaged.write_bytes(bytes(data))
    done = run(["bash", str(damaged), "-b", "-p", str(tmp_path / "mf")], env=home_env)
    assert done.returncode == 1 and "damaged" in done.stderr
    assert not (tmp_path / "mf").exists()


# --------------------------------------------------------------------------
# the stand-in conda


def test_conda_info_json(conda_root: tuple[Path, dict[str, str]]) -> None:
    root, env = conda_root
    done = conda(root, env, "info", "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["conda_version"] == "24.11.3"
    assert info["root_prefix"] == str(root)
    assert info["envs_dirs"][0] == str(root / "envs")
    assert str(root) in info["envs"]


def test_conda_create_with_the_host_python(conda_root: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    root, env = conda_root
    host = host_python_version(root, env)
    prefix = tmp_path / "env"
    done = conda(root, env, "create", "-y", "-p", str(prefix), f"python={host[0]}.{host[1]}")
    assert done.returncode == 0, done.stderr
    assert "standin: requested python" not in done.stderr
    version = run([str(prefix / "bin" / "python"), "-c", "import sys; print(tuple(sys.version_info[:3]))"])
    assert version.stdout.strip() == str(host)
    pip = run([str(prefix / "bin" / "pip"), "--version"], env=env)
    assert pip.returncode == 0 and pip.stdout.startswith("pip 24.3.1 "), pip.stdout + pip.stderr
    history = (prefix / "conda-meta" / "history").read_text()
    assert f"# cmd: {root / 'bin' / 'conda'} create -y -p {prefix}" in history
    assert "+standin::python-%d.%d.%d-host" % host in history
    listed = json.loads(conda(root, env, "env", "list", "--json").stdout)
    assert listed["envs"][0] == str(root) and str(prefix) in listed["envs"]


def host_pythons(
    tmp_path: Path, env: dict[str, str], real: str, versions: dict[str, str]
) -> tuple[dict[str, str], Path]:
    """A PATH of nothing but pythonX.Y stand-ins, each answering the conda's version probe with
    the version given and logging its calls; `-m venv` runs `real`, the python3 the conda runs on
    (no second interpreter version is on this host). Nothing else on PATH: a machine with a
    real python3.N (pyenv, deadsnakes) cannot give it to the env."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for name, version in versions.items():
        script = bin_dir / name
        script.write_text(
            "#!/bin/sh\n"
            f'echo "{name} $*" >> {calls}\n'
            f'[ "$1" = -I ] && [ "$2" = -c ] && {{ echo {version}; exit 0; }}\n'
            f'exec {real} "$@"\n'
        )
        script.chmod(0o755)
    return {**env, "PATH": str(bin_dir)}, calls


def create_other_minor(
    conda_root: tuple[Path, dict[str, str]], tmp_path: Path, answers: str = ""
) -> tuple[subprocess.CompletedProcess[str], Path, tuple[int, int, int], str, Path]:
    """conda create -y -p ENV python=<a minor that is not the host's>, on host_pythons' PATH: a
    python<that minor> answering `answers` as its version ("{wanted}" in it: that minor), or none
    without `answers`. Returns
    what conda printed, ENV, the host's version, the minor asked for and the stand-ins' call log."""
    root, env = conda_root
    host = host_python_version(root, env)
    wanted = other_minor(host)
    real = json.loads(conda(root, env, "info", "--json").stdout)["sys.executable"]
    path_env, calls = host_pythons(
        tmp_path, env, real, {f"python{wanted}": answers.format(wanted=wanted)} if answers else {}
    )
    prefix = tmp_path / "env"
    done = conda(root, path_env, "create", "-y", "-p", str(prefix), f"python={wanted}")
    assert done.returncode == 0, done.stderr
    return done, prefix, host, wanted, calls


def test_conda_create_other_python_warns_and_uses_the_hosts(
    conda_root: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    done, prefix, host, wanted, _ = create_other_minor(conda_root, tmp_path)
    line = f"standin: requested python {wanted}, using the host's python {host[0]}.{host[1]}"
    assert line in done.stderr.splitlines()
    assert (prefix / "bin" / f"python{host[0]}.{host[1]}").exists()


def test_conda_create_takes_the_hosts_python_of_the_version_asked(
    conda_root: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    done, prefix, _, wanted, calls = create_other_minor(conda_root, tmp_path, answers="{wanted}.9")
    assert "standin: requested python" not in done.stderr
    assert f"python{wanted} -m venv --without-pip {prefix}" in calls.read_text().splitlines()
    assert f"+standin::python-{wanted}.9-host" in (prefix / "conda-meta" / "history").read_text()
    assert f"with python {wanted}.9 (the host's)" in done.stdout


def test_conda_create_refuses_a_host_python_of_another_version(
    conda_root: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    # A pythonX.Y on PATH that is not X.Y (a link, a wrong install) is not taken for X.Y.
    done, prefix, host, wanted, calls = create_other_minor(conda_root, tmp_path, answers="3.7.1")
    assert f"standin: requested python {wanted}, using the host's python {host[0]}.{host[1]}" in done.stderr
    assert "-m venv" not in calls.read_text()
    assert "+standin::python-%d.%d.%d-host" % host in (prefix / "conda-meta" / "history").read_text()


def test_conda_create_by_name_and_recreate(conda_root: tuple[Path, dict[str, str]]) -> None:
    root, env = conda_root
    done = conda(root, env, "create", "-y", "-n", "named", "python")
    assert done.returncode == 0, done.stderr
    prefix = root / "envs" / "named"
    assert (prefix / "bin" / "pip").exists()
    (prefix / "marker").write_text("x")
    # conda create -y over an existing environment replaces it
    assert conda(root, env, "create", "-y", "-n", "named", "python").returncode == 0
    assert not (prefix / "marker").exists() and (prefix / "bin" / "python").exists()
    assert str(prefix) in json.loads(conda(root, env, "env", "list", "--json").stdout)["envs"]
    assert conda(root, env, "remove", "-y", "-n", "named", "--all").returncode == 0
    assert not prefix.exists()


def test_conda_remove(conda_root: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    root, env = conda_root
    prefix = tmp_path / "env"
    assert conda(root, env, "create", "-y", "-p", str(prefix), "python").returncode == 0
    done = conda(root, env, "remove", "-y", "-p", str(prefix), "--all")
    assert done.returncode == 0, done.stderr
    assert not prefix.exists()
    assert str(prefix) not in json.loads(conda(root, env, "env", "list", "--json").stdout)["envs"]
    again = conda(root, env, "remove", "-y", "-p", str(prefix), "--all")
    assert again.returncode == 1 and "not a conda environment" in again.stderr
    base = conda(root, env, "remove", "-y", "-n", "base", "--all")
    assert base.returncode == 1 and root.is_dir()


@pytest.mark.parametrize(
    "args",
    [
        ["install", "numpy"],
        ["list"],
        ["update", "-n", "base", "conda"],
        ["config", "--show"],
        ["run", "-n", "base", "true"],
        ["search", "python"],
        ["init", "bash"],
    ],
)
def test_conda_unsupported_subcommand_exits_2(conda_root: tuple[Path, dict[str, str]], args: list[str]) -> None:
    root, env = conda_root
    done = conda(root, env, *args)
    assert done.returncode == 2
    assert done.stderr.strip() == f"standin conda: subcommand {args[0]} is not supported by the stand-in"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["info"], "'conda info' is not supported"),
        (["env", "list"], "'conda env list' is not supported"),
        (["env", "export"], "subcommand env export is not supported"),
        (["create", "-p", "{p}", "python"], "'conda create' without -y is not supported"),
        (["create", "-y", "-p", "{p}", "numpy"], "package spec 'numpy' is not supported"),
        (["create", "-y", "-p", "{p}", "-c", "conda-forge", "python"], "option -c of 'conda create' is not supported"),
        (["create", "-y", "-p", "{p}", "-n", "x", "python"], "exclude each other"),
        (["remove", "-y", "-p", "{p}"], "'conda remove' without --all is not supported"),
    ],
)
def test_conda_refusals_exit_2_and_create_nothing(
    conda_root: tuple[Path, dict[str, str]], tmp_path: Path, args: list[str], message: str
) -> None:
    root, env = conda_root
    prefix = tmp_path / "env"
    done = conda(root, env, *[a.format(p=prefix) for a in args])
    assert done.returncode == 2
    assert message in done.stderr
    assert not prefix.exists()


SHELLS = ["bash"] + (["dash"] if shutil.which("dash") else [])  # conda.sh is POSIX sh


@pytest.mark.parametrize("shell", SHELLS)
def test_conda_sh_activate_and_deactivate(conda_root: tuple[Path, dict[str, str]], tmp_path: Path, shell: str) -> None:
    root, env = conda_root
    prefix = tmp_path / "env"
    assert conda(root, env, "create", "-y", "-p", str(prefix), "python").returncode == 0
    script = f"""
        . '{root}/etc/profile.d/conda.sh'
        echo "sourced=$PATH"
        conda activate '{prefix}' || exit 11
        echo "prefix=$CONDA_PREFIX"
        echo "name=$CONDA_DEFAULT_ENV"
        echo "python=$(command -v python)"
        echo "active=$PATH"
        conda deactivate
        echo "after=${{CONDA_PREFIX-unset}} ${{CONDA_DEFAULT_ENV-unset}} $CONDA_SHLVL"
        echo "restored=$PATH"
        conda activate no-such-env; echo "missing=$?"
        conda activate; echo "base=$CONDA_PREFIX $CONDA_DEFAULT_ENV"; conda deactivate
        echo "version=$(conda --version)"
    """
    done = run([shell, "-c", script], env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    out = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert out["sourced"] == f"{root}/condabin:{env['PATH']}"
    assert out["prefix"] == str(prefix) and out["name"] == str(prefix)
    assert out["python"] == f"{prefix}/bin/python"
    assert out["active"] == f"{prefix}/bin:{out['sourced']}"
    assert out["after"] == "unset unset 0"
    assert out["restored"] == out["sourced"]
    assert out["missing"] == "1"
    assert out["base"] == f"{root} base"
    assert out["version"] == "conda 24.11.3"


# --------------------------------------------------------------------------
# the git repositories


def test_apex_repo_at_the_pinned_commit(standin_vars: dict, tmp_path: Path) -> None:
    apex = standin_vars["standin_apex"]
    checkout = tmp_path / "apex"
    git("clone", "-q", apex["repo"], str(checkout))
    assert (checkout / "LATER.md").is_file()  # the branch head is newer than the pin
    git("checkout", "-q", apex["commit"], cwd=checkout)
    for rel in ("setup.py", "pyproject.toml", "apex/__init__.py", "csrc/flatten_unflatten.cpp"):
        assert (checkout / rel).is_file(), rel
    assert not (checkout / "LATER.md").exists()
    assert "commit-role: pinned" in (checkout / "apex" / "STANDIN").read_text()
    assert f'__version__ = "{apex["version"]}"' in (checkout / "apex" / "__init__.py").read_text()
    assert git("status", "--porcelain", cwd=checkout) == ""


@pytest.fixture
def mirror(standins: Path) -> Iterator[str]:
    """The stand-ins directory served over plain HTTP, as tests/fixtures/mirror.py does."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(standins)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join()


@pytest.mark.parametrize(("key", "ref"), [("standin_apex", "commit"), ("standin_verl", "commit")])
def test_repos_clone_over_dumb_http(
    mirror: str, standin_vars: dict, tmp_path: Path, key: str, ref: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for proxy in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    repo = standin_vars[key]
    checkout = tmp_path / "clone"
    git("clone", "-q", f"{mirror}/{repo['name']}", str(checkout))
    git("checkout", "-q", repo[ref], cwd=checkout)
    assert git("rev-parse", "HEAD", cwd=checkout) == repo[ref]


def sdist_files(sdist: Path, into: Path) -> tuple[Path, dict[str, str]]:
    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(into)
    top = into / "verl-0.4.1"
    return top, tree_hashes(top)


def test_verl_tag_checks_out_the_sdist_files(
    standins: Path, standin_vars: dict, builder: ModuleType, tmp_path: Path
) -> None:
    verl = standin_vars["standin_verl"]
    checkout = tmp_path / "verl"
    git("clone", "-q", verl["repo"], str(checkout))
    git("checkout", "-q", verl["tag"], cwd=checkout)
    assert git("rev-parse", "HEAD", cwd=checkout) == verl["commit"]
    assert git("cat-file", "-t", f"refs/tags/{verl['tag']}", cwd=checkout) == "commit"  # lightweight
    sdist = builder.find_verl_sdist(standins / "cache" / "python", tmp_path)
    assert hashlib.sha256(sdist.read_bytes()).hexdigest() == verl["sdist_sha256"]
    top, expected = sdist_files(sdist, tmp_path / "sdist")
    ours = tree_hashes(checkout)
    left_out = sorted(set(expected) - set(ours))
    # Only what setuptools' sdist step adds is left out; nothing of verl's.
    assert left_out == [
        "PKG-INFO",
        "setup.cfg",
        "verl.egg-info/PKG-INFO",
        "verl.egg-info/SOURCES.txt",
        "verl.egg-info/dependency_links.txt",
        "verl.egg-info/requires.txt",
        "verl.egg-info/top_level.txt",
    ]
    assert (top / "setup.cfg").read_text() == "[egg_info]\ntag_build = \ntag_date = 0\n\n"
    assert ours == {name: digest for name, digest in expected.items() if name not in left_out}
    assert len(ours) > 250
    assert (checkout / "verl" / "version" / "version").read_text().strip() == "0.4.1"


def test_verl_editable_install_leaves_no_tracked_change(standin_vars: dict, tmp_path: Path) -> None:
    """`pip install -e` regenerates verl.egg-info: it must stay untracked, or
    Ansible's git module refuses to update the checkout on the next run."""
    checkout = tmp_path / "verl"
    git("clone", "-q", standin_vars["standin_verl"]["repo"], str(checkout))
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    tools = run([*pip, "install", "-q", "setuptools>=61,<81", "wheel"])
    if tools.returncode != 0:
        pytest.skip("setuptools/wheel not installable from PyPI here:\n" + tools.stderr[-800:])
    done = run([*pip, "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(checkout)])
    assert done.returncode == 0, done.stderr
    version = run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('verl'))"])
    assert version.stdout.strip() == "0.4.1"
    status = git("status", "--porcelain", cwd=checkout).splitlines()
    assert all(line.startswith("?? ") for line in status), status


# --------------------------------------------------------------------------
# Apex builds against a real torch (about 1.5 minutes)


def torch_requirement() -> str | None:
    """A torch that installs without a multi-GB download: $VERL_P40_TEST_TORCH, or
    a CPU wheel lying in pip's find-links directory (as on the CI machine)."""
    if os.environ.get("VERL_P40_TEST_TORCH"):
        return os.environ["VERL_P40_TEST_TORCH"]
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    dirs = [d for d in re.split(r"[\s]+", os.environ.get("PIP_FIND_LINKS", "")) if d] + ["/opt/wheels"]
    for directory in dirs:
        found = sorted(Path(directory.removeprefix("file://")).glob(f"torch-*+cpu-{tag}-{tag}-*.whl"))
        if found:
            return str(found[-1])
    return None


@pytest.fixture(scope="module")
def torch_env(standins: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A stand-in conda environment with torch, setuptools and wheel, as the roles make it."""
    requirement = torch_requirement()
    if requirement is None:
        pytest.skip("no local CPU torch wheel; set VERL_P40_TEST_TORCH to a torch requirement or file")
    base = tmp_path_factory.mktemp("torch-env")
    env = {**os.environ, "HOME": str(base / "home")}
    (base / "home").mkdir()
    assert install(standins, ["-b", "-p", str(base / "mf")], env).returncode == 0
    prefix = base / "env"
    done = conda(base / "mf", env, "create", "-y", "-p", str(prefix), "python")
    assert done.returncode == 0, done.stderr
    done = run(
        [
            str(prefix / "bin" / "pip"),
            "install",
            "-q",
            "--disable-pip-version-check",
            requirement,
            "setuptools<81",
            "wheel",
        ],
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return prefix, env


@pytest.fixture(scope="module")
def apex_checkout(standin_vars: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    checkout = tmp_path_factory.mktemp("apex") / "apex"
    git("clone", "-q", standin_vars["standin_apex"]["repo"], str(checkout))
    git("checkout", "-q", standin_vars["standin_apex"]["commit"], cwd=checkout)
    return checkout


def test_apex_builds_apex_C_with_the_exact_pip_flags(
    torch_env: tuple[Path, dict[str, str]], apex_checkout: Path, standin_vars: dict
) -> None:
    prefix, env = torch_env
    done = run([str(prefix / "bin" / "pip"), "install", *APEX_PIP_FLAGS, "./"], env=env, cwd=apex_checkout)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert SKIP_LINE in log
    check = """
import json, os, torch, apex, apex_C
parts = [torch.arange(6.0).view(2, 3), torch.ones(4)]
flat = apex_C.flatten(parts)
assert flat.shape == (10,) and flat[:6].tolist() == list(range(6))
back = apex_C.unflatten(flat, parts)
assert all(torch.equal(a, b) for a, b in zip(parts, back))
here = os.path.dirname(apex.__file__)
print(json.dumps({"version": apex.__version__,
                  "marker": open(os.path.join(here, "STANDIN")).read(),
                  "build": json.load(open(os.path.join(here, "standin_build.json")))}))
"""
    probe = run([str(prefix / "bin" / "python"), "-c", check], env=env, cwd="/")
    assert probe.returncode == 0, probe.stderr
    result = json.loads(probe.stdout.splitlines()[-1])
    assert result["version"] == standin_vars["standin_apex"]["version"]
    assert "commit-role: pinned" in result["marker"]
    assert result["build"]["cpp_ext"] and result["build"]["cuda_ext"]
    assert result["build"]["built_extensions"] == ["apex_C"]
    assert result["build"]["skipped_cuda_extensions"] == ["amp_C", "fused_layer_norm_cuda"]
    for module in ("amp_C", "fused_layer_norm_cuda"):  # skipped, so absent
        assert run([str(prefix / "bin" / "python"), "-c", f"import {module}"], env=env).returncode == 1
    assert git("status", "--porcelain", cwd=apex_checkout) == ""  # build outputs are ignored


def test_apex_pip_wheel_with_the_same_flags(
    torch_env: tuple[Path, dict[str, str]], apex_checkout: Path, tmp_path: Path
) -> None:
    prefix, env = torch_env
    wheels = tmp_path / "wheels"
    done = run(
        [str(prefix / "bin" / "pip"), "wheel", "--no-deps", "-w", str(wheels), *APEX_PIP_FLAGS, "./"],
        env=env,
        cwd=apex_checkout,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    (wheel,) = wheels.glob("apex-0.1+standin-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(re.fullmatch(r"apex_C\..*\.so", n) for n in names), names
    assert {"apex/__init__.py", "apex/STANDIN", "apex/standin_build.json"} <= set(names)


def test_apex_standin_fail_breaks_the_build_half_way(
    torch_env: tuple[Path, dict[str, str]], apex_checkout: Path, tmp_path: Path
) -> None:
    prefix, env = torch_env
    wheels = tmp_path / "wheels"
    # The build options through the environment this time (newer Apex reads them too).
    fail_env = {**env, "APEX_STANDIN_FAIL": "1", "APEX_CPP_EXT": "1", "APEX_CUDA_EXT": "1"}
    done = run(
        [
            str(prefix / "bin" / "pip"),
            "wheel",
            "-v",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "-w",
            str(wheels),
            "./",
        ],
        env=fail_env,
        cwd=apex_checkout,
    )
    log = done.stdout + done.stderr
    assert done.returncode != 0
    assert "cpp_ext=True cuda_ext=True" in log and SKIP_LINE in log
    assert re.search(r"standin_fail\.cpp:\d+:\d+: error: #error", log), log[-3000:]
    # half-way: apex_C came first
    assert log.index("building 'apex_C' extension") < log.index("building 'apex_standin_fail' extension")
    assert not wheels.exists() or not list(wheels.glob("*.whl"))
