"""tools/install_collections.py: the collections requirements.yml names, and only those, unpacked from
the hash-locked `ansible` bundle wheel into the control venv (make setup).

The broken cases: a range instead of a version (the bundle holds one of each), a version the bundle
does not hold, a collection's dependency left out of requirements.yml, and a bundle member that
would land outside its collection's directory.
"""

from __future__ import annotations

import io
import json
import sysconfig
import zipfile
from pathlib import Path

import pytest

import install_collections as ic

REPO = Path(__file__).resolve().parents[2]


def bundle(collections: dict[str, tuple[str, dict]], extra: dict[str, bytes] | None = None) -> zipfile.ZipFile:
    """A wheel-like zip holding ansible_collections/<ns>/<name>/ for each (version, dependencies)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for name, (version, dependencies) in collections.items():
            root = "ansible_collections/%s/" % name.replace(".", "/")
            info = {"collection_info": {"version": version, "dependencies": dependencies}}
            wheel.writestr(root + "MANIFEST.json", json.dumps(info))
            wheel.writestr(root + "plugins/modules/thing.py", "# %s\n" % name)
        for member, data in (extra or {}).items():
            wheel.writestr(member, data)
        wheel.writestr("ansible-12.3.0.dist-info/METADATA", "Name: ansible\n")
    return zipfile.ZipFile(io.BytesIO(buffer.getvalue()))


def test_requirements_yml_names_exact_versions_of_the_collections_the_project_uses():
    wanted = ic.wanted((REPO / "requirements.yml").read_text())
    assert set(wanted) == {"containers.podman", "ansible.posix"}
    assert all(version[0].isdigit() for version in wanted.values())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("collections:\n  - name: a.b\n    version: '>=1.0.0'\n", "a.b: '>=1.0.0' is not an exact version"),
        ("collections:\n  - name: a.b\n", "a.b: '' is not an exact version"),
        ("collections:\n  - name: ab\n    version: 1.0.0\n", "'ab' is not a collection"),
        ("roles: []\n", "no `collections:` list"),
    ],
)
def test_what_the_bundle_cannot_answer_is_refused(text: str, message: str):
    with pytest.raises(ValueError, match=message):
        ic.wanted(text)


def test_the_bundle_must_hold_each_version_and_every_dependency_must_be_named():
    wheel = bundle({"a.b": ("1.0.0", {}), "c.d": ("2.0.0", {"a.b": ">=1.0.0", "e.f": "*"})})
    assert ic.problems(wheel, {"a.b": "1.0.0", "c.d": "2.0.0"}) == [
        "c.d needs e.f, which requirements.yml does not name"
    ]
    assert ic.problems(wheel, {"a.b": "1.0.1"}) == ["a.b: the bundle holds 1.0.0, requirements.yml names 1.0.1"]
    assert ic.problems(wheel, {"x.y": "1.0.0"}) == ["x.y: not in the bundle"]


def test_only_the_named_collections_are_unpacked_and_an_old_copy_is_replaced(tmp_path: Path):
    wheel = bundle({"a.b": ("1.0.0", {}), "c.d": ("2.0.0", {})})
    stale = tmp_path / "a" / "b" / "plugins" / "modules" / "gone.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    ic.unpack(wheel, {"a.b": "1.0.0"}, tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "a/b/MANIFEST.json",
        "a/b/plugins/modules/thing.py",
    ]
    assert ic.installed(tmp_path, {"a.b": "1.0.0"}) == []
    assert ic.installed(tmp_path, {"a.b": "1.0.1", "c.d": "2.0.0"}) == [
        "a.b: 1.0.0, requirements.yml names 1.0.1",
        "c.d: not installed, requirements.yml names 2.0.0",
    ]


def test_a_member_that_leaves_its_collection_is_refused(tmp_path: Path):
    wheel = bundle({"a.b": ("1.0.0", {})}, extra={"ansible_collections/a/b/../../../escape.py": b""})
    with pytest.raises(ValueError, match="leaves the collection's directory"):
        ic.unpack(wheel, {"a.b": "1.0.0"}, tmp_path / "dest")
    assert not (tmp_path / "escape.py").exists()


def test_the_venv_the_tests_run_in_has_them():
    # make setup installs them; a venv made another way (pip install -r requirements.txt alone) lacks them.
    destination = Path(sysconfig.get_paths()["purelib"]) / "ansible_collections"
    assert ic.installed(destination, ic.wanted((REPO / "requirements.yml").read_text())) == []
