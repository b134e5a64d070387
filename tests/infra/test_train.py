"""The train layer: the launcher for the host's profile, valid against the installed verl.

What these catch beyond the unit tests of the rendered files: train.sh --dry-run runs here
as the training user, so train.env is sourced for real (the cuda layer's profile script,
the conda env's activation) and verl's own Hydra config composes the overrides. A broken
train.env, an env without verl, an override verl refuses, a profile setting that does not
reach verl's config, or a model/data path that is not the directory the model/data layer
wrote (e.g. a literal left behind when model_name changed) fails here.
"""

import json

import pytest
import yaml


def test_launcher_files(host, stack):
    script = host.file(stack["train_work_dir"] + "/train.sh")
    assert script.exists and script.mode == 0o755
    assert script.user == stack["stack_user"]
    env = host.file(stack["train_work_dir"] + "/train.env")
    assert env.mode == 0o600 and env.user == stack["stack_user"]


def test_launcher_is_for_the_host_profile(training_user, stack, layer_state):
    profile = layer_state("preflight")["inputs"]["profile"]
    text = training_user.read(stack["train_work_dir"] + "/train.sh")
    # The profile is named in what train.sh prints (no value is in a comment of the script).
    assert "train.sh: profile %s" % profile in text
    for dead in ("VLLM_DTYPE", "TRITON_MAX_SHARED_MEMORY", "fsdp_config.cpu_offload", "fsdp_config.offload_params"):
        assert dead not in text


def test_print_overrides_and_bash_syntax(training_user, stack, layer_state):
    script = stack["train_work_dir"] + "/train.sh"
    syntax = training_user.run("bash -n " + script)
    assert syntax.rc == 0, syntax.stderr
    overrides = training_user.check_output(script + " --print-overrides").splitlines()
    assert "trainer.resume_mode=%s" % stack["train_resume_mode"] in overrides
    # The directories the model and data layers recorded, not what the controller expects.
    model_dir = layer_state("model")["details"]["dir"]
    assert "actor_rollout_ref.model.path=%s" % model_dir in overrides
    assert "critic.model.path=%s" % model_dir in overrides
    assert "data.train_files=%s/train.parquet" % layer_state("data")["details"]["output"] in overrides


def test_overrides_compose_with_installed_verl(training_user, stack):
    result = training_user.run(
        "%s/bin/python %s/tools/validate_overrides.py --verl %s --script %s/train.sh"
        % (stack["stack_env_prefix"], stack["stack_work_dir"], stack["stack_verl_dir"], stack["train_work_dir"])
    )
    assert result.rc == 0, result.stdout + result.stderr


def test_train_env_activates_the_env_and_the_profile(host, training_user, stack):
    """Sourcing train.env as the training user gives the env's python, CUDA and the profile's variables."""
    probe = (
        'set -eu; . %s/train.env; printf "%%s\\n" "$(command -v python3)" "${CUDA_HOME:-}" "${CONDA_PREFIX:-}"; '
        "python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'" % stack["train_work_dir"]
    )
    result = training_user.run("bash -c %s", probe)
    assert result.rc == 0, result.stdout + result.stderr
    python, cuda_home, conda_prefix, environ = result.stdout.splitlines()[-4:]
    assert python == stack["stack_env_prefix"] + "/bin/python3"
    assert conda_prefix == stack["stack_env_prefix"]
    assert cuda_home and host.file(cuda_home + "/bin/nvcc").exists
    environ = json.loads(environ)
    for name, value in stack["train_profile"]["env"].items():
        assert environ.get(name) == str(value), name


@pytest.fixture(scope="module")
def composed(training_user, stack):
    """verl's config as train.sh --dry-run composes it on this host (Hydra's --cfg job --resolve)."""
    result = training_user.run("%s/train.sh --dry-run", stack["train_work_dir"])
    assert result.rc == 0, "train.sh --dry-run failed:\n%s\n%s" % (result.stdout[-3000:], result.stderr[-3000:])
    config = yaml.safe_load(result.stdout)
    assert isinstance(config, dict) and "actor_rollout_ref" in config, result.stdout[-3000:]
    return config


def test_dry_run_uses_the_layers_model_and_data(composed, layer_state, host):
    model_dir = layer_state("model")["details"]["dir"]
    data_dir = layer_state("data")["details"]["output"]
    arr = composed["actor_rollout_ref"]
    assert arr["model"]["path"] == model_dir
    assert composed["critic"]["model"]["path"] == model_dir
    assert composed["critic"]["model"]["tokenizer_path"] == model_dir
    assert composed["data"]["train_files"] == data_dir + "/train.parquet"
    assert composed["data"]["val_files"] == data_dir + "/test.parquet"
    # ...and those are what the layers filled.
    assert host.file(model_dir + "/config.json").exists
    for name in ("train.parquet", "test.parquet"):
        assert host.file("%s/%s" % (data_dir, name)).size > 0


