"""Mutation testing of the Python that decides things (`make mutate`; not part of `make test`).

Each module under library/, module_utils/, filter_plugins/, action_plugins/, lookup_plugins/
and roles/*/files/ is mutated by cosmic-ray (pinned in requirements-test.txt), one small change
at a time, and each mutant runs against that module's own unit test files only (module_tests:
the test files whose docstring names the module, else those that import or run it; OVERRIDES
where that is wrong): a mutant the tests still pass with is a survivor, a line of code no test
holds to its meaning.

    python tools/mutate.py --list                          # module -> its test files (dry run)
    python tools/mutate.py --module library/verl_patch.py --out docs/mutation/$(date +%F).json
    python tools/mutate.py --out docs/mutation/$(date +%F).json        # every module: hours
    python tools/mutate.py --module library/verl_patch.py --survivors --out FILE   # after new tests
    python tools/mutate.py --judge --out FILE          # after a new reason in equivalent.yml

The mutants are made in a scratch copy of the work tree (the files git tracks or would
track), never in the tree itself, so editing and committing go on beside a run. A module
with no test file, or that cannot be imported, or whose tests fail unmutated, stops a
`--module` run naming it; in a full run it is written to the result file as "not run: <why>".

The result file (docs/testing.md, "Mutation testing") holds per module: mutants, killed,
survived, timeouts, every survivor (file, line, operator, the line before and after), the
survivors judged equivalent (docs/mutation/equivalent.yml: a mutant that cannot change
behaviour, with the reason) and the percentage of the other mutants killed, with the commit
and the machine. A result already in the file for a module not run this time stays; --survivors
reruns only the survivors it lists (the module itself unchanged, by its sha256) and keeps the
other verdicts.

Operators: cosmic-ray's core set makes every replacement of every operator (`a % b` eleven
times, `a == b` seven), ~600 mutants a module, most of them the same test of the same line.
OPERATORS keeps one replacement per operator (the one that inverts or shifts it, as mutmut
does) and adds two that cosmic-ray lacks and this project's bugs need: `in` <-> `not in`,
and a call statement removed (a guard, a `pop` of a stale key, a `fail_json` that is not made).

Speed: each mutant runs `pytest -x` with the tests that killed mutants of the same function
first, then the rest fastest first (from the unmutated run); the tester loads this file as a
pytest plugin for that (the hooks at the end).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
TESTS = "tests/unit"
MODULE_DIRS = ("library", "module_utils", "filter_plugins", "action_plugins", "lookup_plugins", "roles")
MODULE_GLOBS = (
    "library/*.py",
    "module_utils/*.py",
    "filter_plugins/*.py",
    "action_plugins/*.py",
    "lookup_plugins/*.py",
    "roles/*/files/*.py",
)
EQUIVALENT = "docs/mutation/equivalent.yml"

# Where the derived map (a test file that imports, runs or names the module) is wrong or empty.
OVERRIDES: Dict[str, Dict[str, Any]] = {
    "roles/train/files/validate_overrides.py": {
        "tests": ["tests/unit/test_compose.py"],
        "why": "test_render and test_launcher_safety import it as their oracle for the launcher; "
        "test_compose is the one that tests its verdicts and exit status",
    },
    "action_plugins/layer_state.py": {
        "tests": ["tests/unit/test_layer_state.py"],
        "why": "its tests run the layer_state task through Ansible, which calls this action plugin",
    },
    "action_plugins/stack_wait.py": {
        "tests": ["tests/unit/test_stack_wait_action.py"],
        "why": "test_stack_wait_action runs the plugin in this process with a made-up host and clock (a "
        "second); test_stack_wait's real plays with real waits (a minute) timed every mutant out",
    },
}

# cosmic-ray's core operators kept: one replacement per operator; see the docstring.
OPERATORS = (
    "core/AddNot",
    "core/ReplaceUnaryOperator_Delete_Not",
    "core/ReplaceUnaryOperator_USub_UAdd",
    "core/ReplaceTrueWithFalse",
    "core/ReplaceFalseWithTrue",
    "core/ReplaceAndWithOr",
    "core/ReplaceOrWithAnd",
    "core/ReplaceBreakWithContinue",
    "core/ReplaceContinueWithBreak",
    "core/ExceptionReplacer",
    "core/NumberReplacer",
    "core/RemoveDecorator",
    "core/ZeroIterationForLoop",
    "core/ReplaceComparisonOperator_Eq_NotEq",
    "core/ReplaceComparisonOperator_NotEq_Eq",
    "core/ReplaceComparisonOperator_Lt_GtE",
    "core/ReplaceComparisonOperator_Lt_LtE",
    "core/ReplaceComparisonOperator_LtE_Gt",
    "core/ReplaceComparisonOperator_LtE_Lt",
    "core/ReplaceComparisonOperator_Gt_LtE",
    "core/ReplaceComparisonOperator_Gt_GtE",
    "core/ReplaceComparisonOperator_GtE_Lt",
    "core/ReplaceComparisonOperator_GtE_Gt",
    "core/ReplaceComparisonOperator_Is_IsNot",
    "core/ReplaceComparisonOperator_IsNot_Is",
    "core/ReplaceBinaryOperator_Add_Sub",
    "core/ReplaceBinaryOperator_Sub_Add",
    "core/ReplaceBinaryOperator_Mul_Div",
    "core/ReplaceBinaryOperator_Div_Mul",
    "core/ReplaceBinaryOperator_FloorDiv_Div",
    "core/ReplaceBinaryOperator_Mod_FloorDiv",
    "core/ReplaceBinaryOperator_Pow_Mul",
    "core/ReplaceBinaryOperator_BitOr_BitAnd",
    "core/ReplaceBinaryOperator_BitAnd_BitOr",
    "core/ReplaceBinaryOperator_BitXor_BitOr",
    "core/ReplaceBinaryOperator_LShift_RShift",
    "core/ReplaceBinaryOperator_RShift_LShift",
    "verl_p40/ReplaceInWithNotIn",
    "verl_p40/ReplaceNotInWithIn",
    "verl_p40/RemoveCallStatement",
)


class Stop(Exception):
    """A module that cannot be run; the message names it and says why."""


# ---------------------------------------------------------------- the map


def modules(root: Path = REPO) -> List[str]:
    """Every module of the directories that decide things, repository-relative."""
    found = set()
    for pattern in MODULE_GLOBS:
        found.update(path.relative_to(root).as_posix() for path in root.glob(pattern) if path.name != "__init__.py")
    return sorted(found)


def _by_stem(names: List[str]) -> Dict[str, str]:
    """stem -> module; where two directories hold one stem, library/'s (the one tests import)."""
    stems: Dict[str, str] = {}
    for name in sorted(names, key=lambda name: (not name.startswith("library/"), name)):
        stems.setdefault(Path(name).stem, name)
    return stems


