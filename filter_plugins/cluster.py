"""The checks of a Ray cluster of hosts (an inventory group such as ``verl_cluster``).

verl attaches to a running Ray cluster and places every node's workers with ``STRICT_PACK``:
it needs one ``n_gpus_per_node`` on every node, and every node must run the same verl, patched
the same way. These filters say which host is the head, and what keeps a group from being one
cluster, each message naming the host and what to change:

- ``ray_head``: the host marked ``ray_head: true``, else the group's first host;
- ``cluster_gpu_problems``: hosts that would offer different GPU counts;
- ``cluster_patch_problems``: hosts whose verl patch record (``.verl_p40_patch/record.json``)
  differs from the head's, by the checksums of the patched files;
- ``ray_cluster_problems``: what the head's ``ray.nodes()`` lacks: a host with no live node at
  its address (with the ports to check), or a node with another GPU count;
- ``ray_probe_problems``: the same for the ray layer's probe of the head (the command's result):
  the nodes it printed, or that it could not reach the head;
- ``systemd_environment_file`` and ``systemd_exec``: the Ray units' environment file and
  ``ExecStart=`` command line, quoted so that systemd hands over each value exactly.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError


def ray_head(group: list[str], hostvars: Any) -> str:
    """The head of the group: the one host that sets ``ray_head: true``, else the first host."""
    hosts = list(group or [])
    if not hosts:
        raise AnsibleFilterError("the Ray cluster's inventory group has no hosts")
    marked = [host for host in hosts if _true((hostvars[host] if host in hostvars else {}).get("ray_head", False))]
    if len(marked) > 1:
        raise AnsibleFilterError(
            "hosts %s all set ray_head: true; mark one host of the group as the head" % ", ".join(marked)
        )
    return marked[0] if marked else hosts[0]


def _true(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("true", "yes", "on", "1")


def cluster_gpu_problems(gpus: dict[str, Any]) -> list[str]:
    """Hosts of the group whose GPU counts differ (``{host: count}``); empty when all are equal."""
    counts = {host: int(count) for host, count in (gpus or {}).items()}
    if len(set(counts.values())) <= 1:
        return []
    smallest = min(counts.values())
    listed = ", ".join("%s: %d" % (host, count) for host, count in sorted(counts.items()))
    if smallest < 1:
        return ["hosts offer no GPU to the cluster (%s): every node needs one at least" % listed]
    return [
        "the hosts offer different GPU counts (%s); verl places each node's workers with STRICT_PACK and needs the "
        "same n_gpus_per_node on every node: set train_gpus on the larger hosts to pick %d GPUs each"
        % (listed, smallest)
    ]


def _patched(record: Any) -> dict[str, Any]:
    record = record or {}
    return {
        "verl_version": record.get("verl_version"),
        "fixes": sorted(record.get("fixes") or []),
        "files": {rel: entry.get("patched_sha256") for rel, entry in sorted((record.get("files") or {}).items())},
    }


def cluster_patch_problems(records: dict[str, Any], head: str) -> list[str]:
    """Hosts whose verl patch record differs from the head's (verl's version, the fixes, each
    patched file's sha256); a host without a record counts as different."""
    if head not in (records or {}):
        raise AnsibleFilterError("no verl patch record of the head %s was given" % head)
    want = _patched(records[head])
    problems = []
    for host, record in sorted(records.items()):
        if host == head:
            continue
        # No fixes for the profile leave no record: a node without one matches a head without one.
        if not record and records[head]:
            problems.append("%s has no verl patch record: build its verl and patch layers (--tags verl,patch)" % host)
            continue
        have = _patched(record)
        if have == want:
            continue
        differ = sorted(key for key in want if want[key] != have[key])
        files = sorted(
            rel for rel in set(want["files"]) | set(have["files"]) if want["files"].get(rel) != have["files"].get(rel)
        )
        problems.append(
            "%s runs another verl than the head %s (%s differ%s): every node must run the same pins and patch; "
            "run the playbook on the whole group with the same variables"
            % (host, head, ", ".join(differ), (": " + ", ".join(files)) if files else "")
        )
    return problems


