"""Tests for filter_plugins/nvidia.py on recorded nvidia-smi outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

import nvidia

REPO = Path(__file__).resolve().parents[2]
SAMPLES = Path(__file__).resolve().parent / "samples" / "nvidia-smi"
PLUGIN_DIR = REPO / "filter_plugins"

PROFILES = {
    "pascal": {"compute_capabilities": ["6.0", "6.1", "6.2"], "torch_cuda_arch_list": "6.1"},
    "ampere": {"compute_capabilities": ["8.0", "8.6"]},
}


def sample(name: str) -> str:
    """A sample as nvidia-smi printed it. A constructed sample says so in leading '#' lines, which
    nvidia-smi never prints; they are dropped here, so the parser sees only nvidia-smi's format."""
    lines = (SAMPLES / name).read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("#"))


# sample -> (name, compute_capability, memory_mib, pci_bus_id) per GPU, driver
GPU_SAMPLES = {
    "p40-single.txt": (
        [("Tesla P40", "6.1", 24576, "00000000:03:00.0")],
        "535.183.01",
    ),
    "p40-x4.txt": (
        [
            ("Tesla P40", "6.1", 24576, "00000000:3B:00.0"),
            ("Tesla P40", "6.1", 24576, "00000000:5E:00.0"),
            ("Tesla P40", "6.1", 24576, "00000000:AF:00.0"),
            ("Tesla P40", "6.1", 24576, "00000000:D8:00.0"),
        ],
        "550.90.07",
    ),
    # Two P40s with ECC on (their usual state): memory.total reads 22919 MiB (tests/gpu's two-GPU proof).
    "p40-x2-ecc.txt": (
        [
            ("Tesla P40", "6.1", 22919, "00000000:3B:00.0"),
            ("Tesla P40", "6.1", 22919, "00000000:AF:00.0"),
        ],
        "570.172.08",
    ),
    "p40-x2-p100-x2.txt": (
        [
            ("Tesla P40", "6.1", 24576, "00000000:04:00.0"),
            ("Tesla P40", "6.1", 24576, "00000000:05:00.0"),
            ("Tesla P100-PCIE-16GB", "6.0", 16384, "00000000:83:00.0"),
            ("Tesla P100-PCIE-16GB", "6.0", 16384, "00000000:84:00.0"),
        ],
        "535.183.01",
    ),
    "p40-rtx3090-mixed.txt": (
        [
            ("Tesla P40", "6.1", 24576, "00000000:01:00.0"),
            ("NVIDIA GeForce RTX 3090", "8.6", 24576, "00000000:02:00.0"),
        ],
        "535.183.01",
    ),
    # Constructed (the files say so): the other Pascal cards, each with the memory it reports.
    "p100-x2.txt": (
        [
            ("Tesla P100-PCIE-16GB", "6.0", 16280, "00000000:3B:00.0"),
            ("Tesla P100-PCIE-16GB", "6.0", 16280, "00000000:AF:00.0"),
        ],
        "570.172.08",
    ),
    "gtx1080ti-x2.txt": (
        [
            ("NVIDIA GeForce GTX 1080 Ti", "6.1", 11264, "00000000:01:00.0"),
            ("NVIDIA GeForce GTX 1080 Ti", "6.1", 11264, "00000000:02:00.0"),
        ],
        "570.172.08",
    ),
}

# sample -> words the advice must contain
ERROR_SAMPLES = {
    "error-driver-not-loaded.txt": ["driver is not loaded", "modprobe nvidia", "reboot"],
    "error-no-devices.txt": ["sees no GPU", "lspci", "Above 4G decoding"],
    "error-nvml-mismatch.txt": ["version mismatch", "Reboot"],
    "error-compute-cap-unknown.txt": ["compute_cap", "Upgrade the NVIDIA driver"],
}


def test_every_sample_is_tested() -> None:
    on_disk = {path.name for path in SAMPLES.glob("*.txt")}
    assert on_disk == set(GPU_SAMPLES) | set(ERROR_SAMPLES)


def test_query_command_matches_the_parser() -> None:
    assert nvidia.QUERY_COMMAND == (
        "nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version,pci.bus_id"
        " --format=csv,noheader,nounits"
    )