def _named_in(test: Path, names: List[str]) -> tuple:
    """(modules the test file's docstring names, modules it imports or runs)."""
    tree = ast.parse(test.read_text(), str(test))
    doc = ast.get_docstring(tree) or ""
    stems = _by_stem(names)
    in_doc = set()
    for name in names:
        stem = Path(name).stem
        if name[: -len(".py")] in doc or ("_" in stem and re.search(r"\b%s\b" % stem, doc) and stems[stem] == name):
            in_doc.add(name)
    used = set()
    for node in ast.walk(tree):
        dotted = []
        if isinstance(node, ast.Import):
            dotted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            dotted = [node.module]
        for module in dotted:
            parts = module.split(".")
            if module.startswith("ansible.module_utils.") and "module_utils/%s.py" % parts[-1] in names:
                used.add("module_utils/%s.py" % parts[-1])
            elif len(parts) == 2 and "%s/%s.py" % tuple(parts) in names:
                used.add("%s/%s.py" % tuple(parts))
            elif len(parts) == 1 and parts[0] in stems:
                used.add(stems[parts[0]])
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_module" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and "library/%s.py" % first.value in names:
                used.add("library/%s.py" % first.value)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".py"):
            stem = node.value[: -len(".py")]
            if stem in stems and node.value == Path(node.value).name:
                used.add(stems[stem])
    return in_doc, used


