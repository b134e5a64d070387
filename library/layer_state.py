#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: read and record the state of one layer of the stack."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: layer_state
short_description: Decide whether a layer of the stack must be built, and record it when it is
description:
  - Every layer (preflight, cuda, cudnn, ...) keeps a JSON state file C(<name>.json) in O(state_dir)
    with the inputs it was built from, its version, its fingerprint and when it was built.
  - With O(state=query) the module compares the recorded state with the current O(inputs), the
    fingerprints of the layers it O(requires) and the user's O(rebuild) request, and returns
    RV(build) and the RV(reason). It never changes anything in that mode.
  - With O(state=building) it marks the layer incomplete before its work starts, so that a run
    that fails half way is redone from scratch by the next run.
  - With O(state=present) it records the finished layer. Each build gets a new fingerprint, so
    every layer that requires it is rebuilt the next time it runs.
  - The outcome (built, rebuilt, unchanged) is returned as the fact C(stack_layer_<name>) for the
    end-of-run summary; a query of a complete layer returns it as unchanged, so a layer that has
    nothing to do need not record itself again.
  - A query stops with a clear message when a layer it O(requires) has no complete record on the
    host, and otherwise returns those layers' records in RV(required); a layer reads what it needs of
    an earlier layer (a version, a path, the host compiler) from there, never from its files.
  - The state file is replaced atomically (a fsynced temporary file renamed over it), mode 0644.
  - With O(state=snapshot) it reads every layer's record and a stat of the files each recorded, in
    one call, and returns them as the fact C(stack_layer_snapshot); each stage playbook takes one
    first. The action plugin of the same name (C(action_plugins/layer_state.py)) then answers a
    query from that fact, on the controller, when its answer is that nothing changed (complete
    record, same inputs and required fingerprints, recorded files as they were, no O(rebuild) or
    O(verify)); every other query, and every query after a record changed in this run, asks the
    host as before.
