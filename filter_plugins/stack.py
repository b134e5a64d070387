"""Filters for the stack's own data (the artifact manifest), its checks (pip check) and its records (URLs without credentials)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, unquote

from ansible.errors import AnsibleFilterError


def stack_artifact(
    manifest: dict[str, Any],
    key: str,
    overrides: dict[str, Any] | None = None,
    mirror_url: str = "",
    credentials: bool = False,
    require_sha256: bool = True,
) -> dict[str, Any]:
    """Return one manifest entry with its overrides merged and its download URL resolved.

    ``source`` is where it is fetched from: ``<mirror_url>/<file>`` (a query of the mirror URL
    follows the file name), else the entry's ``url``. ``source`` and ``url`` are url_redacted
    (the file name kept), since the entry becomes a fact that -v prints; ``credentials=True``
    keeps them as they are, for the download task alone (no_log). ``require_sha256=False`` lets an
    entry without a sha256 through (an install its role's opt-out allows unverified)."""
    if key not in manifest:
        raise AnsibleFilterError(
            "artifact '%s' is not in stack_artifacts (roles/stack/defaults/main/artifacts.yml); known: %s"
            % (key, ", ".join(sorted(manifest)))
        )
    entry = dict(manifest[key])
    entry.update((overrides or {}).get(key) or {})
    for field in ("file", "url", "sha256") if require_sha256 else ("file", "url"):
        if not entry.get(field):
            raise AnsibleFilterError("artifact '%s' has no %s in the manifest" % (key, field))
    sha = str(entry.get("sha256") or "").lower()
    if (sha or require_sha256) and (len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha)):
        raise AnsibleFilterError("artifact '%s': sha256 '%s' is not 64 hex digits" % (key, sha))
    if "/" in entry["file"] or entry["file"] in ("", ".", ".."):
        raise AnsibleFilterError("artifact '%s': file '%s' must be a plain file name" % (key, entry["file"]))
    entry["sha256"] = sha
    entry["key"] = key
    if mirror_url:
        base, mark, query = str(mirror_url).partition("?")
        entry["source"] = base.rstrip("/") + "/" + entry["file"] + mark + query
    else:
        entry["source"] = entry["url"]
    if not credentials:
        entry["source"] = url_redacted(entry["source"], keep_last=True)
        entry["url"] = url_redacted(entry["url"], keep_last=True)
    return entry


# The lines `pip check` prints (pip's commands/check.py): one per finding, or the all-clear.
PIP_CHECK_CLEAN = "No broken requirements found."
PIP_CHECK_FINDING = re.compile(
    r"^\S+ \S+ (requires \S+, which is not installed\.|has requirement .+, but you have .+\.|is not supported on this platform)$"
)
# What pip may say on stderr without having failed.
PIP_CHECK_NOTICE = re.compile(r"^(WARNING|DEPRECATION): ")


def pip_check_problems(result: dict[str, Any], allowed: list[str] | None = None) -> list[str]:
    """What is wrong with a `python -m pip check` run, given its rc/stdout/stderr; [] when it passes.

    It passes with exit 0 and pip's all-clear, or with exit 1 when stdout holds only
    pip's findings and each matches one of the `allowed` regular expressions. Anything
    else fails: a missing pip or python (exit 1 or 127, nothing on stdout), a crash (a
    traceback on stderr), exit 1 with no finding, or output pip check never prints.
    """
    rc = result.get("rc")
    stdout = [line for line in str(result.get("stdout") or "").splitlines() if line.strip()]
    stderr = [line for line in str(result.get("stderr") or "").splitlines() if line.strip()]
    patterns = [re.compile(pattern) for pattern in allowed or []]
    said = "; stderr: %s" % " | ".join(stderr[-5:]) if stderr else ""
    problems = []
    errors = [line for line in stderr if not PIP_CHECK_NOTICE.match(line)]
    if errors:
        problems.append("pip check wrote errors: %s" % " | ".join(errors[-5:]))
    if rc == 0:
        if stdout != [PIP_CHECK_CLEAN]:
            problems.append("pip check exited 0 without its all-clear (stdout: %s)" % (" | ".join(stdout) or "empty"))
        return problems
    if rc != 1:
        return problems + ["pip check did not run (exit %s)%s" % (rc, said)]
    findings = [line for line in stdout if PIP_CHECK_FINDING.match(line)]
    other = [line for line in stdout if not PIP_CHECK_FINDING.match(line)]
    if not findings:
        problems.append("pip check exited 1 without reporting a finding (it did not run?)%s" % said)
    if other:
        problems.append("pip check printed what it never prints: %s" % " | ".join(other[:5]))
    problems += ["pip check found: %s" % line for line in findings if not any(p.search(line) for p in patterns)]
    return problems