def module_tests(root: Path = REPO) -> Dict[str, List[str]]:
    """module -> its own unit test files: those whose docstring names it, else those that import or
    run it; OVERRIDES where that is wrong. A module with none maps to []."""
    names = modules(root)
    in_doc: Dict[str, List[str]] = {name: [] for name in names}
    used: Dict[str, List[str]] = {name: [] for name in names}
    for test in sorted((root / TESTS).glob("test_*.py")):
        rel = test.relative_to(root).as_posix()
        documented, imported = _named_in(test, names)
        for name in documented:
            in_doc[name].append(rel)
        for name in imported:
            used[name].append(rel)
    mapping = {}
    for name in names:
        if name in OVERRIDES:
            mapping[name] = [test for test in OVERRIDES[name]["tests"] if (root / test).is_file()]
        else:
            mapping[name] = in_doc[name] or used[name]
    return mapping


# ---------------------------------------------------------------- the result file


def kill_percent(killed: int, timeouts: int, survived: int, equivalent: int) -> Optional[float]:
    """The share of non-equivalent mutants the tests detected (a failure or a timeout), in percent,
    rounded to one decimal; None when no non-equivalent mutant was judged. Incompetent mutants
    (that could not be tested) are outside both sides."""
    detected = killed + timeouts
    judged = detected + survived - equivalent
    if judged <= 0:
        return None
    return round(100.0 * detected / judged, 1)


def load_equivalent(root: Path = REPO) -> List[dict]:
    import yaml

    path = root / EQUIVALENT
    return (yaml.safe_load(path.read_text()) or []) if path.is_file() else []


def _same(entry: dict, survivor: dict) -> bool:
    """An entry of equivalent.yml names this survivor: file, operator, the line before and after, and
    where the entry gives it (a line too short to say where it is), the line above it."""

    def words(value: Any) -> Any:  # cosmic-ray's mutated lines may carry a doubled space
        return " ".join(value.split()) if isinstance(value, str) else value

    keys = ("file", "operator", "original", "mutated") + (("context",) if "context" in entry else ())
    return all(words(entry.get(key)) == words(survivor.get(key)) for key in keys)


def judged(entry: dict, equivalent: List[dict]) -> dict:
    """A module's result with its survivors judged again against `equivalent` (nothing is rerun)."""
    found = []
    for survivor in entry["survivors"]:
        reason = next((item["reason"] for item in equivalent if _same(item, survivor)), None)
        if reason:
            found.append(dict(survivor, reason=reason))
    percent = kill_percent(entry["killed"], entry["timeouts"], entry["survived"], len(found))
    return dict(entry, equivalent=found, killed_percent=percent)


def module_result(name: str, tests: List[str], outcomes: List[dict], equivalent: List[dict], **extra: Any) -> dict:
    """A module's entry of the result file from its mutants' outcomes (dicts with `outcome`: killed,
    timeout, survived or incompetent, with file, line, operator, occurrence, original, mutated, context)."""
    count = {key: sum(1 for item in outcomes if item["outcome"] == key) for key in ("killed", "timeout", "survived")}
    survivors = [
        {key: item[key] for key in ("file", "line", "operator", "occurrence", "original", "mutated", "context")}
        for item in outcomes
        if item["outcome"] == "survived"
    ]
    entry = dict(
        tests=tests,
        mutants=len(outcomes),
        killed=count["killed"],
        survived=count["survived"],
        timeouts=count["timeout"],
        incompetent=len(outcomes) - sum(count.values()),
        survivors=survivors,
        **extra,
    )
    return judged(entry, equivalent)


