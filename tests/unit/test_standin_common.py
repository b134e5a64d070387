"""tests/standins/standin_common.py: the helpers both stand-in builders share.

Each test names the broken helper it catches.  Nothing here builds a stand-in or
reaches the network (pip is replaced where its output is judged).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

import standin_common as common


# --------------------------------------------------------------------------
# One copy


@pytest.mark.parametrize("builder", ["standins", "standins_python"])
def test_builders_use_the_shared_helpers(builder: str) -> None:
    # Broken case: a builder with its own copy of a helper (the copies drifted before).
    module = importlib.import_module(builder)
    for name in ("run", "sha256_file", "key_of", "pip_download", "State", "tarinfo", "write_vars_file", "BuildError"):
        assert getattr(module, name) is getattr(common, name), f"{builder}.py has its own {name}"
    assert module.EXIT_UNREACHABLE == common.EXIT_UNREACHABLE == 3


# --------------------------------------------------------------------------
# run


def test_run_returns_stdout_without_stderr() -> None:
    # Broken case: stderr merged into the result (what standins.py's copy did), so a
    # warning would end up in a parsed value such as a git commit id.
    assert common.run(["sh", "-c", "echo out; echo warning >&2"], what="t") == "out\n"


def test_run_failure_says_what_and_shows_both_streams() -> None:
    with pytest.raises(common.BuildError) as err:
        common.run(["sh", "-c", "echo partial; echo broken >&2; exit 4"], what="the step")
    text = str(err.value)
    assert text.startswith("the step failed (exit 4): sh -c")
    assert "partial" in text and "broken" in text
    assert err.value.exit_code == common.EXIT_ERROR


def test_run_missing_program_is_a_build_error() -> None:
    with pytest.raises(common.BuildError, match="no-such-program-xyz is not installed"):
        common.run(["no-such-program-xyz"], what="t")


def test_run_survives_output_that_is_not_utf8() -> None:
    # Broken case: text=True decoding strictly raised UnicodeDecodeError, not a BuildError.
    assert common.run(["printf", "a\\377b"], what="t") == "a\ufffdb"
    with pytest.raises(common.BuildError, match="a\ufffdb"):
        common.run(["sh", "-c", "printf 'a\\377b'; exit 1"], what="t")


def test_run_feeds_stdin() -> None:
    assert common.run(["cat"], what="t", stdin=b"message\n") == "message\n"


# --------------------------------------------------------------------------
# hashing and keys


def test_sha256_file_reads_past_the_first_chunk(tmp_path: Path) -> None:
    # Broken case: a reader that stops after one 4 MiB chunk.
    data = b"x" * (4 << 20) + b"tail"
    path = tmp_path / "f"
    path.write_bytes(data)
    assert common.sha256_file(path) == hashlib.sha256(data).hexdigest()
    path.write_bytes(data[:-1] + b"T")
    assert common.sha256_file(path) != hashlib.sha256(data).hexdigest()


def test_key_of_is_stable_and_sensitive() -> None:
    assert common.key_of("a", {"x": 1, "y": 2}) == common.key_of("a", {"y": 2, "x": 1})
    assert common.key_of("a", {"x": 1}) != common.key_of("a", {"x": 2})
    assert common.key_of("a", "b") != common.key_of("ab")
    assert len(common.key_of("a")) == 20


def test_builder_digest_changes_with_the_shared_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Broken case: the key hashed only the builder (as both did), so an edit of the
    # shared helpers left every stale stand-in "fresh".
    builder, shared = tmp_path / "builder.py", tmp_path / "shared.py"
    builder.write_text("builder v1\n")
    shared.write_text("shared v1\n")
    monkeypatch.setattr(common, "__file__", str(shared))
    first = common.builder_digest(builder)
    shared.write_text("shared v2\n")
    second = common.builder_digest(builder)
    builder.write_text("builder v2\n")
    assert len({first, second, common.builder_digest(builder)}) == 3


# --------------------------------------------------------------------------
# need_tools


def test_need_tools_names_the_package_of_each_missing_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    # Broken case: one fixed list of packages whatever was missing (standins.py's message).
    monkeypatch.setattr(common.shutil, "which", lambda tool: None if tool in ("xz", "cc") else "/usr/bin/" + tool)
    with pytest.raises(common.BuildError) as err:
        common.need_tools("tar", "xz", "cc")
    assert str(err.value) == "missing tools: xz, cc (Debian packages: gcc, xz-utils)"
    common.need_tools("tar")


# --------------------------------------------------------------------------
# pip_download


def fake_pip(monkeypatch: pytest.MonkeyPatch, rc: int, output: str) -> list[list[str]]:
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, rc, stdout=output)

    monkeypatch.setattr(common.subprocess, "run", fake_run)
    return calls


def test_pip_download_pins_the_hash_and_the_platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_pip(monkeypatch, 0, "Saved ./x.whl\n")
    common.pip_download("pkg==1.0", "ab" * 32, tmp_path / "d", tmp_path, binary=True, platform="manylinux1_x86_64")
    assert (tmp_path / "requirements.txt").read_text() == f"pkg==1.0 --hash=sha256:{'ab' * 32}\n"
    cmd = calls[0]
    assert cmd[1:4] == ["-m", "pip", "download"]
    assert "--only-binary=:all:" in cmd and cmd[cmd.index("--platform") + 1] == "manylinux1_x86_64"
    common.pip_download("pkg==1.0", "ab" * 32, tmp_path / "d", tmp_path, binary=False)
    assert "--no-binary=:all:" in calls[1] and "--platform" not in calls[1]


@pytest.mark.parametrize(
    "output",
    [
        "WARNING: Retrying ... Failed to establish a new connection: [Errno 101] Network is unreachable",
        "ERROR: Could not fetch URL https://index/simple/pkg/: connection error",
        "ERROR: No matching distribution found for pkg==1.0",
    ],
)
def test_pip_download_unreachable_index_may_be_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str
) -> None:
    fake_pip(monkeypatch, 1, output)
    with pytest.raises(common.SourceUnreachable, match=r"from PyPI \(or use --cudnn minimal\)") as err:
        common.pip_download("pkg==1.0", "ab" * 32, tmp_path, tmp_path, binary=True, hint=" (or use --cudnn minimal)")
    assert err.value.exit_code == common.EXIT_UNREACHABLE


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.", "not the pinned one"),
        ("/usr/bin/python3: No module named pip", "has no pip"),
        ("ERROR: Invalid requirement: 'pkg==1.0 --hash'", "pip download pkg==1.0 failed"),
    ],
)
def test_pip_download_other_failures_are_build_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str, message: str
) -> None:
    # Broken case: standins.py's copy called every failure but these "unreachable"
    # (exit 3), so the tests skipped on a real build error instead of failing.
    fake_pip(monkeypatch, 1, output)
    with pytest.raises(common.BuildError, match=message) as err:
        common.pip_download("pkg==1.0", "ab" * 32, tmp_path, tmp_path, binary=True)
    assert not isinstance(err.value, common.SourceUnreachable)


# --------------------------------------------------------------------------
# the build cache: lock, scratch, state


def test_locked_scratch_empties_leftovers_but_not_what_a_symlink_points_at(tmp_path: Path) -> None:
    # Broken case: standins_python.py's copy called rmtree on a symlink to a directory,
    # which rmtree refuses (the error was ignored): the link stayed forever.
    cache, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    (cache / "tmp" / "old-dir").mkdir(parents=True)
    (cache / "tmp" / "old-dir" / "f").write_text("x")
    (cache / "tmp" / "old-file").write_text("x")
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("x")
    (cache / "tmp" / "link").symlink_to(elsewhere)
    with common.locked_scratch(cache) as scratch:
        assert scratch == cache / "tmp"
        assert list(scratch.iterdir()) == []
    assert (elsewhere / "keep").is_file()


def test_locked_scratch_holds_the_lock(tmp_path: Path) -> None:
    # Broken case: two builds into one DIR at once (parallel test runs).
    with common.locked_scratch(tmp_path / "cache"):
        with (tmp_path / "cache" / ".lock").open("w") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with (tmp_path / "cache" / ".lock").open("w") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_state_reuses_an_output_only_while_key_size_and_mtime_hold(tmp_path: Path) -> None:
    out = tmp_path / "artifact.bin"
    out.write_bytes(b"built")
    state = common.State(tmp_path / "state.json")
    assert not state.file_fresh(out, "k1")
    state.record_file(out, "k1", mode="wheel")
    again = common.State(tmp_path / "state.json")  # written through to disk
    assert again.file_fresh(out, "k1")
    assert again.entry(out) == {
        "key": "k1",
        "size": 5,
        "mtime_ns": out.stat().st_mtime_ns,
        "sha256": hashlib.sha256(b"built").hexdigest(),
        "mode": "wheel",
    }
    assert not again.file_fresh(out, "k2")  # other inputs
    out.write_bytes(b"BUILT")  # same size, new mtime: someone changed it
    assert not again.file_fresh(out, "k1")
    out.unlink()
    assert not again.file_fresh(out, "k1")
    assert not (tmp_path / "state.json.tmp").exists()


def test_state_starts_empty_on_a_damaged_file(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    assert common.State(tmp_path / "state.json").data == {}


# --------------------------------------------------------------------------
# the vars file


def test_write_vars_file_writes_only_a_change(tmp_path: Path) -> None:
    # Broken case: rewriting an unchanged file, so its mtime no longer says when values changed.
    path = tmp_path / "standins.yml"
    assert common.write_vars_file(path, "---\na: 1\n")
    before = path.stat().st_mtime_ns
    assert not common.write_vars_file(path, "---\na: 1\n")
    assert path.stat().st_mtime_ns == before
    assert common.write_vars_file(path, "---\na: 2\n")
    assert path.read_text() == "---\na: 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["standins.yml"]


@pytest.mark.parametrize("value", ["plain", 'with "quotes" and: colon', "/abs/path.git", "8.9.6"])
def test_yaml_str_round_trips(value: str) -> None:
    assert yaml.safe_load(f"key: {common.yaml_str(value)}\n") == {"key": value}


# --------------------------------------------------------------------------
# tar entries


def test_tarinfo_is_root_owned_whoever_builds(tmp_path: Path) -> None:
    link = common.tarinfo("top/lib/x.so", kind=tarfile.SYMTYPE, linkname="x.so.8", mode=0o777, mtime=1733011200)
    assert (link.uid, link.gid, link.uname, link.gname) == (0, 0, "root", "root")
    assert (link.linkname, link.mtime, link.mode, link.type) == ("x.so.8", 1733011200, 0o777, tarfile.SYMTYPE)
    with tarfile.open(tmp_path / "t.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(link)
    with tarfile.open(tmp_path / "t.tar") as tar:
        member = tar.getmember("top/lib/x.so")
    assert member.issym() and member.linkname == "x.so.8" and member.uid == 0


# --------------------------------------------------------------------------
# apt sources


def test_host_apt_sources_reads_both_formats_and_skips_what_apt_skips(tmp_path: Path) -> None:
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "debian.sources").write_text(
        "# comment\n"
        "Types: deb deb-src\nURIs: http://archive.invalid/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n -----END PGP-----\n"
        "\n"
        "Types: deb\nURIs: http://disabled.invalid/debian\nSuites: bookworm\nEnabled: no\n"
        "\n"
        "Types: deb-src\nURIs: http://src.invalid/debian\nSuites: bookworm\n"
    )
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://one.invalid/debian bookworm main contrib  # x\n"
        "# deb http://commented.invalid/debian bookworm main\n"
        "deb-src http://src.invalid/debian bookworm main\n"
    )
    (parts / "extra.list").write_text("deb http://extra.invalid/debian-security bookworm-security main\n")
    (parts / "ignored.sources.disabled").write_text("Types: deb\nURIs: http://no.invalid\nSuites: x\n")
    found = common.host_apt_sources(tmp_path)
    assert [s["uris"] for s in found] == [
        "http://archive.invalid/debian",
        "http://one.invalid/debian",
        "http://extra.invalid/debian-security",
    ]
    assert found[0]["suites"] == "bookworm bookworm-updates"
    assert found[0]["signed-by"].startswith("\n -----BEGIN PGP")
    assert found[1] == {
        "types": "deb",
        "uris": "http://one.invalid/debian",
        "suites": "bookworm",
        "components": "main contrib",
        "signed-by": "/usr/share/keyrings/k.gpg",
    }


def test_host_apt_sources_without_a_deb_source_says_so(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("deb-src http://src.invalid/debian bookworm main\n")
    with pytest.raises(common.BuildError, match="no enabled 'deb' source found"):
        common.host_apt_sources(tmp_path)


# --------------------------------------------------------------------------
# exit status


def test_main_status_maps_errors_to_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    say = common.logger("tool")

    def fails(error: Exception) -> None:
        raise error

    assert common.main_status(lambda: None, say) == 0
    assert common.main_status(lambda: fails(common.BuildError("bad")), say) == 1
    assert common.main_status(lambda: fails(common.SourceUnreachable("offline")), say) == 3
    assert common.main_status(lambda: fails(KeyboardInterrupt()), say) == 130
    assert capsys.readouterr().err == "[tool] ERROR: bad\n[tool] ERROR: offline\n"
    with pytest.raises(ValueError):  # anything else is a bug: the traceback shows
        common.main_status(lambda: fails(ValueError("bug")), say)
