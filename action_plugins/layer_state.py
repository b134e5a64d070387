# -*- coding: utf-8 -*-
"""Action plugin for layer_state: answer "nothing changed" from the stage's snapshot, on the controller.

A no-op rerun asks every layer's record whether there is work. Each stage playbook reads all records
at once (state=snapshot, one call to the host); a query whose answer is "unchanged" is then given here
without another call. Anything else (no snapshot, a record that is not complete, other inputs or
required fingerprints, a recorded file whose stat changed, files the record does not name, a rebuild
or verify request) goes to the module on the host, which decides exactly as before. So does the record
(state=present) of a layer that built nothing from unchanged inputs and names the files it recorded
(preflight's on every run): the module would keep the record as it is, so it is answered here too. A
call that changes a record empties the snapshot, so a later layer of the same run asks the host again.
The module's documentation (library/layer_state.py) describes the options and results.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from types import ModuleType
from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

SNAPSHOT = "stack_layer_snapshot"
# A rebuild request that asks for nothing (what the stage playbooks pass by default); anything else,
# an unknown name included, is the module's to parse (and refuse). The module reads a verify of
# false or no as none as well.
NO_REBUILD = ("", None, [])
NO_VERIFY = ("", None, [], "false", "no", "False", "No")
SHARED = "ansible.module_utils.stack_layer"


def shared() -> ModuleType:
    """module_utils/stack_layer.py, the module's own decision. Ansible ships a project's module_utils
    to the modules it runs on the host, but does not put them on the controller's import path: the
    file is loaded from the configured module_utils directories (ansible.cfg, Molecule's env)."""
    if SHARED in sys.modules:
        return sys.modules[SHARED]
    for directory in C.DEFAULT_MODULE_UTILS_PATH or []:
        path = os.path.join(os.path.expanduser(directory), "stack_layer.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location(SHARED, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[SHARED] = module
            return module
    raise AnsibleActionFail(
        "layer_state: module_utils/stack_layer.py is not in the module_utils path (%s); run from the project root, "
        "whose ansible.cfg names it" % ", ".join(C.DEFAULT_MODULE_UTILS_PATH or [])
    )


def normal(value: Any) -> Any:
    """The value as the module sees it: through JSON, keys sorted."""
    return json.loads(json.dumps(value, sort_keys=True))


def unchanged(args: dict[str, Any], snap: dict[str, Any]) -> dict[str, Any] | None:
    """The module's result for a query whose answer is "unchanged", from the snapshot; None when the
    host must be asked (any other answer, or anything the snapshot cannot tell). The answer itself is
    the module's decide() and verdict() (module_utils/stack_layer.py) on what the snapshot read."""
    name = args.get("name")
    if not name or not snap or snap.get("state_dir") != args.get("state_dir"):
        return None
    # This run's snapshot only: one kept by a fact cache is another run's, and the host may have changed.
    if not args.get("run") or snap.get("run") != args.get("run"):
        return None
    # A request is the module's to parse (and an unknown name its to refuse).
    rebuild, verify = args.get("rebuild", ""), args.get("verify", "")
    if isinstance(rebuild, bool) or rebuild not in NO_REBUILD or (verify is not False and verify not in NO_VERIFY):
        return None
    records = snap.get("records") or {}
    previous = records.get(name)
    # A record the snapshot did not stat (none, incomplete, or written before layers recorded files), or
    # files the record does not name: the host looks.
    if not isinstance(previous, dict) or not isinstance(previous.get("files"), dict):
        return None
    stale = snap.get("stale", {}).get(name)
    if stale is None or set(args.get("files") or []) - set(previous["files"]):
        return None
    required = {dep: records.get(dep) for dep in args.get("requires") or []}
    # A required layer without a complete record: the module says which, and stops.
    if any(not isinstance(record, dict) or record.get("status") != "complete" for record in required.values()):
        return None
    try:
        inputs = normal(args.get("inputs") or {})
    except (TypeError, ValueError):
        return None
    layer = shared()
    deps = {dep: str(record.get("fingerprint", "")) for dep, record in required.items()}
    build, reason = layer.decide(previous, inputs, deps, False)
    rebuild_, probe, reason = layer.verdict(build, reason, stale, False)
    if build or rebuild_ or probe:
        return None
    started = round(time.time() + float(snap.get("offset", 0.0)), 2)
    return dict(
        changed=False,
        build=build,
        rebuild=rebuild_,
        probe=probe,
        reason=reason,
        changed_files=[],
        previous=previous,
        fingerprint=previous.get("fingerprint", ""),
        path=os.path.join(args["state_dir"], name + ".json"),
        required=layer.required_view(required),
        from_snapshot=True,
        ansible_facts=layer.query_facts(name, previous, started),
    )


def kept(args: dict[str, Any], snap: dict[str, Any]) -> dict[str, Any] | None:
    """The module's result for a record (state=present) that would leave the state file as it is, from
    the snapshot; None when the host must be asked. The module keeps a record when nothing was built
    and decide() finds it unchanged, and refreshes only its files' stat: unchanged when the files are
    the recorded ones and none changed (what unchanged() holds for a query of the same layer)."""
    # The module's defaults (built: true, update_details: false) where a value is absent or null, and
    # its reading of a bool (Ansible's own); a value that is no bool is the module's to refuse.
    flags = {"built": True, "update_details": False}
    try:
        if any(boolean(default if args.get(name) is None else args[name]) for name, default in flags.items()):
            return None
    except TypeError:
        return None
    answer = unchanged(args, snap)
    if answer is None or set(args.get("files") or []) != set(answer["previous"]["files"]):
        return None
    previous = answer["previous"]
    finished = round(time.time() + float(snap.get("offset", 0.0)), 2)
    outcome = shared().outcome(previous, False)
    answer["ansible_facts"] = {
        "stack_layer_" + args["name"]: dict(version=str(args.get("version", "")), outcome=outcome, finished=finished)
    }
    return answer


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        state = args.get("state", "query")
        if state in ("query", "present"):
            facts = (task_vars or {}).get("ansible_facts") or {}
            answer = (unchanged if state == "query" else kept)(args, facts.get(SNAPSHOT) or {})
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