def write_result(out: Path, entries: Dict[str, Any], all_modules: List[str], header: dict) -> dict:
    """Merge `entries` into the result file `out`: earlier results of modules not run now stay,
    every other module is "not run: ..."."""
    old = json.loads(out.read_text()) if out.is_file() else {}
    merged = dict(old.get("modules", {}))
    merged.update(entries)
    for name in all_modules:
        merged.setdefault(name, "not run: not selected (tools/mutate.py --module)")
    result = dict(header, modules={name: merged[name] for name in sorted(merged)})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def commit(root: Path, paths: List[str]) -> str:
    """HEAD's short hash, and the paths among `paths` that differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
        return done.stdout.rstrip("\n") if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    dirty = git("status", "--porcelain", "--", *paths).splitlines()
    if dirty:
        head += " + uncommitted changes to " + ", ".join(sorted(line[3:] for line in dirty))
    return head


def sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def machine() -> dict:
    memory = 0
    if Path("/proc/meminfo").is_file():
        first = Path("/proc/meminfo").read_text().split("\n", 1)[0]
        memory = round(int(first.split()[1]) / 1024 / 1024, 1)
    return dict(
        host=platform.node(),
        cpus=os.cpu_count(),
        memory_gib=memory,
        python=platform.python_version(),
        load_average=[round(load, 2) for load in os.getloadavg()],
    )


# ---------------------------------------------------------------- the tester


def tester_version() -> str:
    from importlib.metadata import version

    return "cosmic-ray " + version("cosmic-ray")


def _house_operators():
    """The two operators the project adds to cosmic-ray's (see the docstring), as its provider."""
    import parso
    from cosmic_ray.operators.operator import Example, Operator

    def comparison(from_op: str, to_op: str):
        class Replace(Operator):
            def mutation_positions(self, node):
                if node.type == "comparison":
                    for op in node.children[1::2]:
                        if op.get_code().strip() == from_op:
                            yield op.start_pos, op.end_pos

            def mutate(self, node, index):
                ops = [i for i, op in enumerate(node.children) if i % 2 and op.get_code().strip() == from_op]
                node.children[ops[index]] = parso.parse(" " + to_op)
                return node

            @classmethod
            def examples(cls):
                return (Example("x %s y" % from_op, "x %s y" % to_op),)

        return Replace

    class RemoveCallStatement(Operator):
        def mutation_positions(self, node):
            if (
                node.type == "simple_stmt"
                and len(node.children) == 2
                and node.children[0].type in ("atom_expr", "power")
            ):
                trailer = node.children[0].children[-1]
                if trailer.type == "trailer" and trailer.children[0].value == "(":
                    yield node.start_pos, node.children[0].end_pos

        def mutate(self, node, index):
            call = node.children[0]
            node.children[0] = parso.python.tree.Keyword("pass", call.start_pos, prefix=call.get_first_leaf().prefix)
            return node

        @classmethod
        def examples(cls):
            return (Example("f(x)\n", "pass\n"),)

    class Provider:
        operators = {
            "ReplaceInWithNotIn": comparison("in", "not in"),
            "ReplaceNotInWithIn": comparison("not in", "in"),
            "RemoveCallStatement": RemoveCallStatement,
        }

        def __iter__(self):
            return iter(self.operators)

        def __getitem__(self, name):
            return self.operators[name]

    return Provider()


def mutations(path: Path) -> list:
    """The MutationSpecs of OPERATORS in one file (cosmic-ray's own init, on our operator list)."""
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.ast.ast_query import ASTQuery
    from cosmic_ray.work_item import MutationSpec

    cosmic_ray.plugins.OPERATOR_PROVIDERS.setdefault("verl_p40", _house_operators())
    tree = get_ast_from_path(path)
    specs = []
    for name in OPERATORS:
        operator = cosmic_ray.plugins.get_operator(name)()
        positions = [(node, pos) for node in ast_nodes(tree) for pos in operator.mutation_positions(node)]
        for occurrence, (node, (start, end)) in enumerate(positions):
            specs.append(
                MutationSpec(
                    module_path=path,
                    operator_name=name,
                    occurrence=occurrence,
                    start_pos=start,
                    end_pos=end,
                    definition_name=ASTQuery(node).get_definition_name(),
                )
            )
    return specs


