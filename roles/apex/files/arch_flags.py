#!/usr/bin/env python3
"""Give every CUDA extension of Apex's setup.py the GPU arches of the build (TORCH_CUDA_ARCH_LIST).

    python3 arch_flags.py SETUP_PY "6.1"

torch's cpp_extension compiles for TORCH_CUDA_ARCH_LIST, unless an extension passes its own
-gencode flags: then it adds none. Apex 25.04's setup.py does that for one extension,
fused_weight_gradient_mlp_cuda, with a fixed list (sm_70, sm_80, sm_86, sm_90), so on a P40
(sm_61) that extension had no code for the card; found by `make apex-proof`. This rewrites
that list, just before the extension is declared, to the build's arches, and leaves the rest
of the file as it is.

Prints one JSON line: {"changed": bool, "found": bool, "flags": [...]}. A setup.py without the
fixed list (another Apex, a stand-in) is left alone (found: false). Idempotent: a file already
rewritten for the same arches is not changed. Exit status 0, or 2 on bad input.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# Where Apex 25.04 declares the extension that carries its own -gencode list (cc_flag).
ANCHOR = re.compile(
    r'^(?P<indent>[ \t]*)ext_modules\.append\(\s*CUDAExtension\(\s*name="fused_weight_gradient_mlp_cuda"', re.M
)
MARK = "# verl-p40: the build's arches (TORCH_CUDA_ARCH_LIST), not a fixed list"
REWRITTEN = re.compile(r"^[ \t]*cc_flag = \[.*\]  " + re.escape(MARK) + r"\n", re.M)


def gencode_flags(arch_list: str) -> list[str]:
    """nvcc's -gencode flags for a TORCH_CUDA_ARCH_LIST ("6.1", "6.1;7.0", "6.1+PTX")."""
    flags: list[str] = []
    for arch in re.split(r"[;\s]+", arch_list.strip()):
        if not arch:
            continue
        match = re.fullmatch(r"(\d+)\.(\d+)(\+PTX)?", arch)
        if not match:
            raise ValueError("%r is not an arch of TORCH_CUDA_ARCH_LIST (such as 6.1 or 6.1+PTX)" % arch)
        number = match[1] + match[2]
        flags += ["-gencode", "arch=compute_%s,code=sm_%s" % (number, number)]
        if match[3]:
            flags += ["-gencode", "arch=compute_%s,code=compute_%s" % (number, number)]
    if not flags:
        raise ValueError("the arch list is empty")
    return flags


def rewrite(text: str, flags: list[str]) -> tuple[str, bool]:
    """(new text, found): the extension's cc_flag set to `flags` right before it is declared."""
    text = REWRITTEN.sub("", text)
    match = ANCHOR.search(text)
    if not match:
        return text, False
    line = "%scc_flag = %s  %s\n" % (match["indent"], json.dumps(flags), MARK)
    return text[: match.start()] + line + text[match.start() :], True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    path, arch_list = Path(argv[0]), argv[1]
    try:
        flags = gencode_flags(arch_list)
    except ValueError as exc:
        print("arch_flags: %s" % exc, file=sys.stderr)
        return 2
    old = path.read_text()
    new, found = rewrite(old, flags)
    if new != old:
        path.write_text(new)
    print(json.dumps({"changed": new != old, "found": found, "flags": flags}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
