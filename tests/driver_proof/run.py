#!/usr/bin/env python3
"""Install Debian's OWN NVIDIA driver packages through the driver layer, for real, on Debian 12 and 13.

    python tests/driver_proof/run.py [--releases 12 13] [--out docs/driver-proof] [--keep] [--dry-run]

The driver layer's `driver_source: distro` on Debian installs the non-free packages
(nvidia-kernel-dkms, nvidia-smi, libcuda1, nvidia-persistenced: R535 on Debian 12, R550 on 13;
the layer's plan names them) and DKMS builds
NVIDIA's kernel module. CI's fault tests run the layer's runfile path against a stand-in; this
runs the distro path with Debian's real packages, which CI's 30 minutes cannot hold (a real
module build takes minutes of both cores). For each release (docs/driver.md says why, and what
stays unproven):

1. a throwaway container of localhost/verl-p40-debian:<release> (tests/standins/images.py),
   reached over SSH as the fault tests reach theirs, with the contrib, non-free and
   non-free-firmware components enabled in its apt sources (what the layer tells a user to do)
   and initramfs-tools (a real host has them; a minimal container does not);
2. a Tesla P40 on a stand-in PCI bus (tests/fixtures/pci_bus.py), since a container has no
   NVIDIA device, and driver_kernel set to the kernel Debian's linux-headers-amd64 depends on
   (the machine's own kernel is not Debian's: the layer builds for a kernel installed but not
   booted, as after a kernel upgrade);
3. `ansible-playbook site.yml --tags driver -e driver_source=distro`: the layer installs the
   headers and the packages, DKMS builds and installs the module for that kernel, the branch is
   held, nouveau is blacklisted, nvidia-persistenced's unit is enabled for the next boot (its
   package does that), and the run stops asking for a reboot, its record saying so;
   then the same command again, which must install nothing and still wait for the reboot;
4. writes <out>/<date>.json (<date>-2.json and on where one is there): per release, the kernel, the packages' versions, `dkms status`,
   `modinfo -k` of the built module (version, licence, vermagic), the holds, the record, each
   run's seconds and exit status, and whether every check held.

The roles are not changed for the proof: only vars (-e), the stand-in bus and the container's apt
sources differ. Loading the module, the reboot and nvidia-smi against a card cannot happen in a
container. Exit status: 0 every release proven, 1 a check failed (the result file is still
written), 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [
    str(REPO / "tests" / "fixtures"),
    str(REPO / "tests" / "standins"),
    str(REPO / "library"),
    str(REPO / "filter_plugins"),
]
from repo import load_file, result_path, use_module_utils  # noqa: E402 - after the path above

use_module_utils()  # driver_info imports ansible.module_utils.stack_files
import driver_info  # noqa: E402
import playbook  # noqa: E402
from driver import AGAIN, DEBIAN_DISTRO_BRANCH, driver_plan  # noqa: E402
from pci_bus import BUS, plant_bus  # noqa: E402

IMAGE = "localhost/verl-p40-debian:{release}"
RELEASES = ("12", "13")
# Debian's non-free driver per release: the driver layer's own table (filter_plugins/driver.py).
BRANCH = {release: DEBIAN_DISTRO_BRANCH[release] for release in RELEASES}
COMPONENTS = ("contrib", "non-free", "non-free-firmware")
PERSISTENCED_UNIT = "/lib/systemd/system/nvidia-persistenced.service"
PERSISTENCED_ENABLED = "/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"


def packages(release: str) -> tuple[str, ...]:
    """The packages the layer installs and holds on this release: its own plan's (filter_plugins/driver.py)."""
    return tuple(driver_plan({"distribution": "Debian", "version": release, "kernel": "any"}, source="distro")["hold"])


def with_components(sources: str, components: tuple[str, ...] = COMPONENTS) -> str:
    """An apt sources file (one-line `deb` entries or deb822 stanzas) with `components` added to every
    entry of the Debian archive that has main, each once; other lines as they are."""

    def extend(found: list[str]) -> list[str]:
        return found + [name for name in components if name not in found]

    out = []
    for line in sources.splitlines():
        one_line = re.match(r"^(deb\s+(?:\[[^\]]*\]\s+)?\S+\s+\S+)\s+(.*)$", line)
        stanza = re.match(r"^(Components:\s*)(.*)$", line)
        if one_line and "main" in one_line.group(2).split():
            line = "%s %s" % (one_line.group(1), " ".join(extend(one_line.group(2).split())))
        elif stanza and "main" in stanza.group(2).split():
            line = stanza.group(1) + " ".join(extend(stanza.group(2).split()))
        out.append(line)
    return "\n".join(out) + "\n"


