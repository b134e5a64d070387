"""Filters for the stack's own data: artifacts, disk space, rebuild requests."""

from __future__ import annotations

import posixpath
from typing import Any

from ansible.errors import AnsibleFilterError

GIB = 1024 ** 3


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


def _mount_of(path: str, mounts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The mount holding path: the longest mount point that is a prefix of it."""
    path = posixpath.normpath(path)
    best = None
    for mount in mounts:
        point = posixpath.normpath(mount.get("mount", ""))
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > len(best["mount"])):
            best = dict(mount, mount=point)
    return best


def stack_disk_shortfalls(requirements: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> list[str]:
    """List, in words, each filesystem that has less free space than the paths on it need.

    requirements: [{path, min_free_gb}], mounts: ansible_mounts. Paths that share a
    filesystem add up, since the layers fill the same disk.
    """
    needed: dict[str, dict[str, Any]] = {}
    for req in requirements:
        mount = _mount_of(str(req["path"]), mounts)
        if mount is None:
            raise AnsibleFilterError("no mounted filesystem holds %s" % req["path"])
        slot = needed.setdefault(mount["mount"], dict(gb=0.0, paths=[], free=mount.get("size_available", 0)))
        slot["gb"] += float(req["min_free_gb"])
        slot["paths"].append(str(req["path"]))
    problems = []
    for point, slot in sorted(needed.items()):
        free_gb = slot["free"] / GIB
        if free_gb < slot["gb"]:
            problems.append("%s (for %s) has %.1f GiB free, needs %.1f GiB"
                            % (point, ", ".join(slot["paths"]), free_gb, slot["gb"]))
    return problems


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "stack_artifact": stack_artifact,
            "stack_disk_shortfalls": stack_disk_shortfalls,
        }
