"""Credentials in a URL variable reach no output, message or record, at any verbosity.

stack_mirror_url may carry a token as userinfo, in the query or as a path segment. These runs
fetch the CUDA runfile from a mirror that answers 401 without the credentials, under -vvv, and
fail (a wrong pinned sha256, or a file the mirror lacks), so no layer changes and the container
stays as the other fault tests of its worker left it.
"""

from __future__ import annotations

import socket
import uuid
from urllib.parse import quote

import pytest
from conftest import STANDINS, stack_paths

import mirror


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def built(host) -> tuple[str, list[str]]:
    """What the layers have on the host: every record (but preflight's and the driver layer's, which
    the setup stage writes before any download: on the containers' bus it records that there is
    nothing to drive, tests/infra/test_driver.py) by its sha256, and which of the paths a layer writes
    exist. These tests share their worker's container with the other fault tests, which may have
    built layers before them: a failed download must change none of it."""
    paths = stack_paths()
    records = host.sh(
        "find %s -type f ! -name preflight.json ! -name driver.json -exec sha256sum {} + 2>/dev/null | sort || true"
        % paths["stack_state_dir"]
    ).stdout
    return records, [path for name, path in paths.items() if name != "stack_state_dir" and host.exists(path)]


@pytest.fixture
def private_mirror(tmp_path):
    """The stand-ins behind HTTP Basic auth, under a path token: (mirror URL with credentials, secrets).
    The password holds an "@" (percent-encoded in the URL, as RFC 3986 asks): the download must decode it."""
    password = "p@ss-" + uuid.uuid4().hex[:12]
    path_token = "Tok" + uuid.uuid4().hex[:16]
    query_token = "q-" + uuid.uuid4().hex[:12]
    served = tmp_path / "served"
    served.mkdir()
    (served / path_token).symlink_to(STANDINS)
    port = free_port()
    server = mirror.serve([str(served)], port, auth="ci:" + password)
    url = "http://ci:%s@127.0.0.1:%d/%s?token=%s" % (quote(password, safe=""), port, path_token, query_token)
    try:
        yield url, port, [password, quote(password, safe=""), path_token, query_token]
    finally:
        server.shutdown()


def assert_no_secret(host, run, secrets: list[str]) -> None:
    leaked = [secret for secret in secrets if secret in run.output]
    assert leaked == [], "in the output: %s" % leaked
    for secret in secrets:
        found = host.sh(
            "grep -rlIF -e %s /var/lib/verl-p40 /var/cache/verl-p40 /root/.ansible_async /tmp /var/tmp 2>/dev/null || true"
            % secret
        )
        assert found.stdout.split() == [], "on the host: %s" % found.stdout


def test_a_mirror_token_stays_hidden_when_the_checksum_fails(host, private_mirror):
    """Broken case: the artifact's set_fact printed the mirror URL whole under -v, and the rescue's
    message named it; before the userinfo went to get_url as its (no_log) username and password, the
    -vvv result of the download carried it. The file's real sha256 in the message shows that the
    credentials, percent-decoded, still reached the mirror (it answers 401 without them)."""
    url, port, secrets = private_mirror
    runfile = dict(host.standins["standin_artifacts"]["cuda_runfile"], sha256="0" * 64)
    overrides = {"cuda_runfile": runfile, "cudnn_archive": host.standins["standin_artifacts"]["cudnn_archive"]}
    before = built(host)
    cached = "/var/cache/verl-p40/" + runfile["file"]
    # An earlier fault test of this worker may have cached the good runfile: it stays as it was.
    cached_before = host.sh("sha256sum %s 2>/dev/null || true" % cached).stdout
    run = host.play("--tags", "cuda", "-vvv", stack_mirror_url=url, stack_artifact_overrides=overrides)
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert "got " + host.standins["standin_artifacts"]["cuda_runfile"]["sha256"] in out, run.output[-3000:]
    assert "http://***@127.0.0.1:%d/***/%s?token=***" % (port, runfile["file"]) in out
    assert_no_secret(host, run, secrets)
    assert built(host) == before
    assert host.sh("sha256sum %s 2>/dev/null || true" % cached).stdout == cached_before


def test_a_mirror_token_stays_hidden_when_the_controller_download_fails(host, private_mirror, tmp_path):
    """Broken case: the controller's get_url failed with its whole result (the URL in it) under -vvv."""
    url, port, secrets = private_mirror
    runfile = dict(host.standins["standin_artifacts"]["cuda_runfile"], file="not-on-the-mirror.run")
    overrides = {"cuda_runfile": runfile, "cudnn_archive": host.standins["standin_artifacts"]["cudnn_archive"]}
    cache = tmp_path / "controller-cache"
    cache.mkdir()
    before = built(host)
    run = host.play(
        "--tags",
        "cuda",
        "-vvv",
        stack_mirror_url=url,
        stack_artifact_overrides=overrides,
        stack_controller_cache_dir=str(cache),
        stack_fetch_on_controller=True,
    )
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert "not-on-the-mirror.run could not be fetched and verified from http://***@127.0.0.1:%d/***/" % port in out, (
        run.output[-3000:]
    )
    assert_no_secret(host, run, secrets)
    assert built(host) == before
