"""tools/role_docs.py: each role's README.md is generated from its meta/argument_specs.yml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import role_docs

REPO = Path(__file__).resolve().parents[2]

TOOL = [sys.executable, str(REPO / "tools" / "role_docs.py")]


def copy_role(tmp_path: Path, name: str) -> Path:
    roles = tmp_path / "roles"
    shutil.copytree(REPO / "roles" / name / "meta", roles / name / "meta")
    return roles


def test_the_project_readmes_are_in_sync():
    run = subprocess.run([*TOOL, "--check"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    for role in (REPO / "roles").iterdir():
        if (role / "meta" / "argument_specs.yml").is_file():
            assert (role / "README.md").is_file(), role.name


def test_check_names_a_drifted_readme(tmp_path: Path):
    roles = copy_role(tmp_path, "cuda")
    assert subprocess.run([*TOOL, "--roles", str(roles)], capture_output=True, check=False).returncode == 0
    assert subprocess.run([*TOOL, "--check", "--roles", str(roles)], capture_output=True, check=False).returncode == 0
    readme = roles / "cuda" / "README.md"
    readme.write_text(readme.read_text().replace("/usr/local/cuda-11.8", "/usr/local/cuda-12.4"))
    run = subprocess.run([*TOOL, "--check", "--roles", str(roles)], capture_output=True, text=True, check=False)
    assert run.returncode == 1
    assert str(readme) + " is out of date" in run.stderr
    assert "cuda-12.4" in readme.read_text(), "--check changed the README"


def test_check_catches_a_spec_change_and_a_missing_readme(tmp_path: Path):
    roles = copy_role(tmp_path, "vllm")
    run = subprocess.run([*TOOL, "--check", "--roles", str(roles)], capture_output=True, text=True, check=False)
    assert run.returncode == 1 and "vllm/README.md is out of date" in run.stderr
    role_docs.stale_readmes(roles, write=True)
    spec_file = roles / "vllm" / "meta" / "argument_specs.yml"
    spec = yaml.safe_load(spec_file.read_text())
    spec["argument_specs"]["main"]["options"]["vllm_artifact"]["description"] = "Another text."
    spec_file.write_text(yaml.safe_dump(spec))
    assert role_docs.stale_readmes(roles, write=False) == [roles / "vllm" / "README.md"]
    role_docs.stale_readmes(roles, write=True)
    assert "Another text." in (roles / "vllm" / "README.md").read_text()


def test_hand_written_text_outside_the_markers_is_kept(tmp_path: Path):
    roles = copy_role(tmp_path, "torch")
    readme = roles / "torch" / "README.md"
    readme.write_text("Intro by hand.\n")
    role_docs.stale_readmes(roles, write=True)
    text = readme.read_text()
    assert text.startswith("Intro by hand.\n\n" + role_docs.BEGIN)
    readme.write_text(
        text.replace(role_docs.END + "\n", role_docs.END + "\n\n## Notes\n\nKept too.\n").replace("torch", "x")
    )
    role_docs.stale_readmes(roles, write=True)
    again = readme.read_text()
    assert again.startswith("Intro by hand.\n\n" + role_docs.BEGIN)
    assert again.endswith(role_docs.END + "\n\n## Notes\n\nKept too.\n")
    assert "torch_packages" in again and "x_packages" not in again


def test_table_cells():
    assert role_docs.as_text(["Set C(a|b)", "or V(x)."]) == "Set `a\\|b` or `x`."
    assert role_docs.default_text({"type": "str", "default": "3.10"}) == '`"3.10"`'
    assert role_docs.default_text({"type": "str", "default": ""}) == '`""`'
    assert role_docs.default_text({"type": "path", "default": "{{ x }}/y"}) == "`{{ x }}/y`"
    assert role_docs.default_text({"type": "list", "default": ["a", "b"]}) == "`[a, b]`"
    assert role_docs.default_text({"type": "int", "default": None}) == "`null`"
    assert role_docs.default_text({"type": "str", "required": True}) == "required"
    assert role_docs.type_text({"type": "list", "elements": "str"}) == "list of str"
    assert role_docs.type_text({"type": "str", "choices": ["a", "b"]}) == "str: `a`, `b`"
