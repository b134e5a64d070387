#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: take a built file out of another user's tree into root's cache, and its sha256."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stack_take
short_description: Copy a file another user built into a root-only directory, with its sha256 beside it
description:
  - The Apex wheel is built by the training user in that user's tree, and cached by root. Checking
    the file, then copying it by path, lets the user swap a link in between; this module does it in
    one step through one descriptor.
  - O(src) is opened with the rights of O(user) only (its effective ids and groups, for the open),
    never through a link at its last component, and without blocking on a FIFO. It must be a
    regular file, as the descriptor says. Nothing the user cannot read can be taken.
  - Its bytes are copied from that descriptor into O(dest), a directory nobody but root can write
    (every directory above it too; it is made, mode 0755, when missing), and hashed as they are
    copied, so the sha256 is that of the bytes written.
  - The pair is written so that a kill leaves nothing a later run trusts. The file comes first, under a
    C(.partial) name, then C(<name><sum_suffix>) with its sha256, then the file is renamed to its name.
    A name without its sum, or a sum without its file, never appears.
options:
  src:
    description: The file to take, in the other user's tree. Absolute.
    type: path
    required: true
  user:
    description: The user with whose rights O(src) is opened (the one who built it).
    type: str
    required: true
  dest:
    description: The root-only directory to write into.
    type: path
    required: true
  name:
    description: The file's name in O(dest); the basename of O(src) when empty.
    type: str
    default: ""
  sum_suffix:
    description: The suffix of the sha256 file written beside it (C(sha256sum)'s format).
    type: str
    default: .sha256
  mode:
    description: The mode of both files.
    type: raw
    default: "0644"
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details: Opens, reads and writes nothing; reports the copy it would make as a change.
  diff_mode:
    support: none
    details: The file is binary; RV(sha256) and RV(bytes) say what was written.
  platform:
    platforms: posix
author:
  - verl-p40 maintainers
"""

EXAMPLES = r"""
- name: Put the built wheel into the cache
  stack_take:
    src: /home/verl/verl-p40/apex.dist/apex-0.1-cp310-cp310-linux_x86_64.whl
    user: verl
    dest: /var/cache/verl-p40/apex-wheels/0123abcd
"""

RETURN = r"""
path:
  description: The file written, in O(dest).
  type: str
  returned: always
  sample: /var/cache/verl-p40/apex-wheels/0123abcd/apex-0.1-cp310-cp310-linux_x86_64.whl
sha256:
  description: The sha256 of the bytes written (empty in check mode).
  type: str
  returned: always
  sample: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
bytes:
  description: How many bytes were written (0 in check mode).
  type: int
  returned: always
  sample: 1048576
"""

import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.stack_files import UnsafePath, opened_dir, take_as, write_at


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            user=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            name=dict(type="str", default=""),
            sum_suffix=dict(type="str", default=".sha256"),
            mode=dict(type="raw", default="0644"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    name = p["name"] or os.path.basename(p["src"])
    # A number is a mode YAML has read already (an unquoted 0644 is 420); text is octal.
    mode = p["mode"] if isinstance(p["mode"], int) else int(str(p["mode"]), 8)
    result = dict(changed=True, path=os.path.join(p["dest"], name), sha256="", bytes=0)
    if "/" in name or name in ("", ".", ".."):
        module.fail_json(msg="stack_take: name '%s' is not a file name" % name, **result)
    try:
        user = pwd.getpwnam(p["user"])
    except KeyError:
        module.fail_json(msg="stack_take: no user %s" % p["user"], **result)
    if module.check_mode:
        module.exit_json(**result)
    try:
        partial = name + ".partial"
        digest, size = take_as(p["src"], user.pw_uid, user.pw_gid, p["dest"], partial, mode)
        with opened_dir(p["dest"], root_only=os.geteuid() == 0) as dfd:
            write_at(dfd, name + p["sum_suffix"], ("%s  %s\n" % (digest, name)).encode(), mode)
            os.replace(partial, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            os.fsync(dfd)
    except (OSError, UnsafePath) as exc:
        module.fail_json(
            msg="%s was not taken into %s: %s. Nothing was cached. Remove what is at that path and build again."
            % (p["src"], p["dest"], exc),
            **result,
        )
    module.exit_json(**dict(result, sha256=digest, bytes=size))


if __name__ == "__main__":
    main()