# --- nvidia_smi_gpus ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GPU_SAMPLES))
def test_gpus_parsed_from_sample(name: str) -> None:
    expected, driver = GPU_SAMPLES[name]
    gpus = nvidia.nvidia_smi_gpus(sample(name))

    assert [gpu["index"] for gpu in gpus] == list(range(len(expected)))
    for gpu, (gpu_name, cc, memory, bus_id) in zip(gpus, expected):
        major, minor = (int(part) for part in cc.split("."))
        assert gpu == {
            "index": gpu["index"],
            "name": gpu_name,
            "compute_capability": cc,
            "cc_major": major,
            "cc_minor": minor,
            "memory_mib": memory,
            "driver_version": driver,
            "pci_bus_id": bus_id,
        }


def test_single_p40_values() -> None:
    [gpu] = nvidia.nvidia_smi_gpus(sample("p40-single.txt"))
    assert gpu["index"] == 0
    assert gpu["cc_major"] == 6 and gpu["cc_minor"] == 1
    assert isinstance(gpu["memory_mib"], int) and gpu["memory_mib"] == 24576


@pytest.mark.parametrize("text", ["", "\n", "  \n\n \t\n"])
def test_empty_output_gives_no_gpus(text: str) -> None:
    assert nvidia.nvidia_smi_gpus(text) == []


def test_whitespace_blank_lines_and_crlf_are_tolerated() -> None:
    text = "\r\n  0 ,Tesla P40,6.1 ,  24576,535.183.01,00000000:03:00.0  \r\n\r\n"
    [gpu] = nvidia.nvidia_smi_gpus(text)
    assert gpu["name"] == "Tesla P40"
    assert gpu["memory_mib"] == 24576
    assert gpu["pci_bus_id"] == "00000000:03:00.0"


def test_warning_lines_are_skipped() -> None:
    text = "WARNING: infoROM is corrupted at gpu 0000:03:00.0\n" + sample("p40-single.txt")
    assert [gpu["name"] for gpu in nvidia.nvidia_smi_gpus(text)] == ["Tesla P40"]


@pytest.mark.parametrize("name", sorted(ERROR_SAMPLES))
def test_gpus_raises_the_advice_for_failure_output(name: str) -> None:
    with pytest.raises(AnsibleFilterError) as error:
        nvidia.nvidia_smi_gpus(sample(name))
    assert str(error.value).startswith("nvidia-smi failed")
    for word in ERROR_SAMPLES[name]:
        assert word in str(error.value)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        # wrong column count: fields missing or an extra field queried
        ("0, Tesla P40, 6.1, 24576", ["line 1", "expected 6", "got 4", "--query-gpu="]),
        (
            "0, Tesla P40, 6.1, 24576, 535.183.01, 00000000:03:00.0, GPU-1234",
            ["expected 6", "got 7"],
        ),
        # forgot nounits / noheader
        (
            "0, Tesla P40, 6.1, 24576 MiB, 535.183.01, 00000000:03:00.0",
            ["memory.total", "'24576 MiB'", "no units"],
        ),
        (
            "index, name, compute_cap, memory.total [MiB], driver_version, pci.bus_id",
            ["index should be a whole number", "'index'", "no header"],
        ),
        # placeholders where a value is required
        ("0, Tesla P40, 6.1, [N/A], 535.183.01, 00000000:03:00.0", ["memory.total", "[N/A]"]),
        (
            "0, Tesla P40, [Not Supported], 24576, 535.183.01, 00000000:03:00.0",
            ["compute_cap", "[Not Supported]"],
        ),
        (
            "0, [GPU requires reset], 6.1, 24576, 535.183.01, 00000000:03:00.0",
            ["name", "[GPU requires reset]", "reset"],
        ),
        # values in the wrong shape
        ("0, Tesla P40, 61, 24576, 535.183.01, 00000000:03:00.0", ["compute_cap", "'61'"]),
        ("0, Tesla P40, 6.1, 24576, R535, 00000000:03:00.0", ["driver_version", "'R535'"]),
        ("0, Tesla P40, 6.1, 24576, 535.183.01, 3:0.0", ["pci.bus_id", "'3:0.0'"]),
        ("0, , 6.1, 24576, 535.183.01, 00000000:03:00.0", ["name is empty"]),
    ],
)
def test_malformed_lines_are_refused(line: str, words: list[str]) -> None:
    with pytest.raises(AnsibleFilterError) as error:
        nvidia.nvidia_smi_gpus(line + "\n")
    for word in words:
        assert word in str(error.value)


