"""No control character in a value that reaches a file or a command line (filter_plugins/control.py).

One rule (control.py), checked once for every option of every role's spec by preflight
(roles/preflight/tasks/control_characters.yml) and by tools/render.py; the templates put no value
into a comment or a quoted here-document, and the lines that cannot quote a value (INI, unit,
ldconfig) pass it through ``one_line``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import REPO, run_play

import render
from control import control_character_problems, one_line, path_spelling_problems

CONTROL = [
    ("\n", "a newline"),
    ("\r", "a carriage return"),
    ("\x00", "a NUL"),
    ("\t", "a tab"),
    ("\x1b", "an escape"),
    ("\x7f", "the control character U+007F"),
    ("\x85", "the control character U+0085"),
    ("\u2028", "the control character U+2028"),
]
SPECS = sorted((REPO / "roles").glob("*/meta/argument_specs.yml"))
# Each role's templates, and the launcher's in the project's templates/ (the train role's).
TEMPLATES = sorted((REPO / "roles").glob("*/templates/*.j2")) + sorted((REPO / "templates").glob("*.j2"))


def spec_options(specs: list[Path] = SPECS) -> dict[str, dict]:
    """Every option of every entry point of every role (or of the roles of `specs`): name -> its spec."""
    options: dict[str, dict] = {}
    for spec in specs:
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            for name, option in (entry.get("options") or {}).items():
                options.setdefault(name, option or {})
    return options


# -- the filter --------------------------------------------------------------------


@pytest.mark.parametrize("char, what", CONTROL)
def test_each_control_character_is_refused_naming_the_variable(char: str, what: str):
    # Broken case: a rule of `ord(c) < 32` alone (the Ray unit's old check) lets DEL, C1 and U+2028 through.
    (problem,) = control_character_problems("/usr/local/cuda" + char + "touch /tmp/x", "cuda_prefix")
    assert problem.startswith("cuda_prefix holds " + what) and problem.endswith(" at character 16")
    with pytest.raises(AnsibleFilterError, match=r"^stack_pip_cert holds .*Set it without that character"):
        one_line("/etc/ca" + char, "stack_pip_cert")


def test_lists_and_dicts_are_walked_keys_included():
    # Broken case: a walk that checks only top-level strings misses every one of these.
    value = {
        "GOOD": "1",
        "BAD": "x\ry",
        "B\tC": "1",
        "nested": {"list": ["ok", ["deep\n"]]},
        "number": 3,
        "none": None,
    }
    assert control_character_problems(value, "train_extra_env") == [
        "train_extra_env.BAD holds a carriage return (\\r) at character 2",
        "a key of train_extra_env ('B\\tC') holds a tab (\\t) at character 2",
        "train_extra_env.nested.list[1][0] holds a newline (\\n) at character 5",
    ]
    assert control_character_problems(["https://a", "https://b\x00"], "stack_pip_extra_index_urls") == [
        "stack_pip_extra_index_urls[1] holds a NUL (\\0) at character 10"
    ]


@pytest.mark.parametrize("value", ["", "/opt/miniforge3", "É ünïcode with spaces", "$(x);`y`'\"", 7, True, None, []])
def test_clean_values_pass(value):
    assert control_character_problems(value, "v") == []
    if isinstance(value, str):
        assert one_line(value, "v") == value


def test_the_message_does_not_repeat_the_value():
    # A URL may carry a token: the message says where the character is, not what the value is.
    (problem,) = control_character_problems("https://user:s3cr3t@mirror/simple\n", "stack_pip_index_url")
    assert "s3cr3t" not in problem and "stack_pip_index_url" in problem


def test_the_ray_unit_filters_use_the_same_rule():
    from cluster import systemd_environment_file, systemd_exec

    # Broken case: cluster.py's own `ord(c) < 32 or == 127` let U+0085 and U+2028 through.
    for char in ("\n", "\x85", "\u2028"):
        with pytest.raises(AnsibleFilterError, match="argument 1 of ExecStart holds a control character"):
            systemd_exec(["ray", "start" + char])
        with pytest.raises(AnsibleFilterError, match="ray_extra_env.X holds a control character"):
            systemd_environment_file({"X": "a" + char}, "ray_extra_env")


def _untemplated(value):
    """The value with its Jinja expressions left out: their text is source, what they render is checked."""
    if isinstance(value, str):
        return "" if "{{" in value or "{%" in value else value
    if isinstance(value, dict):
        return {key: _untemplated(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_untemplated(item) for item in value]
    return value


def test_no_default_holds_a_control_character():
    # What preflight checks must pass with the roles' own defaults (a literal block is the likely slip).
    for path in sorted((REPO / "roles").glob("*/defaults/**/*.yml")):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            assert control_character_problems(_untemplated(value), name) == [], path


# -- every option is checked, at preflight and in render.py -------------------------


def bad_value(option: dict):
    """A value of the option's type with a newline in its one string; None where it holds no text."""
    kind = option.get("type", "str")
    if kind in ("str", "path", "raw"):
        return "/ok\ninjected"
    if kind == "list" and option.get("elements", "str") in ("str", "path"):
        return ["ok", "bad\ninjected"]
    if kind == "dict":
        return {"K": "bad\ninjected"}
    return None


