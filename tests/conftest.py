"""Shared by every pytest run under tests/: the skip budget.

A skipped test proves nothing, so a run fails when more tests skip than the budget of
their directory allows (tests/fixtures/README.md, "Skip budget", says why each skip is
expected). Run pytest with -rs (make and the Molecule scenarios do) to see each reason.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# The most tests that may skip in one run, per directory under tests/, and why they may.
SKIP_BUDGET: dict[str, tuple[int, str]] = {
    "unit": (
        3,
        "test_standins_python.py's three Apex builds, on a machine without a local CPU torch wheel "
        "($VERL_P40_TEST_TORCH or pip's find-links directory): they compile against torch",
    ),
    "infra": (
        2,
        "no GPU in the CI containers: test_torch.py's GPU matmul, test_apex.py's CUDA extensions",
    ),
    "integration": (0, "none: every fault test runs"),
}

_skipped: Counter[str] = Counter()
_over: list[str] = []
_root: list[Path] = []


@pytest.hookimpl
def pytest_configure(config: pytest.Config) -> None:
    _root.append(config.rootpath)


def _directory(nodeid: str) -> str:
    """The directory under tests/ of a test, from its node id (relative to the rootdir)."""
    path = (_root[0] / nodeid.split("::")[0]).resolve()
    try:
        return path.relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return "?"


def _count(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped[_directory(report.nodeid)] += 1


@pytest.hookimpl
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when in ("setup", "call"):
        _count(report)


@pytest.hookimpl
def pytest_collectreport(report: pytest.CollectReport) -> None:
    _count(report)


@pytest.hookimpl
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for directory, count in sorted(_skipped.items()):
        budget, why = SKIP_BUDGET.get(directory, (0, "no budget"))
        if count > budget:
            _over.append(
                "tests/%s: %d tests skipped, the budget is %d (%s). See the skip reasons above (-rs)."
                % (directory, count, budget, why)
            )
    if _over and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl
def pytest_terminal_summary(terminalreporter) -> None:
    for line in _over:
        terminalreporter.write_line("SKIP BUDGET EXCEEDED: " + line, red=True, bold=True)
