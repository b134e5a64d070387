"""The train layer: the launcher for the host's profile, valid against the installed verl."""


def test_launcher_files(host, stack):
    script = host.file(stack["train_work_dir"] + "/train.sh")
    assert script.exists and script.mode == 0o755
    assert script.user == stack["stack_user"]
    env = host.file(stack["train_work_dir"] + "/train.env")
    assert env.mode == 0o644


def test_launcher_is_for_the_host_profile(host, stack, layer_state):
    profile = layer_state("preflight")["inputs"]["profile"]
    text = host.file(stack["train_work_dir"] + "/train.sh").content_string
    assert "GPU profile %s" % profile in text
    for dead in ("VLLM_DTYPE", "TRITON_MAX_SHARED_MEMORY", "fsdp_config.cpu_offload", "fsdp_config.offload_params"):
        assert dead not in text


def test_print_overrides_and_bash_syntax(host, stack):
    script = stack["train_work_dir"] + "/train.sh"
    assert host.run("bash -n " + script).rc == 0
    with host.sudo(stack["stack_user"]):
        overrides = host.check_output(script + " --print-overrides").splitlines()
    assert "trainer.resume_mode=%s" % stack["train_resume_mode"] in overrides
    assert any(line.startswith("actor_rollout_ref.model.path=") for line in overrides)


def test_overrides_compose_with_installed_verl(host, stack):
    with host.sudo(stack["stack_user"]):
        result = host.run("%s/bin/python %s/tools/validate_overrides.py --verl %s --script %s/train.sh"
                          % (stack["stack_env_prefix"], stack["stack_work_dir"], stack["stack_verl_dir"],
                             stack["train_work_dir"]))
    assert result.rc == 0, result.stdout + result.stderr


def test_layer_state(layer_state):
    assert layer_state("train")["status"] == "complete"