options:
  name:
    description: Layer name; must be one of O(layers). Required unless O(state=snapshot).
    type: str
    default: ""
  state_dir:
    description: Directory that holds one C(<name>.json) per layer. Created (mode 0755) when missing.
    type: path
    required: true
  state:
    description:
      - V(query) reads and decides.
      - V(building) marks the layer incomplete (and records O(run)).
      - V(present) records the finished layer.
      - V(snapshot) reads every layer's record at once (RV(ansible_facts.stack_layer_snapshot)).
    type: str
    choices: [query, building, present, snapshot]
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
      - The user's rebuild request. A layer name, comma-separated names, a list, or V(all).
    type: raw
    default: ""
  layers:
    description: All layer names, used to validate O(name), O(requires) and O(rebuild).
    type: list
    elements: str
    required: true
  version:
    description: The version the layer installed (O(state=present)).
    type: str
    default: ""
  built:
    description: Whether this run did the layer's work (O(state=present)); V(false) adopts or confirms.
    type: bool
    default: true
  details:
    description: Extra facts to keep in the state file (O(state=present)).
    type: dict
    default: {}
  update_details:
    description:
      - With O(state=present) and O(built=false) (nothing was built, the inputs are the recorded
        ones), record O(details) and O(version) in place of the recorded ones. Without it a confirm keeps the
        record as it was, details included. The fingerprint and build time stay either way, so
        no layer that requires this one rebuilds.
      - For settings a layer applies without a rebuild (the mirrors the conda layer writes into
        its config files), whose digest in the details says what the files were written with, and
        for a layer that records what it finds (the driver layer, a driver kept or changed by hand).
    type: bool
    default: false
  run:
    description:
      - The identity of the run (the host lock's run id). O(state=building) records it; O(state=present)
        refuses to complete a layer that another run marked building.
    type: str
    default: ""
  step:
    description:
      - With O(state=building), what the layer is about to do that a killed run would leave half done,
        recorded as RV(previous.step) in the building record (V("") removes it). The pip layers say V(pip) right
        before pip changes the env and V("") again when pip stopped by itself (it rolled back). A layer
        found building at step V(pip) was killed in the middle of an install, and reinstalls with
        C(--force-reinstall), since pip would call a half-installed package "already satisfied".
    type: str
    default: ""
  verify:
    description:
      - The user's request to look at the host again even where the record says the layer is unchanged
        (the layer's probe and full check run). Layer names like O(rebuild), V(all), or a boolean.
    type: raw
    default: ""
  files:
    description:
      - Paths the layer installed whose size and modification time stand for it. O(state=present)
        records them; a query whose recorded files changed (size, mtime, type, or gone) returns
        RV(probe=true) with the reason V(files_changed), so the layer looks at the host again. A record
        without files (written by an older version) is probed once too.
      - This is what lets a rerun with nothing to do decide from the state file and a stat, without
        running the env's Python, pip or conda.
    type: list
    elements: path
    default: []
  lock_file:
    description:
      - The host's run lock (the host_lock module of this project). When set, every call but a check-mode one
        (O(state=query), V(building), V(present) and V(snapshot)) fails unless the lock file names O(run), so a run that
        skipped the stage playbooks' lock tasks (C(--skip-tags always), C(--start-at-task)), or whose lock another
        run took over, reads and changes no layer. The stage playbooks set it (C(stack_layer_args)); empty, as
        for a call outside them, checks nothing.
    type: path
    default: ""
  os_facts:
    description:
      - With O(state=snapshot), also the OS release facts the layers read (C(distribution),
        C(distribution_version), C(distribution_major_version), C(distribution_release)), as the setup module
        gathers them with C(gather_subset=distribution), so that a run needs no setup call before its first
        layer. Not setup's other facts (C(os_family), the release file's path, ...). Ignored with any other
        O(state).
    type: bool
    default: false
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - Writes nothing; returns the decision, the fingerprint, the fact and the diff a normal run would.
      - Does not check O(lock_file): a check-mode run takes no lock.
  diff_mode:
    support: full
    details: O(state=building) and O(state=present) show the state file before and after (as JSON).
  platform:
    platforms: posix
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

- name: Record the cuda layer once it is built
  layer_state:
    name: cuda
    state: present
    state_dir: /var/lib/verl-p40/layers
    layers: "{{ stack_layers }}"
    inputs: "{{ cuda_layer_inputs }}"
    version: 11.8.89
    details:
      prefix: /usr/local/cuda-11.8
"""

RETURN = r"""
build:
  description: Whether the layer must be built, judged against the state recorded before this call.
  type: bool
  returned: always
  sample: true
reason:
  description: Why RV(build) is what it is.
  type: str
  returned: always
  choices: [absent, incomplete, requested, inputs_changed, dependency_changed, unchanged]
  sample: inputs_changed
previous:
  description:
    - The state recorded before this call; V({}) when there is none. A file that cannot be read as a
      JSON object gives only RV(previous.status=unreadable).
    - A layer marked building holds only RV(previous.status), RV(previous.name), RV(previous.run) and RV(previous.step)
      on top of what was there.
  type: dict
  returned: always
  contains:
    format:
      description: The version of the state file's format.
      type: int
      sample: 1
    name:
      description: The layer.
      type: str
      sample: cuda
    status:
      description: V(complete), V(building) or V(unreadable).
      type: str
      sample: complete
    version:
      description: The version the layer installed (O(version)).
      type: str
      sample: 11.8.89
    inputs:
      description: The O(inputs) the layer was built from.
      type: dict
      sample: {version: 11.8.0}
    requires:
      description: The fingerprints of the required layers it was built against, by layer.
      type: dict
      sample: {preflight: 5d41402abc4b2a76}
    details:
      description: The O(details) recorded with it.
      type: dict
      sample: {prefix: /usr/local/cuda-11.8}
    fingerprint:
      description: The fingerprint of that build.
      type: str
      sample: 77a873e85013aaa0
    built_at:
      description: When it was recorded (UTC, ISO 8601).
      type: str
      sample: "2026-12-01T10:00:00Z"
    run:
      description: The run id that marked the layer building (O(run)).
      type: str
      sample: ctl-4242-123456
    step:
      description: What a layer marked building was doing (O(step)); absent when it said nothing.
      type: str
      sample: pip
    files:
      description:
        - The O(files) recorded with it, each as V([kind, size, mtime_ns]) (kind V(file), V(dir) or
          V(link)), or V(null) for a path that was missing.
      type: dict
      sample: {/usr/local/cuda-11.8/version.json: [file, 2561, 1764583200000000000]}
fingerprint:
  description: The fingerprint recorded for the layer by this call (O(state=present)), else the one recorded before; empty when none.
  type: str
  returned: always
  sample: 77a873e85013aaa0
path:
  description:
    - The layer's state file.
    - As for any module whose result names an existing file, Ansible adds that file's owner, group, mode,
      uid, gid, size and type to the result, under the keys owner, group, mode, uid, gid, size and state;
      that state key holds the file's type (V(file), V(directory)), not O(state).
  type: str
  returned: always
  sample: /var/lib/verl-p40/layers/cuda.json
ansible_facts:
  description: The layer's facts for the end-of-run summary.
  type: dict
  returned: when O(state=query), O(state=present) or O(state=snapshot)
  contains:
    ansible_distribution:
      description:
        - The OS, as the setup module names it (C(ansible_facts.distribution) in a play); with it
          C(ansible_distribution_version), C(ansible_distribution_major_version) and
          C(ansible_distribution_release), as setup gathers them.
      type: str
      returned: when O(state=snapshot) and O(os_facts)
      sample: Debian
    stack_layer_snapshot:
      description:
        - Every layer's record and the recorded files whose stat changed, read at once
          (O(state=snapshot)), for the action plugin's answers; emptied by any record that changes.
      type: dict
      returned: when O(state=snapshot), or emptied when O(state=building) or O(state=present) changed a record
      contains:
        run:
          description:
            - O(run), the run that read it. The action plugin answers only that run's queries from it,
              so a snapshot kept by a fact cache never answers a later run.
          type: str
        state_dir:
          description: O(state_dir).
          type: str
        host_time:
          description: The host's clock when it was read (seconds since the epoch).
          type: float
        records:
          description: Each layer's record, by name (layers without one are left out).
          type: dict
        stale:
          description: Per layer, its recorded files whose stat differs now.
          type: dict
        offset:
          description: The host's clock minus the controller's, added by the action plugin.
          type: float
    stack_layer_<name>_started:
      description:
        - When the layer's first query of this run ran, in seconds since the epoch on the host's clock;
          the summary subtracts it from RV(ansible_facts.stack_layer_<name>.finished).
      type: float
      returned: when O(state=query)
      sample: 1796191815.84
    stack_layer_<name>:
      description: The fact, named after O(name).
      type: dict
      returned: when O(state=present), and on a query of a layer whose record is complete (as V(unchanged))
      contains:
        version:
          description: The version the layer installed (O(version)).
          type: str
          sample: 11.8.89
        outcome:
          description: V(built) the first time, V(rebuilt) when it replaced a build, V(unchanged) when nothing was built.
          type: str
          choices: [built, rebuilt, unchanged]
          sample: built
        finished:
          description: When the layer was recorded, in seconds since the epoch on the host's clock.
          type: float
          returned: when O(state=present)
          sample: 1796192909.21
  sample: {stack_layer_cuda_started: 1796191815.84, stack_layer_cuda: {version: 11.8.89, outcome: built, finished: 1796192909.21}}
from_snapshot:
  description:
    - V(true) when the action plugin answered the query from the stage's snapshot, on the controller
      (the answer is then always RV(reason=unchanged)); absent when the host answered.
  type: bool
  returned: when the answer came from the snapshot
  sample: true
rebuild:
  description:
    - The layer must be built whatever the host looks like (incomplete, requested, inputs or a
      required layer changed). RV(build) without this (reason V(absent)) lets the layer adopt what it
      finds on the host.
  type: bool
  returned: always
probe:
  description:
    - The layer must look at the host (its probe and full check) when there is no record yet, its recorded files
      changed, or the user asked with O(verify). V(false) on a clean rerun, where the layer has nothing
      to do.
  type: bool
  returned: always
changed_files:
  description: The recorded files whose size, mtime or type changed, or that are gone.
  type: list
  elements: str
  returned: always
required:
  description: The records of the layers named in O(requires), by name.
  type: dict
  returned: always
  contains:
    <layer>:
      description: One required layer's record.
      type: dict
      contains:
        version:
          description: The version that layer installed.
          type: str
        details:
          description: The extra facts that layer recorded (a prefix, the host compiler, a model's config).
          type: dict
        fingerprint:
          description: That layer's fingerprint.
          type: str
        built_at:
          description: When that layer was built (UTC, ISO 8601).
          type: str
  sample: {cuda: {version: 11.8.89, details: {host_compiler: /usr/bin/g++-11}, fingerprint: 77a873e85013aaa0, built_at: "2026-12-01T10:00:00Z"}}
"""

import datetime
import hashlib
import json
import os
import stat
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.sys_info import get_distribution, get_distribution_codename, get_distribution_version
from ansible.module_utils.stack_files import atomic_write
from ansible.module_utils.stack_layer import decide, outcome, parse_rebuild, query_facts, required_view, verdict
from ansible.module_utils.stack_lock import read_lock

STATE_FORMAT = 1


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


def lock_refusal(lock_file: str, run: str) -> str | None:
    """Why this run may not touch a layer under the host lock `lock_file`, or None when the lock names `run`."""
    holder = read_lock(lock_file)
    if holder is None:
        held = "nobody holds it"
    elif holder.get("unreadable"):
        held = "it names no run" if holder["error"].startswith("JSON") else "it cannot be read: %s" % holder["error"]
    elif run and holder["id"] == run:
        return None
    else:
        held = "run %s holds it" % holder["id"]
    return (
        "this run (%s) does not hold the host's run lock %s (%s), so it changes no layer. Either the lock tasks "
        "were skipped (--skip-tags always, --start-at-task: pick layers with --tags <layer> instead; the lock "
        "tasks are tagged always and run with any --tags), or another run took the lock over from this one "
        "(-e break_lock): let that run finish, then rerun." % (run or "no run id", lock_file, held)
    )


def state_text(data: dict[str, Any]) -> str:
    """The state file's content; also what the diff shows, so a diff is the file's own change."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_state(path: str, data: dict[str, Any]) -> None:
    # Fsynced and renamed into place: a crash leaves the old record or the new one, never half of one.
    atomic_write(path, state_text(data), 0o644)


def state_diff(path: str, before: dict[str, Any], after: dict[str, Any]) -> dict[str, str]:
    return dict(before=state_text(before), after=state_text(after), before_header=path, after_header=path)


def required_records(state_dir: str, requires: list[str]) -> dict[str, dict[str, Any]]:
    return {name: read_state(os.path.join(state_dir, name + ".json")) for name in requires}


def missing_requirements(records: dict[str, dict[str, Any]]) -> list[str]:
    """The required layers that have no complete record on the host."""
    return [name for name, record in records.items() if record.get("status") != "complete"]


def file_facts(paths: list[str]) -> dict[str, list[Any]]:
    """What a cheap stat says of each path: [kind, size, mtime_ns], or None when it is gone.

    A symlink is stat'ed itself, not followed: pointing it elsewhere (a new link) counts as a
    change, and what a link points at is never read on its say-so."""
    facts: dict[str, list[Any]] = {}
    for path in paths:
        try:
            info = os.lstat(path)
        except OSError:
            facts[path] = None  # type: ignore[assignment]
            continue
        kind = "dir" if stat.S_ISDIR(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "file"
        # A directory's size and mtime change with its entries only; its own content is not hashed.
        facts[path] = [kind, info.st_size, info.st_mtime_ns]
    return facts


def changed_files(recorded: dict[str, Any], paths: list[str]) -> list[str]:
    """Recorded files whose stat differs now, and paths asked for that were never recorded."""
    now = file_facts(paths)
    return sorted(path for path in paths if path not in recorded or recorded[path] != now[path])


def snapshot(state_dir: str, layers: list[str], run: str) -> dict[str, Any]:
    """Every layer's record and, for a complete one, its recorded files whose stat changed."""
    records: dict[str, Any] = {}
    stale: dict[str, list[str]] = {}
    for layer in layers:
        record = read_state(os.path.join(state_dir, layer + ".json"))
        if not record:
            continue
        records[layer] = record
        recorded = record.get("files")
        if record.get("status") == "complete" and isinstance(recorded, dict):
            stale[layer] = changed_files(recorded, sorted(recorded))
    return dict(run=run, state_dir=state_dir, host_time=round(time.time(), 3), records=records, stale=stale)


def os_release() -> dict[str, Any]:
    """The OS release facts the layers read, named as the setup module names them (ansible_distribution is
    ansible_facts.distribution in a play, and the variable where facts become variables), from the functions
    its distribution collector starts from; on Debian and Ubuntu its release files name the same. Not the
    collector itself: its package imports every fact collector, which the module's payload would then carry,
    and Ansible parse, on every run."""
    version = get_distribution_version() or "NA"
    codename = get_distribution_codename()
    return {
        "ansible_distribution": get_distribution() or "NA",
        "ansible_distribution_version": version,
        "ansible_distribution_major_version": version.split(".")[0] or "NA",
        "ansible_distribution_release": "NA" if codename is None else codename,
    }


def new_fingerprint(name: str, inputs: dict[str, Any], deps: dict[str, str], when: str) -> str:
    payload = json.dumps({"name": name, "inputs": inputs, "requires": deps, "time": when}, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", default=""),
            state_dir=dict(type="path", required=True),
            state=dict(type="str", default="query", choices=["query", "building", "present", "snapshot"]),
            inputs=dict(type="dict", default={}),
            requires=dict(type="list", elements="str", default=[]),
            rebuild=dict(type="raw", default=""),
            layers=dict(type="list", elements="str", required=True),
            version=dict(type="str", default=""),
            built=dict(type="bool", default=True),
            details=dict(type="dict", default={}),
            update_details=dict(type="bool", default=False),
            run=dict(type="str", default=""),
            step=dict(type="str", default=""),
            verify=dict(type="raw", default=""),
            files=dict(type="list", elements="path", default=[]),
            lock_file=dict(type="path", default=""),
            os_facts=dict(type="bool", default=False),
        ),
        required_if=[("state", "query", ["name"]), ("state", "building", ["name"]), ("state", "present", ["name"])],
        supports_check_mode=True,
    )
    p = module.params
    # Every call of a stage holds the host lock (check mode takes none and changes nothing).
    refusal = lock_refusal(p["lock_file"], p["run"]) if p["lock_file"] and not module.check_mode else None
    if refusal:
        module.fail_json(msg="layer %s: %s" % (p["name"] or "records", refusal))
    if p["state"] == "snapshot":
        facts = os_release() if p["os_facts"] else {}
        facts["stack_layer_snapshot"] = snapshot(p["state_dir"], p["layers"], p["run"])
        module.exit_json(changed=False, ansible_facts=facts)
    name = p["name"]
    unknown = sorted({name, *p["requires"]} - set(p["layers"]))
    if unknown:
        module.fail_json(
            msg="layer_state: unknown layer(s) %s; known layers: %s" % (", ".join(unknown), ", ".join(p["layers"]))
        )
    try:
        rebuild = parse_rebuild(p["rebuild"], p["layers"])
    except ValueError as exc:
        module.fail_json(msg="%s. Example: -e rebuild=cuda,cudnn" % exc)
    raw_verify = p["verify"]
    if isinstance(raw_verify, bool) or str(raw_verify).lower() in ("true", "false", "yes", "no"):
        raw_verify = "all" if str(raw_verify).lower() in ("true", "yes") else ""
    try:
        verify = parse_rebuild(raw_verify, p["layers"])
    except ValueError as exc:
        module.fail_json(msg="%s. Example: -e verify=all" % str(exc).replace("rebuild", "verify", 1))

    path = os.path.join(p["state_dir"], name + ".json")
    previous = read_state(path)
    # Inputs pass through JSON on both sides so that the comparison sees the same types.
    inputs = json.loads(json.dumps(p["inputs"], sort_keys=True))
    records = required_records(p["state_dir"], p["requires"])
    missing = missing_requirements(records)
    # A check-mode run on a new host has recorded nothing yet: it reports the build it would do.
    if missing and p["state"] != "building" and not module.check_mode:
        module.fail_json(
            msg="the %s layer needs the %s layer(s), which this host has not completed (no complete record in %s). "
            "Build them first, for example: --tags %s"
            % (name, ", ".join(missing), p["state_dir"], ",".join([*missing, name]))
        )
    deps = {dep: str(record.get("fingerprint", "")) for dep, record in records.items()}
    build, reason = decide(previous, inputs, deps, name in rebuild)
    files = sorted(set(p["files"]))
    recorded_files = previous.get("files", {}) if isinstance(previous.get("files"), dict) else {}
    # Only the files the layer recorded, plus any it now names: a stat each, nothing run on the host.
    stale = changed_files(recorded_files, sorted(set(recorded_files) | set(files))) if not build else []
    # A record written before layers recorded their files is looked at once, then records them.
    unrecorded = not build and "files" not in previous
    must_rebuild, probe, reason = verdict(build, reason, stale, name in verify or unrecorded)
    result: dict[str, Any] = dict(
        changed=False,
        build=build,
        rebuild=must_rebuild,
        probe=probe,
        reason=reason,
        changed_files=stale,
        previous=previous,
        fingerprint=previous.get("fingerprint", ""),
        path=path,
        required=required_view(records),
    )
    if p["state"] == "query":
        result["ansible_facts"] = query_facts(name, previous, round(time.time(), 2))

    if p["state"] == "building":
        marked = dict(previous, status="building", name=name)
        if p["run"]:
            marked["run"] = p["run"]
        marked.pop("step", None)
        if p["step"]:
            marked["step"] = p["step"]
        result["changed"] = marked != previous
        if module._diff:
            result["diff"] = state_diff(path, previous, marked)
        if result["changed"] and not module.check_mode:
            write_state(path, marked)
    elif p["state"] == "present":
        other = previous.get("run") if previous.get("status") == "building" else None
        if other and p["run"] and other != p["run"]:
            module.fail_json(
                msg="layer %s was marked building by run %s, not by this run (%s): another run is working on "
                "this host. Let it finish, then rerun." % (name, other, p["run"]),
                **result,
            )
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        unchanged = not p["built"] and decide(previous, inputs, deps, False) == (False, "unchanged")
        # Nothing was built from the same inputs: the record stays as it was, details included; only
        # the stat of its files is refreshed (a file touched but found sound is not a new build).
        record = (
            dict(previous)
            if unchanged
            else {
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
        )
        if unchanged and p["update_details"]:
            record["details"] = json.loads(json.dumps(p["details"], sort_keys=True))
            record["version"] = p["version"]
        record["files"] = file_facts(files)
        result["changed"] = record != previous
        result["fingerprint"] = record["fingerprint"]
        if module._diff:
            result["diff"] = state_diff(path, previous, record)
        if result["changed"] and not module.check_mode:
            write_state(path, record)
        result["ansible_facts"] = {
            "stack_layer_" + name: dict(
                version=p["version"],
                outcome=outcome(previous, p["built"] and result["changed"]),
                finished=round(time.time(), 2),
            )
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