def scratch_copy(root: Path, into: Path) -> Path:
    """The files git tracks or would track, copied to `into` (no .git, no venv, no caches)."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for rel in filter(None, (item.decode() for item in listed)):
        source = root / rel
        if source.is_file() and not source.is_symlink():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / rel)
        elif source.is_symlink():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), into / rel)
    return into


def import_problem(tree: Path, name: str) -> Optional[str]:
    """Why `name` cannot be imported (as the tests import it: module_utils as ansible.module_utils)."""
    code = (
        "import sys, importlib.util, ansible.module_utils\n"
        "ansible.module_utils.__path__.append(sys.argv[1] + '/module_utils')\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "spec = importlib.util.spec_from_file_location('mutate_probe', sys.argv[2])\n"
        "module = sys.modules['mutate_probe'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tree), str(tree / name)], capture_output=True, text=True, check=False
    )
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1]
        return "cannot import: " + last
    return None


def command_for(tests: List[str]) -> str:
    return "%s -m pytest -x -q -rfE -p no:cacheprovider -p mutate %s" % (sys.executable, " ".join(tests))


FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+?)(?: - |$)", re.MULTILINE)


def run_module_mutants(tree: Path, name: str, tests: List[str], log, only: Optional[set] = None) -> dict:
    """Mutate one module in `tree` and run each mutant against `tests` (with `only`, the mutants
    whose (operator, occurrence) it holds); the module's outcomes."""
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.work_item import TestOutcome

    if not tests:
        raise Stop("%s: not run: no unit test file imports, runs or names it (tools/mutate.py OVERRIDES)" % name)
    problem = import_problem(tree, name)
    if problem:
        raise Stop("%s: not run: %s" % (name, problem))
    try:
        specs = mutations(tree / name)
    except Exception as error:  # the tester's own parse of the file
        raise Stop("%s: not run: cosmic-ray cannot parse it (%s)" % (name, error)) from error
    if only is not None:
        specs = [spec for spec in specs if (spec.operator_name, spec.occurrence) in only]

    # The unmutated run: it must pass, and it times each test (the order of the mutants' runs).
    durations = tree / ".mutate-durations.json"
    order = tree / ".mutate-order.json"
    os.environ["MUTATE_DURATIONS"] = str(durations)
    os.environ.pop("MUTATE_ORDER", None)
    started = time.monotonic()
    baseline = subprocess.run(command_for(tests).split(), capture_output=True, text=True, cwd=tree, check=False)
    base_seconds = time.monotonic() - started
    del os.environ["MUTATE_DURATIONS"]
    if baseline.returncode != 0:
        tail = (baseline.stdout + baseline.stderr).strip().splitlines()[-3:]
        raise Stop("%s: not run: its tests fail unmutated (%s)" % (name, " | ".join(tail)))
    timing = json.loads(durations.read_text())
    fastest = sorted(timing, key=timing.get)
    timeout = max(60.0, 3 * base_seconds)
    log(
        "%s: %d mutants, tests %s (%.0f s unmutated, timeout %.0f s)" % (name, len(specs), tests, base_seconds, timeout)
    )

    source = (tree / name).read_text().splitlines()
    killers: Dict[str, List[str]] = {}
    outcomes = []
    os.environ["MUTATE_ORDER"] = str(order)
    for number, spec in enumerate(specs, 1):
        first = killers.get(spec.definition_name or "", [])
        order.write_text(json.dumps(first + [test for test in fastest if test not in first]))
        began = time.monotonic()
        result = mutate_and_test([spec], command_for(tests), timeout)
        line = spec.start_pos[0]
        removed = [row[1:] for row in (result.diff or "").splitlines() if row.startswith("-") and row[:3] != "---"]
        added = [row[1:] for row in (result.diff or "").splitlines() if row.startswith("+") and row[:3] != "+++"]
        item = dict(
            file=name,
            line=line,
            operator=spec.operator_name,
            occurrence=spec.occurrence,
            original=" ".join(part.strip() for part in removed),
            mutated=" ".join(part.strip() for part in added),
            # The nearest line above with code on it: where a short line (`continue`) stands.
            context=next((text.strip() for text in reversed(source[: line - 1]) if text.strip()), ""),
        )
        if result.test_outcome == TestOutcome.SURVIVED:
            item["outcome"] = "survived"
        elif result.test_outcome == TestOutcome.KILLED and result.output == "timeout":
            item["outcome"] = "timeout"
        elif result.test_outcome == TestOutcome.KILLED:
            item["outcome"] = "killed"
            killer = FAILED.search(result.output or "")
            if killer:
                known = killers.setdefault(spec.definition_name or "", [])
                if killer.group(1) in known:
                    known.remove(killer.group(1))
                known.insert(0, killer.group(1))
        else:
            item["outcome"] = "incompetent"
        outcomes.append(item)
        killer = FAILED.search(result.output or "") if item["outcome"] == "killed" else None
        log(
            "  %d/%d %s line %d %s: %s in %.0f s%s"
            % (
                number,
                len(specs),
                name,
                line,
                spec.operator_name,
                item["outcome"],
                time.monotonic() - began,
                " by " + killer.group(1) if killer else "",
            )
        )
    del os.environ["MUTATE_ORDER"]
    return dict(outcomes=outcomes, seconds=round(time.monotonic() - started), timeout_s=round(timeout))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="extend", nargs="+", metavar="PATH", help="modules to run (default: all)")
    parser.add_argument("--list", action="store_true", help="print each module's test files and exit (dry run)")
    parser.add_argument("--out", type=Path, help="the result file, e.g. docs/mutation/<date>.json (merged into)")
    parser.add_argument(
        "--judge",
        action="store_true",
        help="only judge the survivors in --out again against docs/mutation/equivalent.yml (runs nothing)",
    )
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="run only the mutants --out lists as survivors of each module (after new tests); the other "
        "verdicts stay. Refused where the module changed since that run",
    )
    args = parser.parse_args(argv)
    # A stopped run still removes its scratch copy (the finally clauses run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    mapping = module_tests(REPO)
    selected = list(mapping) if not args.module else [Path(path).as_posix() for path in args.module]
    for name in selected:
        if name not in mapping:
            where = "no such file" if not (REPO / name).is_file() else "not a module mutate.py runs"
            print("mutate.py: %s: %s (%s)" % (name, where, ", ".join(MODULE_GLOBS)), file=sys.stderr)
            return 2
    if args.list:
        for name in selected:
            print("%s -> %s" % (name, " ".join(mapping[name]) if mapping[name] else "no test file"))
        return 0
    if args.judge:
        if not args.out or not args.out.is_file():
            print("mutate.py: --judge reads --out, an existing result file", file=sys.stderr)
            return 2
        result = json.loads(args.out.read_text())
        equivalent = load_equivalent(REPO)
        for name in selected:
            if isinstance(result["modules"].get(name), dict):
                result["modules"][name] = judged(result["modules"][name], equivalent)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        return 0
    previous: Dict[str, Any] = {}
    if args.survivors:
        if not args.out or not args.out.is_file():
            print("mutate.py: --survivors reruns the survivors of --out, an existing result file", file=sys.stderr)
            return 2
        previous = json.loads(args.out.read_text())["modules"]
        for name in selected:
            if not isinstance(previous.get(name), dict) or previous[name].get("sha256") != sha256(REPO / name):
                print("mutate.py: %s: no full run of this version of it in %s" % (name, args.out), file=sys.stderr)
                return 2
    if args.module:
        for name in selected:
            if not mapping[name]:
                print("mutate.py: %s: no unit test file imports, runs or names it" % name, file=sys.stderr)
                return 2

    def log(text: str) -> None:
        print(text, flush=True)

    equivalent = load_equivalent(REPO)
    header = dict(
        date=datetime.date.today().isoformat(),
        tester=tester_version(),
        operators=list(OPERATORS),
        command="tools/mutate.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        machine=machine(),
        commit=commit(REPO, [*MODULE_DIRS, TESTS, "tools/mutate.py"]),
        equivalent_from=EQUIVALENT,
    )
    entries: Dict[str, Any] = {}
    status = 0
    with tempfile.TemporaryDirectory(prefix="mutate-") as scratch:
        tree = scratch_copy(REPO, Path(scratch))
        # What each module's run tests is this copy: its commit is HEAD now, and what differs from it.
        copied = {name: commit(REPO, [name, *mapping[name]]) for name in selected}
        os.environ.setdefault("VERL_P40_CACHE", str(REPO / ".cache" / "sdist"))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree / "tools"), os.environ.get("PYTHONPATH")]))
        here = os.getcwd()
        os.chdir(tree)
        try:
            for name in selected:
                only = None
                if args.survivors:
                    only = {(item["operator"], item["occurrence"]) for item in previous[name]["survivors"]}
                try:
                    run = run_module_mutants(tree, name, mapping[name], log, only)
                except Stop as stop:
                    print("mutate.py: %s" % stop, file=sys.stderr)
                    if args.module:
                        return 2
                    entries[name] = str(stop).split(": ", 1)[1]
                    continue
                outcomes = run["outcomes"]
                extra: Dict[str, Any] = dict(
                    seconds=run["seconds"],
                    timeout_s=run["timeout_s"],
                    commit=copied[name],
                    machine=machine(),
                    sha256=sha256(REPO / name),
                )
                if only is not None:
                    # The earlier verdicts of the mutants not rerun stand; the run that made them is kept.
                    old = previous[name]
                    earlier = [{"outcome": "killed"}] * old["killed"] + [{"outcome": "timeout"}] * old["timeouts"]
                    earlier += [{"outcome": "incompetent"}] * old["incompetent"]
                    outcomes = earlier + outcomes
                    first = old.get("first_run") or {key: old[key] for key in ("commit", "seconds", "machine")}
                    extra.update(first_run=first, survivors_rerun=len(only))
                entries[name] = module_result(name, mapping[name], outcomes, equivalent, **extra)
                entry = entries[name]
                log(
                    "%s: %d mutants, %d killed, %d timeouts, %d survived (%d equivalent): %s%% killed"
                    % (
                        name,
                        entry["mutants"],
                        entry["killed"],
                        entry["timeouts"],
                        entry["survived"],
                        len(entry["equivalent"]),
                        entry["killed_percent"],
                    )
                )
                if args.out:
                    os.chdir(here)
                    write_result(args.out, entries, list(mapping), header)
                    os.chdir(tree)
        finally:
            os.chdir(here)
    if args.out:
        write_result(args.out, entries, list(mapping), header)
    return status


# ---------------------------------------------------------------- the pytest plugin (-p mutate)

_durations: Dict[str, float] = {}


def pytest_collection_modifyitems(session, config, items):
    order_file = os.environ.get("MUTATE_ORDER")
    if order_file:
        rank = {test: index for index, test in enumerate(json.loads(Path(order_file).read_text()))}
        items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))


def pytest_runtest_logreport(report):
    if os.environ.get("MUTATE_DURATIONS"):
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("MUTATE_DURATIONS"):
        Path(os.environ["MUTATE_DURATIONS"]).write_text(json.dumps(_durations))


if __name__ == "__main__":
    sys.exit(main())
