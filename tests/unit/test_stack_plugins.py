"""The artifact and pip check filters, and the disk_space module."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import run_play

import disk_space
from stack import (
    git_credential_line,
    pip_check_problems,
    stack_artifact,
    stack_summary,
    text_redacted,
    url_credentials,
    url_redacted,
    url_secrets,
    url_without_credentials,
)

REPO = Path(__file__).resolve().parents[2]

MANIFEST = yaml.safe_load((REPO / "roles/stack/defaults/main/artifacts.yml").read_text())["stack_artifacts"]


def test_manifest_entries_are_complete():
    for key, entry in MANIFEST.items():
        if key == "vllm_wheel":
            # Published without a checksum we could confirm: refused until the user pins one.
            with pytest.raises(AnsibleFilterError, match="has no sha256"):
                stack_artifact(MANIFEST, key)
            continue
        if key == "nvidia_driver_runfile":
            # Not pinned: no file, URL or sha256 could be confirmed here; the driver layer's plan
            # refuses it by name until a user pins it (tests/unit/test_driver.py).
            assert entry == {"version": "", "file": "", "url": "", "sha256": "", "size": None}
            with pytest.raises(AnsibleFilterError, match="has no file"):
                stack_artifact(MANIFEST, key)
            continue
        resolved = stack_artifact(MANIFEST, key)
        assert resolved["source"] == entry["url"]
        assert resolved["url"].endswith("/" + entry["file"])
        assert entry["version"]


def test_manifest_pins_stack_md_checksums():
    assert MANIFEST["cuda_runfile"]["sha256"] == "9223c4af3aebe4a7bbed9abd9b163b03a1b34b855fbc2b4a0d1b706ac09a5a16"
    assert MANIFEST["cudnn_archive"]["sha256"] == "a3e2509028cecda0117ce5a0f42106346e82e86d390f4bb9475afc976c77402e"
    assert MANIFEST["cudnn_archive"]["size"] == 860967256


def test_mirror_and_overrides():
    entry = stack_artifact(
        MANIFEST, "cudnn_archive", {"cudnn_archive": {"file": "x.tar.xz", "sha256": "A" * 64}}, "http://127.0.0.1:1/m/"
    )
    assert entry["source"] == "http://127.0.0.1:1/m/x.tar.xz"
    assert entry["sha256"] == "a" * 64
    assert entry["url"] == MANIFEST["cudnn_archive"]["url"]


@pytest.mark.parametrize(
    "override, message",
    [
        ({"sha256": "123"}, "is not 64 hex digits"),
        ({"file": "../etc/passwd"}, "must be a plain file name"),
        ({"url": ""}, "has no url"),
    ],
)
def test_bad_entries(override, message):
    with pytest.raises(AnsibleFilterError, match=message):
        stack_artifact(MANIFEST, "cuda_runfile", {"cuda_runfile": override})


def test_a_bad_sha256_is_refused_even_where_none_is_required():
    # require_sha256=False lets an entry without one through; a wrong one is still a wrong one.
    with pytest.raises(AnsibleFilterError, match="is not 64 hex digits"):
        stack_artifact(MANIFEST, "vllm_wheel", {"vllm_wheel": {"sha256": "123"}}, require_sha256=False)
    good = "b" * 64
    assert (
        stack_artifact(MANIFEST, "vllm_wheel", {"vllm_wheel": {"sha256": good}}, require_sha256=False)["sha256"] == good
    )


def test_unknown_key():
    with pytest.raises(AnsibleFilterError, match="not in stack_artifacts"):
        stack_artifact(MANIFEST, "cuda_rnufile")


def test_disk_space_adds_up_paths_on_one_filesystem(tmp_path):
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize / disk_space.GIB
    reqs = [
        {"path": str(tmp_path / "not/yet/there"), "min_free_gb": free * 0.6},
        {"path": str(tmp_path), "min_free_gb": free * 0.6},
    ]
    filesystems, shortfalls = disk_space.check(reqs)
    assert len(filesystems) == 1 and len(shortfalls) == 1
    assert "needs %.1f GiB" % (free * 1.2) in shortfalls[0]
    _, none = disk_space.check(reqs[:1])
    assert none == []


# -- pip check: its exit status and stderr count, not only its findings -------

CLEAN = {"rc": 0, "stdout": "No broken requirements found.\n", "stderr": ""}
FINDING = "ray 2.43.0 has requirement click>=7.0, but you have click 6.0."


@pytest.mark.parametrize(
    "result, allowed",
    [
        (CLEAN, []),
        ({"rc": 0, "stdout": "No broken requirements found.", "stderr": "WARNING: cache dir not writable\n"}, []),
        ({"rc": 1, "stdout": FINDING + "\n", "stderr": ""}, [r"^ray \S+ has requirement click"]),
    ],
)
def test_pip_check_passes(result, allowed):
    assert pip_check_problems(result, allowed) == []


@pytest.mark.parametrize(
    "result, message",
    [
        # Each of these passed the old check, which read only stdout's findings.
        ({"rc": 1, "stdout": "", "stderr": "/env/bin/python: No module named pip"}, "without reporting a finding"),
        ({"rc": 127, "stdout": "", "stderr": "sh: 1: /env/bin/python: not found"}, "did not run (exit 127)"),
        (
            {"rc": 1, "stdout": "", "stderr": "Traceback (most recent call last):\nImportError: cannot import name"},
            "pip check wrote errors: Traceback",
        ),
        ({"rc": 0, "stdout": "", "stderr": ""}, "without its all-clear"),
        ({"rc": 1, "stdout": FINDING, "stderr": "Traceback (most recent call last):"}, "wrote errors"),
        # And findings nobody accepted, as before.
        ({"rc": 1, "stdout": FINDING, "stderr": ""}, "pip check found: " + FINDING),
        ({"rc": 1, "stdout": "torch 2.6.0 requires triton, which is not installed.", "stderr": ""}, "found: torch"),
        ({"rc": 1, "stdout": "Segmentation fault", "stderr": ""}, "never prints: Segmentation fault"),
    ],
)
def test_pip_check_fails(result, message):
    problems = pip_check_problems(result, [r"^nothing-matches-this"])
    assert any(message in problem for problem in problems), problems


def test_pip_check_messages_quote_what_pip_said():
    # The message is all a user sees of the failed task: the exit status, stderr's last five lines,
    # stdout's first five unknown lines, or that stdout was empty.
    stderr = "".join("line %d\n" % n for n in range(1, 7))
    assert pip_check_problems({"rc": 127, "stdout": "", "stderr": "sh: python: not found"}) == [
        "pip check wrote errors: sh: python: not found",
        "pip check did not run (exit 127); stderr: sh: python: not found",
    ]
    assert pip_check_problems({"rc": 2, "stdout": "", "stderr": stderr}) == [
        "pip check wrote errors: line 2 | line 3 | line 4 | line 5 | line 6",
        "pip check did not run (exit 2); stderr: line 2 | line 3 | line 4 | line 5 | line 6",
    ]
    assert pip_check_problems({"rc": 0, "stdout": "", "stderr": ""}) == [
        "pip check exited 0 without its all-clear (stdout: empty)"
    ]
    assert pip_check_problems({"rc": 0, "stdout": "Segmentation fault\n", "stderr": ""}) == [
        "pip check exited 0 without its all-clear (stdout: Segmentation fault)"
    ]
    garbage = "".join("junk %d\n" % n for n in range(1, 7))
    assert pip_check_problems({"rc": 1, "stdout": FINDING + "\n" + garbage, "stderr": ""}, [".*"]) == [
        "pip check printed what it never prints: junk 1 | junk 2 | junk 3 | junk 4 | junk 5"
    ]
    assert pip_check_problems({"rc": 1, "stdout": "", "stderr": "WARNING: no cache\n"}) == [
        "pip check exited 1 without reporting a finding (it did not run?); stderr: WARNING: no cache"
    ]


def test_pip_check_of_an_env_without_pip_fails(tmp_path):
    """A real env whose pip is missing: the old check saw no finding and passed."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True)
    done = subprocess.run(
        [str(tmp_path / "env" / "bin" / "python"), "-m", "pip", "check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and done.stdout == ""
    result = {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    assert pip_check_problems(result, []) != []


def test_pip_check_of_a_real_env(tmp_path):
    """pip's own output in this interpreter's env parses as pip check output."""
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    result = {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    lines = [line for line in done.stdout.splitlines() if line]
    # Whatever this env holds, every line is pip's all-clear or a finding the filter reads.
    assert not [p for p in pip_check_problems(result, [".*"]) if "never prints" in p or "did not run" in p]
    assert lines


@pytest.mark.parametrize(
    "url, shown",
    [
        ("https://ci:s3cret@mirror.example/simple", "https://***@mirror.example/simple"),
        ("https://__token__:pypi-AgEI@mirror.example:8443/simple/", "https://***@mirror.example:8443/simple/"),
        ("https://tok@mirror.example/whl/cu118", "https://***@mirror.example/whl/cu118"),
        # an "@" in the password, unencoded: all of it is hidden, up to the host
        ("https://ci:p@ss@mirror.example/simple", "https://***@mirror.example/simple"),
        ("https://ci:p@ss@mirror.example?x=a@b", "https://***@mirror.example?x=***"),
        # no credentials: unchanged, an @ later in the path included
        ("https://mirror.example/whl/cu118", "https://mirror.example/whl/cu118"),
        ("https://mirror.example/a@b", "https://mirror.example/a@b"),
        ("", ""),
        (None, ""),
    ],
)
def test_url_redacted(url, shown):
    assert url_redacted(url) == shown


@pytest.mark.parametrize(
    "url, shown",
    [
        # every query value, and a bare query word; the keys stay
        ("https://mirror.example/repo?token=s3cr3tvalue&x=1", "https://mirror.example/repo?token=***&x=***"),
        ("https://mirror.example/repo?s3cr3tvalue", "https://mirror.example/repo?***"),
        # conda's token path, and a path segment shaped like a token (Cloudsmith, Gemfury)
        ("https://conda.example/t/abc-123/conda-forge", "https://conda.example/t/***/conda-forge"),
        ("https://pypi.example/AbCdEf1234567890/org/simple/", "https://pypi.example/***/org/simple/"),
        ("https://u:pw@pypi.example/AbCdEf1234567890/simple?t=x#frag", "https://***@pypi.example/***/simple?t=***#***"),
        # ordinary segments stay: lower case words, short versions, release names
        ("https://download.pytorch.org/whl/cu118", "https://download.pytorch.org/whl/cu118"),
        ("https://mirror.example/pypi-remote-virtual/simple", "https://mirror.example/pypi-remote-virtual/simple"),
        ("not a url", "not a url"),
    ],
)
def test_url_redacted_hides_query_and_path_tokens(url, shown):
    assert url_redacted(url) == shown


def test_a_token_as_the_last_segment_is_hidden_unless_it_is_kept():
    url = "https://dl.example/private/AbCdEf1234567890"
    assert url_redacted(url) == "https://dl.example/private/***"
    assert url_redacted(url, keep_last=True) == url


def test_the_artifact_fact_holds_no_credentials():
    # The entry becomes a fact that -v prints: the mirror's userinfo, query and path token are hidden
    # there; only credentials=True (the no_log download task) gets the URL whole, its query after the file.
    mirror = "https://ci:Tok3n@mirror.example/t/abc-123/verl-p40?token=q5ecret"
    shown = stack_artifact(MANIFEST, "cudnn_archive", mirror_url=mirror)
    whole = stack_artifact(MANIFEST, "cudnn_archive", mirror_url=mirror, credentials=True)
    file = MANIFEST["cudnn_archive"]["file"]
    assert shown["source"] == "https://***@mirror.example/t/***/verl-p40/%s?token=***" % file
    assert whole["source"] == "https://ci:Tok3n@mirror.example/t/abc-123/verl-p40/%s?token=q5ecret" % file
    assert not any(secret in str(shown) for secret in ("Tok3n", "abc-123", "q5ecret"))
    # an overridden vendor URL with a token: the same
    entry = stack_artifact(
        MANIFEST, "cudnn_archive", {"cudnn_archive": {"url": "https://tok3nABC@dl.example/x/" + file}}
    )
    assert entry["source"] == entry["url"] == "https://***@dl.example/x/" + file
    # an entry without sha256 passes only when asked (an opt-out's unverified install)
    with pytest.raises(AnsibleFilterError, match="has no sha256"):
        stack_artifact(MANIFEST, "vllm_wheel")
    assert stack_artifact(MANIFEST, "vllm_wheel", require_sha256=False)["sha256"] == ""


def test_url_credentials_are_decoded_for_the_module():
    assert url_credentials("https://ci:p%40ss@mirror.example/x") == {"user": "ci", "password": "p@ss"}
    assert url_credentials("https://ci:p@ss@mirror.example/x") == {"user": "ci", "password": "p@ss"}
    assert url_credentials("https://__token__:glpat-xyz@git.example/x") == {
        "user": "__token__",
        "password": "glpat-xyz",
    }
    assert url_credentials("https://mirror.example/a@b") == {"user": "", "password": ""}


def test_url_secrets_are_every_value_the_url_hides():
    # Each query value (one holding "=" too, as base64 does), a bare query word and the fragment;
    # a secret under 4 characters is left out, one of 4 kept.
    url = "https://ci:pw1@h.example/x?token=dG9rZW4==&s3cr3tword&k=abcd#frag-secret"
    assert url_secrets(url) == ["frag-secret", "s3cr3tword", "dG9rZW4==", "ci:pw1", "abcd"]
    assert url_secrets("not a url") == [] and url_secrets("") == []


def test_text_redacted_replaces_a_url_whole_before_a_shorter_one_it_begins_with():
    # url_redacted hides values too short to be shredded as secrets (k=v1): the longer URL must be
    # replaced whole, or the shorter one's replacement leaves it unmatched and v1 shows.
    short, whole = "https://h.example/a?x=1", "https://h.example/a?x=1&k=v1"
    assert text_redacted("fetching " + whole, short, whole) == "fetching https://h.example/a?x=***&k=***"
    assert text_redacted("not a url here", "not a url") == "not a url here"
    assert text_redacted(None, whole) == ""


def test_text_redacted_scrubs_urls_and_their_secrets():
    index = "https://__token__:glpat-S3cret@pypi.example/AbCdEf1234567890/simple"
    extra = ["https://pypi2.example/simple?token=q5ecret%21"]
    output = (
        "Looking in indexes: https://pypi.example/AbCdEf1234567890/simple, https://pypi2.example/simple?token=q5ecret%21\n"
        "ERROR: 401 for __token__:glpat-S3cret and q5ecret! and AbCdEf1234567890"
    )
    shown = text_redacted(output, index, extra, "", None)
    for secret in ("glpat-S3cret", "AbCdEf1234567890", "q5ecret"):
        assert secret not in shown, shown
    assert "https://pypi.example/***/simple" in shown and "https://pypi2.example/simple?token=***" in shown
    # the secrets, as written and decoded, longest first
    assert url_secrets("https://u:p%40ssw0rd@h.example/x") == ["u:p%40ssw0rd", "p%40ssw0rd", "u:p@ssw0rd", "p@ssw0rd"]
    assert text_redacted("nothing to hide", "") == "nothing to hide"


@pytest.mark.parametrize(
    "url, bare, line",
    [
        ("https://ci:s3cret@git.example/verl.git", "https://git.example/verl.git", "https://ci:s3cret@git.example"),
        ("HTTP://tok@127.0.0.1:8080/a/b.git", "HTTP://127.0.0.1:8080/a/b.git", "http://tok@127.0.0.1:8080"),
        # git's store is URL-encoded: a raw "@" is encoded, an encoded one stays
        ("https://ci:p@ss@git.example/verl.git", "https://git.example/verl.git", "https://ci:p%40ss@git.example"),
        ("https://ci:p%40ss@git.example/verl.git", "https://git.example/verl.git", "https://ci:p%40ss@git.example"),
        # none: the URL as it is, and no line for git's store
        ("https://git.example/a@b.git", "https://git.example/a@b.git", ""),
        ("https://git.example/verl.git", "https://git.example/verl.git", ""),
        ("", "", ""),
    ],
)
def test_git_urls_lose_their_credentials(url, bare, line):
    assert url_without_credentials(url) == bare
    assert git_credential_line(url) == line


def test_git_credential_lines_keep_a_colon_of_the_password_and_need_a_host():
    # Only the first ":" splits user from password; the store file needs a host to match on.
    assert git_credential_line("https://ci:p:ss@git.example/verl.git") == "https://ci:p%3Ass@git.example"
    assert git_credential_line("https://ci:s3cret@/verl.git") == ""


def test_credentials_in_an_ssh_url_are_refused():
    with pytest.raises(AnsibleFilterError, match="only http and https"):
        git_credential_line("ssh://git:pw@git.example/verl.git")


# -- the end-of-run summary ---------------------------------------------------------------------


def test_summary_gives_each_layer_its_outcome_and_seconds():
    facts = {
        "stack_layer_cuda_started": 1000.0,
        "stack_layer_cuda": {"version": "11.8.89", "outcome": "built", "finished": 1095.25},
        # A clean rerun: the query's fact only, the role stopped after it.
        "stack_layer_torch_started": 2000.0,
        "stack_layer_torch": {"version": "2.6.0+cu118", "outcome": "unchanged"},
        # Recorded without a query of its own.
        "stack_layer_preflight": {"version": "pascal", "outcome": "unchanged", "finished": 5.0},
    }
    rows = stack_summary(facts, ["preflight", "cuda", "torch", "train"])
    assert [row.split()[:3] for row in rows] == [
        ["preflight", "pascal", "unchanged"],
        ["cuda", "11.8.89", "built"],
        ["torch", "2.6.0+cu118", "unchanged"],
        ["train", "-", "skipped"],
    ]
    assert rows[1].endswith("95.2 s") and rows[0].endswith("unchanged") and rows[2].endswith("unchanged")


def test_summary_seconds_are_never_negative_nor_rounded_up_to_one():
    facts = {
        "stack_layer_cuda_started": 1000.0,
        "stack_layer_cuda": {"version": "11.8.89", "outcome": "unchanged", "finished": 1000.5},
        # The host's clock stepped back between the query and the record.
        "stack_layer_torch_started": 2000.0,
        "stack_layer_torch": {"version": "2.6.0+cu118", "outcome": "unchanged", "finished": 1990.0},
    }
    rows = stack_summary(facts, ["cuda", "torch"])
    assert rows[0].endswith(" 0.5 s") and rows[1].endswith(" 0.0 s")


def test_summary_names_gpus_without_peer_to_peer():
    p2p = {"checked": True, "ok": False, "blocked": ["GPU0-GPU1", "GPU0-GPU2"]}
    rows = stack_summary({}, ["cuda"], p2p)
    assert rows[-1].startswith("gpus") and "GPU0-GPU1, ..." in rows[-1] and "NCCL_P2P_DISABLE=1" in rows[-1]
    assert len(stack_summary({}, ["cuda"], {"checked": True, "ok": True, "blocked": []})) == 1
    # One pair blocked: named alone.
    rows = stack_summary({}, ["cuda"], {"checked": True, "ok": False, "blocked": ["GPU0-GPU1"]})
    assert "no peer-to-peer (GPU0-GPU1):" in rows[-1]
    assert len(stack_summary({}, ["cuda"], {"checked": False, "ok": None, "blocked": []})) == 1


def test_a_file_seeded_in_the_controller_cache_keeps_its_mode(tmp_path):
    """stack_artifact through the controller (the air-gapped path): a file the user put in
    stack_controller_cache_dir is verified and copied to the host, and left as the user had it.
    Broken case: the controller's download set mode 0644 on it, so a runfile seeded there with its
    execute bit lost it (the CUDA stand-in, which the fault tests seed this way, did)."""
    controller, host = tmp_path / "controller-cache", tmp_path / "host-cache"
    controller.mkdir()
    seeded = controller / "installer.run"
    seeded.write_text("#!/bin/sh\necho stand-in\n")
    seeded.chmod(0o750)
    sha256 = hashlib.sha256(seeded.read_bytes()).hexdigest()
    entry = {"file": seeded.name, "sha256": sha256, "size": seeded.stat().st_size}
    play = {
        "vars": {
            "stack_controller_cache_dir": str(controller),
            "stack_cache_dir": str(host),
            # Nothing listens here: the seeded file must be all the run needs.
            "stack_mirror_url": "http://127.0.0.1:9",
            "stack_artifact_overrides": {"cuda_runfile": entry},
        }
    }
    shared = {"name": "The shared values", "ansible.builtin.import_role": {"name": "stack"}}
    fetch = {
        "name": "Fetch",
        "ansible.builtin.include_role": {"name": "stack_artifact"},
        "vars": {"stack_artifact_key": "cuda_runfile"},
    }
    done = run_play(tmp_path, [shared, fetch], callback="default", **play)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert (host / seeded.name).read_bytes() == seeded.read_bytes()
    assert oct(seeded.stat().st_mode & 0o7777) == oct(0o750)