def test_error_names_the_bad_line_number() -> None:
    text = sample("p40-single.txt") + "\n1, Tesla P40, 6.1, lots, 535.183.01, 00000000:04:00.0\n"
    with pytest.raises(AnsibleFilterError, match=r"line 3 .*memory\.total"):
        nvidia.nvidia_smi_gpus(text)


def test_stdout_lines_instead_of_stdout_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="stdout"):
        nvidia.nvidia_smi_gpus(sample("p40-single.txt").splitlines())


# --- nvidia_smi_error ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ERROR_SAMPLES))
def test_error_advice_for_failure_sample(name: str) -> None:
    advice = nvidia.nvidia_smi_error(sample(name))
    for word in ERROR_SAMPLES[name]:
        assert word in advice


@pytest.mark.parametrize("name", sorted(GPU_SAMPLES))
def test_no_error_for_good_output(name: str) -> None:
    assert nvidia.nvidia_smi_error(sample(name)) == ""


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("/bin/sh: 1: nvidia-smi: not found", ["not installed"]),
        ("[Errno 2] No such file or directory: b'nvidia-smi'", ["not installed"]),
        ("Failed to initialize NVML: Insufficient Permissions", ["root", "/dev/nvidia"]),
        (
            "Unable to determine the device handle for GPU 0000:03:00.0: Unknown Error",
            ["does not answer", "Xid"],
        ),
        ("GPU 00000000:03:00.0: GPU is lost.  Reboot the system to recover this GPU", ["Xid"]),
        ("", []),
        ("something nobody has seen before", []),
        # "not installed" needs both: nvidia-smi named, and the shell or exec saying it is missing.
        ("nvidia-smi: Segmentation fault (core dumped)", []),
        ("/bin/sh: 1: lspci: not found", []),
    ],
)
def test_error_advice_for_other_failures(text: str, words: list[str]) -> None:
    advice = nvidia.nvidia_smi_error(text)
    if not words:
        assert advice == ""
    for word in words:
        assert word in advice


# --- gpu_profile_select ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("p40-single.txt", "pascal"),
        ("p40-x4.txt", "pascal"),
        ("p40-x2-p100-x2.txt", "pascal"),
        ("p100-x2.txt", "pascal"),
        ("gtx1080ti-x2.txt", "pascal"),
    ],
)
def test_profile_selected_from_gpus(name: str, profile: str) -> None:
    gpus = nvidia.nvidia_smi_gpus(sample(name))
    assert nvidia.gpu_profile_select(gpus, PROFILES) == profile


def test_mixed_profiles_are_refused() -> None:
    gpus = nvidia.nvidia_smi_gpus(sample("p40-rtx3090-mixed.txt"))
    with pytest.raises(AnsibleFilterError) as error:
        nvidia.gpu_profile_select(gpus, PROFILES)
    message = str(error.value)
    assert "GPU 0 Tesla P40 (cc 6.1) -> pascal" in message
    assert "GPU 1 NVIDIA GeForce RTX 3090 (cc 8.6) -> ampere" in message
    assert "override" in message and "ampere, pascal" in message


def test_override_wins_over_mixed_gpus() -> None:
    gpus = nvidia.nvidia_smi_gpus(sample("p40-rtx3090-mixed.txt"))
    assert nvidia.gpu_profile_select(gpus, PROFILES, override="pascal") == "pascal"


def test_unknown_override_lists_valid_names() -> None:
    gpus = nvidia.nvidia_smi_gpus(sample("p40-single.txt"))
    with pytest.raises(AnsibleFilterError, match=r"'volta' is not a known profile.*ampere, pascal"):
        nvidia.gpu_profile_select(gpus, PROFILES, override="volta")


def test_gpu_without_profile_is_named() -> None:
    v100 = "0, Tesla V100-PCIE-16GB, 7.0, 16384, 535.183.01, 00000000:00:1E.0"
    gpus = nvidia.nvidia_smi_gpus(v100)
    with pytest.raises(AnsibleFilterError) as error:
        nvidia.gpu_profile_select(gpus, PROFILES)
    message = str(error.value)
    assert "GPU 0 Tesla V100-PCIE-16GB (cc 7.0) matches no GPU profile" in message
    assert "ampere: 8.0, 8.6; pascal: 6.0, 6.1, 6.2" in message


def test_no_gpu_uses_default() -> None:
    assert nvidia.gpu_profile_select([], PROFILES, default="pascal") == "pascal"


