"""roles/verl/files/local_changes.py: what a verl rebuild must not delete from the old checkout.

Each case is shown both ways: the patch layer's own edits, the record it keeps and the
editable install's files are not local work; an edit, a new file or a commit is.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import local_changes

REPO = Path(__file__).resolve().parents[2]

TOOL = REPO / "roles" / "verl" / "files" / "local_changes.py"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, str]:
    """A checkout at its pinned commit, patched the way verl_patch leaves one, and installed -e."""
    repo = tmp_path / "verl"
    (repo / "verl" / "workers").mkdir(parents=True)
    (repo / "verl" / "__init__.py").write_text("__version__ = '0.4.1'\n")
    (repo / "verl" / "workers" / "fsdp_workers.py").write_text("attn = 'flash_attention_2'\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "v0.4.1")
    commit = git(repo, "rev-parse", "HEAD")
    patched = "attn = 'eager'\n"
    (repo / "verl" / "workers" / "fsdp_workers.py").write_text(patched)
    (repo / ".verl_p40_patch").mkdir()
    record = {
        "files": {"verl/workers/fsdp_workers.py": {"patched_sha256": hashlib.sha256(patched.encode()).hexdigest()}}
    }
    (repo / ".verl_p40_patch" / "record.json").write_text(json.dumps(record))
    (repo / "verl.egg-info").mkdir()
    (repo / "verl.egg-info" / "PKG-INFO").write_text("Name: verl\n")
    (repo / "verl" / "__pycache__").mkdir()
    (repo / "verl" / "__pycache__" / "x.cpython-310.pyc").write_bytes(b"\0")
    return repo, commit


def test_a_patched_installed_checkout_has_no_local_work(checkout):
    repo, commit = checkout
    found = local_changes.local_changes(str(repo), commit)
    assert found == {"exists": True, "foreign": False, "head": commit, "commits": [], "edited": [], "untracked": []}


def test_an_edit_beyond_the_patch_is_local_work(checkout):
    repo, commit = checkout
    (repo / "verl" / "__init__.py").write_text("__version__ = '0.4.1'  # mine\n")
    # A patched file the user changed again is theirs too.
    (repo / "verl" / "workers" / "fsdp_workers.py").write_text("attn = 'sdpa'\n")
    found = local_changes.local_changes(str(repo), commit)
    assert found["edited"] == ["verl/__init__.py", "verl/workers/fsdp_workers.py"]


def test_a_new_file_and_a_commit_are_local_work(checkout):
    repo, commit = checkout
    (repo / "my_reward.py").write_text("def score(): ...\n")
    found = local_changes.local_changes(str(repo), commit)
    assert found["untracked"] == ["my_reward.py"] and found["commits"] == []
    git(repo, "add", "my_reward.py")
    git(repo, "commit", "-qm", "my reward")
    found = local_changes.local_changes(str(repo), commit)
    assert [line.split(" ", 1)[1] for line in found["commits"]] == ["my reward"]
    assert found["untracked"] == []


def test_no_checkout_and_the_command_line(tmp_path, checkout):
    assert local_changes.local_changes(str(tmp_path / "none"), "x")["exists"] is False
    repo, commit = checkout
    out = subprocess.run([sys.executable, str(TOOL), str(repo), commit], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1])["edited"] == []
    usage = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, check=False)
    assert usage.returncode == 2


def test_a_directory_that_is_not_a_checkout_is_foreign(tmp_path, checkout):
    """Something at stack_verl_dir that is not a git checkout (the user's own files): the rebuild's
    swap used to move it to <dir>.old and delete it; now it is reported and the layer stops."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine\n")
    found = local_changes.local_changes(str(tmp_path / "mine"), "x")
    assert found["foreign"] is True and found["exists"] is False
    assert local_changes.local_changes(str(tmp_path / "none"), "x")["foreign"] is False
    repo, commit = checkout
    assert local_changes.local_changes(str(repo), commit)["foreign"] is False


