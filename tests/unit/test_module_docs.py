"""The modules' and the lookup's documentation: valid YAML (what ansible-doc and the plugin loader
parse), in the current markup, with honest attributes, and a RETURN that names every key a module
really returns, found by running each module through Ansible."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml
from conftest import play_results

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted(REPO.glob("library/*.py"))
LOOKUPS = sorted(REPO.glob("lookup_plugins/*.py"))
FILES = MODULES + LOOKUPS
SUPPORT = ("full", "partial", "none")


def blocks(path: Path) -> dict[str, str]:
    return {
        node.targets[0].id: node.value.value
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign)
        and getattr(node.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")
    }


def docs(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """DOCUMENTATION and RETURN of a file, parsed."""
    found = blocks(path)
    return yaml.safe_load(found["DOCUMENTATION"]), yaml.safe_load(found.get("RETURN", "")) or {}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_docs_are_yaml(path: Path):
    found = blocks(path)
    assert "DOCUMENTATION" in found
    for name, text in found.items():
        assert yaml.safe_load(text) is not None, name
    doc = yaml.safe_load(found["DOCUMENTATION"])
    assert doc.get("module", doc.get("name")) == path.stem
    assert set(found) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, "each needs DOCUMENTATION, EXAMPLES and RETURN"


def test_ansible_doc_reads_every_plugin():
    """ansible-doc resolves the attributes' fragment and parses the markup; an error fails here."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    ansible_doc = str(Path(sys.executable).parent / "ansible-doc")
    for kind, paths in (("module", MODULES), ("lookup", LOOKUPS)):
        done = subprocess.run(
            [ansible_doc, "-t", kind, "--json", *[p.stem for p in paths]],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            check=False,
        )
        assert done.returncode == 0 and "ERROR" not in done.stderr, done.stderr
        parsed = json.loads(done.stdout)
        assert sorted(parsed) == sorted(p.stem for p in paths)
        for name, entry in parsed.items():
            assert entry["doc"]["description"], name
            if kind == "module":
                # The attributes carry the fragment's descriptions: the fragment was found.
                assert entry["doc"]["attributes"]["check_mode"]["description"], name


# -- attributes: what check mode and diff mode really do --------------------------------------


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_modules_declare_check_and_diff_support(path: Path):
    doc, _ = docs(path)
    attributes = doc.get("attributes") or {}
    for name in ("check_mode", "diff_mode", "platform"):
        assert name in attributes, "%s: DOCUMENTATION needs attributes.%s" % (path.name, name)
    for name in ("check_mode", "diff_mode"):
        support = attributes[name].get("support")
        assert support in SUPPORT, "%s: attributes.%s.support must be one of %s" % (path.name, name, SUPPORT)
        if support == "partial":
            assert attributes[name].get("details"), "%s: a partial %s needs details saying what" % (path.name, name)
    assert "action_common_attributes" in (doc.get("extends_documentation_fragment") or [])
    # A module with an action plugin of the same name (the Ansible convention): both sources.
    action = REPO / "action_plugins" / path.name
    source = path.read_text() + (action.read_text() if action.exists() else "")
    # The code agrees: check mode is declared to AnsibleModule, a diff is built only in diff mode.
    declares_check = "supports_check_mode=True" in source or "_supports_check_mode = True" in source
    assert (attributes["check_mode"]["support"] != "none") == declares_check, path.name
    reads_diff = "_diff" in source
    assert (attributes["diff_mode"]["support"] != "none") == reads_diff, path.name


# -- markup: O(), V(), RV() for options, values and return values; no I() ----------------------