# scheme://userinfo@host...: the userinfo (a user and a password or token) is what to hide.
# The userinfo runs to the authority's last "@" (a password may hold an unencoded "@"; the host cannot).
_URL_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
_URL_PARTS = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?:(?P<userinfo>[^/?#]*)@)?(?P<host>[^/?#]*)"
    r"(?P<path>[^?#]*)(?:\?(?P<query>[^#]*))?(?:#(?P<fragment>.*))?$",
    re.DOTALL,
)
# A path segment that is a token: the one after a "t" segment (conda's and anaconda.org's
# https://host/t/<token>/...), or one of 16 characters or more, of the characters a token is made
# of, with a digit or a capital letter in it (Cloudsmith's and Gemfury's https://host/<token>/...).
_TOKEN_SEGMENT = re.compile(r"^(?=.*[0-9A-Z])[A-Za-z0-9._~%+=-]{16,}$")
REDACTED = "***"


def _url_parts(url: Any) -> dict[str, str] | None:
    match = _URL_PARTS.match(str(url or ""))
    return match.groupdict() if match else None


def _path_tokens(path: str) -> list[int]:
    """The indexes of the path's segments (path.split("/")) that are tokens."""
    segments = path.split("/")
    return [
        i
        for i, segment in enumerate(segments)
        if (i > 0 and segments[i - 1] == "t" and segment) or _TOKEN_SEGMENT.match(segment)
    ]


def url_redacted(url: Any, keep_last: bool = False) -> str:
    """The URL with what may be a credential in it replaced by ``***``: its userinfo
    (``user:password@``), every value of its query (``?token=***``), its fragment, and each path
    segment that is a token (the one after a ``/t/`` segment, or one of 16 or more characters with a
    digit or a capital letter in it). ``keep_last`` keeps the last path segment (a file name the
    caller appended). A string that is not a URL comes back as it is.

    For state records, messages and logs: a pip index, mirror or git URL of a private server may
    carry a token, and those places are readable by more than its owner.
    """
    parts = _url_parts(url)
    if parts is None:
        return str(url or "")
    shown = parts["scheme"] + (REDACTED + "@" if parts["userinfo"] is not None else "") + parts["host"]
    segments = parts["path"].split("/")
    last = len(segments) - 1
    for i in _path_tokens(parts["path"]):
        if not (keep_last and i == last):
            segments[i] = REDACTED
    shown += "/".join(segments)
    if parts["query"] is not None:
        pairs = [
            (pair.split("=", 1)[0] + "=" + REDACTED) if "=" in pair else (REDACTED if pair else "")
            for pair in parts["query"].split("&")
        ]
        shown += "?" + "&".join(pairs)
    if parts["fragment"] is not None:
        shown += "#" + REDACTED
    return shown


def url_secrets(url: Any) -> list[str]:
    """What url_redacted hides of a URL, as it is written and percent-decoded: the password (or the
    user, where the userinfo holds a token alone), the query's values, the fragment and the path's
    tokens. Longest first, so a text_redacted replaces a secret before any part of it."""
    parts = _url_parts(url)
    if parts is None:
        return []
    found = []
    if parts["userinfo"]:
        user, _, password = parts["userinfo"].partition(":")
        found += [parts["userinfo"], password or user]
    if parts["query"]:
        found += [pair.split("=", 1)[-1] for pair in parts["query"].split("&")]
    if parts["fragment"]:
        found.append(parts["fragment"])
    segments = parts["path"].split("/")
    found += [segments[i] for i in _path_tokens(parts["path"])]
    # Shorter than 4 characters: not worth shredding every word that holds it (and no real token).
    found = [secret for secret in found if len(secret) >= 4]
    found += [unquote(secret) for secret in found]
    # Longest first; equal lengths in their order of appearance (a set has none).
    return sorted(dict.fromkeys(found), key=len, reverse=True)


def text_redacted(text: Any, *urls: Any) -> str:
    """The text (a message, a tool's output) with each of these URLs, and each secret in them
    (url_secrets), replaced: a URL by its url_redacted form, a secret by ``***``. ``urls`` may be
    strings or lists of them; empty ones are skipped."""
    shown = str(text if text is not None else "")
    flat: list[str] = []
    for url in urls:
        flat += [str(u) for u in url if u] if isinstance(url, (list, tuple)) else ([str(url)] if url else [])
    for url in sorted(flat, key=len, reverse=True):
        for form in (url, url_without_credentials(url)):
            if len(form) >= 4:
                shown = shown.replace(form, url_redacted(form))
    for url in flat:
        for secret in url_secrets(url):
            shown = shown.replace(secret, REDACTED)
    return shown


def url_without_credentials(url: Any) -> str:
    """The URL with its ``user:password@`` part removed: what git or pip may be given on a command line."""
    return _URL_USERINFO.sub(r"\1", str(url or ""))


def url_credentials(url: Any) -> dict[str, str]:
    """The URL's userinfo, percent-decoded, as ``{"user": ..., "password": ...}`` (empty strings
    when it has none): for a module's username and no_log password parameters, so the URL it is
    given carries no credentials."""
    parts = _url_parts(url) or {}
    user, _, password = (parts.get("userinfo") or "").partition(":")
    return {"user": unquote(user), "password": unquote(password)}


def git_credential_line(url: Any) -> str:
    """The line git's ``store`` credential helper reads for a URL that carries credentials
    (``scheme://user:password@host[:port]``), or ``""`` when it carries none.

    git asks its helpers when the server answers 401; the store file matches on scheme and
    host, so the repository's path is left out.
    """
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)@([^/?#@]*)", str(url or ""))
    if not match or not match.group(3):
        return ""
    scheme, userinfo, host = match.groups()
    if scheme.lower() not in ("http", "https"):
        raise AnsibleFilterError(
            "a %s:// URL cannot carry credentials for git here (only http and https ones can); "
            "use an SSH key or a URL without them" % scheme
        )
    # The store file is URL-encoded (git decodes each part): a raw "@" or ":" in a password is encoded,
    # an already encoded one stays as it is.
    userinfo = ":".join(quote(unquote(part), safe="") for part in userinfo.split(":", 1))
    return "%s://%s@%s" % (scheme.lower(), userinfo, host)


def stack_summary(facts: dict[str, Any], layers: list[str], p2p: dict[str, Any] | None = None) -> list[str]:
    """The end-of-run summary: one row per layer (version, outcome, seconds), from the facts that
    layer_state returned in this run; a layer this run did not reach (tags) is "skipped". The seconds
    run from the layer's first query to its record, on the host's clock; a layer that stopped after
    its query (nothing to do) or recorded without one (preflight) shows none. A row for GPUs that
    cannot reach each other peer-to-peer follows, when preflight found such."""
    rows = []
    for layer in layers:
        seen = facts.get("stack_layer_" + layer) or {}
        started = facts.get("stack_layer_%s_started" % layer)
        took = ""
        if "finished" in seen and isinstance(started, (int, float)):
            took = "%8.1f s" % max(0.0, float(seen["finished"]) - float(started))
        row = "%-10s %-22s %-10s%s" % (layer, seen.get("version") or "-", seen.get("outcome", "skipped"), took)
        rows.append(row.rstrip())
    p2p = p2p or {}
    if p2p.get("checked") and not p2p.get("ok"):
        blocked = list(p2p.get("blocked") or ["?"])
        pair = str(blocked[0]) + (", ..." if len(blocked) > 1 else "")
        rows.append("%-10s no peer-to-peer (%s): train.env sets NCCL_P2P_DISABLE=1" % ("gpus", pair))
    return rows


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "stack_artifact": stack_artifact,
            "pip_check_problems": pip_check_problems,
            "url_redacted": url_redacted,
            "url_without_credentials": url_without_credentials,
            "url_credentials": url_credentials,
            "url_secrets": url_secrets,
            "text_redacted": text_redacted,
            "git_credential_line": git_credential_line,
            "stack_summary": stack_summary,
        }
