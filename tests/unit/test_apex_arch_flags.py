"""roles/apex/files/arch_flags.py: every Apex CUDA extension is built for the profile's arches.

Found by `make apex-proof` (docs/apex-proof/): Apex 25.04 gives fused_weight_gradient_mlp_cuda
its own -gencode list (sm_70 and up), so torch's cpp_extension adds no TORCH_CUDA_ARCH_LIST
flags to it and the P40 build held no sm_61 code for it. The setup.py excerpt below has the
shape of Apex's (the real file is rewritten by the role and checked by the proof).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import arch_flags

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "roles" / "apex" / "files" / "arch_flags.py"

SETUP = """\
if bare_metal_version >= Version("11.0"):

    cc_flag = []
    cc_flag.append("-gencode")
    cc_flag.append("arch=compute_70,code=sm_70")

    ext_modules.append(
        CUDAExtension(
            name="fused_weight_gradient_mlp_cuda",
            sources=["a.cu"],
            extra_compile_args={"nvcc": ["-O3"] + cc_flag},
        )
    )
"""


def flags_in_effect(text: str) -> list[str]:
    """Run the excerpt and return the nvcc flags the extension gets."""
    seen = {}

    class Version(tuple):
        def __new__(cls, text):
            return tuple.__new__(cls, map(int, text.split(".")))

    def extension(**kwargs):
        seen.update(kwargs)
        return kwargs

    scope = {"bare_metal_version": Version("11.8"), "Version": Version, "ext_modules": [], "CUDAExtension": extension}
    exec(compile(text, "setup.py", "exec"), scope)
    return seen["extra_compile_args"]["nvcc"]


@pytest.mark.parametrize(
    "arches, flags",
    [
        ("6.1", ["-gencode", "arch=compute_61,code=sm_61"]),
        ("6.1;7.0", ["-gencode", "arch=compute_61,code=sm_61", "-gencode", "arch=compute_70,code=sm_70"]),
        ("6.1+PTX", ["-gencode", "arch=compute_61,code=sm_61", "-gencode", "arch=compute_61,code=compute_61"]),
    ],
)
def test_gencode_flags(arches, flags):
    assert arch_flags.gencode_flags(arches) == flags


def test_the_fixed_list_becomes_the_builds_arches(tmp_path):
    assert "arch=compute_61,code=sm_61" not in flags_in_effect(SETUP)  # the defect, as Apex has it
    setup = tmp_path / "setup.py"
    setup.write_text(SETUP)
    first = subprocess.run([sys.executable, str(TOOL), str(setup), "6.1"], capture_output=True, text=True, check=True)
    assert json.loads(first.stdout) == {
        "changed": True,
        "found": True,
        "flags": ["-gencode", "arch=compute_61,code=sm_61"],
    }
    assert flags_in_effect(setup.read_text()) == ["-O3", "-gencode", "arch=compute_61,code=sm_61"]
    # Idempotent; another arch list replaces the first rewrite instead of adding to it.
    again = subprocess.run([sys.executable, str(TOOL), str(setup), "6.1"], capture_output=True, text=True, check=True)
    assert json.loads(again.stdout)["changed"] is False
    subprocess.run([sys.executable, str(TOOL), str(setup), "7.0"], capture_output=True, text=True, check=True)
    assert flags_in_effect(setup.read_text()) == ["-O3", "-gencode", "arch=compute_70,code=sm_70"]
    assert setup.read_text().count("verl-p40") == 1


def test_a_setup_py_without_the_list_is_left_alone(tmp_path):
    setup = tmp_path / "setup.py"
    setup.write_text("from setuptools import setup\nsetup(name='apex')\n")
    done = subprocess.run([sys.executable, str(TOOL), str(setup), "6.1"], capture_output=True, text=True, check=True)
    assert (
        json.loads(done.stdout)["found"] is False
        and setup.read_text() == "from setuptools import setup\nsetup(name='apex')\n"
    )


def test_a_bad_arch_is_refused(tmp_path):
    setup = tmp_path / "setup.py"
    setup.write_text(SETUP)
    done = subprocess.run([sys.executable, str(TOOL), str(setup), "sm_61"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "not an arch" in done.stderr and setup.read_text() == SETUP


def test_an_empty_field_of_the_arch_list_is_skipped():
    # "${TORCH_CUDA_ARCH_LIST};6.1" with the variable empty, or a list ending in a separator.
    assert arch_flags.gencode_flags(";6.1; 7.0;") == [
        "-gencode",
        "arch=compute_61,code=sm_61",
        "-gencode",
        "arch=compute_70,code=sm_70",
    ]
    with pytest.raises(ValueError, match="empty"):
        arch_flags.gencode_flags(" ; ")


@pytest.mark.parametrize("argv", [[], ["setup.py"], ["setup.py", "6.1", "7.0"]])
def test_a_wrong_number_of_arguments_prints_the_usage_and_exits_2(argv, capsys):
    assert arch_flags.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == 'python3 arch_flags.py SETUP_PY "6.1"\n'
