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
  - A tree counts as this project's when root's claim record of the layer,
    C(<state_dir>/trees/<layer>.json), names it by the path as spelled, the path after C(realpath), and
    the device and inode of the directory, all three as they were when O(state=present) claimed it.
    A link swapped in for the path, or another directory put in its place, no longer matches.
  - Trees built by earlier versions, which have no claim, count when the layer's state record names
    the path under O(record_key) and says C(adopted=false), or when they hold the old marker file
    C(.verl-p40-tree) naming the layer; either only where nobody but root can write the tree or any
    directory above it. Nothing inside a tree another user can write is ever trusted, and the
    module writes nothing into a tree. A record without C(adopted) does not count. Anything else at
    the path is foreign, and O(state=absent) stops with a message and leaves it as it is.
  - Root opens every path one component at a time without following links (after C(realpath)), so a
    link swapped in after the check fails the call instead of redirecting it. A tree whose parent
    directory belongs to another user (a prefix in the training user's home) is deleted with that
    user's rights only; a parent that is writable by others is refused.
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
        when it is missing (mode 0755, owned by O(owner) or root) and records the claim in
        O(state_dir). A non-empty directory is claimed only when it lies directly inside a tree of
        the layer's. With O(src), the claimed tree at O(src) is renamed to the path, its claim with it.
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
  owner:
    description:
      - With O(state=present), the user who owns the directory the module creates (the training
        user's Miniforge prefix). Set through the directory's descriptor. Root when empty.
    type: str
    default: ""
  private:
    description:
      - With O(state=present), the tree is root's scratch space (the CUDA installer's), so every directory
        above it must be root's and writable by nobody else (missing ones are made, 0755, one at a
        time in the directory above, never followed through a link), and the tree is made mode 0700.
    type: bool
    default: false
  src:
    description:
      - With O(state=present), a tree of the layer's (claimed) to move to O(path), which must not
        exist. The rename happens in the open parent directories, and the claim moves with the tree.
    type: path
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
      - O(state=present) shows the directory's state and its claim before and after.
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
    - Whether the tree there is this project's (claim, or an earlier version's record or marker); V(false) when nothing is there.
    - V(true) after O(state=present) claimed the path.
  type: bool
  returned: with O(path)
  sample: true
