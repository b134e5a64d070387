"""The cudnn layer: the archive unpacked, linked into the CUDA tree, known to ld.so."""

import re

import pytest


@pytest.fixture(scope="module")
def expected(stack):
    return ".".join(stack.artifact(stack["cudnn_artifact"])["version"].split(".")[:3])


def header_version(text):
    parts = [re.search(r"#define CUDNN_%s\s+(\d+)" % name, text).group(1) for name in ("MAJOR", "MINOR", "PATCHLEVEL")]
    return ".".join(parts)


def test_header_version(host, stack, expected):
    text = host.file(stack["cudnn_prefix"] + "/include/cudnn_version.h").content_string
    assert header_version(text) == expected


def test_linked_into_cuda(host, stack):
    if not stack["cudnn_link_into_cuda"]:
        pytest.skip("cudnn_link_into_cuda is off")
    header = host.file(stack["cudnn_cuda_prefix"] + "/include/cudnn_version.h")
    assert header.is_symlink
    assert header.linked_to == stack["cudnn_prefix"] + "/include/cudnn_version.h"
    libs = host.check_output("ls %s/lib64" % stack["cudnn_cuda_prefix"]).split()
    assert any(name.startswith("libcudnn.so") for name in libs)


def test_dynamic_linker_finds_cudnn(host, stack):
    assert host.file(stack["cudnn_ldconfig_file"]).contains(stack["cudnn_prefix"] + "/lib")
    cache = host.check_output("ldconfig -p")
    assert re.search(r"libcudnn\.so\.8 .*=> %s/lib/" % re.escape(stack["cudnn_prefix"]), cache)


def test_layer_state_follows_cuda(layer_state, expected):
    cudnn = layer_state("cudnn")
    assert cudnn["status"] == "complete"
    assert cudnn["version"] == expected
    assert cudnn["requires"]["cuda"] == layer_state("cuda")["fingerprint"]
