"""Filters that read nvidia-smi output and choose the GPU profile.

The preflight role runs exactly:

    nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version,pci.bus_id
               --format=csv,noheader,nounits

and passes its output to ``nvidia_smi_gpus``. Each function here is plain
Python so that tests/unit can call it without Ansible.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.module_utils.compat.version import LooseVersion

# The order of the columns that nvidia_smi_gpus expects.
QUERY_FIELDS = ("index", "name", "compute_cap", "memory.total", "driver_version", "pci.bus_id")
QUERY_COMMAND = "nvidia-smi --query-gpu=" + ",".join(QUERY_FIELDS) + " --format=csv,noheader,nounits"


def nvidia_smi_query(nvidia_smi: str = "nvidia-smi") -> str:
    """The shell command whose output nvidia_smi_gpus parses (the field list has one home: here)."""
    return shlex.quote(nvidia_smi) + QUERY_COMMAND[len("nvidia-smi") :]


# Which GPU pairs can read each other's memory peer-to-peer, as the driver reports it.
P2P_COMMAND = "nvidia-smi topo -p2p r"
# nvidia-smi's legend for that matrix.
P2P_STATUS = {
    "OK": "Status Ok",
    "CNS": "Chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "Topology not supported",
    "NS": "Not supported",
    "DR": "Disabled by regkey",
    "U": "Unknown",
}


def nvidia_smi_p2p_query(nvidia_smi: str = "nvidia-smi") -> str:
    """The shell command whose output nvidia_smi_p2p parses."""
    return shlex.quote(nvidia_smi) + P2P_COMMAND[len("nvidia-smi") :]


def nvidia_smi_p2p(text: Any, indexes: list[Any]) -> dict[str, Any]:
    """Read ``nvidia-smi topo -p2p r`` for the GPUs with these nvidia-smi indexes.

    Returns ``{"ok": bool, "blocked": ["GPU 0 - GPU 1: CNS (Chipset not supported)", ...]}``:
    ``ok`` when every pair of those GPUs reports OK. PCIe servers whose chipset or ACS
    settings stop peer-to-peer report CNS, TNS or NS there; NCCL must then not try it
    (NCCL_P2P_DISABLE=1), or its first collective can hang.
    """
    text = _as_text(text, "nvidia_smi_p2p")
    wanted = [int(index) for index in indexes]
    header: list[int] | None = None
    rows: dict[int, list[str]] = {}
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            continue
        if header is None and all(re.fullmatch(r"GPU\d+", cell) for cell in cells):
            header = [int(cell[3:]) for cell in cells]
        elif header is not None and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) == len(header) + 1:
            rows[int(cells[0][3:])] = cells[1:]
    missing = [index for index in wanted if header is None or index not in header or index not in rows]
    if missing:
        raise AnsibleFilterError(
            f"nvidia_smi_p2p: no row for GPU {', '.join(map(str, missing))} in the output of {P2P_COMMAND}: "
            f"{text.strip()[:300]!r}"
        )
    blocked = []
    for position, first in enumerate(wanted):
        for second in wanted[position + 1 :]:
            for a, b in ((first, second), (second, first)):
                status = rows[a][header.index(b)]
                if status != "OK":
                    blocked.append(f"GPU {a} - GPU {b}: {status} ({P2P_STATUS.get(status, 'unknown status')})")
    return {"ok": not blocked, "blocked": blocked}


def gpus_picked(
    gpus: list[dict[str, Any]], pick: list[Any] | None, variable: str = "train_gpus"
) -> list[dict[str, Any]]:
    """The GPUs the stack trains on: those whose nvidia-smi index ``pick`` names, or all of them."""
    if not pick:
        return list(gpus)
    by_index = {int(gpu["index"]): gpu for gpu in gpus}
    wanted = []
    for index in pick:
        if not re.fullmatch(r"\d+", str(index)) or int(index) not in by_index:
            have = ", ".join(str(i) for i in sorted(by_index)) or "none"
            raise AnsibleFilterError(
                f"{variable} names GPU {index!r}, which this host lacks (nvidia-smi's indexes here: {have})."
            )
        if by_index[int(index)] not in wanted:
            wanted.append(by_index[int(index)])
    return wanted


_CC_RE = re.compile(r"^\d+\.\d+$")
_DRIVER_RE = re.compile(r"^\d+\.\d+(\.\d+)?$")
_BUS_ID_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")

# Known failure outputs of nvidia-smi, each with what the user should do.
# Checked in order; the first phrase found in the output wins.
_FAILURES = (
    (
        "couldn't communicate with the NVIDIA driver",
        "The NVIDIA kernel driver is not loaded. Install the NVIDIA driver, then load it "
        "('sudo modprobe nvidia') or reboot; if it still fails, check 'dmesg' for nouveau "
        "holding the GPU or Secure Boot refusing the unsigned module.",
    ),
    (
        "Driver/library version mismatch",
        "The loaded NVIDIA kernel module and the installed driver libraries have different "
        "versions, usually after a driver upgrade without a reboot. Reboot the host (or "
        "unload and reload the nvidia kernel modules).",
    ),
    (
        "No devices were found",
        "The NVIDIA driver is loaded but sees no GPU. Check that the card shows in "
        "'lspci | grep -i nvidia', that 'Above 4G decoding' is enabled in the firmware "
        "(a Tesla P40 needs it), that the driver branch still supports the card (R580 is "
        "the last one for Pascal), and 'dmesg' for NVRM errors.",
    ),
    (
        "is not a valid field to query",
        "This nvidia-smi does not know a queried field (compute_cap needs a recent driver). "
        "Upgrade the NVIDIA driver to one that supports CUDA 11.8.",
    ),
    (
        "Insufficient Permissions",
        "nvidia-smi may not open the GPU devices. Run it as root or fix the permissions of /dev/nvidia*.",
    ),
    (
        "Unable to determine the device handle",
        "A GPU does not answer (fallen off the bus or needs a reset). Check 'dmesg' for Xid "
        "errors, power and cooling (a P40 is passively cooled and needs server airflow), "
        "then reboot.",
    ),
    (
        "GPU is lost",
        "A GPU has fallen off the bus. Check 'dmesg' for Xid errors, power and cooling (a "
        "P40 is passively cooled and needs server airflow), then reboot.",
    ),
)

_NOT_INSTALLED = (
    "nvidia-smi is not installed. Install the NVIDIA driver, whose utilities provide "
    "nvidia-smi, and make sure it is on PATH."
)


def nvidia_smi_error(text: str) -> str:
    """Return what to do about a known nvidia-smi failure in ``text``, or ''.

    ``text`` is whatever the failed run printed (stdout, stderr, or the
    module's msg when the command was not found). '' means no known failure.
    """
    text = _as_text(text, "nvidia_smi_error")
    for phrase, advice in _FAILURES:
        if phrase in text:
            return f"nvidia-smi failed ({phrase}). {advice}"
    if "nvidia-smi" in text and ("not found" in text or "No such file or directory" in text):
        return _NOT_INSTALLED
    return ""


def nvidia_smi_gpus(text: str) -> list[dict[str, Any]]:
    """Parse the CSV output of QUERY_COMMAND into one dict per GPU.

    Blank lines and nvidia-smi's 'WARNING:' lines (e.g. a corrupted infoROM,
    which still leaves the GPU usable) are skipped. Empty output gives [].
    Every field is required: a placeholder such as '[N/A]' or
    '[Not Supported]' fails, since the profile choice and the summary need
    them all and a real GPU in working order reports them all.
    """
    text = _as_text(text, "nvidia_smi_gpus")
    failure = nvidia_smi_error(text)
    if failure:
        raise AnsibleFilterError(failure)

    gpus = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith("WARNING:"):
            continue
        gpus.append(_parse_line(line, number))
    return gpus


def _parse_line(line: str, number: int) -> dict[str, Any]:
    where = f"nvidia-smi output line {number} ({line!r})"
    values = [value.strip() for value in line.split(",")]
    if len(values) != len(QUERY_FIELDS):
        raise AnsibleFilterError(
            f"{where}: expected {len(QUERY_FIELDS)} comma-separated fields "
            f"({', '.join(QUERY_FIELDS)}), got {len(values)}. Run: {QUERY_COMMAND}"
        )
    fields = dict(zip(QUERY_FIELDS, values))
    for field, value in fields.items():
        if value.startswith("[") and value.endswith("]"):
            raise AnsibleFilterError(
                f"{where}: nvidia-smi reports {field} as {value}. The GPU may need a reset "
                "or a newer driver; check 'nvidia-smi -q' and 'dmesg'."
            )

    index = _to_int(fields["index"], "index", where)
    memory_mib = _to_int(fields["memory.total"], "memory.total", where)
    cc = fields["compute_cap"]
    _check(cc, _CC_RE, "compute_cap", "like 6.1", where)
    _check(fields["driver_version"], _DRIVER_RE, "driver_version", "like 535.183.01", where)
    _check(fields["pci.bus_id"], _BUS_ID_RE, "pci.bus_id", "like 00000000:03:00.0", where)
    if not fields["name"]:
        raise AnsibleFilterError(f"{where}: the GPU name is empty.")

    major, minor = cc.split(".")
    return {
        "index": index,
        "name": fields["name"],
        "compute_capability": cc,
        "cc_major": int(major),
        "cc_minor": int(minor),
        "memory_mib": memory_mib,
        "driver_version": fields["driver_version"],
        "pci_bus_id": fields["pci.bus_id"],
    }


def _to_int(value: str, field: str, where: str) -> int:
    if not value.isdecimal():
        raise AnsibleFilterError(
            f"{where}: {field} should be a whole number, got {value!r}. Run: {QUERY_COMMAND} (no header, no units)"
        )
    return int(value)


def _check(value: str, pattern: re.Pattern[str], field: str, example: str, where: str) -> None:
    if not pattern.match(value):
        raise AnsibleFilterError(f"{where}: {field} should look {example}, got {value!r}. Run: {QUERY_COMMAND}")


def gpu_profile_select(
    gpus: list[dict[str, Any]],
    profiles: dict[str, dict[str, Any]],
    override: str = "",
    default: str = "",
) -> str:
    """Return the name of the GPU profile for this host.

    ``profiles`` maps a name to a dict whose ``compute_capabilities`` key
    lists the exact capabilities it serves, as quoted strings:
    ``{"pascal": {"compute_capabilities": ["6.0", "6.1", "6.2"], ...}}``.
    Other keys are ignored here. A capability may belong to one profile only.

    A non-empty ``override`` wins (it must name a profile). With no GPU the
    ``default`` profile is used, so a build host without a GPU still builds
    a stack. Otherwise every GPU must map to the same profile.
    """
    claims = _profile_claims(profiles)
    names = ", ".join(sorted(profiles))

    if override:
        if override not in profiles:
            raise AnsibleFilterError(
                f"GPU profile override {override!r} is not a known profile; choose one of: {names}."
            )
        return override

    if not gpus:
        if not default:
            raise AnsibleFilterError(
                f"No NVIDIA GPU found and no default profile given; set the GPU profile override to one of: {names}."
            )
        if default not in profiles:
            raise AnsibleFilterError(f"Default GPU profile {default!r} is not a known profile; choose one of: {names}.")
        return default

    chosen: dict[str, str] = {}
    for gpu in gpus:
        cc = str(gpu["compute_capability"])
        label = f"GPU {gpu['index']} {gpu['name']} (cc {cc})"
        if cc not in claims:
            raise AnsibleFilterError(
                f"{label} matches no GPU profile. Profiles and the capabilities they serve: "
                f"{_describe(profiles)}. Add its capability to a profile or set the GPU "
                "profile override."
            )
        chosen[label] = claims[cc]

    if len(set(chosen.values())) > 1:
        pairs = "; ".join(f"{label} -> {name}" for label, name in chosen.items())
        raise AnsibleFilterError(
            f"This host mixes GPUs that need different profiles: {pairs}. Pick the GPUs of one "
            "class to train on with train_gpus (their nvidia-smi indexes, e.g. train_gpus: [0, 1]), "
            f"or set the GPU profile override to one of: {names}."
        )
    return next(iter(chosen.values()))


def _profile_claims(profiles: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Map each compute capability to the one profile that claims it."""
    if not isinstance(profiles, dict) or not profiles:
        raise AnsibleFilterError("GPU profiles must be a non-empty mapping of name -> profile.")
    claims: dict[str, str] = {}
    for name, profile in profiles.items():
        ccs = profile.get("compute_capabilities") if isinstance(profile, dict) else None
        if not isinstance(ccs, list) or not ccs:
            raise AnsibleFilterError(
                f"GPU profile {name!r} needs a non-empty list 'compute_capabilities', e.g. ['6.0', '6.1', '6.2']."
            )
        for cc in ccs:
            # YAML reads an unquoted 6.1 as a float; its str() is still '6.1'.
            cc = str(cc)
            if not _CC_RE.match(cc):
                raise AnsibleFilterError(f"GPU profile {name!r} lists {cc!r}; a compute capability looks like '6.1'.")
            if cc in claims and claims[cc] != name:
                raise AnsibleFilterError(
                    f"Compute capability {cc} is claimed by both GPU profiles "
                    f"{claims[cc]!r} and {name!r}; list it in one only."
                )
            claims[cc] = name
    return claims


