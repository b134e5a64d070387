"""The cuda layer: a working nvcc 11.8 with a host compiler it accepts."""

import pytest

KERNEL = r"""
__global__ void axpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


@pytest.fixture(scope="module")
def prefix(stack):
    return stack["cuda_prefix"]


@pytest.fixture(scope="module")
def release(stack):
    return ".".join(stack.artifact(stack["cuda_artifact"])["version"].split(".")[:2])


def login(host, command):
    """Run a command in a login shell, as a user of the host would."""
    return host.run("bash -lc %s", command)


def test_version_json(host, prefix, release):
    import json

    version = json.loads(host.file(prefix + "/version.json").content_string)
    assert version["cuda"]["version"].startswith(release + ".")


def test_nvcc_reports_the_release(host, prefix, release):
    out = host.check_output(prefix + "/bin/nvcc --version")
    assert "release %s," % release in out


def test_login_shell_environment(host, prefix, stack):
    assert host.file(stack["cuda_profile_script"]).exists
    env = login(host, "echo $CUDA_HOME; command -v nvcc; echo $LD_LIBRARY_PATH")
    assert env.rc == 0
    cuda_home, nvcc, ld_path = env.stdout.splitlines()[:3]
    assert cuda_home == prefix
    assert nvcc == prefix + "/bin/nvcc"
    assert prefix + "/lib64" in ld_path.split(":")


def test_host_compiler_is_accepted_and_default_gcc_unchanged(host, layer_state):
    compiler = layer_state("cuda")["details"]["host_compiler"]
    major = int(host.check_output(compiler + " -dumpfullversion").split(".")[0])
    assert major <= 11
    if host.system_info.distribution == "debian" and host.system_info.release.startswith("12"):
        assert compiler.endswith("g++-11")
        assert host.check_output("gcc -dumpfullversion").startswith("12.")


def test_compiles_a_kernel_for_sm_61(host):
    # A cubin's ELF e_flags carry the SM version in the low byte (0x3d for sm_61).
    check = (
        "import struct; d = open('k.cubin', 'rb').read(); "
        "print(d[:4] == b'\\x7fELF', struct.unpack('<I', d[48:52])[0] & 0xff)"
    )
    result = login(
        host,
        "d=$(mktemp -d) && cd $d && cat > k.cu <<'EOF'\n%s\nEOF\n"
        'nvcc -cubin -arch=sm_61 -o k.cubin k.cu && python3 -c "%s"; rc=$?; rm -rf $d; exit $rc' % (KERNEL, check),
    )
    assert result.rc == 0, result.stderr
    assert result.stdout.split() == ["True", "61"]


def test_layer_state(layer_state, release):
    state = layer_state("cuda")
    assert state["status"] == "complete"
    assert state["version"].startswith(release + ".")
    assert state["details"]["nvcc"].startswith("V" + release + ".")


def test_link_matches_setting(host, prefix, stack):
    link = host.file(stack["cuda_link_path"])
    if stack["cuda_link"]:
        assert link.is_symlink and link.linked_to == prefix
    else:
        # The role must not have made the link it was told not to make.
        assert not (link.is_symlink and link.linked_to == prefix)
