"""Shared by every pytest run under tests/: the skip budget.

A skipped test proves nothing, and neither does an xfailed one (nor one marked xfail that
passed: it could not have failed the run), so a run fails when more tests skip or xfail
than the budget of their directory allows (tests/fixtures/README.md, "Skip budget", says
why each skip is expected). pytest.ini sets -rsxX, so each run prints every reason.

What tests/infra skips depends on the host it checks, so its budget is per Molecule
scenario: the scenario's verify sets VERL_P40_SCENARIO (molecule/*/verify.yml), and a
tests/infra run without it, or with a scenario the table does not know, stops before any
test runs, naming it.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SCENARIO_VARIABLE = "VERL_P40_SCENARIO"

# The most tests that may skip or xfail in one run, per directory under tests/, and why they
# may; a directory whose skips depend on the host has one entry per scenario. CI runs unit,
# integration and the default, bullseye, trixie and cluster scenarios; p40 is a real P40 host.
SKIP_BUDGET: dict[str, tuple[int, str] | dict[str, tuple[int, str]]] = {
    "unit": (
        0,
        "none: CI (root, PyPI, host_tools.py's packages, a CPU torch wheel in pip's find-links "
        "directory) runs every unit test; elsewhere test_standins_python.py's Apex builds need "
        "VERL_P40_TEST_TORCH",
    ),
    "infra": {
        "default": (
            8,
            "one host outside a Ray cluster and no GPU: test_ray.py's 6 tests of a cluster member "
            "(the 7th checks there is no ray layer), test_torch.py's GPU matmul, "
            "test_apex.py's CUDA extensions",
        ),
        "bullseye": (0, "none: test_preflight.py, test_cuda.py and test_cudnn.py all run"),
        "trixie": (8, "the same as default's: one host outside a Ray cluster and no GPU"),
        "cluster-head": (0, "none: the head runs every test of test_ray.py"),
        "cluster-worker": (5, "test_ray.py's 5 tests that drive the cluster from its head"),
        "p40": (
            6,
            "one P40 host outside a Ray cluster: test_ray.py's 6 tests of a cluster member (the GPU tests run)",
        ),
    },
    "integration": (0, "none: every fault test runs"),
}

# (directory, "skipped" or "xfailed") -> how many tests
_skipped: Counter[tuple[str, str]] = Counter()
_over: list[str] = []
_used: list[str] = []
_root: list[Path] = []


def budget(directory: str, scenario: str | None) -> tuple[int, str]:
    """The budget of a directory (and scenario, where it has one per scenario), with why.

    Raises ValueError naming the scenario when a directory needs one and it is unset or unknown.
    """
    entry = SKIP_BUDGET.get(directory, (0, "no budget"))
    if isinstance(entry, tuple):
        return entry
    if scenario in entry:
        return entry[scenario]
    said = "is not set" if not scenario else "is %r, a scenario with no skip budget" % scenario
    raise ValueError(
        "tests/%s has a skip budget per scenario, and %s %s: set it to one of %s (tests/conftest.py, SKIP_BUDGET)"
        % (directory, SCENARIO_VARIABLE, said, ", ".join(sorted(entry)))
    )


def _scenario() -> str | None:
    return os.environ.get(SCENARIO_VARIABLE) or None


@pytest.hookimpl
def pytest_configure(config: pytest.Config) -> None:
    _root.append(config.rootpath)


def _directory(path: Path) -> str:
    """The directory under tests/ of a test file."""
    try:
        return path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return "?"


def _directory_of(nodeid: str) -> str:
    return _directory(_root[0] / nodeid.split("::")[0])


@pytest.hookimpl
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Stop before the first test when a directory that needs a scenario runs without a known one."""
    for directory in sorted({_directory(item.path) for item in items}):
        try:
            budget(directory, _scenario())
        except ValueError as error:
            raise pytest.UsageError(str(error)) from None


def _count(report: pytest.TestReport | pytest.CollectReport) -> None:
    # wasxfail: xfailed (reported as skipped) or marked xfail and passed; either way it could not fail.
    if hasattr(report, "wasxfail"):
        _skipped[(_directory_of(report.nodeid), "xfailed")] += 1
    elif report.skipped:
        _skipped[(_directory_of(report.nodeid), "skipped")] += 1


@pytest.hookimpl
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when in ("setup", "call"):
        _count(report)


@pytest.hookimpl
def pytest_collectreport(report: pytest.CollectReport) -> None:
    _count(report)


@pytest.hookimpl
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for directory in sorted({directory for directory, _ in _skipped}):
        skipped, xfailed = _skipped[(directory, "skipped")], _skipped[(directory, "xfailed")]
        try:
            allowed, why = budget(directory, _scenario())
        except ValueError as error:
            # Collection stops such a run before any test; a skip at collection can still get here.
            _over.append(str(error))
            continue
        where = "tests/%s" % directory
        if not isinstance(SKIP_BUDGET.get(directory), tuple):
            where += " (scenario %s)" % _scenario()
        counted = "%d tests skipped or xfailed (%d skipped, %d xfailed)" % (skipped + xfailed, skipped, xfailed)
        if skipped + xfailed > allowed:
            _over.append(
                "%s: %s, the budget is %d (%s). See the reasons above (-rsxX)." % (where, counted, allowed, why)
            )
        else:
            _used.append("%s: %s, within the budget of %d" % (where, counted, allowed))
    if _over and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl
def pytest_terminal_summary(terminalreporter) -> None:
    for line in _used:
        terminalreporter.write_line("skip budget: " + line)
    for line in _over:
        terminalreporter.write_line("SKIP BUDGET EXCEEDED: " + line, red=True, bold=True)