def _describe(profiles: dict[str, dict[str, Any]]) -> str:
    return "; ".join(
        f"{name}: {', '.join(str(cc) for cc in profiles[name]['compute_capabilities'])}" for name in sorted(profiles)
    )


def gpu_cuda_arch_list(gpus: list[dict[str, Any]], default: Any) -> str:
    """TORCH_CUDA_ARCH_LIST for code compiled on this host (Apex): the GPUs' compute capabilities.

    Each once, lowest first, as torch spells the list: "6.0" for a P100, "6.1" for a P40, P4 or
    GTX 10xx, "6.0;6.1" for a host with both. Code built for sm_61 alone does not run on a
    P100 (sm_60), nor the other way round, so the list is the cards', not the profile's.
    With no GPU (a build host, CI) it is ``default``: the profile's cuda_arch_list.
    """
    if not gpus:
        default = str(default if default is not None else "").strip()
        if not default:
            raise AnsibleFilterError(
                "No GPU found and no arch list to fall back on: give the GPU profile a cuda_arch_list "
                "(stack_gpu_profiles) or set apex_cuda_arch_list."
            )
        return default
    found = set()
    for gpu in gpus:
        cc = str(gpu.get("compute_capability", ""))
        if not _CC_RE.match(cc):
            raise AnsibleFilterError(f"GPU {gpu.get('index', '?')} has no compute capability like 6.1: {cc!r}.")
        major, minor = cc.split(".")
        found.add((int(major), int(minor)))
    return ";".join(f"{major}.{minor}" for major, minor in sorted(found))


