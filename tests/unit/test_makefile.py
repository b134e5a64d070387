"""The Makefile's lanes: make test runs molecule and integration side by side (make lanes).

Two lanes at once must not share a mirror port, must not hide a failure behind the pipe that
prefixes their lines, and the molecule lane must run the cluster scenario on the default
scenario's committed image.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import mirror  # noqa: E402

# A target that prints a line and fails the way a lane's command would.
PROBE = 'lane-probe: ; sh -c "echo a line; exit 3" $(LANE)'


def make(*args: str, makefile: Path = ROOT / "Makefile") -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "-f", str(makefile), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_a_lane_fails_when_its_command_does(tmp_path: Path):
    run = make("--eval", PROBE, "lane-probe", "LANES=1")
    assert "[lane-probe] a line" in run.stdout
    assert run.returncode != 0, "the prefixing pipe hid the command's exit status"
    # The broken case: without pipefail the pipe's status is sed's, and the lane passes.
    broken = tmp_path / "Makefile"
    broken.write_text(
        "".join(line for line in (ROOT / "Makefile").read_text().splitlines(True) if ".SHELLFLAGS" not in line)
    )
    assert make("--eval", PROBE, "lane-probe", "LANES=1", makefile=broken).returncode == 0


def test_make_test_runs_molecule_and_integration_side_by_side():
    test = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("test:"))
    assert test.split(":")[1].split("##")[0].split() == ["lint", "unit", "lanes"]
    run = make("-n", "lanes")
    assert run.returncode == 0, run.stderr
    (submake,) = [line for line in run.stdout.splitlines() if "LANES=1" in line]
    assert "-j 2" in submake and submake.split()[-2:] == ["molecule", "integration"]
    # Output sync would hold each scenario's lines back until it ends: no progress for minutes.
    assert "--output-sync" not in submake and " -O" not in submake


def test_the_lanes_use_two_mirror_ports_and_prefix_their_lines():
    run = make("-n", "LANES=1", "molecule", "integration")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    molecule = [line for line in lines if "molecule test -s" in line]
    assert [re.search(r"molecule test -s (\w+)", line).group(1) for line in molecule] == [
        "default",
        "cluster",
        "bullseye",
    ]
    # The cluster scenario's nodes start from the default scenario's commit (side_effect.yml).
    assert molecule[0].startswith("VERL_P40_COMMIT_IMAGE=1 ")
    (integration,) = [line for line in lines if "tests/integration" in line]
    port = re.match(r"VERL_P40_MIRROR_PORT=(\d+) ", integration)
    assert port and int(port.group(1)) != mirror.DEFAULT_PORT, integration
    assert all("VERL_P40_MIRROR_PORT" not in line for line in molecule)
    for line in [*molecule, integration]:
        assert line.endswith("| sed -u 's/^/[%s] /'" % ("molecule" if line in molecule else "integration")), line
    # One line per test (-v): -q's progress dots end no line, and the prefix shows whole lines only.
    assert " -v " in integration
    # Alone (no LANES), a lane prints as it always did.
    alone = make("-n", "integration").stdout
    assert "sed" not in alone