def test_dry_run_carries_the_profile(composed, stack):
    profile = stack["train_profile"]
    arr, critic = composed["actor_rollout_ref"], composed["critic"]
    precision = profile["precision"]
    assert arr["rollout"]["dtype"] == precision
    fsdp = {
        "actor": arr["actor"]["fsdp_config"],
        "ref": arr["ref"]["fsdp_config"],
        "critic": critic["model"]["fsdp_config"],
    }
    for role, config in fsdp.items():
        assert config["mixed_precision"]["param_dtype"] == precision, role
        assert config["mixed_precision"]["reduce_dtype"] == "float32", role
        assert config["mixed_precision"]["buffer_dtype"] == "float32", role
    assert fsdp["actor"]["model_dtype"] == fsdp["critic"]["model_dtype"] == "float32"
    assert fsdp["ref"]["model_dtype"] == precision
    assert arr["model"]["override_config"]["_attn_implementation"] == profile["attn_implementation"]
    assert arr["actor"]["use_torch_compile"] is profile["torch_compile"]
    assert arr["model"]["use_remove_padding"] is critic["model"]["use_remove_padding"] is profile["remove_padding"]
    assert arr["rollout"]["name"] == profile["rollout_backend"]
    if profile["rollout_backend"] == "hf":
        # Computed on the host (filter_plugins/memory.py): an even split of each GPU's batch.
        micro = arr["rollout"]["micro_batch_size"]
        per_gpu = composed["data"]["train_batch_size"] // composed["trainer"]["n_gpus_per_node"]
        assert micro > 0 and per_gpu % micro == 0, (micro, per_gpu)
    assert fsdp["actor"]["param_offload"] is profile["offload"]["actor_params"]
    assert composed["trainer"]["n_gpus_per_node"] == stack["train_n_gpus_per_node"]


