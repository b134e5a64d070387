"""The preflight layer: what it found and which GPU profile it chose."""


def test_preflight_recorded_the_host(layer_state, stack):
    state = layer_state("preflight")
    assert state["status"] == "complete"
    assert state["inputs"]["os"].split()[0] in stack["preflight_supported_os"]


def test_preflight_chose_the_expected_profile(host, layer_state, stack):
    state = layer_state("preflight")
    gpus = state["inputs"]["gpus"]
    if stack["preflight_gpu_profile"]:
        expected = stack["preflight_gpu_profile"]
    elif not gpus:
        expected = stack["preflight_default_profile"]
    else:
        ccs = {gpu["compute_capability"] for gpu in gpus}
        expected = next(
            name for name, profile in stack["stack_gpu_profiles"].items() if ccs <= set(profile["compute_capabilities"])
        )
    assert state["inputs"]["profile"] == expected
    assert expected in stack["stack_gpu_profiles"]


def test_gpus_match_nvidia_smi(host, layer_state, stack):
    gpus = layer_state("preflight")["inputs"]["gpus"]
    if not host.exists("nvidia-smi"):
        assert gpus == []
        assert not stack["preflight_require_gpu"]
        return
    names = host.check_output("nvidia-smi --query-gpu=name --format=csv,noheader").splitlines()
    assert [gpu["name"] for gpu in gpus] == [name.strip() for name in names]