def ray_cluster_problems(
    nodes: list[dict[str, Any]], expected: dict[str, dict[str, Any]], ports: str = ""
) -> list[str]:
    """What keeps the cluster the head sees (``ray.nodes()``) from being the group.

    expected: ``{host: {"ip": address, "gpus": count}}``. A host with no live node at its
    address is missing (the message names the ports to check); a live node at a host's address
    with another GPU count is refused.
    """
    alive: dict[str, dict[str, Any]] = {}
    for node in nodes or []:
        if node.get("Alive", node.get("alive", False)):
            alive[str(node.get("NodeManagerAddress", ""))] = node
    problems = []
    missing = []
    for host, want in sorted((expected or {}).items()):
        node = alive.get(str(want.get("ip", "")))
        if node is None:
            missing.append("%s (%s)" % (host, want.get("ip", "?")))
            continue
        gpus = float((node.get("Resources") or {}).get("GPU", 0))
        if int(gpus) != int(want.get("gpus", 0)):
            problems.append(
                "node %s (%s) offers %g GPUs to Ray, not the %d preflight found"
                % (host, want["ip"], gpus, want["gpus"])
            )
    if missing:
        problems.insert(
            0,
            "not in the cluster: %s%s"
            % (", ".join(missing), ("; check that these ports are open: " + ports) if ports else ""),
        )
    return problems


def last_json_object(lines: list[str]) -> dict[str, Any] | None:
    """The last of these lines that is a JSON object, or None."""
    for line in reversed(lines):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def ray_probe_problems(result: dict[str, Any], expected: dict[str, dict[str, Any]], ports: str = "") -> list[str]:
    """``ray_cluster_problems`` of the probe's result (the ray layer's wait task): the last line of
    its stdout that is a JSON object (Ray may log a line of its own to stdout after it, as the driver
    disconnects). A probe that failed, or printed no such line, could not reach the head, and the
    last lines of its stderr say why."""
    result = result or {}
    lines = result.get("stdout_lines") or str(result.get("stdout") or "").splitlines()
    seen = last_json_object(lines) if result.get("rc") == 0 else None
    if not isinstance(seen, dict):
        why = " ".join(str(result.get("stderr") or "").splitlines()[-3:]) or "rc %s" % result.get("rc")
        return ["cannot reach the head: " + why]
    return ray_cluster_problems(seen.get("nodes") or [], expected, ports)


def _control_character(text: str) -> str | None:
    """The stack's one rule for control characters (filter_plugins/control.py), loaded from the file
    beside this one: Ansible loads each filter plugin file by its path, not as a package module."""
    global _CONTROL_CHARACTER
    if _CONTROL_CHARACTER is None:
        spec = importlib.util.spec_from_file_location("verl_p40_control", Path(__file__).with_name("control.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _CONTROL_CHARACTER = module.control_character
    return _CONTROL_CHARACTER(text)


_CONTROL_CHARACTER = None


def _one_line(value: Any, where: str, line: str) -> str:
    """The value as text; a control character (a newline would start another line) is refused."""
    text = str(value)
    found = _control_character(text)
    if found:
        raise AnsibleFilterError("%s holds a control character (%s): %s cannot carry it" % (where, found, line))
    return text


def _systemd_exec_quoted(value: Any, where: str) -> str:
    text = _one_line(value, where, "a systemd unit line")
    # Inside double quotes systemd reads C escapes; % starts a specifier, and on a command line $ a variable.
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return '"%s"' % text


def systemd_environment_file(env: dict[str, Any], variable: str = "the environment") -> str:
    """The text of a unit's ``EnvironmentFile=``: one ``NAME="value"`` line per variable, names
    shell names. In double quotes systemd unescapes backslash, quote, ``$`` and backquote, expands
    neither variables nor ``%`` specifiers, and nothing else is special, so each value arrives as
    written. (A file, not ``Environment=`` lines: a unit's Environment= is any local user's to read
    through ``systemctl show``.)"""
    lines = []
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise AnsibleFilterError("%s: %r is not an environment variable name" % (variable, name))
        if value is None or isinstance(value, (dict, list, tuple, set)):
            raise AnsibleFilterError("%s.%s is %r; give a string or a number" % (variable, name, value))
        text = _one_line(value, "%s.%s" % (variable, name), "an environment file line")
        lines.append('%s="%s"\n' % (name, re.sub(r'([\\"$`])', r"\\\1", text)))
    return "".join(lines)


def systemd_exec(argv: list[Any]) -> str:
    """An ``ExecStart=`` command line: every argument quoted, ``%`` and ``$`` kept literal."""
    if not argv:
        raise AnsibleFilterError("an ExecStart= command line needs a program")
    return " ".join(_systemd_exec_quoted(arg, "argument %d of ExecStart" % n) for n, arg in enumerate(argv))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "ray_head": ray_head,
            "cluster_gpu_problems": cluster_gpu_problems,
            "cluster_patch_problems": cluster_patch_problems,
            "ray_cluster_problems": ray_cluster_problems,
            "ray_probe_problems": ray_probe_problems,
            "last_json_object": last_json_object,
            "systemd_environment_file": systemd_environment_file,
            "systemd_exec": systemd_exec,
        }
