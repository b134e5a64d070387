# -*- coding: utf-8 -*-
"""Action plugin for layer_state: answer "nothing changed" from the stage's snapshot, on the controller.

A no-op rerun asks every layer's record whether there is work. Each stage playbook reads all records
at once (state=snapshot, one call to the host); a query whose answer is "unchanged" is then given here
without another call. Anything else (no snapshot, a record that is not complete, other inputs or
required fingerprints, a recorded file whose stat changed, files the record does not name, a rebuild
or verify request) goes to the module on the host, which decides exactly as before. A call that
changes a record empties the snapshot, so a later layer of the same run asks the host again.
The module's documentation (library/layer_state.py) describes the options and results.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.plugins.action import ActionBase

SNAPSHOT = "stack_layer_snapshot"
# A rebuild request that asks for nothing (what the stage playbooks pass by default); anything else,
# an unknown name included, is the module's to parse (and refuse). The module reads a verify of
# false or no as none as well.
NO_REBUILD = ("", None, [])
NO_VERIFY = ("", None, [], "false", "no", "False", "No")


def normal(value: Any) -> Any:
    """The value as the module sees it: through JSON, keys sorted."""
    return json.loads(json.dumps(value, sort_keys=True))


def unchanged(args: dict[str, Any], snap: dict[str, Any]) -> dict[str, Any] | None:
    """The module's result for a query whose answer is "unchanged", from the snapshot; None when the
    host must be asked (any other answer, or anything the snapshot cannot tell)."""
    name = args.get("name")
    if not name or not snap or snap.get("state_dir") != args.get("state_dir"):
        return None
    # This run's snapshot only: one kept by a fact cache is another run's, and the host may have changed.
    if not args.get("run") or snap.get("run") != args.get("run"):
        return None
    rebuild, verify = args.get("rebuild", ""), args.get("verify", "")
    if isinstance(rebuild, bool) or rebuild not in NO_REBUILD or (verify is not False and verify not in NO_VERIFY):
        return None
    records = snap.get("records") or {}
    previous = records.get(name)
    if not isinstance(previous, dict) or previous.get("status") != "complete":
        return None
    recorded = previous.get("files")
    if not isinstance(recorded, dict) or snap.get("stale", {}).get(name) != []:
        return None
    if set(args.get("files") or []) - set(recorded):
        return None
    try:
        inputs = normal(args.get("inputs") or {})
    except (TypeError, ValueError):
        return None
    if previous.get("inputs") != inputs:
        return None
    required = {}
    for dep in args.get("requires") or []:
        record = records.get(dep)
        if not isinstance(record, dict) or record.get("status") != "complete":
            return None
        required[dep] = record
    if previous.get("requires", {}) != {dep: str(record.get("fingerprint", "")) for dep, record in required.items()}:
        return None
    started = round(time.time() + float(snap.get("offset", 0.0)), 2)
    return dict(
        changed=False,
        build=False,
        rebuild=False,
        probe=False,
        reason="unchanged",
        changed_files=[],
        previous=previous,
        fingerprint=previous.get("fingerprint", ""),
        path=os.path.join(args["state_dir"], name + ".json"),
        required={
            dep: {key: record.get(key) for key in ("version", "details", "fingerprint", "built_at")}
            for dep, record in required.items()
        },
        from_snapshot=True,
        ansible_facts={
            "stack_layer_%s_started" % name: started,
            "stack_layer_" + name: dict(version=str(previous.get("version", "")), outcome="unchanged"),
        },
    )


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        state = args.get("state", "query")
        if state == "query":
            facts = (task_vars or {}).get("ansible_facts") or {}
            answer = unchanged(args, facts.get(SNAPSHOT) or {})
            if answer is not None:
                result.update(answer)
                return result
        result.update(self._execute_module(module_name="layer_state", module_args=args, task_vars=task_vars))
        facts = result.setdefault("ansible_facts", {})
        if state == "snapshot" and isinstance(facts.get(SNAPSHOT), dict):
            snap = facts[SNAPSHOT]
            snap["offset"] = round(float(snap.get("host_time", time.time())) - time.time(), 3)
        elif state in ("building", "present") and result.get("changed"):
            facts[SNAPSHOT] = {}
        if not facts:
            del result["ansible_facts"]
        return result
