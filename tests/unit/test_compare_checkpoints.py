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


SAVED_BASE = "base_model.model.model.layers.0.mlp.up_proj.base_layer.weight"
SAVED_NORM = "base_model.model.model.norm.weight"
SAVED_HEAD = "base_model.model.lm_head.weight"
SAVED_LORA = "base_model.model.model.layers.0.mlp.up_proj.lora_B.default.weight"


def test_a_save_is_compared_with_the_model_it_started_from_under_peft_names():
    initial = {
        "model.layers.0.mlp.up_proj.weight": Tensor(1, 2),
        "model.norm.weight": Tensor(1),
        "model.embed_tokens.weight": Tensor(5, 6),
    }
    saved = {SAVED_BASE: Tensor(1, 2), SAVED_NORM: Tensor(1), SAVED_HEAD: Tensor(5, 6), SAVED_LORA: Tensor(9)}
    # A tied lm_head is the embedding; the adapter has no counterpart and is left to the save.
    first = compare_checkpoints.initial_names(saved, initial, tied=True)
    assert first == {
        SAVED_BASE: initial["model.layers.0.mlp.up_proj.weight"],
        SAVED_NORM: initial["model.norm.weight"],
        SAVED_HEAD: initial["model.embed_tokens.weight"],
    }
    lines, ok = compare_checkpoints.compare(first, saved, equal, both="the save and the initial model")
    assert ok and lines == [
        "frozen (base model): 3 tensors, 3 equal, 0 differ, 0 missing from one file, 0 with NaN",
        "trained (LoRA adapter): 1 tensors in the save",
        "frozen weights: the same in the save and the initial model",
    ]
    # An untied head has weights of its own, which the initial model must hold.
    untied = compare_checkpoints.initial_names(saved, initial, tied=False)
    lines, ok = compare_checkpoints.compare(untied, saved, equal, both="the save and the initial model")
    assert not ok and "  e.g. " + SAVED_HEAD in lines


def test_a_save_whose_frozen_weight_moved_off_the_initial_model_fails():
    initial = {"model.layers.0.mlp.up_proj.weight": Tensor(1, 2)}
    for saved in (
        {SAVED_BASE: Tensor(1, 3)},
        {SAVED_BASE: Tensor(1, 2), SAVED_NORM: Tensor(1)},
        {SAVED_LORA: Tensor(1)},
    ):
        first = compare_checkpoints.initial_names(saved, initial, tied=True)
        lines, ok = compare_checkpoints.compare(first, saved, equal, both="the save and the initial model")
        assert not ok and lines[-1] == "frozen weights: NOT the same", saved


def test_the_initial_model_is_every_safetensors_file_and_its_tied_flag(tmp_path, monkeypatch):
    import json
    import types

    loaded = []
    fake = types.ModuleType("safetensors.torch")
    fake.load_file = lambda path: loaded.append(path.name) or {path.stem: Tensor(1)}
    monkeypatch.setitem(sys.modules, "safetensors", types.ModuleType("safetensors"))
    monkeypatch.setitem(sys.modules, "safetensors.torch", fake)
    for name in ("model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors", "notes.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    weights, tied = compare_checkpoints.load_initial(tmp_path)
    assert loaded == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert sorted(weights) == ["model-00001-of-00002", "model-00002-of-00002"] and tied
    (tmp_path / "config.json").write_text("{}")
    assert compare_checkpoints.load_initial(tmp_path)[1] is False


def test_initial_without_a_save_says_how_to_run_it():
    done = subprocess.run([sys.executable, str(TOOL), "--initial", "DIR"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "--initial MODEL_DIR A.pt" in done.stderr
