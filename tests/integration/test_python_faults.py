"""Faults of the Python layers: clear messages, nothing half-installed, the next run recovers.

Runs after test_faults.py on the same container, whose CUDA layer is built by then.
"""

from __future__ import annotations


def test_a_user_that_cannot_be_created(host):
    run = host.play("--tags", "conda", stack_user="Bad User!")
    assert run.returncode != 0
    assert "The training user 'Bad User!'" in run.output
    assert host.state("conda") == {}
    assert not host.exists("/opt/miniforge3")


def test_a_torch_pin_that_does_not_exist(host):
    run = host.play("--tags", "conda,torch", torch_packages=["torch==2.6.99"], torch_expected_version="2.6.99")
    assert run.returncode != 0
    assert "pip could not install torch==2.6.99" in run.output
    assert host.state("conda")["status"] == "complete"
    assert host.state("torch")["status"] == "building"


def test_torch_then_a_failing_apex_build(host):
    run = host.play("--tags", "torch")
    assert run.returncode == 0, run.output[-3000:]
    assert host.state("torch")["status"] == "complete"

    run = host.play("--tags", "apex", apex_build_environment={"APEX_STANDIN_FAIL": "1"})
    assert run.returncode != 0
    assert "Apex did not build" in run.output and "its last lines:" in run.output
    assert "APEX_STANDIN_FAIL=1: this source fails to compile on purpose" in run.output
    assert host.state("apex")["status"] == "building"
    assert host.sh("ls /var/cache/verl-p40/apex-wheels 2>/dev/null | wc -l").stdout.strip() == "0"
    assert host.sh("/opt/miniforge3/envs/verl-env/bin/python -c 'import torch, apex_C'", check=False).returncode != 0

    run = host.play("--tags", "apex")
    assert run.returncode == 0, run.output[-3000:]
    assert host.state("apex")["status"] == "complete"
    assert host.sh("/opt/miniforge3/envs/verl-env/bin/python -c 'import torch, apex_C'", check=False).returncode == 0


def test_apex_reinstalls_from_the_cached_wheel(host):
    run = host.play("--tags", "apex", rebuild="apex")
    assert run.returncode == 0, run.output[-3000:]
    assert "Compile (log in" not in run.output
    assert host.state("apex")["details"]["built_from_source"] is False


def test_a_verl_tag_that_does_not_exist(host):
    run = host.play("--tags", "verl", verl_version="v9.9.9")
    assert run.returncode != 0
    assert "Could not check out v9.9.9" in run.output
    assert host.state("verl")["status"] == "building"


def test_vllm_is_refused_on_a_pascal_gpu(host):
    host.fake_nvidia_smi("0, Tesla P40, 6.1, 24576, 535.183.01, 00000000:3B:00.0")
    try:
        run = host.play("--tags", "vllm", preflight_require_gpu=True, vllm_enabled=True)
    finally:
        host.fake_nvidia_smi(None)
    assert run.returncode != 0
    out = " ".join(run.output.split())
    assert "compute capability 6.1" in out and "no kernel image is available" in out
    assert "HF rollout" in out
    assert host.state("vllm") == {}


def test_a_second_host_takes_the_wheel_from_the_controller(host, tmp_path):
    # The first build sends its wheel to the controller's cache...
    host.sh("rm -rf /var/cache/verl-p40/apex-wheels")
    run = host.play("--tags", "apex", rebuild="apex", stack_controller_cache_dir=str(tmp_path))
    assert run.returncode == 0, run.output[-3000:]
    assert list(tmp_path.glob("apex-wheels/*/apex-*.whl"))
    # ...and a host without it (here: the same host, its cache emptied) installs that wheel.
    host.sh("rm -rf /var/cache/verl-p40/apex-wheels")
    run = host.play("--tags", "apex", rebuild="apex", stack_controller_cache_dir=str(tmp_path))
    assert run.returncode == 0, run.output[-3000:]
    assert "Compile (log in" not in run.output
    assert host.state("apex")["details"]["built_from_source"] is False
