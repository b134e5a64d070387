#!/usr/bin/env python3
"""Compare two of verl's FSDP model checkpoints (model_world_size_1_rank_0.pt) tensor by tensor.

    python3 tests/gpu/compare_checkpoints.py A.pt B.pt

With LoRA the base model's weights are frozen, so two saves of one run must hold the same base
weights whatever the steps between them trained: a save whose state_dict kept a parameter's own
tensor (torch's FSDP does when its clone() runs out of memory; see hooks/sitecustomize.py,
P40_SAVE_HEADROOM_GIB) is checked against one that cloned every weight. Prints, for the frozen
weights and for the adapter's, how many tensors are equal, differ, or are missing from one file;
exit 1 when a frozen weight differs or is missing, a tensor holds a NaN, or there is none.
"""

from __future__ import annotations

import sys
from typing import Any, Callable


def frozen(name: str) -> bool:
    return "lora_" not in name


def compare(first: dict[str, Any], second: dict[str, Any], equal: Callable[[Any, Any], bool]) -> tuple[list[str], bool]:
    """The report's lines and whether the frozen weights are the same; `equal` is torch.equal."""
    lines, ok = [], True
    for label, keep in (("frozen (base model)", frozen), ("trained (LoRA adapter)", lambda n: not frozen(n))):
        names = sorted({n for n in (*first, *second) if keep(n)})
        same, differ, missing, nan = [], [], [], []
        for name in names:
            if name not in first or name not in second:
                missing.append(name)
                continue
            a, b = (t.full_tensor() if hasattr(t, "full_tensor") else t for t in (first[name], second[name]))
            if a.is_floating_point() and (a.isnan().any() or b.isnan().any()):
                nan.append(name)
            (same if a.shape == b.shape and equal(a, b) else differ).append(name)
        lines.append(
            f"{label}: {len(names)} tensors, {len(same)} equal, {len(differ)} differ, "
            f"{len(missing)} missing from one file, {len(nan)} with NaN"
        )
        lines.extend(f"  e.g. {name}" for name in (differ + missing + nan)[:5])
        if keep is frozen and (differ or missing or nan or not names):
            ok = False
    lines.append("frozen weights: " + ("the same in both saves" if ok else "NOT the same"))
    return lines, ok


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: compare_checkpoints.py A.pt B.pt", file=sys.stderr)
        return 2
    import torch

    first, second = (torch.load(path, map_location="cpu", mmap=True, weights_only=False) for path in argv)
    lines, ok = compare(first, second, torch.equal)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