def equal_chunks(rows: int, micro: int) -> bool:
    """verl 0.4.1's hf rollout (hf_rollout.py:47): rows // micro chunks (at least one), which
    DataProto.chunk must cut into equal parts (protocol.py:663)."""
    chunks = max(rows // micro, 1)
    return rows % chunks == 0


def test_batch_sizes_are_ones_verl_runs_with(composed):
    """The batch arithmetic verl 0.4.1 asserts only minutes into a run, worked out here from the
    composed config itself (train.sh --dry-run: verl's own Hydra), not by validate_overrides.py,
    the train role's checker and test_overrides_compose_with_installed_verl's only oracle. A
    validate_overrides.py that exits 0 on wrong batch sizes, with a launcher rendered with them
    (prompts or sequences the GPUs do not divide, a micro-batch set twice or not at all, a
    per-GPU mini-batch that is not a multiple of its micro-batch, an hf rollout micro-batch
    that cuts a GPU's prompts into unequal chunks, no validation batch size), fails here.

    The rules, from verl 0.4.1's source: ray_trainer.py's _validate_config (lines 363-481),
    fsdp_workers.py's normalization of the mini- and micro-batches (156-166, 859-869), the
    prompts split equally among the GPUs (decorator.py's DP_COMPUTE_PROTO dispatch, no padding
    unless VERL_AUTO_PADDING), and the hf rollout's chunks, validation batches padded to a
    multiple of the GPUs (ray_trainer.py:649) included."""
    arr, critic, data, trainer, algorithm = (
        composed[key] for key in ("actor_rollout_ref", "critic", "data", "trainer", "algorithm")
    )
    actor, rollout, ref = arr["actor"], arr["rollout"], arr["ref"]
    gpus = trainer["n_gpus_per_node"] * trainer["nnodes"]
    batch, n = data["train_batch_size"], rollout["n"]
    gae = algorithm["adv_estimator"] == "gae"
    problems = []
    if batch * n % gpus:
        problems.append("train_batch_size %d x rollout.n %d does not divide among %d GPUs" % (batch, n, gpus))
    if batch % gpus:
        problems.append("the %d prompts of a step do not divide among %d GPUs" % (batch, gpus))
    micro_batches = []
    if not actor["use_dynamic_bsz"]:
        micro_batches += [("actor", actor, "ppo_micro_batch_size"), ("rollout", rollout, "log_prob_micro_batch_size")]
        if algorithm["use_kl_in_reward"] or actor["use_kl_loss"]:
            micro_batches.append(("ref", ref, "log_prob_micro_batch_size"))
    if gae and not critic["use_dynamic_bsz"]:
        micro_batches.append(("critic", critic, "ppo_micro_batch_size"))
    for name, section, key in micro_batches:
        given = [k for k in (key, key + "_per_gpu") if section.get(k) is not None]
        if len(given) != 1:
            problems.append("%s: %s set, verl needs exactly one of %s, %s_per_gpu" % (name, given, key, key))
    for name, section in [("actor", actor)] + ([("critic", critic)] if gae else []):
        if section["use_dynamic_bsz"]:
            continue
        if batch < section["ppo_mini_batch_size"]:
            problems.append(
                "%s: ppo_mini_batch_size %d > train_batch_size %d" % (name, section["ppo_mini_batch_size"], batch)
            )
        dp = gpus // section.get("ulysses_sequence_parallel_size", 1)
        mini = section["ppo_mini_batch_size"] * n // dp
        micro = section.get("ppo_micro_batch_size_per_gpu") or (section.get("ppo_micro_batch_size") or 0) // dp
        if mini < 1 or micro < 1 or mini % micro:
            problems.append(
                "%s: per-GPU mini-batch %d, micro-batch %d (must be a positive multiple)" % (name, mini, micro)
            )
    if rollout["name"] == "hf":
        micro = rollout.get("micro_batch_size") or 0
        if micro < 1:
            problems.append("hf rollout without a micro_batch_size: it generates a GPU's whole batch at once")
        else:
            if not equal_chunks(batch // gpus, micro):
                problems.append("hf rollout: %d prompts per GPU in chunks of %d" % (batch // gpus, micro))
            size = data.get("val_batch_size")
            if size is None:
                problems.append("hf rollout: val_batch_size is null, the whole validation set is one batch")
            else:
                # Every validation batch, the last smaller one included, repeated val_kwargs.n times,
                # padded to a multiple of the GPUs and split among them.
                repeat = rollout["val_kwargs"]["n"]
                bad = [rows for rows in range(1, size + 1) if not equal_chunks(-(-rows * repeat // gpus), micro)]
                if bad:
                    problems.append("hf rollout: validation batches of %s rows split unequally" % bad[:5])
    assert problems == [], problems


def test_dry_run_on_pascal_is_the_p40_set(composed, stack):
    """The P40's needs, spelled out: fp32 everywhere, eager attention, the HF rollout."""
    if stack["train_profile"]["name"] != "pascal":
        pytest.skip("this host's profile is %s, not pascal" % stack["train_profile"]["name"])
    arr = composed["actor_rollout_ref"]
    assert arr["rollout"]["dtype"] == "float32"
    for config in (arr["actor"]["fsdp_config"], arr["ref"]["fsdp_config"], composed["critic"]["model"]["fsdp_config"]):
        assert config["model_dtype"] == "float32"
        assert set(config["mixed_precision"].values()) == {"float32"}
    assert arr["model"]["override_config"]["_attn_implementation"] == "eager"
    assert arr["rollout"]["name"] == "hf"
    assert arr["actor"]["use_torch_compile"] is False


def test_layer_state(layer_state):
    assert layer_state("train")["status"] == "complete"


def test_hf_rollout_is_sized_from_the_host(training_user, stack, layer_state):
    # The train role read the model's config.json and preflight's GPU memory; the
    # launcher's header says what it computed, and validation is one chunk per GPU.
    profile = layer_state("preflight")["inputs"]["profile"]
    backend = stack["stack_gpu_profiles"][profile]["rollout_backend"]
    if backend != "hf":
        pytest.skip("the %s profile's rollout backend is %s: nothing sizes an hf rollout" % (profile, backend))
    script = stack["train_work_dir"] + "/train.sh"
    assert "computed by filter_plugins/memory.py" in training_user.read(script)
    overrides = dict(
        line.split("=", 1) for line in training_user.check_output(script + " --print-overrides").splitlines()
    )
    micro = int(overrides["+actor_rollout_ref.rollout.micro_batch_size"])
    gpus = int(overrides["trainer.n_gpus_per_node"]) * int(overrides["trainer.nnodes"])
    assert int(overrides["data.val_batch_size"]) == micro * gpus
    assert (int(overrides["data.train_batch_size"]) // gpus) % micro == 0


def test_report_runs_in_the_training_env(host, training_user, stack):
    tool = host.file(stack["train_tools_dir"] + "/train_report.py")
    assert tool.exists and tool.mode == 0o755
    # The log is the training user's own temporary file: root writes nothing at a name in /tmp
    # that user could have planted a link at.
    lines = (
        "Total training steps: 4",
        "step:1 - critic/score/mean:0.250 - response_length/mean:180.0 - timing_s/gen:3.0 - timing_s/step:9.0",
    )
    result = training_user.run(
        'log=$(mktemp) || exit 1; printf "%%s\\n" %s %s > "$log" && %s --report "$log"; rc=$?; rm -f "$log"; exit $rc',
        *lines,
        stack["train_work_dir"] + "/train.sh",
    )
    assert result.rc == 0, result.stdout + result.stderr
    assert "1 step logged (last: step 1 of 4); still running" in result.stdout
    assert "reward   0.250  length  180.0" in result.stdout