"""

import contextlib
import json
import os
import pwd
import stat
from typing import Any, Iterable, Optional

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.stack_files import (
    DIR_FLAGS,
    UnsafePath,
    atomic_write,
    open_dir,
    opened_dir,
    rights_of,
    writable_by_others,
)

# The marker file of earlier versions, inside the tree itself. Read only where root alone can write
# the tree (is_ours); never written any more.
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


def normalised(path: str) -> str:
    """`path` without a trailing '/', '//' or '/./' (the spelling a claim records)."""
    return "/" + "/".join(part for part in path.split("/") if part not in ("", "."))


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


class Tree:
    """What is at a path: as spelled (normalised), after realpath, and the directory's identity as
    read through a descriptor opened without following links (None when nothing is there, or not
    a directory)."""

    def __init__(self, given: str) -> None:
        self.path = normalised(given)
        self.resolved = os.path.realpath(self.path)
        self.exists = os.path.lexists(self.path)
        self.stat: Optional[os.stat_result] = None
        if self.exists:
            with contextlib.suppress(OSError, UnsafePath):
                fd = open_dir(self.resolved)
                self.stat = os.fstat(fd)
                os.close(fd)

    @property
    def identity(self) -> Optional[list[int]]:
        return [self.stat.st_dev, self.stat.st_ino] if self.stat else None


def claims_path(state_dir: str, layer: str) -> str:
    return os.path.join(state_dir, "trees", layer + ".json")


def read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def read_claims(state_dir: str, layer: str) -> list[dict[str, Any]]:
    data = read_json(claims_path(state_dir, layer))
    claims = data.get("trees") if isinstance(data, dict) else None
    return [claim for claim in claims or [] if isinstance(claim, dict)]


def write_claims(state_dir: str, layer: str, claims: list[dict[str, Any]]) -> None:
    data = {"layer": layer, "made_by": "verl-p40", "trees": sorted(claims, key=lambda claim: claim["path"])}
    atomic_write(claims_path(state_dir, layer), json.dumps(data, indent=2, sort_keys=True) + "\n", 0o644)


def claim_of(tree: Tree) -> dict[str, Any]:
    return {"path": tree.path, "resolved": tree.resolved, "id": tree.identity}


def root_only(path: str) -> bool:
    """Whether nobody but root can write the directory `path` or any directory above it."""
    try:
        os.close(open_dir(path, root_only=True))
    except (OSError, UnsafePath):
        return False
    return True


def legacy_record(state_dir: str, layer: str, key: str) -> Optional[str]:
    """The path an earlier version's state record names under details.<key>, when that record says
    the layer installed the tree (adopted: false)."""
    record = read_json(os.path.join(state_dir, layer + ".json"))
    details = (record.get("details") if isinstance(record, dict) else None) or {}
    # adopted: true is a tree found there and kept; a record without the key was written before layers
    # said which, by a version that adopted trees too: it cannot tell, so the tree is not deleted on its say-so.
    if details.get("adopted") is not False:
        return None
    value = details.get(key)
    return normalised(value) if isinstance(value, str) and value.startswith("/") else None


def legacy_marker(tree: Tree, layer: str) -> bool:
    """An earlier version's marker in a tree only root can write (the marker root's own file)."""
    if not root_only(tree.resolved):
        return False
    try:
        with opened_dir(tree.resolved) as tree_fd:
            fd = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=tree_fd)
            with os.fdopen(fd, "rb") as handle:
                st = os.fstat(handle.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_uid != 0:
                    return False
                return json.loads(handle.read(4096).decode("utf-8")).get("layer") == layer
    except (OSError, ValueError, AttributeError, UnsafePath):
        return False


def is_ours(tree: Tree, layer: str, state_dir: str, key: str = "prefix") -> bool:
    if tree.stat is None and not tree.exists:
        return False
    for claim in read_claims(state_dir, layer):
        if [claim.get("path"), claim.get("resolved"), claim.get("id")] == [tree.path, tree.resolved, tree.identity]:
            return tree.identity is not None
    # Trees of earlier versions, which wrote no claim: only where nobody else can swap anything.
    if not root_only(os.path.dirname(tree.resolved)):
        return False
    recorded = legacy_record(state_dir, layer, key)
    if recorded is not None and tree.path == recorded and os.path.realpath(recorded) == tree.resolved:
        return True
    return tree.stat is not None and legacy_marker(tree, layer)


def undecided_note(state_dir: str, layer: str, path: str) -> str:
    """What to add to the foreign-tree message when the layer's record is an old one that names
    the path without saying whether the layer installed it."""
    record = read_json(os.path.join(state_dir, layer + ".json"))
    details = (record.get("details") if isinstance(record, dict) else None) or {}
    named = [normalised(value) for value in details.values() if isinstance(value, str) and value.startswith("/")]
    if "adopted" in details or path not in named:
        return ""
    return (
        "; its record, written by an older version, names the path but not whether the layer installed it "
        "or found it there. If this project installed it, remove the tree yourself; if it is yours, keep it "
        "and point the variable elsewhere"
    )


def kind(path: str) -> str:
    """What is at `path`, in the words of ansible.builtin.file's diff."""
    if os.path.islink(path):
        return "link"
    if os.path.isdir(path):
        return "directory"
    return "file" if os.path.lexists(path) else "absent"


def validated(module: AnsibleModule, given: str, layer: str, var: str, homes: Iterable[str]) -> Tree:
    """The tree at the path, or the task fails saying why it may not be a layer's tree."""
    if not given.startswith("/"):
        module.fail_json(msg="%s '%s' must be an absolute path." % (var, given))
    tree = Tree(given)
    why = problem(tree.resolved, var, homes)
    if why:
        module.fail_json(
            msg="%s: the %s layer deletes and recreates this tree on a rebuild, so it must be a directory "
            "of its own, such as /usr/local/cuda-11.8 or /opt/miniforge3. Set %s to such a path." % (why, layer, var),
            path=tree.resolved,
        )
    return tree


def foreign_message(tree: Tree, spec: dict, state_dir: str) -> str:
    """Why a tree at the path is not this project's, and what to do."""
    return (
        "%s (%s = %s) holds something this project did not make (no claim of the %s layer in %s matches it, "
        "no state record saying the layer installed it%s). It is left as it is. Move it away or set %s to another "
        "path, then rerun."
        % (
            tree.resolved,
            spec["var"],
            spec["path"],
            spec["layer"],
            os.path.join(state_dir, "trees"),
            undecided_note(state_dir, spec["layer"], tree.path),
            spec["var"],
        )
    )