def test_no_gpu_without_default_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match=r"No NVIDIA GPU found.*ampere, pascal"):
        nvidia.gpu_profile_select([], PROFILES)


def test_unknown_default_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match=r"Default GPU profile 'kepler'"):
        nvidia.gpu_profile_select([], PROFILES, default="kepler")


def test_unquoted_yaml_capabilities_still_match() -> None:
    gpus = nvidia.nvidia_smi_gpus(sample("p40-single.txt"))
    assert nvidia.gpu_profile_select(gpus, {"pascal": {"compute_capabilities": [6.0, 6.1]}}) == ("pascal")


@pytest.mark.parametrize(
    ("profiles", "words"),
    [
        ({}, ["non-empty mapping"]),
        ({"pascal": {"min_cc": "6.0"}}, ["'pascal'", "compute_capabilities"]),
        ({"pascal": {"compute_capabilities": "6.1"}}, ["non-empty list"]),
        ({"pascal": {"compute_capabilities": ["sm_61"]}}, ["'sm_61'"]),
        (
            {"pascal": {"compute_capabilities": ["6.1"]}, "p40": {"compute_capabilities": ["6.1"]}},
            ["6.1 is claimed by both", "'pascal'", "'p40'"],
        ),
    ],
)
def test_bad_profiles_are_refused(profiles: dict, words: list[str]) -> None:
    gpus = nvidia.nvidia_smi_gpus(sample("p40-single.txt"))
    with pytest.raises(AnsibleFilterError) as error:
        nvidia.gpu_profile_select(gpus, profiles)
    for word in words:
        assert word in str(error.value)


# --- gpu_cuda_arch_list: what Apex compiles for ------------------------------


@pytest.mark.parametrize(
    ("name", "arch_list"),
    [
        # A constant "6.1" fails here: an sm_61-only build has no code a P100 (sm_60) can run.
        ("p100-x2.txt", "6.0"),
        ("p40-single.txt", "6.1"),
        ("p40-x2-ecc.txt", "6.1"),
        ("gtx1080ti-x2.txt", "6.1"),
        # Both, each once, lowest first: a list of the first GPU's only, or one entry per GPU, fails.
        ("p40-x2-p100-x2.txt", "6.0;6.1"),
    ],
)
def test_arch_list_is_the_cards_own(name: str, arch_list: str) -> None:
    gpus = nvidia.nvidia_smi_gpus(sample(name))
    assert nvidia.gpu_cuda_arch_list(gpus, "9.9") == arch_list


def test_arch_list_sorts_by_number_not_text() -> None:
    gpus = [{"index": 0, "compute_capability": "10.0"}, {"index": 1, "compute_capability": "9.0"}]
    assert nvidia.gpu_cuda_arch_list(gpus, "") == "9.0;10.0"


def test_arch_list_without_gpu_is_the_profile_default() -> None:
    # CI and other GPU-less build hosts: the pascal profile's 6.1, what CI's Apex has always built.
    assert nvidia.gpu_cuda_arch_list([], "6.1") == "6.1"
    assert nvidia.gpu_cuda_arch_list([], 6.1) == "6.1"  # an unquoted YAML value


def test_arch_list_without_gpu_or_default_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="apex_cuda_arch_list"):
        nvidia.gpu_cuda_arch_list([], "")


# --- gpu_summary -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "summary"),
    [
        ("p40-single.txt", "1 x Tesla P40 (cc 6.1, 24576 MiB), driver 535.183.01"),
        ("p40-x4.txt", "4 x Tesla P40 (cc 6.1, 24576 MiB), driver 550.90.07"),
        (
            "p40-x2-p100-x2.txt",
            "2 x Tesla P40 (cc 6.1, 24576 MiB) + 2 x Tesla P100-PCIE-16GB (cc 6.0, 16384 MiB), driver 535.183.01",
        ),
        (
            "p40-rtx3090-mixed.txt",
            "1 x Tesla P40 (cc 6.1, 24576 MiB) + 1 x NVIDIA GeForce RTX 3090 (cc 8.6, 24576 MiB), driver 535.183.01",
        ),
    ],
)
def test_summary(name: str, summary: str) -> None:
    assert nvidia.gpu_summary(nvidia.nvidia_smi_gpus(sample(name))) == summary


def test_summary_without_gpu() -> None:
    assert nvidia.gpu_summary([]) == "no NVIDIA GPU"


