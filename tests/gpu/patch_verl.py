#!/usr/bin/env python3
"""Apply the project's verl_patch module to a verl checkout with a GPU profile's fix set.

    python3 tests/gpu/patch_verl.py --verl DIR [--profile pascal]

What the patch role does on a host (roles/patch: fixes = the profile's
patch_fixes, attn_implementation = its attn_implementation), without Ansible
running it: module_utils/ is put on ansible.module_utils' path the way
Ansible ships it with a module (as tests/unit/conftest.py does), and
library/verl_patch.py's plain run() is called. Needs ansible-core and PyYAML.
Prints the module's result as JSON; exit status 1 when it refuses.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def load_module():
    import ansible.module_utils

    if str(REPO / "module_utils") not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(str(REPO / "module_utils"))
    sys.path.insert(0, str(REPO / "library"))
    import verl_patch

    return verl_patch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verl", type=Path, required=True, help="verl checkout root (holds verl/)")
    parser.add_argument("--profile", default="pascal", help="GPU profile in roles/stack/defaults/main/gpu_profiles.yml")
    args = parser.parse_args(argv)

    profiles = yaml.safe_load((REPO / "roles" / "stack" / "defaults" / "main" / "gpu_profiles.yml").read_text())[
        "stack_gpu_profiles"
    ]
    profile = profiles[args.profile]
    verl_patch = load_module()
    try:
        result = verl_patch.run(
            str(args.verl),
            state="present" if profile["patch_fixes"] else "absent",
            fixes=profile["patch_fixes"] or None,
            attn_implementation=profile["attn_implementation"] if profile["patch_fixes"] else "eager",
        )
    except verl_patch.PatchError as error:
        print(f"patch_verl.py: verl_patch refused: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
