"""tests/conftest.py: a run fails when more tests skip or xfail than their budget: per directory,
and for tests/infra per Molecule scenario (VERL_P40_SCENARIO, set by each verify.yml)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from repo import REPO, load_file

SKIPPING = """
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_skips(i):
    pytest.skip("nothing to test here")

def test_passes():
    pass
"""
XFAILING = """
import pytest

@pytest.mark.xfail(reason="known to fail")
def test_fails():
    assert False

@pytest.mark.xfail(reason="known to fail, and passes")
def test_passes_anyway():
    pass

def test_imperative():
    pytest.xfail("gave up here")
"""


# tests/conftest.py, loaded under its own name (`conftest` is this directory's).
SHARED = load_file(REPO / "tests" / "conftest.py", "tests_shared_conftest")
INFRA_SCENARIOS = sorted(SHARED.SKIP_BUDGET["infra"])


def run_copy(
    tmp_path: Path,
    directory: str,
    skips: int = 0,
    cwd: Path | None = None,
    scenario: str | None = None,
    text: str | None = None,
) -> subprocess.CompletedProcess:
    """pytest on a copy of the project's pytest.ini and tests/conftest.py with one test module."""
    shutil.copy(REPO / "pytest.ini", tmp_path / "pytest.ini")
    (tmp_path / "tests" / directory).mkdir(parents=True)
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    if text is None:
        text = SKIPPING.format(n=skips) if skips else "def test_passes():\n    pass\n"
    (tmp_path / "tests" / directory / "test_s.py").write_text(text)
    env = {k: v for k, v in os.environ.items() if k != SHARED.SCENARIO_VARIABLE}
    if scenario is not None:
        env[SHARED.SCENARIO_VARIABLE] = scenario
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "tests" / directory)],
        capture_output=True,
        text=True,
        cwd=cwd or tmp_path,
        env=env,
        check=False,
    )


def one_line(done: subprocess.CompletedProcess) -> str:
    return " ".join((done.stdout + done.stderr).split())


# Each directory's run, as (directory, scenario): one scenario per infra budget.
RUNS = [("unit", None), ("integration", None)] + [("infra", scenario) for scenario in INFRA_SCENARIOS]


def where(directory: str, scenario: str | None) -> str:
    return "tests/%s" % directory + (" (scenario %s)" % scenario if scenario else "")


@pytest.mark.parametrize("directory, scenario", RUNS)
def test_within_the_budget_passes(tmp_path: Path, directory: str, scenario: str | None):
    allowed, _ = SHARED.budget(directory, scenario)
    done = run_copy(tmp_path, directory, allowed, scenario=scenario)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SKIP BUDGET EXCEEDED" not in done.stdout
    if allowed:
        assert "skip budget: %s: %d tests skipped or xfailed" % (where(directory, scenario), allowed) in one_line(done)


@pytest.mark.parametrize("directory, scenario", RUNS)
def test_one_skip_over_the_budget_fails(tmp_path: Path, directory: str, scenario: str | None):
    allowed, why = SHARED.budget(directory, scenario)
    done = run_copy(tmp_path, directory, allowed + 1, scenario=scenario)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SKIP BUDGET EXCEEDED: %s: %d tests skipped or xfailed (%d skipped, 0 xfailed), the budget is %d (%s)" % (
        where(directory, scenario),
        allowed + 1,
        allowed + 1,
        allowed,
        " ".join(why.split()),
    ) in one_line(done)
    # -rsxX comes from pytest.ini: the reasons are printed.
    assert "SKIPPED [%d]" % (allowed + 1) in done.stdout and "nothing to test here" in done.stdout


def test_an_xfail_counts_like_a_skip(tmp_path: Path):
    """An xfailed test, one marked xfail that passed and one that called pytest.xfail: none can
    fail the run, so each counts, and a budget of 0 is exceeded by them."""
    assert SHARED.budget("integration", None)[0] == 0
    done = run_copy(tmp_path, "integration", text=XFAILING)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "SKIP BUDGET EXCEEDED: tests/integration: 3 tests skipped or xfailed (0 skipped, 3 xfailed), the budget is 0"
        in one_line(done)
    )
    # -rsxX comes from pytest.ini: each xfail's reason is printed.
    assert "known to fail, and passes" in done.stdout and "gave up here" in done.stdout