def test_gpus_on_old_drivers_names_each_one_below_the_minimum() -> None:
    gpus = [
        {"index": 0, "name": "Tesla P40", "driver_version": "470.256.02"},
        {"index": 1, "name": "Tesla P40", "driver_version": "520.61.05"},
        {"index": 2, "name": "Tesla P100", "driver_version": "520.61.4"},
        {"index": 3, "name": "Tesla P4", "driver_version": "580.105.08"},
    ]
    # 520.61.4 < 520.61.05 as numbers, not as text (the version test's reading).
    assert nvidia.gpus_on_old_drivers(gpus, "520.61.05") == [
        "GPU 0 (Tesla P40) runs driver 470.256.02",
        "GPU 2 (Tesla P100) runs driver 520.61.4",
    ]
    assert nvidia.gpus_on_old_drivers(gpus[1:2] + gpus[3:], "520.61.05") == []
    assert nvidia.gpus_on_old_drivers([], "520.61.05") == []


# --- through Ansible ---------------------------------------------------------


def test_filter_module_lists_the_filters() -> None:
    assert set(nvidia.FilterModule().filters()) == {
        "gpus_picked",
        "gpus_on_old_drivers",
        "nvidia_smi_p2p",
        "nvidia_smi_p2p_query",
        "nvidia_smi_query",
        "nvidia_smi_gpus",
        "nvidia_smi_error",
        "gpu_profile_select",
        "gpu_summary",
        "gpu_cuda_arch_list",
    }


