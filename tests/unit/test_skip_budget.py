"""tests/conftest.py: a run fails when more tests skip than their directory's budget."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SKIPPING = """
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_skips(i):
    pytest.skip("nothing to test here")

def test_passes():
    pass
"""


def run_copy(tmp_path: Path, directory: str, skips: int, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """pytest on a copy of the project's pytest.ini and tests/conftest.py with one test module."""
    shutil.copy(REPO / "pytest.ini", tmp_path / "pytest.ini")
    (tmp_path / "tests" / directory).mkdir(parents=True)
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    text = SKIPPING.format(n=skips) if skips else "def test_passes():\n    pass\n"
    (tmp_path / "tests" / directory / "test_s.py").write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "tests" / directory)],
        capture_output=True,
        text=True,
        cwd=cwd or tmp_path,
        check=False,
    )


def budget(directory: str) -> int:
    """The budget tests/conftest.py enforces (loaded under its own name: `conftest` is this directory's)."""
    spec = importlib.util.spec_from_file_location("tests_shared_conftest", REPO / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SKIP_BUDGET[directory][0]


@pytest.mark.parametrize("directory", ["unit", "infra", "integration"])
def test_within_the_budget_passes(tmp_path: Path, directory: str):
    allowed = budget(directory)
    done = run_copy(tmp_path, directory, allowed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SKIP BUDGET" not in done.stdout


@pytest.mark.parametrize("directory", ["unit", "infra", "integration"])
def test_one_skip_over_the_budget_fails(tmp_path: Path, directory: str):
    allowed = budget(directory)
    done = run_copy(tmp_path, directory, allowed + 1)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SKIP BUDGET EXCEEDED: tests/%s: %d tests skipped, the budget is %d" % (
        directory,
        allowed + 1,
        allowed,
    ) in " ".join(done.stdout.split())
    # -rs comes from pytest.ini: the reasons are printed.
    assert "SKIPPED [%d]" % (allowed + 1) in done.stdout and "nothing to test here" in done.stdout


def test_applies_when_pytest_starts_elsewhere(tmp_path: Path):
    """Molecule's verify starts pytest outside the project; pytest.ini still anchors the rootdir."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    done = run_copy(project, "integration", 1, cwd=elsewhere)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SKIP BUDGET EXCEEDED: tests/integration" in done.stdout


def test_the_documented_budgets_are_the_enforced_ones():
    readme = (REPO / "tests" / "fixtures" / "README.md").read_text()
    section = readme[readme.index("## Skip budget") :]
    for directory in ("unit", "infra", "integration"):
        assert "| `tests/%s` | %d |" % (directory, budget(directory)) in section, directory