@pytest.mark.parametrize(
    "record",
    [None, "{not json", '["verl/workers/fsdp_workers.py"]'],
    ids=["no record", "not json", "not an object"],
)
def test_without_a_readable_patch_record_the_patched_file_counts_as_local_work(checkout, record):
    """The patch's record is what tells its edits from the user's: without it, or unreadable, an edit
    is kept as the user's (the safe side) rather than the script failing."""
    repo, commit = checkout
    path = repo / ".verl_p40_patch" / "record.json"
    if record is None:
        path.unlink()
    else:
        path.write_text(record)
    found = local_changes.local_changes(str(repo), commit)
    assert found["edited"] == ["verl/workers/fsdp_workers.py"] and found["untracked"] == []


def test_a_checkout_git_cannot_read_stops_the_script(checkout):
    """A corrupt index: `git status` fails, and that must not read as "no local work" (the rebuild
    would then delete the checkout)."""
    repo, commit = checkout
    (repo / ".git" / "index").write_bytes(b"garbage")
    with pytest.raises(subprocess.CalledProcessError):
        local_changes.local_changes(str(repo), commit)


def test_another_commit_checked_out_is_local_work(checkout):
    repo, commit = checkout
    git(repo, "commit", "-qam", "mine")
    ahead = git(repo, "rev-parse", "HEAD")
    # The recorded commit behind HEAD: HEAD's own commit is listed.
    assert [line.split(" ", 1)[1] for line in local_changes.local_changes(str(repo), commit)["commits"]] == ["mine"]
    # HEAD behind the recorded commit (an older one checked out): no commit on top, but not the recorded one.
    assert local_changes.local_changes(str(repo), ahead)["commits"] == []
    git(repo, "checkout", "-q", commit)
    found = local_changes.local_changes(str(repo), ahead)
    assert found["head"] == commit and found["commits"] == ["HEAD is %s, not the recorded %s" % (commit, ahead)]
    # A recorded commit the checkout does not have.
    unknown = "0" * 40
    found = local_changes.local_changes(str(repo), unknown)
    assert found["commits"] == ["HEAD is %s, not the recorded %s" % (commit, unknown)]


def test_one_character_file_names_are_seen(checkout):
    repo, commit = checkout
    (repo / "x").write_text("new\n")
    git(repo, "add", "x")
    git(repo, "commit", "-qm", "x")
    (repo / "x").write_text("edited\n")
    (repo / "y").write_text("new\n")
    found = local_changes.local_changes(str(repo), "")
    assert found["edited"] == ["x"] and found["untracked"] == ["y"] and found["commits"] == []


def test_a_rename_is_one_edit_under_its_new_name(checkout):
    """git status -z names a rename's source after it: that is not a second entry, and the entry
    after it is still read."""
    repo, commit = checkout
    git(repo, "mv", "verl/__init__.py", "verl/version_info.py")
    (repo / "verl" / "workers" / "fsdp_workers.py").write_text("attn = 'sdpa'\n")  # the entry after it
    (repo / "my_reward.py").write_text("def score(): ...\n")
    found = local_changes.local_changes(str(repo), commit)
    assert found["edited"] == ["verl/version_info.py", "verl/workers/fsdp_workers.py"]
    assert found["untracked"] == ["my_reward.py"]


def test_the_command_line_with_and_without_the_commit(checkout, capsys):
    repo, commit = checkout
    git(repo, "commit", "-qam", "mine")
    assert local_changes.main(["local_changes.py", str(repo), commit]) == 0
    with_commit = json.loads(capsys.readouterr().out)
    assert with_commit["head"] != commit and [line.split(" ", 1)[1] for line in with_commit["commits"]] == ["mine"]
    # Without COMMIT nothing counts as a commit on top; the rest is still reported.
    (repo / "new.py").write_text("\n")
    assert local_changes.main(["local_changes.py", str(repo)]) == 0
    without = json.loads(capsys.readouterr().out)
    assert without["exists"] is True and without["commits"] == [] and without["untracked"] == ["new.py"]
    assert local_changes.main(["local_changes.py"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "local_changes.py DIR [COMMIT]" in err
