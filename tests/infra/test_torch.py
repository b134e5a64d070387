"""The torch layer: the pinned build, and constraints that keep it."""

import json

import pytest


@pytest.fixture(scope="module")
def build(training_user, stack):
    out = training_user.check_output(
        stack["stack_env_prefix"] + "/bin/python -c "
        "'import json, torch; print(json.dumps([torch.__version__, torch.version.cuda]))'"
    )
    return json.loads(out)


def test_version_and_cuda(build, stack):
    assert build == [stack["torch_expected_version"], stack["torch_expected_cuda"]]


def test_constraints_pin_every_package(training_user, stack):
    pins = training_user.read(stack["stack_env_prefix"] + "/constraints.txt").split()
    for package in stack["torch_packages"]:
        assert package in pins


def test_torch_is_the_wheel_its_sha256_pins(host, training_user, stack):
    """With a sha256 known for the torch pin on the env's Python, pip installed the file it had
    downloaded with --require-hashes (direct_url.json names it); without one, torch came from the
    index (no direct_url.json). The download directory is gone either way."""
    pin = next(p for p in stack["torch_packages"] if p.startswith("torch=="))
    known = (stack["torch_wheel_sha256"].get(pin) or {}).get(str(stack["conda_python_version"]))
    wheel_dir = stack["stack_env_prefix"] + "/torch-wheel"
    found = training_user.run("cat %s/torch-*.dist-info/direct_url.json" % stack["stack_env_site_packages"])
    if known:
        assert found.rc == 0, "torch has no direct_url.json: it was not installed from the verified wheel"
        url = json.loads(found.stdout)["url"]
        assert url.startswith("file://" + wheel_dir + "/torch-") and url.endswith(".whl"), url
    else:
        # No such file, not a cat (or a runuser) that did not run.
        assert found.rc != 0 and "No such file" in found.stderr, found.stdout + found.stderr
    assert not host.file(wheel_dir).exists


def test_a_later_pip_install_cannot_replace_torch(training_user, stack):
    result = training_user.run(
        stack["stack_env_prefix"] + "/bin/python -m pip install --dry-run --no-deps torch==2.5.1"
    )
    assert result.rc != 0
    assert "torch" in result.stderr and ("constraint" in result.stderr or "conflict" in result.stderr.lower())


def test_gpu_matches_the_profile(training_user, stack, layer_state):
    gpus = layer_state("preflight")["inputs"]["gpus"]
    if not gpus:
        pytest.skip("no GPU on this host")
    out = training_user.check_output(
        stack["stack_env_prefix"] + "/bin/python -c "
        '\'import torch; a = torch.ones(64, 64, device="cuda"); '
        'print("%d.%d" % torch.cuda.get_device_capability(0), (a @ a)[0, 0].item())\''
    )
    cap, value = out.split()
    assert cap == gpus[0]["compute_capability"]
    assert float(value) == 64.0


def test_layer_state(layer_state, stack):
    state = layer_state("torch")
    assert state["status"] == "complete"
    assert state["version"] == stack["torch_expected_version"]
    assert state["requires"]["conda"] == layer_state("conda")["fingerprint"]
