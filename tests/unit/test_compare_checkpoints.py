"""tests/gpu/compare_checkpoints.py, which the save-headroom proof runs on the device (tests/gpu/README.md):
its comparison on stand-in tensors (no torch here), and its command line without arguments."""

from __future__ import annotations

import subprocess
import sys

from repo import REPO, load_file

TOOL = REPO / "tests" / "gpu" / "compare_checkpoints.py"
compare_checkpoints = load_file(TOOL, "compare_checkpoints_under_test")


class Tensor:
    """What the comparison asks of a torch tensor: its values, shape, dtype kind and NaNs."""

    def __init__(self, *values: float, floating: bool = True) -> None:
        self.values, self.shape, self.floating = values, (len(values),), floating

    def is_floating_point(self) -> bool:
        return self.floating

    def isnan(self) -> Tensor:
        return Tensor(*(float(value != value) for value in self.values))

    def any(self) -> bool:
        return any(self.values)


def equal(a: Tensor, b: Tensor) -> bool:
    return a.values == b.values


BASE = "model.layers.0.mlp.up_proj.base_layer.weight"
LORA = "model.layers.0.mlp.up_proj.lora_B.default.weight"


def test_trained_adapter_weights_may_differ_frozen_ones_may_not():
    lines, ok = compare_checkpoints.compare(
        {BASE: Tensor(1, 2), LORA: Tensor(0)}, {BASE: Tensor(1, 2), LORA: Tensor(3)}, equal
    )
    assert ok and lines[0] == "frozen (base model): 1 tensors, 1 equal, 0 differ, 0 missing from one file, 0 with NaN"
    assert lines[1].startswith("trained (LoRA adapter): 1 tensors, 0 equal, 1 differ") and lines[2] == "  e.g. " + LORA
    assert lines[-1] == "frozen weights: the same in both saves"


def test_a_frozen_weight_that_differs_is_missing_or_holds_a_nan_fails():
    cases = [
        ({BASE: Tensor(1, 2)}, {BASE: Tensor(1, 3)}),
        ({BASE: Tensor(1, 2)}, {BASE: Tensor(1, 2, 3)}),
        ({BASE: Tensor(1, 2)}, {}),
        ({BASE: Tensor(float("nan"))}, {BASE: Tensor(float("nan"))}),
        ({LORA: Tensor(1)}, {LORA: Tensor(1)}),  # no frozen weight at all: nothing was compared
    ]
    for first, second in cases:
        lines, ok = compare_checkpoints.compare(first, second, equal)
        assert not ok and lines[-1] == "frozen weights: NOT the same", (first, second)
    # Integers have no NaN to look for.
    assert compare_checkpoints.compare({BASE: Tensor(1, floating=False)}, {BASE: Tensor(1, floating=False)}, equal)[1]


def test_without_two_files_it_says_how_to_run_it():
    done = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stderr.startswith("usage: compare_checkpoints.py A.pt B.pt")
