"""Filters for the stack's own data: the artifact manifest."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

def stack_artifact(manifest: dict[str, Any], key: str, overrides: dict[str, Any] | None = None,
                   mirror_url: str = "") -> dict[str, Any]:
    """Return one manifest entry with its overrides merged and its download URL resolved."""
    if key not in manifest:
        raise AnsibleFilterError(
            "artifact '%s' is not in stack_artifacts (group_vars/all/artifacts.yml); known: %s"
            % (key, ", ".join(sorted(manifest))))
    entry = dict(manifest[key])
    entry.update((overrides or {}).get(key) or {})
    for field in ("file", "url", "sha256"):
        if not entry.get(field):
            raise AnsibleFilterError("artifact '%s' has no %s in the manifest" % (key, field))
    sha = str(entry["sha256"]).lower()
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise AnsibleFilterError("artifact '%s': sha256 '%s' is not 64 hex digits" % (key, sha))
    if "/" in entry["file"] or entry["file"] in ("", ".", ".."):
        raise AnsibleFilterError("artifact '%s': file '%s' must be a plain file name" % (key, entry["file"]))
    entry["sha256"] = sha
    entry["key"] = key
    entry["source"] = (mirror_url.rstrip("/") + "/" + entry["file"]) if mirror_url else entry["url"]
    return entry


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "stack_artifact": stack_artifact,
        }