def walk_options(options: dict[str, Any] | None, prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for name, spec in (options or {}).items():
        yield prefix + name, spec
        yield from walk_options(spec.get("suboptions"), prefix + name + ".")


def walk_returns(returns: dict[str, Any] | None, prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for name, spec in (returns or {}).items():
        yield prefix + name, spec
        yield from walk_returns(spec.get("contains"), prefix + name + ".")


def texts(value: Any) -> Iterator[str]:
    """Every string in a parsed documentation block (descriptions, details, notes)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in ("sample", "example", "default", "choices"):
                yield from texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from texts(item)


def reference(target: str) -> str:
    """The option or return value an O()/RV() names: `a[].b=value` -> `a.b`."""
    return re.sub(r"\[[^\]]*\]", "", target.split("=", 1)[0])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_docs_use_current_markup(path: Path):
    doc, returns = docs(path)
    options = dict(walk_options(doc.get("options")))
    values = {str(choice) for spec in options.values() for choice in spec.get("choices") or []}
    every = list(texts(doc)) + list(texts(returns))
    problems = []
    for text in every:
        problems += ["I(%s): use O() for an option, else C() or B()" % m for m in re.findall(r"\bI\(([^)]*)\)", text)]
        for code in re.findall(r"\bC\(([^)]*)\)", text):
            if code in options or reference(code) in options:
                problems.append("C(%s): an option, write O(%s)" % (code, code))
            elif code in values:
                problems.append("C(%s): an option's value, write V(%s)" % (code, code))
            elif code in returns:
                problems.append("C(%s): a return value, write RV(%s)" % (code, code))
        for target in re.findall(r"\bO\(([^)]*)\)", text):
            if not target.startswith("ignore:") and reference(target) not in options:
                problems.append("O(%s) names no documented option" % target)
        for target in re.findall(r"\bRV\(([^)]*)\)", text):
            if not target.startswith("ignore:") and reference(target) not in dict(walk_returns(returns)):
                problems.append("RV(%s) names no documented return value" % target)
    assert not problems, "%s:\n  %s" % (path.name, "\n  ".join(problems))


# -- RETURN: every key a module returns, found by running it -----------------------------------

# Keys Ansible itself puts into a result, documented by Ansible, not by each module.
ANSIBLE_KEYS = {
    "changed",
    "failed",
    "msg",
    "invocation",
    "diff",
    "action",
    "exception",
    "warnings",
    "deprecations",
    "skipped",
}
# AnsibleModule.exit_json adds these to any result whose `path` exists (add_path_info).
PATH_INFO = {"uid", "gid", "owner", "group", "mode", "size", "state", "secontext"}


def run_tasks(name: str, tasks: list[dict], tmp_path: Path) -> list[dict]:
    """Run tasks in one ansible-playbook (one start-up instead of one per call, as run_module has):
    the results of the tasks that call module `name`. A task may set check_mode and diff."""
    results = [result for result in play_results(tmp_path, tasks) if result.get("action") == name]
    assert len(results) == sum(name in task for task in tasks)
    return [{key: value for key, value in result.items() if not key.startswith("_ansible")} for result in results]


def disk_space_runs(tmp_path: Path, request: pytest.FixtureRequest) -> list[dict]:
    args = {"requirements": [{"path": str(tmp_path / "not/yet"), "min_free_gb": 1}, {"path": "/", "min_free_gb": 1}]}
    return run_tasks("disk_space", [{"disk_space": args}, {"disk_space": args, "check_mode": True}], tmp_path)


def driver_info_runs(tmp_path: Path, request: pytest.FixtureRequest) -> list[dict]:
    """A stand-in tree with a P40 bound to nvidia, its module loaded and EFI on; a stand-in nvidia-smi."""
    device = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:03:00.0"
    device.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("device", "0x1b38"), ("class", "0x030200")):
        (device / name).write_text(value + "\n")
    (tmp_path / "sys" / "bus" / "pci" / "drivers" / "nvidia").mkdir(parents=True)
    (device / "driver").symlink_to(tmp_path / "sys" / "bus" / "pci" / "drivers" / "nvidia")
    (tmp_path / "sys" / "module" / "nvidia").mkdir(parents=True)
    (tmp_path / "sys" / "module" / "nvidia" / "version").write_text("580.105.08\n")
    (tmp_path / "sys" / "firmware" / "efi").mkdir(parents=True)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '580.105.08, 00000000:03:00.0, Tesla P40, 22919, Enabled'\n")
    smi.chmod(0o755)
    args = {"root": str(tmp_path), "nvidia_smi": str(smi), "modinfo": "", "mokutil": ""}
    return run_tasks("driver_info", [{"driver_info": args}, {"driver_info": args, "check_mode": True}], tmp_path)


def host_lock_runs(tmp_path: Path, request: pytest.FixtureRequest) -> list[dict]:
    lock = str(tmp_path / "run.lock")
    run_a = {"id": "run-a", "controller": "ctl", "pid": 4242, "user": "alice", "started": "2026-12-01T00:00:00Z"}
    run_b = dict(run_a, id="run-b")
    rebooted = json.dumps(dict(run_a, boot_id="an-earlier-boot"))
    tasks = [
        {"host_lock": {"path": lock, "run": run_a}, "check_mode": True},
        {"host_lock": {"path": lock, "run": run_a}},
        {"host_lock": {"path": lock, "run": run_a, "state": "query"}},
        {"host_lock": {"path": lock, "run": run_b, "takeover": "run-a"}},
        {"host_lock": {"path": lock, "run": run_b, "state": "released"}},
        {"ansible.builtin.copy": {"content": rebooted, "dest": lock, "mode": "0644"}},
        {"host_lock": {"path": lock, "run": run_b}},
        {"ansible.builtin.copy": {"content": "{not json", "dest": lock, "mode": "0644"}},
        {"host_lock": {"path": lock, "run": run_b, "state": "query"}},
    ]
    return run_tasks("host_lock", tasks, tmp_path)


def layer_state_runs(tmp_path: Path, request: pytest.FixtureRequest) -> list[dict]:
    base = {"name": "cuda", "state_dir": str(tmp_path / "layers"), "layers": ["preflight", "cuda"]}
    present = dict(base, state="present", inputs={"v": 1}, version="11.8.89", details={"prefix": "/opt/x"})
    tasks = [
        {"layer_state": base},
        {"layer_state": dict(base, state="building", run="run-a"), "diff": True},
        {"layer_state": dict(present, run="run-a"), "check_mode": True, "diff": True},
        {"layer_state": dict(present, run="run-a"), "diff": True},
        {"layer_state": dict(base, name="preflight", state="present")},
        {"layer_state": dict(base, inputs={"v": 1}, requires=["preflight"], files=[str(tmp_path)], verify="cuda")},
        {"layer_state": dict(present, built=False)},
        {"layer_state": dict(base, state="snapshot", run="run-a")},
        {"layer_state": dict(base, inputs={"v": 1}, run="run-a")},
    ]
    return run_tasks("layer_state", tasks, tmp_path)


def stack_tree_runs(tmp_path: Path, request: pytest.FixtureRequest) -> list[dict]:
    base = {"path": str(tmp_path / "cuda-11.8"), "layer": "cuda", "state_dir": str(tmp_path / "layers")}
    tasks = [
        {"stack_tree": base},
        {"stack_tree": dict(base, state="present"), "check_mode": True, "diff": True},
        {"stack_tree": dict(base, state="present"), "diff": True},
        {"stack_tree": dict(base, require_ours=True)},
        {"stack_tree": dict(base, state="absent"), "check_mode": True, "diff": True},
        {"stack_tree": dict(base, state="absent"), "diff": True},
        {"stack_tree": {"state_dir": base["state_dir"], "trees": [{"path": base["path"], "layer": "cuda"}]}},
    ]
    return run_tasks("stack_tree", tasks, tmp_path)


def stack_take_runs(tmp_path: Path, request: pytest.FixtureRequest) -> list[dict]:
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "apex.whl").write_bytes(b"wheel")
    args = {"src": str(tmp_path / "build" / "apex.whl"), "user": "root", "dest": str(tmp_path / "cache")}
    tasks = [{"stack_take": args, "check_mode": True}, {"stack_take": args}]
    return run_tasks("stack_take", tasks, tmp_path)


def verl_patch_runs(tmp_path: Path, request: pytest.FixtureRequest) -> list[dict]:
    tree = str(request.getfixturevalue("verl_041"))
    tasks = [
        {"verl_patch": {"path": tree}, "check_mode": True, "diff": True},
        {"verl_patch": {"path": tree, "fixes": ["no_prefix_caching"]}, "diff": True},
        {"verl_patch": {"path": tree, "state": "absent"}},
    ]
    return run_tasks("verl_patch", tasks, tmp_path)


def stack_wait_runs(tmp_path: Path, request: pytest.FixtureRequest) -> list[dict]:
    log = tmp_path / "build.log"
    job = {"ansible.builtin.shell": "echo started > %s; sleep 2; echo built" % log, "async": 30, "poll": 0}
    failing = {"ansible.builtin.command": "false", "async": 30, "poll": 0, "register": "failing"}
    tasks = [
        dict(job, register="job"),
        {"stack_wait": {"jid": "{{ job.ansible_job_id }}", "every": 1, "log": str(log), "size_of": str(log)}},
        failing,
        {"stack_wait": {"jid": "{{ failing.ansible_job_id }}"}, "ignore_errors": True},
        {"stack_wait": {"jid": ""}},
    ]
    return run_tasks("stack_wait", tasks, tmp_path)


def stack_links_runs(tmp_path: Path, request: pytest.FixtureRequest) -> list[dict]:
    args = {"links": [{"src": str(tmp_path / "target"), "dest": str(tmp_path / "link")}]}
    tasks = [
        {"stack_links": args, "check_mode": True, "diff": True},
        {"stack_links": args, "diff": True},
        {"stack_links": args},
        {"stack_links": {"links": [{"src": "x", "dest": str(tmp_path)}]}, "ignore_errors": True},
    ]
    return run_tasks("stack_links", tasks, tmp_path)


RUNS: dict[str, Callable[[Path, pytest.FixtureRequest], list[dict]]] = {
    "disk_space": disk_space_runs,
    "driver_info": driver_info_runs,
    "host_lock": host_lock_runs,
    "layer_state": layer_state_runs,
    "stack_links": stack_links_runs,
    "stack_take": stack_take_runs,
    "stack_tree": stack_tree_runs,
    "stack_wait": stack_wait_runs,
    "verl_patch": verl_patch_runs,
}


def key_pattern(name: str) -> re.Pattern[str]:
    """A documented key; `<name>` in it stands for any text (stack_layer_<name>)."""
    return re.compile(
        "".join(".+" if part.startswith("<") else re.escape(part) for part in re.split(r"(<[^>]+>)", name))
    )


def undocumented(value: Any, documented: dict[str, Any], where: str) -> Iterator[str]:
    """Keys of a returned dict (or list of dicts) that its `contains` does not name, recursively."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, dict):
            continue
        for key, inner in item.items():
            spec = next((s for n, s in documented.items() if key_pattern(n).fullmatch(key)), None)
            if spec is None:
                yield "%s.%s" % (where, key)
            elif spec.get("contains"):
                yield from undocumented(inner, spec["contains"], "%s.%s" % (where, key))


def test_every_module_has_its_runs():
    assert sorted(RUNS) == sorted(p.stem for p in MODULES), "add the new module's runs to RUNS"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_return_documents_every_returned_key(name: str, tmp_path: Path, request: pytest.FixtureRequest):
    _, returns = docs(REPO / "library" / (name + ".py"))
    results = RUNS[name](tmp_path, request)
    seen: set[str] = set()
    missing: list[str] = []
    for result in results:
        own = set(result) - ANSIBLE_KEYS - (PATH_INFO if "path" in result else set())
        seen |= own
        missing += ["%s (returned, not in RETURN)" % key for key in sorted(own - set(returns))]
        for key in sorted(own & set(returns)):
            value = result[key]
            structured = isinstance(value, dict) or (
                isinstance(value, list) and any(isinstance(v, dict) for v in value)
            )
            if structured and value and not returns[key].get("contains"):
                missing.append("%s (returns dicts; RETURN needs its contains)" % key)
            if returns[key].get("contains"):
                missing += [
                    "%s (returned, not in its contains)" % k for k in undocumented(value, returns[key]["contains"], key)
                ]
    problems = sorted(set(missing)) + [
        "%s (in RETURN, never returned by these runs)" % k for k in sorted(set(returns) - seen)
    ]
    assert not problems, "%s:\n  %s" % (name, "\n  ".join(problems))


def test_lookup_return_documents_the_identity():
    import stack_run

    _, returns = docs(REPO / "lookup_plugins" / "stack_run.py")
    assert set(returns) == {"_raw"}
    assert sorted(stack_run.identity()) == sorted(returns["_raw"]["contains"])
