"""The apex layer: extensions built against the env's torch, wheel cached by build key."""

import pytest


def test_cpp_extension_imports(host, stack):
    assert host.run(stack["stack_env_prefix"] + "/bin/python -c 'import torch, apex_C, apex'").rc == 0


def test_cuda_extensions(host, stack):
    if not stack["apex_cuda_extensions_expected"]:
        pytest.skip("CUDA extensions not expected here (apex_cuda_extensions_expected is false: no GPU build)")
    result = host.run(stack["stack_env_prefix"] + "/bin/python -c 'import torch, amp_C, fused_layer_norm_cuda'")
    assert result.rc == 0, result.stderr


def test_wheel_is_cached_under_its_key(host, stack, layer_state):
    key = layer_state("apex")["details"]["wheel_key"]
    listing = host.check_output("ls %s/%s" % (stack["apex_wheel_cache_dir"], key))
    assert any(name.startswith("apex-") and name.endswith(".whl") for name in listing.split())


def test_build_log_kept(host, stack, layer_state):
    if layer_state("apex")["details"]["built_from_source"]:
        assert host.file(stack["apex_build_log"]).exists


def test_layer_state(layer_state):
    state = layer_state("apex")
    assert state["status"] == "complete"
    assert state["requires"]["torch"] == layer_state("torch")["fingerprint"]
    assert state["requires"]["cuda"] == layer_state("cuda")["fingerprint"]
