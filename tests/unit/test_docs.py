"""README.md is the front door: short, its links lead somewhere, the make targets it names exist.

The long documents live in docs/; a link that a move left behind, or a make target renamed in the
Makefile and not in the README, sends a reader nowhere. Each check below is shown failing on a
broken case too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").rglob("*.md"))
MAX_README_LINES = 170

# [text](target) and ![alt](target); the target ends at the first blank or closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# `make target` in text or in a code block; make's own options (-C, -j) are not targets.
MAKE = re.compile(r"(?<![\w/.-])make ([a-z][\w-]*)")
TARGET = re.compile(r"^([A-Za-z][\w-]*)\s*:(?!=)", re.MULTILINE)


def relative_links(text: str) -> list[str]:
    """The link targets of a Markdown text that point into the repository (no URL, no bare anchor)."""
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        targets.append(target)
    return targets


def broken_links(doc: Path) -> list[str]:
    """The relative links of doc whose file or directory does not exist (anchors are not checked)."""
    broken = []
    for target in relative_links(doc.read_text()):
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    return broken


def make_targets_named(text: str) -> set[str]:
    return set(MAKE.findall(text))


def makefile_targets(text: str) -> set[str]:
    return set(TARGET.findall(text))


def test_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, "README.md has %d lines; move the long parts into docs/" % lines


def test_docs_exist():
    names = {doc.relative_to(REPO / "docs").as_posix() for doc in DOCS}
    for name in ("layers.md", "adding-a-layer.md", "training.md", "patch.md", "testing.md", "benchmarks.md"):
        assert name in names


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_leads_to_a_file(doc: Path):
    assert broken_links(doc) == []


def test_readme_links_every_document_in_docs():
    linked = {(REPO / t.split("#", 1)[0]).resolve() for t in relative_links(README.read_text())}
    top = [doc for doc in DOCS if doc.parent == REPO / "docs"]
    assert [doc.name for doc in top if doc.resolve() not in linked] == []


def test_every_make_target_the_readme_names_exists():
    named = make_targets_named(README.read_text())
    assert {"setup", "test", "render", "bench", "apex-proof", "demo", "host-check"} <= named
    assert sorted(named - makefile_targets((REPO / "Makefile").read_text())) == []


def test_a_broken_link_is_caught(tmp_path: Path):
    (tmp_path / "there.md").write_text("x\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](there.md) [ok](there.md#part) [web](https://example.invalid/x) [anchor](#top)\n"
        "[gone](docs/moved.md) ![img](gone.png) [gone too](../nowhere/file.json#a)\n"
    )
    assert broken_links(doc) == ["docs/moved.md", "gone.png", "../nowhere/file.json#a"]


def test_an_unknown_make_target_is_caught():
    makefile = "setup: x\n\t@true\nPROFILE ?= pascal\nOUT := out\ntest: lint  ## all\n"
    assert makefile_targets(makefile) == {"setup", "test"}
    named = make_targets_named("Run `make test`, then make benchmark, not cmake build or remake it.")
    assert named == {"test", "benchmark"}
    assert named - makefile_targets(makefile) == {"benchmark"}


# Files outside the repository that a user's checkout does not have: notes the project was
# written from. Every fact the project relies on is stated, with its source, in its own docs.
OUTSIDE = re.compile(r"STACK\.md|SEED-RECIPE\.md|\.\./shared\b")
# Files that still name one, each with its owner's open work (issue 27); the test below fails
# when one of them no longer does, so the list can only shrink.
STILL_OUTSIDE = {
    "docs/apex-proof.md",  # the vendored Apex tarball's default --vendor directory
    "tests/apex_proof/run.py",  # the same default, in its docstring
}


def tracked_files() -> list[str]:
    import subprocess

    done = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip("not a git checkout: %s" % done.stderr.decode(errors="replace").strip())
    return [name for name in done.stdout.decode().split("\0") if name]


def outside_references(names: list[str], root: Path) -> dict[str, list[str]]:
    """name -> the references to files outside the repository that it holds (text files only)."""
    found: dict[str, list[str]] = {}
    for name in names:
        path = root / name
        if not path.is_file():  # deleted in the working tree, not yet in the index
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        hits = OUTSIDE.findall(text)
        if hits:
            found[name] = sorted(set(hits))
    return found


def test_no_tracked_file_points_outside_the_repository():
    found = outside_references(tracked_files(), REPO)
    assert sorted(set(found) - STILL_OUTSIDE) == [], found
    assert sorted(STILL_OUTSIDE - set(found)) == [], "fixed: remove them from STILL_OUTSIDE"


def test_a_reference_outside_the_repository_is_caught(tmp_path: Path):
    # Spelled in pieces, so that this file does not name them itself.
    stack, seed, shared = "STACK" + ".md", "SEED-RECIPE" + ".md", ".." + "/shared"
    (tmp_path / "a.md").write_text("As %s says, 22919 MiB.\n" % stack)
    (tmp_path / "b.py").write_text("# see %s/%s\n" % (shared, seed))
    (tmp_path / "c.yml").write_text("source: docs/training.md, the %sness of it\n" % shared)
    (tmp_path / "d.bin").write_bytes(b"\xff\xfe " + stack.encode())
    found = outside_references(["a.md", "b.py", "c.yml", "d.bin", "gone.md"], tmp_path)
    assert found == {"a.md": [stack], "b.py": [shared, seed]}
