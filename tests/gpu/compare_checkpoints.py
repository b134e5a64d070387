#!/usr/bin/env python3
"""Compare two of verl's FSDP model checkpoints (model_world_size_1_rank_0.pt) tensor by tensor.

    python3 tests/gpu/compare_checkpoints.py A.pt B.pt
    python3 tests/gpu/compare_checkpoints.py --initial MODEL_DIR A.pt

With LoRA the base model's weights are frozen, so two saves of one run must hold the same base
weights whatever the steps between them trained: a save whose state_dict kept a parameter's own
tensor (torch's FSDP does when its clone() runs out of memory; see hooks/sitecustomize.py,
P40_SAVE_HEADROOM_GIB) is checked against one that cloned every weight. Prints, for the frozen
weights and for the adapter's, how many tensors are equal, differ, or are missing from one file;
exit 1 when a frozen weight differs or is missing, a tensor holds a NaN, or there is none.

With --initial, the save is compared with the model it started from (MODEL_DIR's safetensors,
as make_tiny_model.py wrote them): a save's frozen weight is PEFT's name for the model's own
(base_model.model. before it, .base_layer in a wrapped layer), and a tied lm_head is the
embedding. A one-step run then proves its one save, whatever it cloned, kept the base model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable


def frozen(name: str) -> bool:
    return "lora_" not in name


def initial_names(saved: dict[str, Any], initial: dict[str, Any], tied: bool) -> dict[str, Any]:
    """The initial model's frozen weights under the names the save gives them (PEFT's); a saved
    frozen weight with no counterpart is left out, so compare() reports it missing."""
    out = {}
    for name in saved:
        if not frozen(name):
            continue
        own = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        if own not in initial and own == "lm_head.weight" and tied:
            own = "model.embed_tokens.weight"
        if own in initial:
            out[name] = initial[own]
    return out


def compare(
    first: dict[str, Any], second: dict[str, Any], equal: Callable[[Any, Any], bool], both: str = "both saves"
) -> tuple[list[str], bool]:
    """The report's lines and whether the frozen weights are the same; `equal` is torch.equal.
    With no adapter weight in `first` (the initial model), the adapter's are only counted."""
    lines, ok = [], True
    sections = [("frozen (base model)", frozen), ("trained (LoRA adapter)", lambda n: not frozen(n))]
    if not any(not frozen(n) for n in first):
        lines_after = [f"trained (LoRA adapter): {sum(not frozen(n) for n in second)} tensors in the save"]
        sections = sections[:1]
    else:
        lines_after = []
    for label, keep in sections:
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
    lines.extend(lines_after)
    lines.append("frozen weights: " + (f"the same in {both}" if ok else "NOT the same"))
    return lines, ok


def load_initial(model_dir: Path) -> tuple[dict[str, Any], bool]:
    """MODEL_DIR's weights (every *.safetensors file) and whether its embeddings are tied."""
    from safetensors.torch import load_file

    weights: dict[str, Any] = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        weights.update(load_file(path))
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    return weights, bool(config.get("tie_word_embeddings", False))


def main(argv: list[str]) -> int:
    initial = argv[:1] == ["--initial"]
    if initial:
        argv = argv[1:]
    if len(argv) != 2:
        print("usage: compare_checkpoints.py A.pt B.pt | --initial MODEL_DIR A.pt", file=sys.stderr)
        return 2
    import torch

    if initial:
        second = torch.load(argv[1], map_location="cpu", mmap=True, weights_only=False)
        weights, tied = load_initial(Path(argv[0]))
        first = initial_names(second, weights, tied)
        lines, ok = compare(first, second, torch.equal, both="the save and the initial model")
    else:
        first, second = (torch.load(path, map_location="cpu", mmap=True, weights_only=False) for path in argv)
        lines, ok = compare(first, second, torch.equal)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