def expected_name(name: str, option: dict) -> str:
    value = bad_value(option)
    return name + {list: "[1]", dict: ".K"}.get(type(value), "")


def test_every_string_option_of_every_role_is_covered(tmp_path: Path):
    # Broken case: a hand-written list of variables (a new option is missed), or a walk over
    # stack_layers only (the stack, preflight and stack_artifact specs are missed).
    options = spec_options()
    bad = {name: bad_value(option) for name, option in options.items() if bad_value(option) is not None}
    assert {"cuda_prefix", "stack_work_dir", "stack_user", "stack_pip_index_url", "train_extra_env"} <= set(bad)
    extra = tmp_path / "extra.json"

    def play(values: dict, stage: str) -> subprocess.CompletedProcess:
        extra.write_text(json.dumps(values))
        check = {
            "name": "Run it",
            "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "control_characters"},
            "vars": {"__preflight_input_stage": stage},
        }
        return run_play(
            tmp_path, [check], "-e", "@%s" % extra, callback="default", env={"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
        )

    # Preflight checks twice (roles/preflight/tasks/inputs.yml, then profile_inputs.yml): before the first
    # layer every role's options but those of the roles whose defaults read the profile, then theirs.
    # Broken cases: a role in neither check, or a profile role's option checked before the profile.
    late = set(yaml.safe_load((REPO / "roles/preflight/vars/main.yml").read_text())["__preflight_input_roles"])
    early_options = spec_options([spec for spec in SPECS if spec.parent.parent.name not in late])
    stage_of = {name: "early" if name in early_options else "profile" for name in options}
    named = {}
    for stage in ("early", "profile"):
        refused = play(bad, stage)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "nothing was changed on the host" in refused.stdout, refused.stdout + refused.stderr
        named[stage] = set(re.findall(r"(?:^|; |\")(\S+) holds a newline", refused.stdout))
    for name, option in options.items():
        if option.get("no_log"):
            # Reading a no_log option decrypts a vault: it is checked where it is used.
            assert name not in named["early"] | named["profile"]
        elif name in bad:
            assert expected_name(name, option) in named[stage_of[name]], (name, stage_of[name])
            assert expected_name(name, option) not in named[{"early": "profile", "profile": "early"}[stage_of[name]]]
    for stage in ("early", "profile"):
        passed = play({}, stage)
        assert passed.returncode == 0, passed.stdout + passed.stderr


@pytest.mark.parametrize(
    "value, normal",
    [
        ("/usr/local/cuda-11.8/", "/usr/local/cuda-11.8"),
        ("/opt//miniforge3", "/opt/miniforge3"),
        ("/opt/./x", "/opt/x"),
    ],
)
def test_a_path_spelled_other_than_normally_is_refused(value: str, normal: str):
    # Broken case: '<cudnn_prefix>.partial' of '/opt/x/' is '/opt/x/.partial', inside the prefix.
    assert path_spelling_problems(value, "cuda_prefix") == [
        "cuda_prefix is spelled '%s': write it as '%s'" % (value, normal)
    ]


@pytest.mark.parametrize("value", ["/usr/local/cuda-11.8", "/", "relative/", "", None, 3])
def test_a_path_spelled_normally_passes(value):
    assert path_spelling_problems(value, "cuda_prefix") == []


def test_preflight_refuses_a_path_option_with_a_trailing_slash(tmp_path: Path):
    """Only options of type path: a URL with a trailing '/' (stack_mirror_url) is fine."""
    task = {"name": "Run it", "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "control_characters"}}
    values = {"cuda_prefix": "/usr/local/cuda-11.8/", "stack_mirror_url": "http://mirror.example/verl-p40/"}
    done = run_play(tmp_path, [task], "-e", json.dumps(values), callback="default")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cuda_prefix is spelled '/usr/local/cuda-11.8/': write it as '/usr/local/cuda-11.8'" in done.stdout
    assert "stack_mirror_url" not in done.stdout


def test_render_checks_the_same_options(tmp_path: Path):
    # Broken case: render.py without the check writes a launcher preflight would refuse.
    assert set(render.spec_options()) == {name for name, option in spec_options().items() if not option.get("no_log")}
    with pytest.raises(ValueError, match=r"train_log_dir holds a newline \(\\n\) at character 3"):
        render.render("pascal", tmp_path, {"train_log_dir": "/l\nEOF\ntouch pwned"})
    with pytest.raises(ValueError, match=r"train_extra_env.A holds a carriage return"):
        render.render("pascal", tmp_path, {"train_extra_env": {"A": "x\ry"}})
    assert not (tmp_path / "train.sh").exists()


# -- the templates ----------------------------------------------------------------------

EXPRESSION = re.compile(r"\{\{(.*?)\}\}")
# A number cannot end a line: `| int` and `| float` may stand in a comment. ansible_managed is
# the controller's configuration, not an input.
NUMERIC = re.compile(r"\|\s*(int|float)\s*$")


def _template_lines(path: Path):
    """(number, line, in a quoted here-document) for each line of a template's text."""
    heredoc = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if heredoc is not None:
            if line.strip() == heredoc:
                heredoc = None
                continue
            yield number, line, True
            continue
        yield number, line, False
        match = re.search(r"<<-?\s*(['\"])(\w+)\1", line)
        if match:
            heredoc = match.group(2)


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_template_puts_a_value_in_a_comment_or_a_quoted_heredoc(path: Path):
    # Broken case: `# CUDA from {{ cuda_prefix }}` in cuda-env.sh.j2, or `{{ train_log_dir }}` in
    # train.sh's usage text (a newline ends the here-document and the next line runs).
    for number, line, in_heredoc in _template_lines(path):
        values = [e.strip() for e in EXPRESSION.findall(line) if e.strip() != "ansible_managed"]
        where = "%s:%d" % (path.relative_to(REPO), number)
        if in_heredoc:
            assert not values, "%s: a value inside a quoted here-document" % where
        if line.lstrip().startswith("#"):
            assert all(NUMERIC.search(v) for v in values), "%s: a value in a comment: %s" % (where, line)


LINE_TEMPLATES = [path for path in TEMPLATES if not path.name.endswith((".sh.j2", ".env.j2"))]


@pytest.mark.parametrize("path", LINE_TEMPLATES, ids=lambda p: str(p.relative_to(REPO)))
def test_config_and_unit_lines_pass_values_through_one_line(path: Path):
    # An INI, unit or ldconfig line cannot quote a value: the template itself refuses a control
    # character too, for a role run without preflight. Broken case: `index-url = {{ stack_pip_index_url }}`.
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for expression in EXPRESSION.findall(line):
            expression = expression.strip()
            if expression == "ansible_managed" or line.lstrip().startswith("#"):
                continue
            assert "one_line" in expression or "systemd_exec" in expression, "%s:%d: %s" % (
                path.relative_to(REPO),
                number,
                line,
            )


MARK = "MARKxq"


def test_rendered_launcher_has_values_only_in_quoted_words(tmp_path: Path):
    # Every str/path option of the train role, and the stack values it reads, set to text with a marker.
    options = spec_options()
    variables = {
        name: "/m/%s%s" % (MARK, name)
        for name, option in options.items()
        if name.startswith("train_")
        and option.get("type", "str") in ("str", "path")
        # Names from a fixed set, refused otherwise before any value is written (a preset: the
        # names of stack_train_presets, filter_plugins/memory.py's preset_check).
        and name not in ("train_adv_estimator", "train_resume_mode", "train_preset")
    }
    variables["stack_ray_group"] = MARK + "group"
    # The model's shape, which render.py would otherwise take from the model directory's name.
    variables["train_model_config"] = yaml.safe_load(
        (REPO / "roles" / "stack" / "defaults" / "main" / "model_architectures.yml").read_text()
    )["stack_model_architectures"]["Qwen2.5-0.5B-Instruct"]
    written = render.render("pascal", tmp_path, variables)
    for path in written.values():
        heredoc = None
        for line in path.read_text().splitlines():
            if heredoc is not None:
                assert MARK not in line, "%s: a value in a here-document: %s" % (path.name, line)
                heredoc = None if line.strip() == heredoc else heredoc
                continue
            match = re.search(r"<<-?\s*'(\w+)'", line)
            heredoc = match.group(1) if match else None
            if MARK in line:
                assert not line.lstrip().startswith("#"), "%s: a value in a comment: %s" % (path.name, line)


def test_usage_prints_the_log_directory_as_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # With render.py's check out of the way, the template itself: the log directory used to sit
    # inside the usage text's quoted here-document, where a newline and EOF ended it.
    monkeypatch.setattr(render, "input_control_problems", lambda templar, data: [])
    marker = tmp_path / "pwned"
    log_dir = "/logs\nEOF\ntouch %s\ncat <<'EOF'" % marker
    render.render("pascal", tmp_path / "out", {"train_log_dir": log_dir})
    done = subprocess.run(
        ["bash", str(tmp_path / "out" / "train.sh"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert done.stdout.endswith("The log directory: %s\n" % log_dir)