@pytest.mark.parametrize("scenario", ["no-such-scenario", None, ""])
def test_an_infra_run_needs_a_known_scenario(tmp_path: Path, scenario: str | None):
    """Unset or unknown, the scenario stops the run before its first test, naming it and the known ones."""
    done = run_copy(tmp_path, "infra", 0, scenario=scenario)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    said = one_line(done)
    if scenario:
        assert "VERL_P40_SCENARIO is %r, a scenario with no skip budget" % scenario in said, said
    else:
        assert "VERL_P40_SCENARIO is not set" in said, said
    assert "set it to one of %s" % ", ".join(INFRA_SCENARIOS) in said
    assert "passed" not in done.stdout


def test_other_directories_ignore_the_scenario(tmp_path: Path):
    done = run_copy(tmp_path, "unit", 0, scenario="no-such-scenario")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_lanes_that_skip_nothing_in_ci_have_no_budget():
    """CI runs every unit test (a CPU torch wheel lies in pip's find-links directory there, so
    test_standins_python.py's Apex builds run) and every fault test; Debian 11's system layers and
    the cluster's head run every test they collect. Debian 13's whole stack skips what Debian 12's
    does (one host outside a Ray cluster, no GPU), and no more."""
    nothing_skips = [
        ("unit", None),
        ("integration", None),
        ("infra", "bullseye"),
        ("infra", "cluster-head"),
    ]
    for directory, scenario in nothing_skips:
        assert SHARED.budget(directory, scenario)[0] == 0, (directory, scenario)
    assert SHARED.budget("infra", "trixie")[0] == SHARED.budget("infra", "default")[0]


def test_applies_when_pytest_starts_elsewhere(tmp_path: Path):
    """Molecule's verify starts pytest outside the project; pytest.ini still anchors the rootdir."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    done = run_copy(project, "integration", 1, cwd=elsewhere)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SKIP BUDGET EXCEEDED: tests/integration" in done.stdout


def verify_scenarios() -> dict[str, set[str]]:
    """The VERL_P40_SCENARIO values each molecule/*/verify.yml gives its tests/infra run: a name,
    or the quoted names of a Jinja expression (the cluster's head and workers)."""
    found: dict[str, set[str]] = {}
    for verify in sorted((REPO / "molecule").glob("*/verify.yml")):
        for play in yaml.safe_load(verify.read_text()):
            for task in play.get("tasks", []):
                argv = (task.get("ansible.builtin.command") or {}).get("argv") or []
                if not any("/tests/infra" in str(arg) for arg in argv):
                    continue
                value = str((task.get("environment") or {}).get(SHARED.SCENARIO_VARIABLE, ""))
                names = set(re.findall(r"'([^']*)'", value)) if "{{" in value else {value}
                found[verify.parent.name] = names - {""}
    return found


def test_every_scenario_names_its_budget():
    """Each verify.yml that runs tests/infra sets VERL_P40_SCENARIO to names with a budget, and
    every budget is some scenario's."""
    found = verify_scenarios()
    assert sorted(found) == ["bullseye", "cluster", "default", "p40", "trixie"]
    assert all(found.values()), found
    assert sorted(set().union(*found.values())) == INFRA_SCENARIOS
    assert found["cluster"] == {"cluster-head", "cluster-worker"}


def test_the_documented_budgets_are_the_enforced_ones():
    readme = (REPO / "tests" / "fixtures" / "README.md").read_text()
    section = readme[readme.index("## Skip budget") :]
    for directory, scenario in RUNS:
        named = "`%s`" % scenario if scenario else "any"
        row = "| `tests/%s` | %s | %d |" % (directory, named, SHARED.budget(directory, scenario)[0])
        assert row in section, row
