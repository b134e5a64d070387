#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: point symbolic links at files, many in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stack_links
short_description: Make each of many paths a symbolic link to its file, in one call
description:
  - For each item of O(links), makes O(links[].dest) a symbolic link whose target is O(links[].src),
    as M(ansible.builtin.file) with C(state=link) and
    C(force=true) does for one path, but in one call for all of them (the
    cudnn layer links each of its headers and libraries into the CUDA tree, one call instead of one
    per file).
  - A link that already points at its O(links[].src) is left as it is. Any other link, or a file, at
    O(links[].dest) is replaced atomically by a new link (made beside it, then renamed over it); the
    old path is never followed, so a link at O(links[].dest) that points into another directory is
    replaced itself, and nothing is written where it points.
  - A directory at O(links[].dest), or a O(links[].dest) whose directory does not exist, fails the
    call before any link is changed, naming the path.
options:
  links:
    description: The links to make.
    type: list
    elements: dict
    required: true
    suboptions:
      src:
        description: The link's target, written into the link as given (an absolute path; it need not exist).
        type: str
        required: true
      dest:
        description: The absolute path that becomes the link.
        type: str
        required: true
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports which links would change and writes nothing.
  diff_mode:
    support: full
    details: Shows each changed path's target before and after, one line per path.
  platform:
    platforms: posix
author:
  - verl-p40 maintainers
"""

EXAMPLES = r"""
- name: Link the cuDNN headers into the CUDA tree
  stack_links:
    links:
      - {src: /usr/local/cudnn-8.9.7/include/cudnn.h, dest: /usr/local/cuda-11.8/include/cudnn.h}
      - {src: /usr/local/cudnn-8.9.7/lib/libcudnn.so.8, dest: /usr/local/cuda-11.8/lib64/libcudnn.so.8}
"""

RETURN = r"""
changed_links:
  description: The O(links[].dest) paths this call made or replaced (or would, in check mode), in the order given.
  type: list
  elements: str
  returned: always
  sample: [/usr/local/cuda-11.8/include/cudnn.h]
"""

import os
from typing import Any, Optional

from ansible.module_utils.basic import AnsibleModule


def current(dest: str) -> Optional[str]:
    """What is at dest now, as the diff shows it: the link's target, '(a file)', or None for nothing."""
    try:
        return os.readlink(dest)
    except FileNotFoundError:
        return None
    except OSError:
        return "(a file)" if os.path.lexists(dest) else None


def problem(dest: str) -> Optional[str]:
    """Why dest cannot become a link, or None."""
    if not os.path.isabs(dest):
        return "%s is not an absolute path" % dest
    if not os.path.islink(dest) and os.path.isdir(dest):
        return "%s is a directory, not a link or a file: remove it or choose another dest" % dest
    if not os.path.isdir(os.path.dirname(dest)):
        return "the directory of %s does not exist" % dest
    return None


def replace(src: str, dest: str) -> None:
    """dest becomes a link to src: a new link beside it, renamed over it (rename never follows dest)."""
    temporary = "%s.stack-links-%d" % (dest, os.getpid())
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(src, temporary)
    try:
        os.replace(temporary, dest)
    except OSError:
        os.unlink(temporary)
        raise


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            links=dict(
                type="list",
                elements="dict",
                required=True,
                options=dict(src=dict(type="str", required=True), dest=dict(type="str", required=True)),
            )
        ),
        supports_check_mode=True,
    )
    links: list[dict[str, Any]] = module.params["links"]
    problems = [found for found in (problem(link["dest"]) for link in links) if found]
    if problems:
        module.fail_json(msg="stack_links changed nothing: %s." % "; ".join(problems))
    changes = [(link["src"], link["dest"], current(link["dest"])) for link in links]
    changes = [(src, dest, before) for src, dest, before in changes if before != src]
    result: dict[str, Any] = dict(changed=bool(changes), changed_links=[dest for _, dest, _ in changes])
    if module._diff:
        result["diff"] = dict(
            before="".join("%s -> %s\n" % (dest, before or "(nothing)") for _, dest, before in changes),
            after="".join("%s -> %s\n" % (dest, src) for src, dest, _ in changes),
        )
    if not module.check_mode:
        for src, dest, _ in changes:
            try:
                replace(src, dest)
            except OSError as exc:
                module.fail_json(msg="stack_links could not link %s to %s: %s" % (dest, src, exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
