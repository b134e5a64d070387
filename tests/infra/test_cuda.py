"""The cuda layer: a working nvcc 11.8 with a host compiler it accepts."""

import re

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


# Debian's default gcc by major release, where nvcc 11.8 needs g++-11 beside it.
DEFAULT_GCC = {"12": "12.", "13": "14."}


def test_host_compiler_is_accepted_and_default_gcc_unchanged(host, layer_state):
    compiler = layer_state("cuda")["details"]["host_compiler"]
    major = int(host.check_output(compiler + " -dumpfullversion").split(".")[0])
    assert major <= 11
    release = host.system_info.release.split(".")[0]
    if host.system_info.distribution == "debian" and release in DEFAULT_GCC:
        assert compiler.endswith("g++-11")
        assert host.check_output("gcc -dumpfullversion").startswith(DEFAULT_GCC[release])


def test_gcc_11_comes_from_another_suite_only_where_the_release_has_none(host, stack):
    """Debian 13's archive has no gcc 11: the layer adds bookworm's suite pinned at priority 1, so apt
    takes gcc-11 from it and nothing the release has; elsewhere it adds no suite."""
    sources = host.file(stack["cuda_compiler_apt_sources"])
    pin = host.file(stack["cuda_compiler_apt_preferences"])
    if not (host.system_info.distribution == "debian" and host.system_info.release.startswith("13")):
        assert not sources.exists and not pin.exists
        return
    assert sources.user == pin.user == "root" and sources.mode == pin.mode == 0o644
    assert "Suites: bookworm" in sources.content_string
    assert "Pin: release n=bookworm" in pin.content_string
    policy = host.check_output("apt-cache policy gcc-11 gcc")
    gcc_11, gcc = policy.split("\ngcc:")
    assert re.search(r"Installed: (\S+)", gcc_11).group(1) == re.search(r"Candidate: (\S+)", gcc_11).group(1)
    assert re.search(r"^ +1 \S+ bookworm/main", gcc_11, re.M), gcc_11
    # The release's own gcc stays apt's choice (priority 500), and an upgrade takes nothing from bookworm:
    # apt -s names each package's source as Origin:Version/Suite (bookworm's: Debian:12.<n>/oldstable).
    # The priority above is what holds it; trixie's versions are newer than bookworm's for nearly every
    # package both have, so this fails only where a pin let an older release's higher version in.
    assert re.search(r"\*\*\* \S+ 500\n +500 \S+ trixie/main", gcc), gcc
    upgrade = host.run("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    assert upgrade.rc == 0, upgrade.stderr
    from_bookworm = [
        line
        for line in upgrade.stdout.splitlines()
        if line.startswith("Inst ") and re.search(r"Debian:12[.\d]*/|/oldstable|bookworm", line)
    ]
    assert from_bookworm == [], upgrade.stdout


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


def test_math_header_declares_the_c23_functions_as_glibc_2_41_does(host, prefix):
    """nvcc 11.8's crt/math_functions.h against glibc 2.41's mathcalls.h (Debian 13): the four
    declarations carry glibc's exception specification behind a guard of its version, on every
    host (below 2.41 the guard gives them none, as before); test_compiles_a_kernel_for_sm_61 is
    what fails on Debian 13 without it."""
    header = host.file(prefix + "/targets/x86_64-linux/include/crt/math_functions.h").content_string
    declared = re.findall(
        r"^extern .* (sinpi|sinpif|cospi|cospif)\((?:double|float) x\) VERL_P40_C23_MATH_NOEXCEPT;$", header, re.M
    )
    assert sorted(declared) == ["cospi", "cospif", "sinpi", "sinpif"]
    assert header.count("#define VERL_P40_C23_MATH_NOEXCEPT noexcept(true)") == 1
    assert "(__GLIBC__ == 2 && __GLIBC_MINOR__ >= 41)" in header
