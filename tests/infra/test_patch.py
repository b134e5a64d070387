"""The patch layer: the profile's fixes applied to the checkout, and recorded."""

import json

import pytest


def test_record_lists_the_profile_fixes(training_user, stack, layer_state):
    expected = stack["patch_fixes"]
    state = layer_state("patch")
    assert state["status"] == "complete"
    assert sorted(state["details"]["applied"]) == sorted(expected)
    record = stack["stack_verl_dir"] + "/.verl_p40_patch/record.json"
    if expected:
        applied = {entry["fix"] for entry in json.loads(training_user.read(record))["applied"]}
        assert applied == set(expected)


def test_no_bf16_autocast_left_in_the_actor(training_user, stack):
    if "no_bf16_autocast" not in stack["patch_fixes"]:
        pytest.skip("the profile's patch_fixes do not name no_bf16_autocast: the actor keeps verl's autocast")
    actor = training_user.read(stack["stack_verl_dir"] + "/verl/workers/actor/dp_actor.py")
    assert "dtype=torch.bfloat16" not in actor
    assert "verl_p40_patch: no_bf16_autocast" in actor


def test_precision_maps_untouched(training_user, stack):
    dtypes = training_user.read(stack["stack_verl_dir"] + "/verl/utils/torch_dtypes.py")
    assert '"bfloat16"' in dtypes and "verl_p40_patch" not in dtypes


def test_patched_verl_still_imports(training_user, stack):
    code = "import verl.workers.actor.dp_actor, verl.workers.critic.dp_critic"
    result = training_user.run("%s/bin/python -c %s", stack["stack_env_prefix"], code)
    assert result.rc == 0, result.stderr