def debian_kernel(depends: str) -> str:
    """The kernel release linux-headers-amd64 depends on, from `apt-cache depends linux-headers-amd64`."""
    found = re.search(r"Depends: linux-headers-(\S+-amd64)$", depends, re.M)
    if not found:
        raise SystemExit("apt-cache depends linux-headers-amd64 names no linux-headers-<kernel>-amd64:\n" + depends)
    return found.group(1)


def driver_vars(kernel: str) -> dict[str, Any]:
    return {"driver_host_root": BUS, "driver_kernel": kernel, "driver_source": "distro"}


class Workdirs:
    """What the fault tests' container() takes from pytest's tmp_path_factory: mktemp(name)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mktemp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=name + "-", dir=self.root))


def checks(release: str, kernel: str, found: dict[str, Any]) -> dict[str, bool]:
    """What must hold after the two runs, each by name (the result file keeps them all)."""
    branch = str(BRANCH[release])

    def waits(record: dict[str, Any]) -> bool:
        details = record.get("details") or {}
        return (
            record.get("status") == "complete"
            and details.get("source") == "distro"
            and details.get("flavour") == "proprietary"
            and details.get("reboot_pending") is True
        )

    record = found["record"]
    return {
        "first run stops for the reboot": found["runs"][0]["rc"] != 0 and found["runs"][0]["asks_reboot"],
        "record after each run: complete, distro, proprietary, reboot pending": waits(found["record_after_first"])
        and waits(record),
        "record: Debian's branch": str(record.get("version", "")).startswith(branch + "."),
        "packages installed at Debian's branch": all(
            found["packages"].get(name, "").startswith(branch + ".") for name in packages(release)
        ),
        "dkms: installed for the kernel": bool(re.search(r"\b%s\b.*: installed" % re.escape(kernel), found["dkms"])),
        "module: NVIDIA's licence and version": found["modinfo"].get("license") == "NVIDIA"
        and found["modinfo"].get("version", "").startswith(branch + "."),
        "module: built for the kernel": found["modinfo"].get("vermagic", "").split(" ")[0] == kernel,
        "branch held": set(packages(release)) <= set(found["held"]),
        "nvidia-persistenced enabled for boot": found["persistenced"] == {"unit": True, "enabled": True},
        "nouveau blacklisted": "blacklist nouveau" in found["nouveau"],
        "second run installs nothing and still waits": found["runs"][1]["rc"] != 0
        and found["runs"][1]["asks_reboot"]
        and found["dpkg_log_after_first"].isdigit()
        and int(found["dpkg_log_after_first"]) > 0
        and found["dpkg_log_after_second"] == found["dpkg_log_after_first"],
    }


def prove(release: str, workdirs: Workdirs, keep: bool) -> dict[str, Any]:
    """measure() on a new container of the release's image (the fault tests' container()), removed
    after unless `keep`."""
    faults = load_file(REPO / "tests" / "integration" / "conftest.py", "driver_proof_fault_conftest")
    with contextlib.ExitStack() as stack:
        host = stack.enter_context(faults.container([IMAGE.format(release=release)], workdirs))
        try:
            return measure(release, host)
        finally:
            if keep:
                stack.pop_all()
                print("kept: podman exec -it %s bash" % host.name)


def measure(release: str, host: Any) -> dict[str, Any]:
    """The driver layer's distro path twice on `host`, and what it left: the result of one release."""
    sources = host.sh("cat /etc/apt/sources.list").stdout
    host.sh("cat > /etc/apt/sources.list <<'EOF'\n%sEOF" % with_components(sources))
    host.sh(
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends"
        " initramfs-tools >/dev/null"
    )
    kernel = debian_kernel(host.sh("apt-cache depends linux-headers-amd64").stdout)
    plant_bus(host)
    runs = []
    dpkg_logs = []
    records = []
    for _ in range(2):
        start = time.monotonic()
        done = host.play("--tags", "driver", **driver_vars(kernel))
        seconds = round(time.monotonic() - start, 1)
        out = " ".join(done.output.split())
        runs.append({"rc": done.returncode, "seconds": seconds, "asks_reboot": AGAIN in out, "tail": out[-1500:]})
        records.append(host.state("driver"))
        # dpkg's log lines of packages installed or upgraded so far (none: no log, which fails the check).
        dpkg_logs.append(host.sh("grep -cE ' (install|upgrade) ' /var/log/dpkg.log", check=False).stdout.strip())
        print("Debian %s: run %d: exit %d in %.1f s" % (release, len(runs), done.returncode, seconds), flush=True)
    # The module under the names the layer reads it by (library/driver_info.py): Debian's is nvidia-current.
    for name in driver_info.MODULE_FILES:
        if host.sh("modinfo -k %s -F version %s" % (kernel, name), check=False).stdout.strip():
            break
    modinfo = {"name": name}
    for field in ("version", "license", "vermagic", "filename"):
        modinfo[field] = host.sh("modinfo -k %s -F %s %s" % (kernel, field, name), check=False).stdout.strip()
    query = host.sh(
        "dpkg-query -W -f='${Package} ${Version}\\n' %s linux-headers-%s" % (" ".join(packages(release)), kernel),
        check=False,
    ).stdout
    found: dict[str, Any] = {
        "image": IMAGE.format(release=release),
        "os": host.sh(". /etc/os-release && echo $PRETTY_NAME").stdout.strip(),
        "kernel": kernel,
        "runs": runs,
        "record_after_first": records[0],
        "record": records[1],
        "packages": dict(line.split(" ", 1) for line in query.splitlines() if " " in line),
        "dkms": host.sh("dkms status", check=False).stdout.strip(),
        "modinfo": modinfo,
        "held": host.sh("apt-mark showhold").stdout.split(),
        "nouveau": host.sh("cat /etc/modprobe.d/verl-p40-nouveau.conf", check=False).stdout,
        # The unit Debian's package installs, and the link its postinst makes to start it at boot.
        "persistenced": {
            "unit": host.exists(PERSISTENCED_UNIT),
            "enabled": host.sh("test -L " + PERSISTENCED_ENABLED, check=False).returncode == 0,
        },
        "dpkg_log_after_first": dpkg_logs[0],
        "dpkg_log_after_second": dpkg_logs[1],
    }
    found["checks"] = checks(release, kernel, found)
    found["proven"] = all(found["checks"].values())
    return found


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO, check=False).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", nargs="+", default=list(RELEASES), choices=RELEASES)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "driver-proof")
    parser.add_argument("--keep", action="store_true", help="leave the containers running")
    parser.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    args = parser.parse_args(argv)
    for release in args.releases:
        command = playbook.command("<inventory>", ["<CI vars files>"], "--tags", "driver", **driver_vars("<kernel>"))
        print("Debian %s (%s): R%d" % (release, IMAGE.format(release=release), BRANCH[release]))
        print("  apt sources: + %s; apt-get install initramfs-tools" % " ".join(COMPONENTS))
        print("  kernel: the one linux-headers-amd64 depends on; a P40 on the stand-in bus at %s" % BUS)
        print("  twice: " + shlex.join(command))
    print("result: %s" % result_path(args.out, dt.date.today().isoformat()))
    if args.dry_run:
        return 0
    # The commit the runs start from: one made during them (minutes) must not be taken for theirs.
    commit = git("rev-parse", "HEAD")
    with tempfile.TemporaryDirectory(prefix="driver-proof-") as tmp:
        results = {release: prove(release, Workdirs(Path(tmp)), args.keep) for release in args.releases}
    today = dt.date.today().isoformat()
    result = {
        "what": "the driver layer's distro path on Debian: Debian's own NVIDIA packages, a real DKMS build",
        "command": "python tests/driver_proof/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": today,
        "commit": commit,
        # HEAD when the file was written, where a commit came during the runs (else the same).
        "commit_at_end": git("rev-parse", "HEAD"),
        # What the run's tree had that the commit has not (git status --porcelain): empty for a run of the commit.
        "uncommitted": git("status", "--porcelain", "--untracked-files=all").splitlines(),
        "machine": {"cores": os.cpu_count(), "kernel": platform.release()},
        "releases": results,
        "unproven": [
            "loading the module (a container cannot), so nvidia-smi against a card and the record after the reboot",
            "a real reboot (the fault test of the runfile path simulates one)",
            "Secure Boot: DKMS signs with its own key, which a firmware must trust (the layer stops without one)",
        ],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = result_path(args.out, today)
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print("wrote %s" % path)
    for release, found in results.items():
        failed = [name for name, ok in found["checks"].items() if not ok]
        print("Debian %s: %s" % (release, "proven" if not failed else "FAILED: " + "; ".join(failed)))
    return 0 if all(found["proven"] for found in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
