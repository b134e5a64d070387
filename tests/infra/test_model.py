"""The model layer: a complete model directory where the launcher looks for it.

The completeness check is the fetch tool's own (every weight file as long as its header
says), run on the host; tests/infra/test_train.py checks that train.sh names this directory.
"""

import json


def test_model_directory_is_complete(host, stack):
    for name in ("config.json", "tokenizer_config.json"):
        assert host.file("%s/%s" % (stack["model_dir"], name)).exists, name
    listing = host.check_output("ls %s" % stack["model_dir"]).split()
    assert any(name.endswith(".safetensors") for name in listing)
    config = json.loads(host.file(stack["model_dir"] + "/config.json").content_string)
    assert config["model_type"] == "qwen2"


def test_weights_are_whole(host, stack):
    result = host.run(
        "%s/bin/python %s/tools/model_fetch.py check %s",
        stack["stack_env_prefix"],
        stack["stack_work_dir"],
        stack["model_dir"],
    )
    assert result.rc == 0, result.stdout + result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {"changed": False, "complete": True, "missing": []}


def test_layer_records_the_directory(layer_state, stack):
    assert layer_state("model")["details"]["dir"] == stack["model_dir"]
