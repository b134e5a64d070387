"""The conda layer: Miniforge, the env with the expected Python, owned by the training user."""

import json


def test_training_user_exists(host, stack):
    user = host.user(stack["stack_user"])
    assert user.exists
    assert user.home == stack["stack_user_home"]


def test_conda_runs(training_user, stack):
    out = training_user.check_output(stack["stack_conda_prefix"] + "/bin/conda --version")
    assert out.startswith("conda ")


def test_env_python_version(training_user, stack):
    python = stack["stack_env_prefix"] + "/bin/python"
    version = training_user.check_output(python + " -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'")
    assert version == stack["conda_python_version"]


def test_env_and_work_dir_belong_to_the_user(host, stack):
    for path in (stack["stack_env_prefix"], stack["stack_work_dir"]):
        assert host.file(path).user == stack["stack_user"], path


def test_root_wrote_nothing_into_the_users_miniforge(host, stack):
    """Root claims the prefix in its own state directory (library/stack_tree.py), never by a file
    in the tree, which is the training user's to swap under it. Broken case: the marker file
    .verl-p40-tree that root wrote there (the review's chmod-through-a-link attack)."""
    prefix = stack["stack_conda_prefix"]
    assert host.file(prefix).user == stack["stack_user"]
    owned_by_root = host.check_output("find %s -xdev -user root -print -quit" % prefix)
    assert owned_by_root == ""
    claims = json.loads(host.file(stack["stack_state_dir"] + "/trees/conda.json").content_string)
    assert [claim["path"] for claim in claims["trees"]] == [prefix]


def test_condarc_uses_conda_forge_only(training_user, stack):
    condarc = training_user.read(stack["stack_conda_prefix"] + "/.condarc")
    assert "conda-forge" in condarc
    assert "defaults" not in condarc


def test_condarc_is_the_training_users_only(host, stack):
    """A conda-forge mirror URL in it may carry credentials, and only that user runs conda."""
    condarc = host.file(stack["stack_conda_prefix"] + "/.condarc")
    assert (condarc.mode, condarc.user) == (0o600, stack["stack_user"])


def test_pip_conf_applies_the_constraints(training_user, stack):
    pip_conf = training_user.read(stack["stack_env_prefix"] + "/pip.conf")
    assert "constraint = %s/constraints.txt" % stack["stack_env_prefix"] in pip_conf


def test_login_shell_of_the_user_activates_the_env(training_user, stack):
    out = training_user.check_output("bash -lc 'echo $CONDA_PREFIX; command -v python'")
    prefix, python = out.splitlines()[-2:]
    assert prefix == stack["stack_env_prefix"]
    assert python == stack["stack_env_prefix"] + "/bin/python"


def test_root_login_shells_do_not_source_the_users_conda(host, stack):
    # conda.sh lives in a tree the training user writes: a root shell sourcing it runs that user's code.
    out = host.check_output("bash -lc 'type conda 2>&1; echo ${CONDA_EXE:-none}'")
    assert "not found" in out and out.splitlines()[-1] == "none"


def test_layer_state(layer_state, stack):
    state = layer_state("conda")
    assert state["status"] == "complete"
    assert state["details"]["python"] == stack["conda_python_version"]
    assert json.dumps(state["inputs"]["env"]) == json.dumps(stack["stack_env_prefix"])
