"""The patch layer: the profile's fixes applied to the checkout, and recorded."""

import json

import pytest


def test_record_lists_the_profile_fixes(host, stack, layer_state):
    expected = stack["patch_fixes"]
    state = layer_state("patch")
    assert state["status"] == "complete"
    assert sorted(state["details"]["applied"]) == sorted(expected)
    record = host.file(stack["stack_verl_dir"] + "/.verl_p40_patch/record.json")
    if expected:
        applied = {entry["fix"] for entry in json.loads(record.content_string)["applied"]}
        assert applied == set(expected)


def test_no_bf16_autocast_left_in_the_actor(host, stack):
    if "no_bf16_autocast" not in stack["patch_fixes"]:
        pytest.skip("the profile's patch_fixes do not name no_bf16_autocast: the actor keeps verl's autocast")
    actor = host.file(stack["stack_verl_dir"] + "/verl/workers/actor/dp_actor.py").content_string
    assert "dtype=torch.bfloat16" not in actor
    assert "verl_p40_patch: no_bf16_autocast" in actor


def test_precision_maps_untouched(host, stack):
    dtypes = host.file(stack["stack_verl_dir"] + "/verl/utils/torch_dtypes.py").content_string
    assert '"bfloat16"' in dtypes and "verl_p40_patch" not in dtypes


def test_patched_verl_still_imports(host, stack):
    code = "import verl.workers.actor.dp_actor, verl.workers.critic.dp_critic"
    result = host.run("%s/bin/python -c '%s'" % (stack["stack_env_prefix"], code))
    assert result.rc == 0, result.stderr
