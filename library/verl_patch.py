#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Apply or revert the P40 source fixes of module_utils/verl_fixes.py on a verl checkout."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: verl_patch
short_description: Patch a verl checkout for Pascal GPUs, precisely and reversibly
description:
  - Applies source fixes that verl needs on NVIDIA Pascal GPUs (Tesla P40, compute
    capability 6.1) and that no Hydra override can reach. The fixes are data, kept
    per verl version in C(module_utils/verl_fixes.py); each names a file, an exact
    anchor text and its replacement.
  - All or nothing. Every anchor of every selected fix must match exactly once in
    the pristine file before anything is written; otherwise nothing is written and
    the module fails naming each fix and file that did not match.
  - A verl version without a catalog entry is refused and left untouched.
  - The original of every touched file and a record of each change are kept in
    C(<path>/.verl_p40_patch/), so O(state=absent) restores the files byte for byte,
    and a later run with a different O(fixes) set brings the tree to exactly that set.
  - Refuses to overwrite a touched file that changed since this module wrote it.
options:
  path:
    description:
      - Root of the verl checkout, the directory that holds C(verl/version/version)
        (a git clone of the release tag, an unpacked sdist, or a site-packages
        directory for a non-editable install).
    type: path
    required: true
  state:
    description:
      - V(present) brings the tree to exactly the fixes in O(fixes).
      - V(absent) restores every file this module touched and removes C(.verl_p40_patch/).
    type: str
    choices: [present, absent]
    default: present
  fixes:
    description:
      - Names of the fixes to apply, from the catalog entry of the verl version found.
      - Fixes applied before and not listed here are reverted.
      - Omitted means every fix of that version. An empty list is refused; use O(state=absent).
    type: list
    elements: str
  attn_implementation:
    description:
      - Attention implementation the critic is loaded with by the C(critic_eager_attention)
        fix, in place of the hard-coded C(flash_attention_2).
      - V(eager) is what has been seen to work on a P40; V(sdpa) uses PyTorch's
        scaled-dot-product attention, which on Pascal falls back to its math kernel.
    type: str
    choices: [eager, sdpa]
    default: eager
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details: Plans the whole run, refusals included, and returns what it would apply and change; writes nothing.
  diff_mode:
    support: full
    details: One diff per verl file that changes, its whole text before and after. The record under C(.verl_p40_patch/) is not shown.
  platform:
    platforms: posix
notes:
  - Files are replaced atomically (temporary file in the same directory, then rename)
    and keep their permission bits; when run as root they also keep their owner.
  - The record lives in C(<path>/.verl_p40_patch/record.json), with the originals
    under C(originals/); that directory carries its own C(.gitignore).
author:
  - verl-p40 project
"""

EXAMPLES = r"""
- name: Patch the verl checkout for the P40.
  verl_patch:
    path: /opt/verl

- name: Patch only what the HF rollout needs, loading the critic with sdpa.
  verl_patch:
    path: /opt/verl
    fixes: [critic_eager_attention, no_bf16_autocast, optional_flash_attn, hf_rollout_timing]
    attn_implementation: sdpa

- name: Put the checkout back as it was.
  verl_patch:
    path: /opt/verl
    state: absent
"""

RETURN = r"""
verl_version:
  description: The verl version read from C(verl/version/version).
  returned: always
  type: str
  sample: 0.4.1
fixes:
  description: Names of the fixes in effect after the run (in check mode, that would be).
  returned: always
  type: list
  elements: str
  sample: [critic_eager_attention, no_bf16_autocast]
