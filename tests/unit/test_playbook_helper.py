"""tests/fixtures/playbook.py: the site.yml command line the fault tests and test_ray.py run."""

from __future__ import annotations

import json
from pathlib import Path

import playbook

REPO = Path(__file__).resolve().parents[2]


def test_the_command_line_has_the_inventory_every_vars_file_and_the_extra_vars():
    argv = playbook.command("inv/hosts.yml", ["a.yml", Path("b.yml")], "--tags", "conda", stack_user="Bad User!")
    assert argv[1:4] == ["-i", "inv/hosts.yml", str(REPO / "site.yml")]
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
    assert "playbook: %s" % (REPO / "site.yml") in done.output
    # A vars file that is not there fails the run, and output carries the reason.
    gone = playbook.run("localhost,", [tmp_path / "gone.yml"], "--syntax-check")
    assert gone.returncode != 0 and "gone.yml" in gone.output


def test_another_playbook_or_a_copy_of_the_project():
    # A stage playbook or a play of a test's own (a relative path is the project's), or a copy's site.yml.
    assert playbook.command("inv", [], playbook="playbooks/cuda.yml")[3] == str(REPO / "playbooks" / "cuda.yml")
    assert playbook.command("inv", [], playbook=Path("/tmp/play.yml"))[3] == "/tmp/play.yml"
    assert playbook.command("inv", [], root=Path("/copy"))[3] == "/copy/site.yml"
