"""The model layer: a complete model directory where the launcher looks for it.

The fetch tool's own completeness check (every weight file as long as its header says) runs
on the host; test_weights_match_the_config checks the same and more without it, from the
safetensors headers read here. tests/infra/test_train.py checks that train.sh names this
directory.
"""

import base64
import json
import math
import struct


def test_model_directory_is_complete(host, training_user, stack):
    for name in ("config.json", "tokenizer_config.json"):
        assert host.file("%s/%s" % (stack["model_dir"], name)).exists, name
    listing = training_user.check_output("ls %s", stack["model_dir"]).split()
    assert any(name.endswith(".safetensors") for name in listing)
    config = json.loads(training_user.read(stack["model_dir"] + "/config.json"))
    assert config["model_type"] == "qwen2"


def test_weights_are_whole(training_user, stack):
    result = training_user.run(
        "%s/bin/python %s/tools/model_fetch.py check %s",
        stack["stack_env_prefix"],
        stack["stack_work_dir"],
        stack["model_dir"],
    )
    assert result.rc == 0, result.stdout + result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {"changed": False, "complete": True, "missing": []}


def test_layer_records_the_directory(layer_state, stack):
    assert layer_state("model")["details"]["dir"] == stack["model_dir"]


# safetensors' dtype names and their sizes in bytes; config.json's torch_dtype -> safetensors'.
DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
TORCH_DTYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def qwen2_tensors(config: dict) -> dict[str, list[int]]:
    """Every tensor Qwen2ForCausalLM loads, with its shape, from config.json (transformers' modeling_qwen2)."""
    hidden, inner, heads = config["hidden_size"], config["intermediate_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    q, kv = heads * head_dim, config["num_key_value_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": [config["vocab_size"], hidden], "model.norm.weight": [hidden]}
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = [config["vocab_size"], hidden]
    for layer in range(config["num_hidden_layers"]):
        prefix = "model.layers.%d." % layer
        shapes.update(
            {
                prefix + "input_layernorm.weight": [hidden],
                prefix + "post_attention_layernorm.weight": [hidden],
                prefix + "self_attn.q_proj.weight": [q, hidden],
                prefix + "self_attn.q_proj.bias": [q],
                prefix + "self_attn.k_proj.weight": [kv, hidden],
                prefix + "self_attn.k_proj.bias": [kv],
                prefix + "self_attn.v_proj.weight": [kv, hidden],
                prefix + "self_attn.v_proj.bias": [kv],
                prefix + "self_attn.o_proj.weight": [hidden, q],
                prefix + "mlp.gate_proj.weight": [inner, hidden],
                prefix + "mlp.up_proj.weight": [inner, hidden],
                prefix + "mlp.down_proj.weight": [hidden, inner],
            }
        )
    return shapes


def first_bytes(user, path: str, count: int) -> bytes:
    """The first bytes of a file on the host, read as the training user (base64 keeps binary
    intact through the backend)."""
    return base64.b64decode(user.check_output("head -c %s %s | base64 -w0", str(count), path))


def safetensors_header(user, path: str) -> tuple[int, dict]:
    """A .safetensors file's header and its length: an 8-byte little-endian length, then that many bytes of JSON."""
    (length,) = struct.unpack("<Q", first_bytes(user, path, 8))
    assert 0 < length < 100_000_000, "%s: a header length of %d bytes is not a safetensors header" % (path, length)
    return length, json.loads(first_bytes(user, path, 8 + length)[8:])


def test_weights_match_the_config(host, training_user, stack):
    """Read without the fetch tool (model_fetch.py check, the model layer's and
    test_weights_are_whole's oracle): each weight file's safetensors header, parsed here. Every
    tensor Qwen2ForCausalLM loads is there, once, in config.json's shape and dtype and nothing
    else; each tensor's bytes are its shape's, packed without gap or overlap; each file is
    exactly 8 + header + data bytes long. Weights of another model or revision than the
    config.json beside them (a mixed copy), a shard missing from an index, or a file cut off
    after its header that a lying checker passed, fail here."""
    directory = stack["model_dir"]
    config = json.loads(training_user.read(directory + "/config.json"))
    index = directory + "/model.safetensors.index.json"
    if host.file(index).exists:
        weight_map = json.loads(training_user.read(index))["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        weight_map = None
        files = [
            name for name in training_user.check_output("ls %s", directory).split() if name.endswith(".safetensors")
        ]
    assert files, "no .safetensors weights in %s" % directory
    found: dict[str, dict] = {}
    for name in files:
        path = "%s/%s" % (directory, name)
        assert host.file(path).is_file, "%s is missing" % path
        header_length, header = safetensors_header(training_user, path)
        header.pop("__metadata__", None)
        spans = sorted(tuple(entry["data_offsets"]) for entry in header.values())
        ends = [0] + [end for _, end in spans]
        assert [start for start, _ in spans] == ends[:-1], "%s: tensor data has gaps or overlaps" % name
        assert host.file(path).size == 8 + header_length + ends[-1], "%s is not 8 + header + data bytes long" % name
        for tensor, entry in header.items():
            assert tensor not in found, "%s is in %s and %s" % (tensor, found[tensor]["file"], name)
            start, end = entry["data_offsets"]
            assert end - start == math.prod(entry["shape"]) * DTYPE_BYTES[entry["dtype"]], (name, tensor, entry)
            found[tensor] = dict(entry, file=name)
    if weight_map is not None:
        where = {tensor: entry["file"] for tensor, entry in found.items()}
        differ = sorted(t for t in set(where) | set(weight_map) if where.get(t) != weight_map.get(t))
        assert differ == [], "the index and the shards' headers place these differently: %s" % differ[:10]
    expected = qwen2_tensors(config)
    # A tied checkpoint may still carry lm_head.weight (transformers ignores it).
    if config.get("tie_word_embeddings", False) and "lm_head.weight" in found:
        expected["lm_head.weight"] = [config["vocab_size"], config["hidden_size"]]
    lacking, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    assert lacking == [], "tensors config.json needs that the weights lack: %s" % lacking[:10]
    assert extra == [], "tensors in the weights that config.json has no place for: %s" % extra[:10]
    wrong = {t: found[t]["shape"] for t in expected if found[t]["shape"] != expected[t]}
    assert wrong == {}, "shapes other than config.json's: %s" % {t: (wrong[t], expected[t]) for t in wrong}
    assert config.get("torch_dtype") in TORCH_DTYPES, "config.json's torch_dtype: %r" % config.get("torch_dtype")
    dtype = TORCH_DTYPES[config["torch_dtype"]]
    assert {t: e["dtype"] for t, e in found.items() if e["dtype"] != dtype} == {}, "config.json says " + dtype
