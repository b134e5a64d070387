#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: the one check of every tree a layer may delete, and the only way it deletes one."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stack_tree
short_description: Validate, mark and delete the directory trees the layers of the stack own
description:
  - A layer deletes its install tree (a CUDA prefix, a cuDNN prefix, Miniforge) before it builds
    it again. This module is the one place that decides whether a path may be deleted at all and
    whether this project made the tree that is there.
  - A path is refused, whatever its spelling, when after C(realpath) it is C(/), a system
    directory (C(/usr), C(/usr/lib), C(/etc), C(/var/lib), ...), fewer than two levels deep, or a
    user's home directory or one of its ancestors.
  - A tree counts as this project's when it holds the marker file C(.verl-p40-tree) naming the
    layer, or when the layer's state record in O(state_dir) names the path among its details
    under O(record_key) and says C(adopted=false) (it installed the tree, it did not find it there).
    A record without C(adopted), from a version that did not say, does not count. Anything else at
    the path is foreign, and O(state=absent) stops with a message and leaves it as it is.
options:
  path:
    description: The tree. Must be absolute. Required unless O(trees) is given.
    type: path
  layer:
    description: The layer that owns the tree (its marker names it). Required with O(path).
    type: str
  trees:
    description:
      - Several trees checked in one call (O(state=check) only), as preflight checks every tree a
        layer may delete before the first layer runs. Each fails the task as O(path) alone would.
    type: list
    elements: dict
    suboptions:
      path:
        description: The tree, as O(path).
        type: path
        required: true
      layer:
        description: Its layer, as O(layer).
        type: str
        required: true
      var:
        description: Its variable, as O(var).
        type: str
        default: path
      record_key:
        description: Its record's key, as O(record_key).
        type: str
        default: prefix
  var:
    description: The variable the path came from, named in every message.
    type: str
    default: path
  state:
    description:
      - V(check) validates the path (and that a tree there is this project's, when
        O(require_ours=true)); changes nothing.
      - V(absent) deletes the tree when it is this project's; nothing there is fine.
      - V(present) claims the path for the layer before it builds there. It creates the directory
        when it is missing (root's, mode 0755) and writes the marker into it. A non-empty
        directory is claimed only when it lies directly inside a tree of the layer's.
    type: str
    choices: [check, absent, present]
    default: check
  require_ours:
    description: With O(state=check), also fail when a foreign tree is at the path.
    type: bool
    default: false
  state_dir:
    description: Directory of the layers' state records (C(<layer>.json)).
    type: path
    required: true
  record_key:
    description: The key of the layer record's C(details) that holds this tree's path.
    type: str
    default: prefix
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details: Deletes, creates and writes nothing; validates and refuses exactly as a normal run and reports the same C(changed).
  diff_mode:
    support: full
    details:
      - O(state=absent) shows the tree going from V(directory) (or V(file), V(link)) to V(absent).
      - O(state=present) shows the directory's state and the marker's content before and after.
  platform:
    platforms: posix
author:
  - verl-p40 maintainers
"""

EXAMPLES = r"""
- name: Remove the previous toolkit (only if this project installed it)
  stack_tree:
    path: "{{ cuda_prefix }}"
    layer: cuda
    var: cuda_prefix
    state: absent
    state_dir: "{{ stack_state_dir }}"

- name: Claim the prefix before the toolkit is installed into it
  stack_tree:
    path: "{{ cuda_prefix }}"
    layer: cuda
    var: cuda_prefix
    state: present
    state_dir: "{{ stack_state_dir }}"
"""

RETURN = r"""
trees:
  description: With O(trees), one entry per tree, in order.
  type: list
  elements: dict
  returned: when O(trees) is given
  contains:
    path:
      description: The tree's path after C(realpath).
      type: str
    var:
      description: Its variable.
      type: str
    exists:
      description: Whether something is at the path.
      type: bool
    ours:
      description: Whether the tree there is this project's.
      type: bool
  sample: [{path: /usr/local/cuda-11.8, var: cuda_prefix, exists: true, ours: true}]
path:
  description:
    - The path after C(realpath).
    - As for any module whose result names an existing file, Ansible adds that file's owner, group, mode,
      uid, gid, size and type to the result, under the keys owner, group, mode, uid, gid, size and state;
      that state key holds the file's type (V(file), V(directory)), not O(state).
  type: str
  returned: with O(path)
  sample: /usr/local/cuda-11.8
exists:
  description: Whether something was at the path before the module ran.
  type: bool
  returned: with O(path)
  sample: true
ours:
  description:
    - Whether the tree there is this project's (marker or state record); V(false) when nothing is there.
    - V(true) after O(state=present) claimed the path.
  type: bool
  returned: with O(path)
  sample: true
"""

import json
import os
import pwd
import shutil
from typing import Iterable, Optional

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.stack_files import atomic_write

MARKER = ".verl-p40-tree"

# Directories no layer may ever delete, whatever is configured. Their children are checked
# separately (depth, homes); these are the ones a mistyped variable tends to name.
SYSTEM_DIRS = frozenset(
    [
        "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt",
        "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
        "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/local",
        "/usr/sbin", "/usr/share", "/usr/src", "/usr/local/bin", "/usr/local/include", "/usr/local/lib",
        "/usr/local/sbin", "/usr/local/share", "/usr/local/src", "/var/cache", "/var/lib", "/var/log",
        "/var/opt", "/var/spool", "/var/tmp", "/var/mail", "/var/backups", "/etc/profile.d",
    ]
)  # fmt: skip


def home_dirs() -> list[str]:
    return sorted({os.path.realpath(entry.pw_dir) for entry in pwd.getpwall() if entry.pw_dir.startswith("/")})


def problem(path: str, var: str, homes: Iterable[str]) -> Optional[str]:
    """Why the tree at `path` may never be deleted, or None. `path` is already realpath'd."""
    if path in SYSTEM_DIRS or path == "/":
        return "%s resolves to %s, a system directory" % (var, path)
    parts = [p for p in path.split("/") if p]
    if len(parts) < 2:
        return "%s resolves to %s, less than two levels deep" % (var, path)
    for home in homes:
        if home in ("/", ""):
            continue
        if path == home or home.startswith(path.rstrip("/") + "/"):
            return "%s resolves to %s, a home directory or one that holds one (%s)" % (var, path, home)
    return None


def recorded_path(state_dir: str, layer: str, key: str) -> Optional[str]:
    """The path the layer's state record holds under details.<key>."""
    try:
        with open(os.path.join(state_dir, layer + ".json"), encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    details = record.get("details") or {}
    # Only a record that says the layer installed the tree (adopted: false) counts. adopted: true is a
    # tree found there and kept; a record without the key was written before layers said which, by a
    # version that adopted trees too: it cannot tell, so the tree is not deleted on its say-so.
    if details.get("adopted") is not False:
        return None
    value = details.get(key)
    return os.path.realpath(value) if isinstance(value, str) and value.startswith("/") else None


def undecided_note(state_dir: str, layer: str, path: str) -> str:
    """What to add to the foreign-tree message when the layer's record is an old one that names
    the path without saying whether the layer installed it."""
    try:
        with open(os.path.join(state_dir, layer + ".json"), encoding="utf-8") as handle:
            details = json.load(handle).get("details") or {}
    except (OSError, ValueError, AttributeError):
        return ""
    named = [value for value in details.values() if isinstance(value, str) and value.startswith("/")]
    if "adopted" in details or path not in [os.path.realpath(value) for value in named]:
        return ""
    return (
        "; its record, written by an older version, names the path but not whether the layer installed it "
        "or found it there. If this project installed it, remove the tree yourself; if it is yours, keep it "
        "and point the variable elsewhere"
    )


def is_ours(path: str, layer: str, state_dir: str, key: str = "prefix") -> bool:
    marker = os.path.join(path, MARKER)
    if os.path.isfile(marker) and not os.path.islink(marker):
        try:
            with open(marker, encoding="utf-8") as handle:
                if json.load(handle).get("layer") == layer:
                    return True
        except (OSError, ValueError):
            pass
    return path == recorded_path(state_dir, layer, key)


def marker_text(layer: str) -> str:
    return json.dumps({"layer": layer, "made_by": "verl-p40"}) + "\n"


def read_marker(path: str) -> Optional[str]:
    """The marker's content in the tree at `path`, or None when it has none (or it cannot be read)."""
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def write_marker(path: str, layer: str) -> bool:
    text = marker_text(layer)
    if read_marker(path) == text:
        return False
    return atomic_write(os.path.join(path, MARKER), text, 0o644)


def kind(path: str) -> str:
    """What is at `path`, in the words of ansible.builtin.file's diff."""
    if os.path.islink(path):
        return "link"
    if os.path.isdir(path):
        return "directory"
    return "file" if os.path.lexists(path) else "absent"


def validated(module: AnsibleModule, given: str, layer: str, var: str, homes: Iterable[str]) -> str:
    """The path after realpath, or the task fails saying why it may not be a layer's tree."""
    if not given.startswith("/"):
        module.fail_json(msg="%s '%s' must be an absolute path." % (var, given))
    path = os.path.realpath(given)
    why = problem(path, var, homes)
    if why:
        module.fail_json(
            msg="%s: the %s layer deletes and recreates this tree on a rebuild, so it must be a directory "
            "of its own, such as /usr/local/cuda-11.8 or /opt/miniforge3. Set %s to such a path." % (why, layer, var),
            path=path,
        )
    return path


def foreign_message(path: str, tree: dict, state_dir: str) -> str:
    """Why a tree at the path is not this project's, and what to do."""
    return (
        "%s (%s = %s) holds something this project did not make (no %s marker of the %s layer, no state "
        "record saying the layer installed it%s). It is left as it is. Move it away or set %s to another path, "
        "then rerun."
        % (
            path,
            tree["var"],
            tree["path"],
            MARKER,
            tree["layer"],
            undecided_note(state_dir, tree["layer"], path),
            tree["var"],
        )
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            layer=dict(type="str"),
            trees=dict(
                type="list",
                elements="dict",
                options=dict(
                    path=dict(type="path", required=True),
                    layer=dict(type="str", required=True),
                    var=dict(type="str", default="path"),
                    record_key=dict(type="str", default="prefix", no_log=False),
                ),
            ),
            var=dict(type="str", default="path"),
            state=dict(type="str", choices=["check", "absent", "present"], default="check"),
            require_ours=dict(type="bool", default=False),
            state_dir=dict(type="path", required=True),
            # A key of a JSON record, not a secret (validate-modules asks because of "key").
            record_key=dict(type="str", default="prefix", no_log=False),
        ),
        mutually_exclusive=[("trees", "path")],
        required_one_of=[("trees", "path")],
        required_together=[("path", "layer")],
        supports_check_mode=True,
    )
    p = module.params
    homes = home_dirs()
    if p["trees"] is not None:
        if p["state"] != "check":
            module.fail_json(msg="stack_tree: trees is for state=check only; delete or claim one path at a time")
        checked = []
        for tree in p["trees"]:
            path = validated(module, tree["path"], tree["layer"], tree["var"], homes)
            exists = os.path.lexists(path)
            ours = exists and is_ours(path, tree["layer"], p["state_dir"], tree["record_key"])
            checked.append(dict(path=path, var=tree["var"], exists=exists, ours=ours))
            if exists and not ours and p["require_ours"]:
                module.fail_json(msg=foreign_message(path, tree, p["state_dir"]), trees=checked)
        module.exit_json(changed=False, trees=checked)
    path = validated(module, p["path"], p["layer"], p["var"], homes)
    exists = os.path.lexists(path)
    ours = exists and is_ours(path, p["layer"], p["state_dir"], p["record_key"])
    result = dict(changed=False, path=path, exists=exists, ours=ours)
    foreign = foreign_message(path, p, p["state_dir"])
    if p["state"] == "check":
        if exists and not ours and p["require_ours"]:
            module.fail_json(msg=foreign, **result)
    elif p["state"] == "absent":
        if exists:
            if not ours:
                module.fail_json(msg=foreign, **result)
            result["changed"] = True
            if module._diff:
                result["diff"] = dict(before=dict(path=path, state=kind(path)), after=dict(path=path, state="absent"))
            if not module.check_mode:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
    else:
        if exists and not os.path.isdir(path):
            module.fail_json(msg="%s is there but is not a directory. %s" % (path, foreign), **result)
        # A tree inside one this project made (unpacked into its staging area) is this project's.
        inside_ours = is_ours(os.path.dirname(path), p["layer"], p["state_dir"], p["record_key"])
        if exists and not ours and not inside_ours and os.listdir(path):
            module.fail_json(msg=foreign, **result)
        before = dict(path=path, state=kind(path), marker=read_marker(path) or "")
        after = dict(path=path, state="directory", marker=marker_text(p["layer"]))
        if module.check_mode:
            # The same comparison write_marker makes, so check mode predicts the real run exactly.
            result["changed"] = before != after
        else:
            if not exists:
                os.makedirs(path, 0o755)
            result["changed"] = write_marker(path, p["layer"])
        if module._diff:
            result["diff"] = dict(before=before, after=after)
        result["ours"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
