"""What a layer's record says about the work to do: the one decision behind every layer_state query.

The layer_state module (library/layer_state.py) decides on the host; its action plugin
(action_plugins/layer_state.py) answers "nothing changed" from the stage's snapshot on the controller.
Both decide with the functions below, so the two answers cannot drift apart."""

from __future__ import annotations

from typing import Any


def parse_rebuild(raw: Any, layers: list[str]) -> set[str]:
    """Turn the user's rebuild request into a set of layer names; raise ValueError on unknown names."""
    if raw is None or raw is False or raw == "":
        return set()
    items = raw if isinstance(raw, list) else str(raw).split(",")
    names = {str(item).strip() for item in items if str(item).strip()}
    if "all" in names:
        return set(layers)
    unknown = sorted(names - set(layers))
    if unknown:
        raise ValueError(
            "rebuild names unknown layer(s) %s; valid names are %s, or 'all'" % (", ".join(unknown), ", ".join(layers))
        )
    return names


def decide(previous: dict[str, Any], inputs: dict[str, Any], deps: dict[str, str], requested: bool) -> tuple[bool, str]:
    """Return (build, reason) for a layer, most specific reason first."""
    if not previous:
        return True, "absent"
    if previous.get("status") != "complete":
        return True, "incomplete"
    if requested:
        return True, "requested"
    if previous.get("inputs") != inputs:
        return True, "inputs_changed"
    if previous.get("requires", {}) != deps:
        return True, "dependency_changed"
    return False, "unchanged"


def verdict(build: bool, reason: str, files_changed: list[str], verify: bool) -> tuple[bool, bool, str]:
    """(rebuild, probe, reason): must the layer be built whatever the host looks like, must it look.

    A layer with no record may adopt what the host has (probe, no forced build); an unchanged record
    whose files changed is looked at again, not rebuilt blindly."""
    if build:
        return reason != "absent", reason == "absent" or verify, reason
    if files_changed:
        return False, True, "files_changed"
    return False, verify, reason


def outcome(previous: dict[str, Any], built: bool) -> str:
    if not built:
        return "unchanged"
    return "rebuilt" if previous.get("fingerprint") else "built"


def required_view(records: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What a query returns of the layers it requires (RV required): what later layers may read."""
    return {
        dep: {key: record.get(key) for key in ("version", "details", "fingerprint", "built_at")}
        for dep, record in records.items()
    }


def query_facts(name: str, previous: dict[str, Any], started: float) -> dict[str, Any]:
    """The facts a query returns: when the layer's first look ran, and, for a complete record, unchanged."""
    facts: dict[str, Any] = {"stack_layer_%s_started" % name: started}
    if previous.get("status") == "complete":
        facts["stack_layer_" + name] = dict(version=str(previous.get("version", "")), outcome="unchanged")
    return facts
