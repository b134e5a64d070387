"""The apex layer: extensions built against the env's torch, wheel cached by build key."""

import pytest


@pytest.fixture(autouse=True)
def _apex_built(stack):
    """apex_enabled: false skips the layer (nothing built, no record): nothing here to check."""
    if not stack["apex_enabled"]:
        pytest.skip("apex_enabled is false: the apex layer is skipped")


def test_cpp_extension_imports(training_user, stack):
    result = training_user.run(stack["stack_env_prefix"] + "/bin/python -c 'import torch, apex_C, apex'")
    assert result.rc == 0, result.stderr


def test_cuda_extensions(training_user, stack):
    if not stack["apex_cuda_extensions_expected"]:
        pytest.skip("CUDA extensions not expected here (apex_cuda_extensions_expected is false: no GPU build)")
    result = training_user.run(
        stack["stack_env_prefix"] + "/bin/python -c 'import torch, amp_C, fused_layer_norm_cuda'"
    )
    assert result.rc == 0, result.stderr


def test_wheel_is_cached_under_its_key(host, stack, layer_state):
    key = layer_state("apex")["details"]["wheel_key"]
    directory = "%s/%s" % (stack["apex_wheel_cache_dir"], key)
    wheels = [name for name in host.check_output("ls %s" % directory).split() if name.endswith(".whl")]
    assert wheels and all(name.startswith("apex-") for name in wheels)
    # Each with the sha256 recorded when it was built, which an install verifies.
    for name in wheels:
        recorded = host.file("%s/%s.sha256" % (directory, name)).content_string.split()
        assert recorded == [host.file("%s/%s" % (directory, name)).sha256sum, name]


def test_build_log_kept(host, stack, layer_state):
    if layer_state("apex")["details"]["built_from_source"]:
        assert host.file(stack["apex_build_log"]).exists


def test_layer_state(layer_state):
    state = layer_state("apex")
    assert state["status"] == "complete"
    assert state["requires"]["torch"] == layer_state("torch")["fingerprint"]
    assert state["requires"]["cuda"] == layer_state("cuda")["fingerprint"]
