"""The vllm layer: installed only for a profile whose rollout backend is vllm."""


def test_vllm_only_where_the_profile_wants_it(host, training_user, stack, layer_state):
    profile = layer_state("preflight")["inputs"]["profile"]
    wanted = stack["stack_gpu_profiles"][profile]["rollout_backend"] == "vllm"
    result = training_user.run(stack["stack_env_prefix"] + "/bin/python -c 'import vllm'")
    found = result.rc == 0
    if not found:
        # Absent, not a python (or a runuser) that did not run.
        assert "No module named 'vllm'" in result.stderr, result.stderr
    assert found == wanted
    state = host.file("%s/vllm.json" % stack["stack_state_dir"])
    assert state.exists == wanted