def remove_tree(dir_fd: int) -> None:
    """Empty the directory open at `dir_fd`, entry by entry through descriptors: a link inside is
    removed, never followed, and a directory swapped for a link mid-way fails to open as one."""
    with os.scandir(dir_fd) as entries:
        names = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    for name, is_dir in names:
        if is_dir:
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                os.unlink(name, dir_fd=dir_fd)
                continue
            try:
                remove_tree(child)
            finally:
                os.close(child)
            os.rmdir(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)


def delete(tree: Tree) -> None:
    """Delete the tree whose identity was checked: its parent opened without links, the tree opened
    in it without following one and compared with the identity, then emptied and removed there."""
    parent, name = os.path.split(tree.resolved)
    parent_fd = open_dir(parent)
    try:
        parent_stat = os.fstat(parent_fd)
        if parent_stat.st_uid == 0 and writable_by_others(parent_stat, final=True):
            raise UnsafePath("%s is writable by users other than root" % parent)
        user = parent_stat.st_uid
        if tree.stat is None:
            # Not a directory (an earlier version's record of a file): unlinked in its parent.
            with rights_of(user, parent_stat.st_gid):
                os.unlink(name, dir_fd=parent_fd)
            return
        if user != 0:
            # The parent is another user's: they could swap the tree under root, so root deletes only
            # what that user could delete, with that user's rights, in a child process.
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.setgroups([parent_stat.st_gid])
                    os.setgid(parent_stat.st_gid)
                    os.setuid(user)
                    _delete_at(parent_fd, name, tree)
                    code = 0
                except BaseException:  # the parent reports the failure
                    code = 1
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise UnsafePath(
                    "%s could not be deleted with the rights of uid %d, who owns %s" % (tree.resolved, user, parent)
                )
            return
        _delete_at(parent_fd, name, tree)
    finally:
        os.close(parent_fd)


