"""The Makefile's lanes: make test runs molecule, integration and the unit suite side by side (make lanes).

The lanes share one mirror (the stand-ins' URLs are part of what a host records, and the fault
tests start hosts from the default scenario's stack root), must not hide a failure behind the pipe
that prefixes their lines, and the cluster scenario and the fault tests on built hosts start
from the default scenario's converged stack root.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MOLECULE = str(REPO / ".venv" / "bin" / "molecule")

# How make lanes prefixes a target's lines: the time, then the target's name.
PREFIX = r"""\| awk (-W interactive )?'\{ print strftime\("%H:%M:%S"\) " \[(stack-root|verify-default|cluster|bullseye|trixie|faults-new|faults-built|unit)\] " \$0; fflush\(\) \}'$"""
# A target that prints a line and fails the way a lane's command would.
PROBE = 'lane-probe: ; sh -c "echo a line; exit 3" $(LANE)'


def make(
    *args: str, makefile: Path = REPO / "Makefile", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "-f", str(makefile), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=False,
    )


def test_a_lane_fails_when_its_command_does(tmp_path: Path):
    run = make("--eval", PROBE, "lane-probe", "LANES=1")
    assert re.search(r"^\d\d:\d\d:\d\d \[lane-probe\] a line$", run.stdout, re.M), run.stdout
    assert run.returncode != 0, "the prefixing pipe hid the command's exit status"
    # The broken case: without pipefail the pipe's status is awk's, and the lane passes.
    broken = tmp_path / "Makefile"
    broken.write_text(
        "".join(line for line in (REPO / "Makefile").read_text().splitlines(True) if ".SHELLFLAGS" not in line)
    )
    assert make("--eval", PROBE, "lane-probe", "LANES=1", makefile=broken).returncode == 0


def test_a_lane_stamps_each_line_when_it_is_printed(tmp_path: Path):
    """A line reaches the lane's output while its command goes on, not when the command ends (mawk
    reads a pipe in blocks unless -W interactive): the probe prints a line, then waits for this test
    to have read it before it prints the next and ends. Held back, the line never comes in time."""
    mark = tmp_path / "read"
    probe = 'lane-live: ; sh -c "echo first; while [ ! -e %s ]; do sleep 0.1; done; echo second" $(LANE)' % mark
    lane = subprocess.Popen(
        ["make", "-s", "--no-print-directory", "--eval", probe, "lane-live", "LANES=1"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        ready, _, _ = select.select([lane.stdout], [], [], 60)
        assert ready, "no line within 60 s: the lane's awk held the first line back"
        first = lane.stdout.readline()
        assert re.match(r"^\d\d:\d\d:\d\d \[lane-live\] first$", first), first
        mark.touch()
        rest, _ = lane.communicate(timeout=60)
        assert rest.endswith("[lane-live] second\n") and lane.returncode == 0, rest
    finally:
        mark.touch()
        if lane.poll() is None:
            lane.kill()
        lane.wait()


def shared(*args: str) -> subprocess.CompletedProcess:
    """make -n as make lanes runs its targets: under a mirror that already serves (no second one)."""
    return subprocess.run(
        ["make", "--no-print-directory", "-n", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, VERL_P40_MIRROR_URL="http://127.0.0.1:9"),
        check=False,
    )


def recipe(target: str) -> list[str]:
    """The recipe lines of a target, as written in the Makefile."""
    lines = (REPO / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(target + ":"))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        body.append(line.strip())
    return body


def test_make_test_runs_molecule_and_integration_side_by_side():
    test = next(line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("test:"))
    assert test.split(":")[1].split("##")[0].split() == ["lint", "lanes"]
    # One mirror for every lane, started around the sub-make; the stack root goes after it, on a line of
    # its own: make -n runs a line that names $(MAKE), so a removal on that line would run under a dry
    # run (this test's) and take the root from under a make lanes running beside it.
    (first, second) = recipe("lanes")
    assert first.startswith("$(MIRROR) $(MAKE)") and "podman" not in first
    assert second == "$(REMOVE_STACK_ROOT)"
    run = shared("lanes")
    assert run.returncode == 0, run.stderr
    (submake,) = [line for line in run.stdout.splitlines() if "LANES=1" in line]
    # Five at once: after the stack root, the default scenario's verify, the cluster, the built-host faults and
    # Debian 11 (then 13), with the unit suite (at the lowest priority) beside them.
    assert "-j 5" in submake and submake.split()[-3:] == ["molecule", "integration", "unit"]
    assert "mirror.py" not in submake
    # Output sync would hold each scenario's lines back until it ends: no progress for minutes.
    assert "--output-sync" not in submake and " -O" not in submake


def test_the_built_faults_and_the_cluster_wait_for_the_default_scenarios_stack_root():
    """make runs a prerequisite once however many targets name it: the default scenario's verify, the
    cluster scenario and the fault tests on built hosts all start after the default scenario has
    converged its stack root, Debian 13 after it too, and Debian 11 after the fault tests on new hosts."""
    run = shared("LANES=1", "molecule", "integration")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    order = [line for line in lines if "molecule " in line or "tests/integration/" in line]
    names = [re.search(r"\[([a-z-]+)\]", line).group(1) for line in order]
    assert names == ["stack-root", "verify-default", "cluster", "faults-new", "bullseye", "trixie", "faults-built"], (
        order
    )
    # The default scenario: molecule test's steps up to side_effect, in one lane; the rest after it.
    steps = re.findall(r"molecule ([a-z-]+) -s default", order[0])
    assert steps == ["destroy", "converge", "idempotence", "side-effect"], order[0]
    assert re.findall(r"molecule ([a-z-]+) -s default", order[1]) == ["verify", "destroy"]
    assert [re.search(r"molecule test -s (\w+)", line).group(1) for line in order[2:] if "molecule test" in line] == [
        "cluster",
        "bullseye",
        "trixie",
    ]
    # Each target's lines carry its name, and under make lanes none starts a mirror of its own.
    for line in order:
        assert re.search(PREFIX, line), line
        assert "mirror.py" not in line
    # Every fault test file runs in one of the two targets, and none in both.
    new = [line for line in lines if "[faults-new]" in line]
    built = [line for line in lines if "[faults-built]" in line]
    files = sorted(path.name for path in (REPO / "tests" / "integration").glob("test_*.py"))
    named = sorted(re.findall(r"tests/integration/(test_\w+\.py)", " ".join(new + built)))
    assert named == files
    # One line per test (-v): -q's progress dots end no line, and the prefix shows whole lines only.
    assert all(" -v " in line for line in new + built)


def runs_of(*args: str) -> list[str]:
    """What a dry run of make with `args` starts, in order: "integration" for a fault-test line,
    "stack-root" for the default scenario's converge, the scenario's name for a molecule test line."""
    done = shared(*args)
    assert done.returncode == 0, done.stderr
    runs = []
    for line in done.stdout.splitlines():
        scenario = re.search(r"molecule test -s (\w+)", line)
        if scenario or "tests/integration/" in line or "molecule converge -s default" in line:
            runs.append(
                scenario.group(1) if scenario else "integration" if "tests/integration/" in line else "stack-root"
            )
    return runs


@pytest.mark.parametrize(
    ("target", "under_lanes"),
    [("trixie", ["stack-root", "trixie"]), ("bullseye", ["integration", "bullseye"])],
)
def test_the_scenarios_on_new_hosts_wait_their_turn_only_under_make_lanes(target: str, under_lanes: list[str]):
    """Alone, make bullseye (Debian 11) and make trixie (13) run their own scenario and nothing else;
    under make lanes Debian 13 follows the default scenario's converge, and Debian 11 the fault tests
    on new hosts."""
    assert runs_of(target) == [target]
    assert runs_of("LANES=1", target) == under_lanes


def test_make_molecule_runs_every_scenario():
    run = shared("molecule")
    assert run.returncode == 0, run.stderr
    ran = re.findall(r"molecule (verify|test) -s (\w+)", run.stdout)
    assert sorted(ran) == [("test", "bullseye"), ("test", "cluster"), ("test", "trixie"), ("verify", "default")], ran
    scenarios = sorted(path.parent.name for path in (REPO / "molecule").glob("*/molecule.yml"))
    # p40 is a real P40 host's scenario (docs/testing.md), not CI's.
    assert sorted({name for _, name in ran} | {"p40"}) == scenarios


def test_a_target_run_alone_serves_the_standins_itself():
    run = make("-n", "faults-new")
    assert run.returncode == 0, run.stderr
    (faults,) = [line for line in run.stdout.splitlines() if "tests/integration" in line]
    assert "tests/fixtures/mirror.py" in faults and "sed" not in faults
    # The port the shared mirror binds is the default: the stack root's recorded URLs name it.
    assert "--port" not in faults


def test_only_a_stack_root_the_default_scenario_made_is_removed(tmp_path: Path):
    """make lanes and make clean remove STACK_ROOT only where molecule/default/create.yml marked it:
    a STACK_ROOT pointed at a directory of the user's keeps it."""
    probe = "root-probe: ; $(REMOVE_STACK_ROOT)"
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for root in (mine, theirs):
        (root / "etc").mkdir(parents=True)
        (root / "etc" / "file").write_text("x")
    (mine / ".verl-p40-stack-root").write_text("")
    for root in (mine, theirs):
        run = make("--eval", probe, "root-probe", "STACK_ROOT=%s" % root)
        assert run.returncode == 0, run.stderr
    assert not mine.exists()
    assert (theirs / "etc" / "file").read_text() == "x"
    # The mark is the one create.yml writes.
    create = (REPO / "molecule" / "default" / "create.yml").read_text()
    assert "/.verl-p40-stack-root" in create


