#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: read and record the state of one layer of the stack."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: layer_state
short_description: Decide whether a layer of the stack must be built, and record it when it is
description:
  - Every layer (preflight, cuda, cudnn, ...) keeps a JSON state file in I(state_dir) with the
    inputs it was built from, its version, its fingerprint and when it was built.
  - With I(state=query) the module compares the recorded state with the current inputs, the
    fingerprints of the layers it I(requires) and the user's I(rebuild) request, and returns
    C(build) and the C(reason). It never changes anything in that mode.
  - With I(state=building) it marks the layer incomplete before its work starts, so that a run
    that fails half way is redone from scratch by the next run.
  - With I(state=present) it records the finished layer. Each build gets a new fingerprint, so
    every layer that requires it is rebuilt the next time it runs.
  - The outcome (built, rebuilt, unchanged) is returned as the fact C(stack_layer_<name>) for the
    end-of-run summary.
options:
  name:
    description: Layer name; must be one of I(layers).
    type: str
    required: true
  state_dir:
    description: Directory that holds one C(<name>.json) per layer.
    type: path
    required: true
  state:
    description: C(query) reads, C(building) marks the layer incomplete, C(present) records it.
    type: str
    choices: [query, building, present]
    default: query
  inputs:
    description: Everything the layer is built from (versions, checksums, paths, options).
    type: dict
    default: {}
  requires:
    description: Layers whose recorded fingerprints are part of this layer's inputs.
    type: list
    elements: str
    default: []
  rebuild:
    description:
      - The user's rebuild request. A layer name, comma-separated names, a list, or C(all).
    type: raw
    default: ""
  layers:
    description: All layer names, used to validate I(name), I(requires) and I(rebuild).
    type: list
    elements: str
    required: true
  version:
    description: The version the layer installed (I(state=present)).
    type: str
    default: ""
  built:
    description: Whether this run did the layer's work (I(state=present)); false adopts or confirms.
    type: bool
    default: true
  details:
    description: Extra facts to keep in the state file (I(state=present)).
    type: dict
    default: {}
author:
  - verl-p40 maintainers
"""

EXAMPLES = r"""
- name: Read the state of the cuda layer
  layer_state:
    name: cuda
    state_dir: /var/lib/verl-p40/layers
    layers: "{{ stack_layers }}"
    inputs:
      version: 11.8.0
      sha256: "{{ cuda_artifact.sha256 }}"
    rebuild: "{{ rebuild | default('') }}"
  register: cuda_layer
"""

RETURN = r"""
build:
  description: Whether the layer must be built (query).
  type: bool
  returned: always
reason:
  description: absent, incomplete, inputs_changed, dependency_changed, requested or unchanged.
  type: str
  returned: always
previous:
  description: The state recorded before this call, or an empty dict.
  type: dict
  returned: always
fingerprint:
  description: The fingerprint recorded for the layer (present), or the current one.
  type: str
  returned: always
"""

import datetime
import hashlib
import json
import os
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule

STATE_FORMAT = 1


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
            "rebuild names unknown layer(s) %s; valid names are %s, or 'all'"
            % (", ".join(unknown), ", ".join(layers))
        )
    return names


def read_state(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        # An unreadable state is treated as an incomplete layer: it is rebuilt, never trusted.
        return {"status": "unreadable"}
    return data if isinstance(data, dict) else {"status": "unreadable"}


def write_state(path: str, data: dict[str, Any]) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".layer-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def required_fingerprints(state_dir: str, requires: list[str]) -> dict[str, str]:
    return {
        name: str(read_state(os.path.join(state_dir, name + ".json")).get("fingerprint", ""))
        for name in requires
    }


def decide(previous: dict[str, Any], inputs: dict[str, Any], deps: dict[str, str],
           requested: bool) -> tuple[bool, str]:
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


def new_fingerprint(name: str, inputs: dict[str, Any], deps: dict[str, str], when: str) -> str:
    payload = json.dumps({"name": name, "inputs": inputs, "requires": deps, "time": when},
                         sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def outcome(previous: dict[str, Any], built: bool) -> str:
    if not built:
        return "unchanged"
    return "rebuilt" if previous.get("fingerprint") else "built"


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state_dir=dict(type="path", required=True),
            state=dict(type="str", default="query", choices=["query", "building", "present"]),
            inputs=dict(type="dict", default={}),
            requires=dict(type="list", elements="str", default=[]),
            rebuild=dict(type="raw", default=""),
            layers=dict(type="list", elements="str", required=True),
            version=dict(type="str", default=""),
            built=dict(type="bool", default=True),
            details=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    name = p["name"]
    unknown = sorted({name, *p["requires"]} - set(p["layers"]))
    if unknown:
        module.fail_json(msg="layer_state: unknown layer(s) %s; known layers: %s"
                         % (", ".join(unknown), ", ".join(p["layers"])))
    try:
        rebuild = parse_rebuild(p["rebuild"], p["layers"])
    except ValueError as exc:
        module.fail_json(msg="%s. Example: -e rebuild=cuda,cudnn" % exc)

    path = os.path.join(p["state_dir"], name + ".json")
    previous = read_state(path)
    # Inputs pass through JSON on both sides so that the comparison sees the same types.
    inputs = json.loads(json.dumps(p["inputs"], sort_keys=True))
    deps = required_fingerprints(p["state_dir"], p["requires"])
    build, reason = decide(previous, inputs, deps, name in rebuild)
    result: dict[str, Any] = dict(changed=False, build=build, reason=reason, previous=previous,
                                  fingerprint=previous.get("fingerprint", ""), path=path)

    if p["state"] == "building":
        marked = dict(previous, status="building", name=name)
        result["changed"] = previous.get("status") != "building"
        if result["changed"] and not module.check_mode:
            write_state(path, marked)
    elif p["state"] == "present":
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        unchanged = (not p["built"] and previous.get("status") == "complete"
                     and previous.get("inputs") == inputs and previous.get("requires", {}) == deps)
        # Nothing was built from the same inputs: the record stays as it was, details included.
        record = dict(previous) if unchanged else {
            "format": STATE_FORMAT,
            "name": name,
            "status": "complete",
            "version": p["version"],
            "inputs": inputs,
            "requires": deps,
            "details": json.loads(json.dumps(p["details"], sort_keys=True)),
            "fingerprint": new_fingerprint(name, inputs, deps, when),
            "built_at": when,
        }
        result["changed"] = record != previous
        result["fingerprint"] = record["fingerprint"]
        result["diff"] = dict(before=json.dumps(previous, indent=2, sort_keys=True) + "\n",
                              after=json.dumps(record, indent=2, sort_keys=True) + "\n",
                              before_header=path, after_header=path)
        if result["changed"] and not module.check_mode:
            write_state(path, record)
        result["ansible_facts"] = {
            "stack_layer_" + name: dict(version=p["version"],
                                        outcome=outcome(previous, p["built"] and result["changed"]))
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
