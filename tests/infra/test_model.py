"""The model layer: a complete model directory where the launcher looks for it."""

import json


def test_model_directory_is_complete(host, stack):
    for name in ("config.json", "tokenizer_config.json"):
        assert host.file("%s/%s" % (stack["model_dir"], name)).exists, name
    listing = host.check_output("ls %s" % stack["model_dir"]).split()
    assert any(name.endswith(".safetensors") for name in listing)
    config = json.loads(host.file(stack["model_dir"] + "/config.json").content_string)
    assert config["model_type"] == "qwen2"


def test_launcher_points_at_it(stack):
    assert stack["train_model_path"] == stack["model_dir"]
