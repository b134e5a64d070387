#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: what the driver layer needs to know of a host, read without a driver."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: driver_info
short_description: Read the NVIDIA devices on the PCI bus and the NVIDIA driver a host has
description:
  - Lists the NVIDIA display devices (vendor 0x10de, PCI class 0x03xx) from sysfs, with the kernel
    driver bound to each, whether or not an NVIDIA driver is installed.
  - Reads the installed driver three ways, each of which can be absent on its own, the version
    loaded into the running kernel (C(/sys/module/nvidia/version)), its flavour
    (C(/proc/driver/nvidia/version) names the open kernel modules), the version on disk
    (C(modinfo -F version nvidia), else C(nvidia-current), the name Debian's nvidia-kernel-dkms installs
    it under), and what C(nvidia-smi) reports. Also whether nouveau is loaded,
    the running kernel's release, the Secure Boot state (C(mokutil --sb-state)), where
    C(nvidia-persistenced) is and whether systemd runs the host (C(run/systemd/system) is a directory).
  - Never changes anything. The decisions (which branch, install or keep) are the driver layer's
    filters (filter_plugins/driver.py), on the controller.
options:
  root:
    description:
      - The directory under which C(sys/), C(proc/) and C(run/) are read. V(/) on a host; a test
        points it at a stand-in tree.
    type: path
    default: /
  nvidia_smi:
    description: The nvidia-smi to run (a name looked up on PATH, or a path).
    type: str
    default: nvidia-smi
  modinfo:
    description: The modinfo to run; an empty string skips it.
    type: str
    default: modinfo
  mokutil:
    description: The mokutil to run; an empty string skips it.
    type: str
    default: mokutil
  kernel:
    description:
      - The kernel release whose modules O(modinfo) looks in (its -k); empty, the running one.
    type: str
    default: ""
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; check mode returns the same result as a normal run.
  diff_mode:
    support: none
    details: The module changes nothing, so there is nothing to show.
  platform:
    platforms: posix
author:
  - verl-p40 maintainers
"""

EXAMPLES = r"""
- name: Read the GPUs and the driver
  driver_info:
  register: found
"""

RETURN = r"""
devices:
  description: The NVIDIA display devices on the PCI bus, by address.
  type: list
  elements: dict
  returned: always
  contains:
    address: {description: The PCI address., type: str, sample: "0000:3b:00.0"}
    vendor: {description: The vendor id., type: int, sample: 4318}
    device: {description: The device id (0x1b38 is a Tesla P40)., type: int, sample: 6968}
    class: {description: The PCI class., type: int, sample: 197120}
    driver: {description: The kernel driver bound to it (nvidia, nouveau, vfio-pci), or null., type: str, sample: nvidia}
module:
  description: The nvidia kernel module.
  type: dict
  returned: always
  contains:
    loaded: {description: The version the running kernel has loaded, or null., type: str, sample: "580.105.08"}
    on_disk: {description: The version modinfo finds for O(kernel), or null., type: str, sample: "580.105.08"}
    flavour: {description: open or proprietary where known, else null., type: str, sample: proprietary}
nvidia_smi:
  description: What nvidia-smi said.
  type: dict
  returned: always
  contains:
    rc: {description: Its exit status; 127 where it is not installed., type: int, sample: 0}
    driver_version: {description: The driver version it reports, or null., type: str, sample: "580.105.08"}
    gpus: {description: How many GPUs it lists., type: int, sample: 1}
    cards:
      description:
        - Each GPU it lists, bus_id, name, memory_mib (what the card reports; 22919 for a P40 with ECC on),
          ecc (Enabled, Disabled, [N/A]) and persistence_mode (Enabled, Disabled).
      type: list
      elements: dict
    error: {description: Its error output where it failed., type: str, sample: ""}
installed:
  description: The driver as the layer's decision reads it.
  type: dict
  returned: always
  contains:
    version: {description: nvidia-smi's version, else the loaded module's, else the one on disk; null for none., type: str}
    working: {description: Whether nvidia-smi runs and lists a GPU., type: bool}
    flavour: {description: open, proprietary or null., type: str}
