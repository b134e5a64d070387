"""tests/fixtures/playbook.py: the site.yml command line the fault tests and test_ray.py run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import playbook  # noqa: E402


def test_the_command_line_has_the_inventory_every_vars_file_and_the_extra_vars():
    argv = playbook.command("inv/hosts.yml", ["a.yml", Path("b.yml")], "--tags", "conda", stack_user="Bad User!")
    assert argv[1:4] == ["-i", "inv/hosts.yml", str(ROOT / "site.yml")]
    assert argv[4:8] == ["-e", "@a.yml", "-e", "@b.yml"]
    assert argv[8] == "-e" and json.loads(argv[9]) == {"stack_user": "Bad User!"}
    assert argv[10:] == ["--tags", "conda"]
    # No extra vars: no empty -e.
    assert playbook.command("inv", []).count("-e") == 0


def test_a_run_reads_its_vars_files(tmp_path: Path):
    extra = tmp_path / "extra.yml"
    extra.write_text("stack_ray_port: 7000\n")
    done = playbook.run("localhost,", [extra], "--syntax-check")
    assert done.returncode == 0, done.output[-3000:]
    assert "playbook: %s" % (ROOT / "site.yml") in done.output
    # A vars file that is not there fails the run, and output carries the reason.
    gone = playbook.run("localhost,", [tmp_path / "gone.yml"], "--syntax-check")
    assert gone.returncode != 0 and "gone.yml" in gone.output