def test_under_make_lanes_the_unit_suite_runs_last_in_line_for_the_cpu_in_its_own_environment(tmp_path: Path):
    """Beside the lanes the unit suite runs at nice 19 in a session of its own whose autogroup is niced
    too (where the kernel groups tasks by session, a nice task in the lanes' session would still get
    that session's share: the 2026-12-05 CI run where it did slowed the default scenario's converge
    from 8 to 12 minutes), without the lanes' mirror or make's flags:
    test_a_target_run_alone_serves_the_standins_itself would see no mirror of its own under a
    VERL_P40_MIRROR_URL, and the make runs of this file would inherit -j. A stand-in python prints
    what the suite would get."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text(
        '#!/bin/sh\necho "nice=$(nice) mirror=${VERL_P40_MIRROR_URL-unset} makeflags=${MAKEFLAGS-unset}'
        ' lanes=${LANES-unset} session=$(cut -d" " -f6 /proc/$$/stat)'
        ' autogroup=$(sed "s/.* nice /nice/" /proc/self/autogroup 2>/dev/null) args=$*"\n'
    )
    (fake / "python").chmod(0o755)

    def unit(*args: str) -> str:
        run = make(
            "-j", "2", "BIN=%s" % fake, *args, "unit", env=dict(os.environ, VERL_P40_MIRROR_URL="http://127.0.0.1:9")
        )
        assert run.returncode == 0, run.stdout + run.stderr
        (line,) = [line for line in run.stdout.splitlines() if "nice=" in line]
        return line

    beside = unit("LANES=1")
    assert re.match(r"^\d\d:\d\d:\d\d \[unit\] nice=19 mirror=unset makeflags=unset lanes=unset ", beside), beside
    assert "-m pytest -q -n 2 --dist loadfile" in beside and beside.endswith(" tests/unit")
    session = int(re.search(r" session=(\d+)", beside).group(1))
    assert session != os.getsid(0), "the suite shares the session (and its CPU share) of make's lanes"
    if Path("/proc/self/autogroup").exists():
        assert " autogroup=nice19 " in beside, beside
    # Alone: as it was started, with its environment and session.
    alone = unit()
    assert alone.startswith("nice=%d mirror=http://127.0.0.1:9 makeflags=" % os.nice(0)), alone
    assert "makeflags=unset" not in alone and " session=%d " % os.getsid(0) in alone


@pytest.mark.parametrize(
    ("target", "script"),
    [
        ("apex-proof", "tests/apex_proof/run.py --jobs 2"),
        ("driver-proof", "tests/driver_proof/run.py"),
        ("setup-proof", "tests/setup_proof/run.py"),
    ],
)
def test_each_proof_runs_its_script_outside_make_test(target: str, script: str):
    """The proofs take minutes to an hour of both cores (docs/testing.md): each make target runs
    its script, and make test runs none of them."""
    run = make("-n", target)
    assert run.returncode == 0, run.stderr
    assert script in run.stdout
    test_line = next(line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("test:"))
    assert target not in test_line
    lanes = shared("LANES=1", "molecule", "integration", "unit")
    assert lanes.returncode == 0 and script.split()[0] not in lanes.stdout