def _delete_at(parent_fd: int, name: str, tree: Tree) -> None:
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        st = os.fstat(fd)
        if [st.st_dev, st.st_ino] != tree.identity:
            raise UnsafePath("%s changed since it was checked" % tree.resolved)
        remove_tree(fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def state_present(module: AnsibleModule, tree: Tree, p: dict, result: dict, foreign: str) -> None:
    layer, state_dir = p["layer"], p["state_dir"]
    claims = read_claims(state_dir, layer)
    if p["src"]:
        src = Tree(p["src"])
        if not is_ours(src, layer, state_dir, p["record_key"]):
            module.fail_json(
                msg="%s is not a tree of the %s layer's, so it is not moved." % (src.path, layer), **result
            )
        if tree.exists:
            module.fail_json(msg="%s is there already; %s is not moved onto it." % (tree.path, src.path), **result)
        result.update(changed=True, ours=True)
        if module._diff:
            result["diff"] = dict(
                before=dict(path=tree.path, state="absent", claim=None),
                after=dict(path=tree.path, state="directory", claim=dict(claim_of(src), path=tree.path)),
            )
        if not module.check_mode:
            moved = dict(
                claim_of(src),
                path=tree.path,
                resolved=os.path.join(os.path.realpath(os.path.dirname(tree.path)), os.path.basename(tree.path)),
            )
            # The new claim first: killed before the rename, it names a path where nothing is.
            write_claims(state_dir, layer, [c for c in claims if c["path"] != tree.path] + [moved])
            src_parent, src_name = os.path.split(src.resolved)
            # Two statements, not one parenthesised with: the hosts' Python may be 3.9.
            with opened_dir(src_parent) as sfd:
                with opened_dir(os.path.dirname(moved["resolved"])) as dfd:
                    if os.stat(src_name, dir_fd=sfd, follow_symlinks=False).st_ino != src.stat.st_ino:
                        raise UnsafePath("%s changed since it was checked" % src.path)
                    os.rename(src_name, os.path.basename(tree.path), src_dir_fd=sfd, dst_dir_fd=dfd)
            write_claims(state_dir, layer, [c for c in read_claims(state_dir, layer) if c["path"] != src.path])
        return
    if tree.exists and tree.stat is None:
        module.fail_json(msg="%s is there but is not a directory. %s" % (tree.path, foreign), **result)
    ours = tree.exists and is_ours(tree, layer, state_dir, p["record_key"])
    if tree.exists and not ours:
        # A tree inside one this project made (unpacked into its staging area) is this project's.
        inside_ours = is_ours(Tree(os.path.dirname(tree.resolved)), layer, state_dir, p["record_key"])
        if not inside_ours and os.listdir(tree.resolved):
            module.fail_json(msg=foreign, **result)
    owner = pwd.getpwnam(p["owner"]) if p["owner"] else None
    mode = 0o700 if p["private"] else 0o755
    if p["private"]:
        try:
            parent = os.path.dirname(tree.path)
            if tree.resolved != tree.path:
                raise UnsafePath("it is reached through a link (it resolves to %s)" % tree.resolved)
            if module.check_mode:
                # Check mode makes no directory: one that is there already is judged as a real run would.
                if os.path.isdir(parent) and not root_only(parent):
                    raise UnsafePath("a directory above it is another user's, a link, or writable by others")
            else:
                os.close(open_dir(parent, create_mode=0o755, root_only=True))
        except (OSError, UnsafePath) as exc:
            module.fail_json(
                msg="%s (%s): %s. Root works in this directory, so it must lie under directories only root can "
                "write (the default is under stack_cache_dir). Remove what is there, or set %s under such a "
                "directory." % (tree.path, p["var"], exc, p["var"]),
                **result,
            )
        tree = Tree(tree.path)
    mine = [c for c in claims if c["path"] == tree.path]
    before = dict(path=tree.path, state=kind(tree.path), claim=mine[0] if mine else None)
    changed = not ours or not mine or mine[0] != claim_of(tree)
    if owner and tree.stat and (tree.stat.st_uid, tree.stat.st_gid) != (owner.pw_uid, owner.pw_gid):
        changed = True
    if p["private"] and tree.stat and (stat.S_IMODE(tree.stat.st_mode) != mode or tree.stat.st_uid != 0):
        changed = True
    result.update(changed=changed, ours=True)
    if not module.check_mode and changed:
        parent, name = os.path.split(tree.resolved)
        # Missing directories above it are made (root's, 0755) one at a time, never through a link.
        with opened_dir(parent, create_mode=0o755) as pfd:
            if not tree.exists:
                os.mkdir(name, mode, dir_fd=pfd)
            fd = os.open(name, DIR_FLAGS, dir_fd=pfd)
            try:
                st = os.fstat(fd)
                if tree.stat is not None and [st.st_dev, st.st_ino] != tree.identity:
                    raise UnsafePath("%s changed since it was checked" % tree.resolved)
                if owner:
                    os.fchown(fd, owner.pw_uid, owner.pw_gid)
                if p["private"]:
                    os.fchown(fd, 0, 0)
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
        tree = Tree(tree.path)
        write_claims(state_dir, layer, [c for c in claims if c["path"] != tree.path] + [claim_of(tree)])
    if module._diff:
        after = dict(path=tree.path, state="directory", claim=claim_of(tree) if tree.stat else dict(path=tree.path))
        result["diff"] = dict(before=before, after=after)


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
            owner=dict(type="str", default=""),
            src=dict(type="path"),
            private=dict(type="bool", default=False),
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
        for spec in p["trees"]:
            tree = validated(module, spec["path"], spec["layer"], spec["var"], homes)
            ours = tree.exists and is_ours(tree, spec["layer"], p["state_dir"], spec["record_key"])
            checked.append(dict(path=tree.resolved, var=spec["var"], exists=tree.exists, ours=ours))
            if tree.exists and not ours and p["require_ours"]:
                module.fail_json(msg=foreign_message(tree, spec, p["state_dir"]), trees=checked)
        module.exit_json(changed=False, trees=checked)
    tree = validated(module, p["path"], p["layer"], p["var"], homes)
    ours = tree.exists and is_ours(tree, p["layer"], p["state_dir"], p["record_key"])
    result = dict(changed=False, path=tree.resolved, exists=tree.exists, ours=ours)
    foreign = foreign_message(tree, p, p["state_dir"])
    try:
        if p["state"] == "check":
            if tree.exists and not ours and p["require_ours"]:
                module.fail_json(msg=foreign, **result)
        elif p["state"] == "absent":
            if tree.exists:
                if not ours:
                    module.fail_json(msg=foreign, **result)
                result["changed"] = True
                if module._diff:
                    result["diff"] = dict(
                        before=dict(path=tree.path, state=kind(tree.path)), after=dict(path=tree.path, state="absent")
                    )
                if not module.check_mode:
                    delete(tree)
                    claims = read_claims(p["state_dir"], p["layer"])
                    if any(claim["path"] == tree.path for claim in claims):
                        write_claims(p["state_dir"], p["layer"], [c for c in claims if c["path"] != tree.path])
        else:
            state_present(module, tree, p, result, foreign)
    except (OSError, UnsafePath) as exc:
        module.fail_json(
            msg="%s (%s = %s): %s. Nothing more was changed. Make sure no other user can write the path or a "
            "directory above it, then rerun." % (tree.resolved, p["var"], p["path"], exc),
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