applied:
  description:
    - One entry per edit in effect after the run. O(state=absent) returns an empty list.
  returned: always
  type: list
  elements: dict
  contains:
    fix:
      description: The fix the edit belongs to.
      type: str
      sample: hf_rollout_timing
    file:
      description: The edited file, relative to O(path).
      type: str
      sample: verl/workers/fsdp_workers.py
    line:
      description: The first changed line in the original file.
      type: int
      sample: 671
    patched_line:
      description: The same line in the patched file.
      type: int
      sample: 671
    before:
      description: The changed lines of the original only (the anchor's context lines left out).
      type: str
      sample: "        timing_generate.update(self.rollout_sharding_manager.timing)\n"
    after:
      description: The lines that replace them.
      type: str
      sample: "        timing_generate.update(getattr(self.rollout_sharding_manager, \"timing\", {}))  # verl_p40_patch: hf_rollout_timing\n"
  sample:
    - fix: hf_rollout_timing
      file: verl/workers/fsdp_workers.py
      line: 671
      patched_line: 671
      before: "        timing_generate.update(self.rollout_sharding_manager.timing)\n"
      after: "        timing_generate.update(getattr(self.rollout_sharding_manager, \"timing\", {}))  # verl_p40_patch: hf_rollout_timing\n"
changed_files:
  description: Files (relative to O(path)) that were, or in check mode would be, written.
  returned: always
  type: list
  elements: str
  sample: [verl/workers/fsdp_workers.py, verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py]
record:
  description: Path of the record kept with the checkout.
  returned: always
  type: str
  sample: /opt/verl/.verl_p40_patch/record.json
"""

import hashlib
import json
import os
import shutil
from typing import Dict, List, Optional, Tuple

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.stack_files import replace_keeping as write_atomic
from ansible.module_utils.verl_fixes import CATALOG, NEVER_TOUCH, PLACEHOLDERS, VERSION_FILE

STATE_DIR = ".verl_p40_patch"
RECORD_FILE = "record.json"
ORIGINALS_DIR = "originals"
RECORD_FORMAT = 1


class PatchError(Exception):
    """A refusal. Its message says what is wrong and what to do; nothing has been written."""


# ---------------------------------------------------------------- small helpers


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def state_dir(root: str) -> str:
    return os.path.join(root, STATE_DIR)


def record_path(root: str) -> str:
    return os.path.join(state_dir(root), RECORD_FILE)


def original_path(root: str, rel: str) -> str:
    # ".orig" so that linters and test collectors run inside the checkout skip the copies.
    return os.path.join(state_dir(root), ORIGINALS_DIR, rel + ".orig")


# ---------------------------------------------------------------- the catalog


def read_verl_version(root: str) -> str:
    path = os.path.join(root, VERSION_FILE)
    if not os.path.isfile(path):
        raise PatchError(
            "%s is not a verl checkout: %s does not exist. Point path at the directory that "
            "holds verl/ (the clone or unpacked sdist root, or site-packages)." % (root, path)
        )
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


def catalog_for(version: str, root: str) -> List[dict]:
    if version not in CATALOG:
        raise PatchError(
            "verl %s at %s has no entry in the verl_patch catalog (known versions: %s). Nothing was "
            "changed. Check out or install a release the catalog knows, or add a catalog entry for %s "
            "to module_utils/verl_fixes.py after checking every fix against that version's source."
            % (version, root, ", ".join(sorted(CATALOG)), version)
        )
    return CATALOG[version]


def select_fixes(catalog: List[dict], names: Optional[List[str]], version: str) -> List[dict]:
    """The fixes to apply, in catalog order; None means all of them."""
    known = [fix["name"] for fix in catalog]
    if names is None:
        return list(catalog)
    if not names:
        raise PatchError("fixes is an empty list. To remove every fix use state=absent; to apply all, omit fixes.")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise PatchError(
            "Unknown fix name(s) for verl %s: %s. Known fixes: %s." % (version, ", ".join(unknown), ", ".join(known))
        )
    return [fix for fix in catalog if fix["name"] in names]


def check_protected(fixes: List[dict]) -> None:
    """A catalog entry must never reach the files the project promised to leave alone."""
    for fix in fixes:
        for edit in fix["edits"]:
            for protected in NEVER_TOUCH:
                if edit["file"] == protected or edit["file"].startswith(protected.rstrip("/") + "/"):
                    raise PatchError(
                        "Catalog error: fix %s edits %s, which verl_patch must never touch (NEVER_TOUCH). "
                        "Fix module_utils/verl_fixes.py." % (fix["name"], edit["file"])
                    )


def render(text: str, params: Dict[str, str]) -> str:
    for option, token in PLACEHOLDERS.items():
        text = text.replace(token, params[option])
    return text


def files_of(fixes: List[dict]) -> List[str]:
    seen: List[str] = []
    for fix in fixes:
        for edit in fix["edits"]:
            if edit["file"] not in seen:
                seen.append(edit["file"])
    return seen


# ---------------------------------------------------------------- planning (pure)


def changed_lines(anchor: str, replacement: str) -> Tuple[int, str, str]:
    """Lines skipped from the anchor's start, and the differing lines before and after.

    Anchors carry context lines that the fix leaves alone; the record should show
    only what changed and where.
    """
    old = anchor.splitlines(keepends=True)
    new = replacement.splitlines(keepends=True)
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return head, "".join(old[head : len(old) - tail]), "".join(new[head : len(new) - tail])


def patch_texts(
    pristine: Dict[str, str], fixes: List[dict], params: Dict[str, str], version: str
) -> Tuple[Dict[str, str], List[dict]]:
    """Apply fixes to pristine texts in memory: (patched text per touched file, record entries).

    Every anchor is located in the pristine text before anything is built, and every
    mismatch is reported at once, so one run tells the user everything that is wrong.
    """
    located: Dict[str, List[Tuple[int, int, str, str, str]]] = {}
    problems: List[str] = []
    for fix in fixes:
        for edit in fix["edits"]:
            rel = edit["file"]
            if rel not in pristine:
                problems.append("%s: %s does not exist" % (fix["name"], rel))
                continue
            anchor = edit["anchor"]
            count = pristine[rel].count(anchor)
            if count != 1:
                problems.append("%s: %s: anchor matched %d times, expected exactly once" % (fix["name"], rel, count))
                continue
            start = pristine[rel].index(anchor)
            located.setdefault(rel, []).append(
                (start, start + len(anchor), fix["name"], anchor, render(edit["replacement"], params))
            )
    if problems:
        raise PatchError(
            "verl %s: nothing was written, because these anchors did not match exactly once:\n  %s\n"
            "The catalog was checked against the pristine verl %s release. If a file was edited by hand, "
            "patched by another tool, or patched by verl_patch and its .verl_p40_patch/ directory then "
            "deleted, restore it (git checkout -- FILE, or unpack the release again) and rerun; to skip a "
            "fix, leave it out of fixes." % (version, "\n  ".join(problems), version)
        )

    patched: Dict[str, str] = {}
    applied: List[dict] = []
    for rel, edits in located.items():
        edits.sort()
        text = pristine[rel]
        pieces: List[str] = []
        cursor = 0
        shift = 0  # lines added so far in this file by earlier edits
        for start, end, name, anchor, replacement in edits:
            if start < cursor:
                raise PatchError(
                    "Catalog error: two edits in %s overlap (at fix %s). Fix module_utils/verl_fixes.py." % (rel, name)
                )
            pieces.append(text[cursor:start])
            pieces.append(replacement)
            cursor = end
            head, before, after = changed_lines(anchor, replacement)
            line = text.count("\n", 0, start) + 1 + head
            applied.append(
                {"fix": name, "file": rel, "line": line, "patched_line": line + shift, "before": before, "after": after}
            )
            shift += replacement.count("\n") - anchor.count("\n")
        pieces.append(text[cursor:])
        patched[rel] = "".join(pieces)
    fix_order = [fix["name"] for fix in fixes]
    applied.sort(key=lambda entry: (fix_order.index(entry["fix"]), entry["file"], entry["line"]))
    return patched, applied


def check_compiles(rel: str, pristine: str, patched: str) -> None:
    """Refuse a patched file that no longer parses.

    Judged against the pristine file, because the Python running this module may be
    older than the one verl targets and reject syntax that verl itself uses.
    """
    try:
        compile(patched, rel, "exec", dont_inherit=True)
    except SyntaxError as error:
        try:
            compile(pristine, rel, "exec", dont_inherit=True)
        except SyntaxError:
            return
        raise PatchError(
            "Catalog error: %s would not compile after patching (%s, line %s). Nothing was written. "
            "Fix module_utils/verl_fixes.py." % (rel, error.msg, error.lineno)
        ) from error


# ---------------------------------------------------------------- the record


def load_record(root: str) -> Optional[dict]:
    path = record_path(root)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except ValueError as error:
        raise PatchError(
            "%s is not valid JSON (%s). Restore the files listed under %s with git checkout, "
            "then delete %s and rerun." % (path, error, os.path.join(state_dir(root), ORIGINALS_DIR), state_dir(root))
        ) from error
    if record.get("format") != RECORD_FORMAT:
        raise PatchError("%s has format %r; this module reads format %d." % (path, record.get("format"), RECORD_FORMAT))
    return record


def pristine_bytes(root: str, record: Optional[dict], version: str, rels: List[str]) -> Dict[str, bytes]:
    """Original content of each file: the kept copy for files touched before, else the file itself.

    A touched file must still hold content this module wrote (or its original); anything
    else is someone's edit, which restoring or re-patching would silently destroy.
    """
    if record is not None and record.get("verl_version") != version:
        raise PatchError(
            "%s was written for verl %s but the tree is now verl %s; its originals are stale. "
            "Restore the tree to a clean verl %s (git checkout), delete %s, and rerun."
            % (record_path(root), record.get("verl_version"), version, version, state_dir(root))
        )
    touched = record["files"] if record else {}
    result: Dict[str, bytes] = {}
    for rel in rels:
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        current = read_bytes(path)
        if rel not in touched:
            result[rel] = current
            continue
        entry = touched[rel]
        kept = original_path(root, rel)
        if not os.path.isfile(kept) or sha256(read_bytes(kept)) != entry["original_sha256"]:
            raise PatchError(
                "The kept original of %s (%s) is missing or damaged. Restore %s with git checkout, "
                "delete %s, and rerun." % (rel, kept, rel, state_dir(root))
            )
        ours = {entry["original_sha256"], entry["patched_sha256"], entry.get("previous_sha256")}
        if sha256(current) not in ours:
            raise PatchError(
                "%s changed since verl_patch last wrote it (its content matches neither the original nor the "
                "patched version recorded in %s). verl_patch will not overwrite edits it did not make. Restore "
                "the file (git checkout -- %s, or copy %s), delete %s if the whole tree is clean again, and rerun."
                % (rel, record_path(root), rel, kept, state_dir(root))
            )
        result[rel] = read_bytes(kept)
    return result


# ---------------------------------------------------------------- plan and execute


def plan(root: str, state: str, names: Optional[List[str]], attn_implementation: str) -> dict:
    """Everything a run would do, computed without writing: the basis of check mode and of the real run."""
    version = read_verl_version(root)
    record = load_record(root)

    if state == "present":
        selected = select_fixes(catalog_for(version, root), names, version)
        check_protected(selected)
    else:
        selected = []
    params = {"attn_implementation": attn_implementation}

    rels = files_of(selected)
    for rel in record["files"] if record else {}:
        if rel not in rels:
            rels.append(rel)
    pristine_raw = pristine_bytes(root, record, version, rels)

    pristine: Dict[str, str] = {}
    for rel, data in pristine_raw.items():
        try:
            pristine[rel] = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise PatchError("%s is not UTF-8 text; the catalog only edits verl's Python sources." % rel) from error
    patched, applied = patch_texts(pristine, selected, params, version)
    for rel, text in patched.items():
        check_compiles(rel, pristine[rel], text)

    desired: Dict[str, bytes] = {}
    current: Dict[str, bytes] = {}
    for rel in rels:
        if rel not in pristine_raw:
            # Only reachable for files the record lists: patch_texts already refused missing targets.
            raise PatchError(
                "%s, touched by verl_patch before, no longer exists. Restore it (git checkout -- %s) and rerun."
                % (rel, rel)
            )
        desired[rel] = patched[rel].encode("utf-8") if rel in patched else pristine_raw[rel]
        current[rel] = read_bytes(os.path.join(root, rel))

    # Record only the options that shape the selected fixes, so that changing an
    # option no fix uses does not count as a change.
    used = {
        option: value
        for option, value in params.items()
        if any(PLACEHOLDERS[option] in edit["replacement"] for fix in selected for edit in fix["edits"])
    }
    return {
        "root": root,
        "version": version,
        "fixes": [fix["name"] for fix in selected],
        "params": used,
        "applied": applied,
        "pristine": pristine_raw,
        "desired": desired,
        "current": current,
        "record": record,
    }


def new_record(the_plan: dict, with_previous: bool) -> dict:
    files = {}
    for rel, data in the_plan["desired"].items():
        original = the_plan["pristine"][rel]
        if data == original and not with_previous:
            continue
        entry = {"original_sha256": sha256(original), "patched_sha256": sha256(data)}
        if with_previous:
            entry["previous_sha256"] = sha256(the_plan["current"][rel])
        files[rel] = entry
    return {
        "format": RECORD_FORMAT,
        "tool": "verl_patch",
        "verl_version": the_plan["version"],
        "fixes": the_plan["fixes"],
        "options": the_plan["params"],
        "files": files,
        "applied": the_plan["applied"],
    }


def is_changed(the_plan: dict) -> bool:
    if any(the_plan["desired"][rel] != the_plan["current"][rel] for rel in the_plan["desired"]):
        return True
    # Same bytes but a different recorded set (or a leftover directory) still needs the record fixed.
    wanted = new_record(the_plan, with_previous=False)
    if not wanted["files"]:
        return os.path.exists(state_dir(the_plan["root"]))
    old = the_plan["record"]
    return old is None or any(old.get(key) != wanted[key] for key in ("fixes", "options", "files", "applied"))


def execute(the_plan: dict) -> None:
    """Write the plan in an order that a rerun can always finish after an interruption.

    Originals are kept before any file changes; the record written before the files lists
    each file's previous content too, so a file left in either state is recognised as ours.
    """
    root = the_plan["root"]
    os.makedirs(os.path.join(state_dir(root), ORIGINALS_DIR), exist_ok=True)
    ignore = os.path.join(state_dir(root), ".gitignore")
    if not os.path.exists(ignore):
        write_atomic(ignore, b"# Written by verl_patch: originals and record of the P40 fixes.\n*\n")
    recorded = the_plan["record"]["files"] if the_plan["record"] else {}
    for rel, original in the_plan["pristine"].items():
        kept = original_path(root, rel)
        # A copy the record does not vouch for may be left from an interrupted run; the file is the truth.
        if rel not in recorded or not os.path.exists(kept):
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            write_atomic(kept, original)
    write_atomic(record_path(root), (json.dumps(new_record(the_plan, with_previous=True), indent=2) + "\n").encode())

    for rel, data in the_plan["desired"].items():
        if data != the_plan["current"][rel]:
            write_atomic(os.path.join(root, rel), data)

    final = new_record(the_plan, with_previous=False)
    if not final["files"]:
        shutil.rmtree(state_dir(root))
        return
    write_atomic(record_path(root), (json.dumps(final, indent=2) + "\n").encode())
    for rel in the_plan["pristine"]:
        if rel not in final["files"] and os.path.exists(original_path(root, rel)):
            os.unlink(original_path(root, rel))


def diff_of(the_plan: dict) -> List[dict]:
    diffs = []
    for rel, data in the_plan["desired"].items():
        if data != the_plan["current"][rel]:
            diffs.append(
                {
                    "before_header": rel,
                    "after_header": rel,
                    "before": the_plan["current"][rel].decode("utf-8", "replace"),
                    "after": data.decode("utf-8", "replace"),
                }
            )
    return diffs


def run(
    path: str,
    state: str = "present",
    fixes: Optional[List[str]] = None,
    attn_implementation: str = "eager",
    check_mode: bool = False,
    want_diff: bool = False,
) -> dict:
    """The whole module without Ansible: returns the result dict, raises PatchError on refusal."""
    root = os.path.abspath(path)
    the_plan = plan(root, state, fixes, attn_implementation)
    changed = is_changed(the_plan)
    if changed and not check_mode:
        execute(the_plan)
    result = {
        "changed": changed,
        "verl_version": the_plan["version"],
        "fixes": the_plan["fixes"],
        "applied": the_plan["applied"],
        "changed_files": [rel for rel, data in the_plan["desired"].items() if data != the_plan["current"][rel]],
        "record": record_path(root),
    }
    if want_diff:
        result["diff"] = diff_of(the_plan)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            fixes=dict(type="list", elements="str"),
            attn_implementation=dict(type="str", choices=["eager", "sdpa"], default="eager"),
        ),
        supports_check_mode=True,
    )
    try:
        result = run(
            module.params["path"],
            state=module.params["state"],
            fixes=module.params["fixes"],
            attn_implementation=module.params["attn_implementation"],
            check_mode=module.check_mode,
            want_diff=module._diff,
        )
    except PatchError as error:
        module.fail_json(msg=str(error))
    except OSError as error:
        module.fail_json(
            msg="verl_patch could not read or write %s: %s. Check that the path exists and is writable "
            "by the user the task runs as (become)." % (error.filename or module.params["path"], error.strerror)
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