nvidia_smi_path:
  description: The nvidia-smi found (O(nvidia_smi) itself where it is a path), or null.
  type: str
  returned: always
  sample: /usr/bin/nvidia-smi
nouveau_loaded:
  description: Whether the nouveau module is loaded.
  type: bool
  returned: always
kernel:
  description: The running kernel's release (uname -r).
  type: str
  returned: always
  sample: 6.1.0-28-amd64
secure_boot:
  description: enabled, disabled, or unknown (mokutil missing or not answering); disabled without EFI.
  type: str
  returned: always
persistenced_path:
  description: The nvidia-persistenced beside the nvidia-smi found, else the one on PATH, or null.
  type: str
  returned: always
  sample: /usr/bin/nvidia-persistenced
persistenced_unsafe:
  description:
    - Why root must not run that program - the file or a directory above it is not root's, or its group or others may
      write it; empty where only root can have written it, or where there is none.
  type: str
  returned: always
  sample: ""
systemd:
  description: Whether systemd runs the host (what sd_booted() asks); false in most containers.
  type: bool
  returned: always
"""

import os
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.stack_files import writable_by_others

NVIDIA_VENDOR = 0x10DE
DISPLAY_CLASS = 0x03


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def pci_devices(root: str) -> list[dict]:
    """NVIDIA display devices under <root>/sys/bus/pci/devices."""
    base = os.path.join(root, "sys", "bus", "pci", "devices")
    found = []
    names = sorted(os.listdir(base)) if os.path.isdir(base) else []
    for address in names:
        path = os.path.join(base, address)
        fields = {}
        for name in ("vendor", "device", "class"):
            text = _read(os.path.join(path, name))
            try:
                fields[name] = int((text or "").strip(), 16)
            except ValueError:
                fields = None
                break
        if not fields or fields["vendor"] != NVIDIA_VENDOR or fields["class"] >> 16 != DISPLAY_CLASS:
            continue
        link = os.path.join(path, "driver")
        fields["driver"] = os.path.basename(os.readlink(link)) if os.path.islink(link) else None
        fields["address"] = address
        found.append(fields)
    return found


def _run(argv: list[str]) -> tuple[int, str, str]:
    """(rc, stdout, stderr); rc 127 where the program is not there."""
    program = argv[0] if os.path.sep in argv[0] else shutil.which(argv[0])
    if not program or not os.access(program, os.X_OK):
        return 127, "", "%s: not found" % argv[0]
    try:
        done = subprocess.run([program] + argv[1:], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return 126, "", str(error)
    return done.returncode, done.stdout, done.stderr


# The names the nvidia module is installed under: NVIDIA's runfile and Ubuntu's packages install
# nvidia.ko; Debian's nvidia-kernel-dkms installs the same module as nvidia-current.ko (DKMS's
# DEST_MODULE_NAME), which modinfo does not find as nvidia for a kernel not running. Loaded, the
# module calls itself nvidia either way (/sys/module/nvidia).
MODULE_FILES = ("nvidia", "nvidia-current")


def module_state(root: str, modinfo: str, kernel: str = "") -> dict:
    loaded = (_read(os.path.join(root, "sys", "module", "nvidia", "version")) or "").strip() or None
    proc = _read(os.path.join(root, "proc", "driver", "nvidia", "version")) or ""
    flavour = None
    if loaded:
        flavour = "open" if "Open Kernel Module" in proc else "proprietary"
    on_disk = None
    if modinfo:
        at = ["-k", kernel] if kernel else []
        for name in MODULE_FILES:
            rc, out, _ = _run([modinfo, *at, "-F", "version", name])
            on_disk = (out.strip() or None) if rc == 0 else None
            if on_disk:
                break
        if flavour is None and on_disk:
            rc, out, _ = _run([modinfo, *at, "-F", "license", name])
            license_ = out.strip() if rc == 0 else ""
            flavour = "open" if "MIT" in license_ else ("proprietary" if license_ else None)
    return {"loaded": loaded, "on_disk": on_disk, "flavour": flavour}


SMI_FIELDS = ("driver_version", "pci.bus_id", "name", "memory.total", "ecc.mode.current", "persistence_mode")


def smi_state(nvidia_smi: str) -> dict:
    rc, out, err = _run([nvidia_smi, "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"])
    cards, version = [], None
    for line in out.splitlines() if rc == 0 else []:
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(SMI_FIELDS):
            continue
        memory = values[3]
        cards.append(
            {
                "bus_id": values[1],
                "name": values[2],
                "memory_mib": int(memory) if memory.isdigit() else None,
                "ecc": values[4],
                "persistence_mode": values[5],
            }
        )
        version = values[0]
    return {
        "rc": rc,
        "driver_version": version if cards else None,
        "gpus": len(cards),
        "cards": cards,
        "error": "" if rc == 0 else (err.strip() or out.strip())[-500:],
    }


def secure_boot(root: str, mokutil: str) -> str:
    if not os.path.isdir(os.path.join(root, "sys", "firmware", "efi")):
        return "disabled"
    if not mokutil:
        return "unknown"
    rc, out, err = _run([mokutil, "--sb-state"])
    text = (out + err).lower()
    if "secureboot enabled" in text:
        return "enabled"
    if "secureboot disabled" in text:
        return "disabled"
    return "unknown"


def smi_path(nvidia_smi: str) -> str | None:
    return nvidia_smi if os.path.sep in nvidia_smi else shutil.which(nvidia_smi)


def persistenced_path(smi: str | None) -> str | None:
    """nvidia-persistenced where the driver put it: beside nvidia-smi, else on PATH."""
    if smi:
        beside = os.path.join(os.path.dirname(os.path.realpath(smi)), "nvidia-persistenced")
        if os.path.isfile(beside) and os.access(beside, os.X_OK):
            return beside
    return shutil.which("nvidia-persistenced")


def not_root_only(path: str | None) -> str:
    """Why root must not run path: the file or a directory above it (links resolved) is not root's,
    or group or others may write it, a sticky one too (stack_files.writable_by_others, as for the
    directory root writes in); '' where only root can have written it (or no path)."""
    if not path:
        return ""
    current = os.path.realpath(path)
    while True:
        try:
            why = writable_by_others(os.stat(current), final=True)
        except OSError as error:
            return "%s: %s" % (current, error.strerror)
        if why:
            return "%s (%s is %s)" % (path, current, why)
        parent = os.path.dirname(current)
        if parent == current:
            return ""
        current = parent


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "modinfo": {"type": "str", "default": "modinfo"},
            "mokutil": {"type": "str", "default": "mokutil"},
            "kernel": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    root = module.params["root"]
    kernel_module = module_state(root, module.params["modinfo"], module.params["kernel"])
    smi = smi_state(module.params["nvidia_smi"])
    installed = {
        "version": smi["driver_version"] or kernel_module["loaded"] or kernel_module["on_disk"],
        "working": smi["rc"] == 0 and smi["gpus"] > 0,
        "flavour": kernel_module["flavour"],
    }
    smi_found = smi_path(module.params["nvidia_smi"])
    daemon = persistenced_path(smi_found)
    module.exit_json(
        changed=False,
        devices=pci_devices(root),
        module=kernel_module,
        nvidia_smi=smi,
        installed=installed,
        nouveau_loaded=os.path.isdir(os.path.join(root, "sys", "module", "nouveau")),
        nvidia_smi_path=smi_found,
        kernel=os.uname().release,
        secure_boot=secure_boot(root, module.params["mokutil"]),
        persistenced_path=daemon,
        persistenced_unsafe=not_root_only(daemon),
        systemd=os.path.isdir(os.path.join(root, "run", "systemd", "system")),
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