def gpu_summary(gpus: list[dict[str, Any]]) -> str:
    """One line for the log, e.g. '2 x Tesla P40 (cc 6.1, 24576 MiB), driver 535.183.01'."""
    if not gpus:
        return "no NVIDIA GPU"
    counts: dict[str, int] = {}
    for gpu in gpus:
        kind = f"{gpu['name']} (cc {gpu['compute_capability']}, {gpu['memory_mib']} MiB)"
        counts[kind] = counts.get(kind, 0) + 1
    kinds = " + ".join(f"{count} x {kind}" for kind, count in counts.items())
    drivers = ", ".join(sorted({str(gpu["driver_version"]) for gpu in gpus}))
    return f"{kinds}, driver {drivers}"


def gpus_on_old_drivers(gpus: list[dict[str, Any]], minimum: str) -> list[str]:
    """One phrase per GPU whose driver is older than ``minimum``, e.g. 'GPU 0 (Tesla P40) runs driver
    470.256.02'; [] when every one is new enough. Versions compare as Ansible's version test does."""
    return [
        f"GPU {gpu['index']} ({gpu['name']}) runs driver {gpu['driver_version']}"
        for gpu in gpus
        if LooseVersion(str(gpu["driver_version"])) < LooseVersion(str(minimum))
    ]


def _as_text(text: Any, filter_name: str) -> str:
    if not isinstance(text, str):
        raise AnsibleFilterError(
            f"{filter_name} expects nvidia-smi's output as one string (the registered "
            f"result's stdout), got {type(text).__name__}."
        )
    return text


class FilterModule:
    """nvidia-smi parsing and GPU profile selection."""

    def filters(self) -> dict[str, Any]:
        return {
            "nvidia_smi_query": nvidia_smi_query,
            "nvidia_smi_gpus": nvidia_smi_gpus,
            "nvidia_smi_error": nvidia_smi_error,
            "gpu_profile_select": gpu_profile_select,
            "gpu_summary": gpu_summary,
            "gpu_cuda_arch_list": gpu_cuda_arch_list,
            "gpus_picked": gpus_picked,
            "gpus_on_old_drivers": gpus_on_old_drivers,
            "nvidia_smi_p2p_query": nvidia_smi_p2p_query,
            "nvidia_smi_p2p": nvidia_smi_p2p,
        }
