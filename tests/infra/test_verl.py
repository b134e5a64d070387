"""The verl layer: the pinned checkout, installed editable, torch untouched."""

import json
import re

from stack import pip_check_problems


def test_checkout_at_the_pinned_commit(training_user, stack):
    head = training_user.check_output("git -C %s rev-parse HEAD", stack["stack_verl_dir"])
    assert head == stack["verl_commit"]


def test_import_resolves_to_the_checkout(training_user, stack):
    out = training_user.check_output(
        stack["stack_env_prefix"] + "/bin/python -c "
        "'import json, verl, torch; print(json.dumps([verl.__file__, verl.__version__, torch.__version__]))'"
    )
    path, version, torch_version = json.loads(out)
    assert path.startswith(stack["stack_verl_dir"] + "/")
    assert version == stack["verl_expected_version"]
    assert torch_version == stack["torch_expected_version"]


def test_pip_check(training_user, stack):
    """Exit 0 with pip's all-clear, or exit 1 with only the allowed findings; a missing or
    crashing pip (exit 1 or 127 with nothing on stdout, a traceback on stderr) fails."""
    result = training_user.run(stack["stack_env_prefix"] + "/bin/python -m pip check")
    run = {"rc": result.rc, "stdout": result.stdout, "stderr": result.stderr}
    assert pip_check_problems(run, stack["verl_pip_check_allowed"]) == []


def test_pip_check_read_here(training_user, stack):
    """pip check's own verdict, read here without pip_check_problems (filter_plugins/stack.py),
    which the verl role and test_pip_check above both trust. With no finding allowed (the
    default: verl 0.4.1's pinned set has none), pip must exit 0 and print only its all-clear;
    with some allowed, each line it prints must match one of them. A conflicting install that
    a pip_check_problems returning [] lets through, or a pip that did not run (exit 127, a
    traceback), fails here."""
    result = training_user.run(stack["stack_env_prefix"] + "/bin/python -m pip check")
    said = "exit %s\nstdout: %s\nstderr: %s" % (result.rc, result.stdout, result.stderr)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    allowed = [re.compile(pattern) for pattern in stack["verl_pip_check_allowed"] or []]
    assert "Traceback" not in result.stderr, said
    if result.rc == 0 or not allowed:
        assert result.rc == 0 and lines == ["No broken requirements found."], said
    else:
        # Exit 1: pip found something; each finding must be one the inventory accepts.
        assert result.rc == 1 and lines, said
        assert [line for line in lines if not any(pattern.search(line) for pattern in allowed)] == [], said


def test_layer_state(layer_state, stack):
    state = layer_state("verl")
    assert state["status"] == "complete"
    assert state["details"]["commit"] == stack["verl_commit"]
    assert state["requires"]["torch"] == layer_state("torch")["fingerprint"]