def _ansible_debug(expression: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run one debug task on the implicit localhost, away from the project's ansible.cfg."""
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip(f"no ansible next to {sys.executable}")
    env = dict(
        os.environ,
        ANSIBLE_FILTER_PLUGINS=str(PLUGIN_DIR),
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        ANSIBLE_NOCOLOR="1",
    )
    args = json.dumps({"msg": expression})
    return subprocess.run(
        [str(ansible), "localhost", "-m", "ansible.builtin.debug", "-a", args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_filters_load_in_ansible(tmp_path: Path) -> None:
    line = "0, Tesla P40, 6.1, 24576, 535.183.01, 00000000:03:00.0"
    gpus = f"('{line}' | nvidia_smi_gpus)"
    profiles = "{'pascal': {'compute_capabilities': ['6.0', '6.1', '6.2']}}"
    summary = "{{ " + gpus + " | gpu_summary }}"
    profile = "{{ " + gpus + " | gpu_profile_select(" + profiles + ") }}"
    result = _ansible_debug(f"{summary} / {profile}", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 x Tesla P40 (cc 6.1, 24576 MiB), driver 535.183.01 / pascal" in result.stdout


def test_filter_error_reaches_ansible(tmp_path: Path) -> None:
    result = _ansible_debug("{{ 'No devices were found' | nvidia_smi_gpus }}", tmp_path)
    assert result.returncode != 0
    assert "sees no GPU" in result.stdout + result.stderr


def test_the_query_command_is_the_one_the_parser_reads():
    assert nvidia.nvidia_smi_query() == nvidia.QUERY_COMMAND
    assert nvidia.nvidia_smi_query("/opt/my nvidia/nvidia-smi") == (
        "'/opt/my nvidia/nvidia-smi' --query-gpu=" + ",".join(nvidia.QUERY_FIELDS) + " --format=csv,noheader,nounits"
    )


# --- GPUs picked with train_gpus, and peer-to-peer ---------------------------

TOPO = Path(__file__).parent / "samples" / "nvidia-smi-topo"


def four_p40s() -> list[dict]:
    return nvidia.nvidia_smi_gpus((SAMPLES / "p40-x4.txt").read_text())


def test_every_gpu_unless_train_gpus_picks():
    gpus = four_p40s()
    assert nvidia.gpus_picked(gpus, []) == gpus
    assert [gpu["index"] for gpu in nvidia.gpus_picked(gpus, [2, "3"])] == [2, 3]
    with pytest.raises(AnsibleFilterError, match=r"train_gpus names GPU 7, which this host lacks .*0, 1, 2, 3"):
        nvidia.gpus_picked(gpus, [0, 7])


def test_mixed_classes_say_how_to_pick():
    gpus = nvidia.nvidia_smi_gpus((SAMPLES / "p40-rtx3090-mixed.txt").read_text())
    with pytest.raises(AnsibleFilterError, match=r"Pick the GPUs of one class to train on with train_gpus"):
        nvidia.gpu_profile_select(gpus, PROFILES)
    p40s = [gpu["index"] for gpu in gpus if gpu["name"] == "Tesla P40"]
    assert nvidia.gpu_profile_select(nvidia.gpus_picked(gpus, p40s), PROFILES) == "pascal"


@pytest.mark.parametrize(
    "sample, indexes, ok, blocked",
    [
        ("p40-x4-p2p-ok.txt", [0, 1, 2, 3], True, 0),
        ("p40-x4-two-root-complexes.txt", [0, 1, 2, 3], False, 8),
        # A pair on one root complex: peer-to-peer works between the GPUs picked.
        ("p40-x4-two-root-complexes.txt", [2, 3], True, 0),
        ("p40-x4-two-root-complexes.txt", [1, 2], False, 2),
        ("p40-x2-acs.txt", [0, 1], False, 2),
    ],
)
def test_peer_to_peer_between_the_gpus_used(sample, indexes, ok, blocked):
    found = nvidia.nvidia_smi_p2p((TOPO / sample).read_text(), indexes)
    assert found["ok"] is ok and len(found["blocked"]) == blocked


def test_peer_to_peer_names_the_blocked_pair():
    found = nvidia.nvidia_smi_p2p((TOPO / "p40-x2-acs.txt").read_text(), [0, 1])
    assert found["blocked"][0] == "GPU 0 - GPU 1: NS (Not supported)"


def test_peer_to_peer_output_without_the_gpu():
    with pytest.raises(AnsibleFilterError, match="no row for GPU 5"):
        nvidia.nvidia_smi_p2p((TOPO / "p40-x2-acs.txt").read_text(), [0, 5])
    with pytest.raises(AnsibleFilterError, match="no row for GPU 0"):
        nvidia.nvidia_smi_p2p("Failed to initialize NVML: Driver/library version mismatch", [0, 1])


def test_peer_to_peer_skips_warnings_and_blank_lines_before_the_matrix():
    """nvidia-smi may print a warning (a corrupted infoROM) and a blank line before the matrix; the
    matrix after them is read, not the first blank line taken for its end."""
    matrix = (TOPO / "p40-x4-two-root-complexes.txt").read_text()
    text = "WARNING: infoROM is corrupted at gpu 0000:03:00.0\n\n" + matrix
    assert nvidia.nvidia_smi_p2p(text, [2, 3]) == {"ok": True, "blocked": []}
    assert nvidia.nvidia_smi_p2p(text, [1, 2]) == nvidia.nvidia_smi_p2p(matrix, [1, 2])


@pytest.mark.parametrize(
    "line, edited, indexes, missing",
    [
        # The row of GPU 1 cut short: GPU 1 is in the header but has no full row.
        ("GPU1\tOK\tX\tCNS\tCNS\t", "GPU1\tOK\tX\t", [0, 1], 1),
        # A full row for GPU 4, which the header lacks (the matrix of another host pasted under it).
        ("GPU3\tCNS\tCNS\tOK\tX\t", "GPU3\tCNS\tCNS\tOK\tX\t\n GPU4\tCNS\tCNS\tOK\tX\t", [0, 4], 4),
    ],
)
def test_peer_to_peer_needs_both_the_header_and_a_full_row_of_each_gpu(line, edited, indexes, missing):
    matrix = (TOPO / "p40-x4-two-root-complexes.txt").read_text()
    assert line in matrix
    with pytest.raises(AnsibleFilterError, match="no row for GPU %d in the output of nvidia-smi topo" % missing):
        nvidia.nvidia_smi_p2p(matrix.replace(line, edited), indexes)


def test_peer_to_peer_error_quotes_the_first_300_characters_of_the_output():
    """The output is quoted so the refusal shows what nvidia-smi printed, cut at 300 characters so a
    long one does not flood the play's log."""
    text = (TOPO / "p40-x4-two-root-complexes.txt").read_text()
    assert len(text.strip()) > 300
    with pytest.raises(AnsibleFilterError) as refused:
        nvidia.nvidia_smi_p2p(text, [7])
    quoted = repr(text.strip()[:300])
    assert str(refused.value) == "nvidia_smi_p2p: no row for GPU 7 in the output of nvidia-smi topo -p2p r: " + quoted


def test_p2p_query_command():
    assert nvidia.nvidia_smi_p2p_query("/opt/nv/nvidia-smi") == "/opt/nv/nvidia-smi topo -p2p r"
