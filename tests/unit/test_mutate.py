"""tools/mutate.py (`make mutate`): the module -> test files map its dry run prints, the names it stops
with, and the kill percentage the result file carries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mutate

REPO = Path(__file__).resolve().parents[2]
TOOL = [sys.executable, str(REPO / "tools" / "mutate.py")]


def dry_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TOOL, *args], capture_output=True, text=True, cwd=REPO, check=False)


def test_every_module_is_mapped_to_its_test_files_or_said_to_have_none():
    done = dry_run("--list")
    assert done.returncode == 0, done.stderr
    listed = dict(line.split(" -> ", 1) for line in done.stdout.splitlines())
    expected = set()
    for pattern in ("library", "module_utils", "filter_plugins", "action_plugins", "lookup_plugins"):
        expected.update(path.relative_to(REPO).as_posix() for path in (REPO / pattern).glob("*.py"))
    expected.update(path.relative_to(REPO).as_posix() for path in REPO.glob("roles/*/files/*.py"))
    assert set(listed) == expected
    for module, tests in listed.items():
        if tests != "no test file":
            for test in tests.split():
                assert test.startswith("tests/unit/test_") and (REPO / test).is_file(), (module, test)
    # The modules the issue holds to 100% are each mapped to their own test file.
    assert listed["library/layer_state.py"] == "tests/unit/test_layer_state.py"
    assert listed["library/verl_patch.py"] == "tests/unit/test_verl_patch.py"
    assert listed["roles/train/files/validate_overrides.py"] == "tests/unit/test_compose.py"
    assert listed["action_plugins/layer_state.py"] == "tests/unit/test_layer_state.py"


def test_the_map_follows_a_docstring_or_an_import(tmp_path: Path):
    (tmp_path / "library").mkdir()
    (tmp_path / "filter_plugins").mkdir()
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    for name in ("library/thing_one.py", "library/thing_two.py", "filter_plugins/knobs.py"):
        (tmp_path / name).write_text("")
    unit = tmp_path / "tests" / "unit"
    (unit / "test_a.py").write_text('"""The thing_one module."""\nimport thing_two\n')
    (unit / "test_b.py").write_text('"""Other things."""\nimport thing_two\nfrom filter_plugins.knobs import x\n')
    assert mutate.module_tests(tmp_path) == {
        "filter_plugins/knobs.py": ["tests/unit/test_b.py"],
        "library/thing_one.py": ["tests/unit/test_a.py"],
        "library/thing_two.py": ["tests/unit/test_a.py", "tests/unit/test_b.py"],
    }


def test_a_module_that_does_not_exist_stops_with_its_name():
    done = dry_run("--list", "--module", "library/no_such_module.py")
    assert done.returncode == 2
    assert "library/no_such_module.py: no such file" in done.stderr
    done = dry_run("--module", "library/no_such_module.py")
    assert done.returncode == 2 and "library/no_such_module.py" in done.stderr


def test_a_module_without_tests_stops_with_its_name(monkeypatch, capsys):
    """Every module has a test file today, so the map is made to have one without: the run stops
    before any mutant, naming it, and --list says it has none."""
    monkeypatch.setattr(mutate, "module_tests", lambda root: {"library/lonely.py": []})
    monkeypatch.setattr(mutate.signal, "signal", lambda *args: None)  # the test process keeps its handlers
    assert mutate.main(["--module", "library/lonely.py"]) == 2
    assert "library/lonely.py: no unit test file" in capsys.readouterr().err
    assert mutate.main(["--list", "--module", "library/lonely.py"]) == 0
    assert capsys.readouterr().out == "library/lonely.py -> no test file\n"


def test_the_kill_percentage_leaves_the_equivalent_mutants_out():
    assert mutate.kill_percent(killed=8, timeouts=1, survived=3, equivalent=2) == 90.0
    assert mutate.kill_percent(killed=9, timeouts=0, survived=0, equivalent=0) == 100.0
    assert mutate.kill_percent(killed=2, timeouts=0, survived=1, equivalent=0) == 66.7
    assert mutate.kill_percent(killed=0, timeouts=0, survived=2, equivalent=2) is None


def test_the_result_file_lists_every_survivor_and_judges_the_equivalent_ones(tmp_path: Path):
    def outcome(result: str, line: int, mutated: str) -> dict:
        return dict(
            outcome=result,
            file="library/m.py",
            line=line,
            operator="core/AddNot",
            occurrence=line,
            context="",
            original="if a:",
            mutated=mutated,
        )

    outcomes = [outcome("killed", 1, "if not a:")] * 6 + [outcome("timeout", 2, "if not a:")]
    outcomes += [
        outcome("survived", 3, "if not b:"),
        outcome("survived", 4, "if not c:"),
        outcome("incompetent", 5, ""),
    ]
    equivalent = [dict(file="library/m.py", operator="core/AddNot", original="if a:", mutated="if not c:", reason="r")]
    entry = mutate.module_result("library/m.py", ["tests/unit/test_m.py"], outcomes, equivalent)
    assert (entry["mutants"], entry["killed"], entry["timeouts"], entry["survived"], entry["incompetent"]) == (
        10,
        6,
        1,
        2,
        1,
    )
    assert [survivor["line"] for survivor in entry["survivors"]] == [3, 4]
    assert [(item["line"], item["reason"]) for item in entry["equivalent"]] == [(4, "r")]
    assert entry["killed_percent"] == 87.5  # 7 of the 8 non-equivalent mutants with a verdict
    out = tmp_path / "result.json"
    mutate.write_result(out, {"library/m.py": entry}, ["library/m.py", "library/n.py"], {"commit": "abc"})
    mutate.write_result(out, {"library/n.py": "not run: its tests fail unmutated"}, ["library/m.py"], {"commit": "d"})
    written = json.loads(out.read_text())
    assert written["commit"] == "d"
    assert written["modules"]["library/m.py"]["killed_percent"] == 87.5
    assert written["modules"]["library/n.py"] == "not run: its tests fail unmutated"


def test_the_project_s_operators_remove_a_call_and_flip_in():
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code

    cosmic_ray.plugins.OPERATOR_PROVIDERS.setdefault("verl_p40", mutate._house_operators())
    source = 'def f(a, b):\n    marked.pop("step", None)\n    if a in b and a not in c:\n        g(\n            1)\n    x = h(2)\n'

    def mutants(name: str) -> list:
        operator = cosmic_ray.plugins.get_operator(name)()
        found = [mutate_code(source, operator, index) for index in range(4)]
        return [code for code in found if code is not None]

    assert mutants("verl_p40/RemoveCallStatement") == [
        source.replace('marked.pop("step", None)', "pass"),
        source.replace("g(\n            1)", "pass"),
    ]
    assert mutants("verl_p40/ReplaceInWithNotIn") == [source.replace("a in b", "a not in b")]
    assert mutants("verl_p40/ReplaceNotInWithIn") == [source.replace("a not in c", "a in c")]
    # Each mutant is a module Python compiles.
    for name in ("verl_p40/RemoveCallStatement", "verl_p40/ReplaceInWithNotIn", "verl_p40/ReplaceNotInWithIn"):
        for code in mutants(name):
            compile(code, "m.py", "exec")
    assert all(name in cosmic_ray.plugins.operator_names() for name in mutate.OPERATORS)


def test_an_equivalent_entry_with_context_names_only_the_survivor_under_that_line():
    def survivor(context: str) -> dict:
        return dict(
            outcome="survived",
            file="m.py",
            line=1,
            operator="core/ReplaceContinueWithBreak",
            occurrence=0,
            original="continue",
            mutated="break",
            context=context,
        )

    entry = dict(
        file="m.py", operator="core/ReplaceContinueWithBreak", original="continue", mutated="break", context="if b:"
    )
    result = mutate.module_result("m.py", [], [survivor("if a:"), survivor("if b:")], [dict(entry, reason="last")])
    assert [item["context"] for item in result["equivalent"]] == ["if b:"]
    assert result["killed_percent"] == 0.0


def test_judging_again_applies_new_reasons_without_running(tmp_path: Path):
    survivor = dict(
        file="m.py", line=3, operator="core/AddNot", occurrence=0, original="if a:", mutated="if  not a:", context=""
    )
    entry = dict(mutants=4, killed=3, timeouts=0, survived=1, incompetent=0, survivors=[survivor], equivalent=[])
    assert mutate.kill_percent(3, 0, 1, 0) == 75.0
    reason = dict(file="m.py", operator="core/AddNot", original="if a:", mutated="if not a:", reason="same")
    again = mutate.judged(entry, [reason])
    assert again["killed_percent"] == 100.0 and again["equivalent"] == [dict(survivor, reason="same")]
