"""filter_plugins/rollout.py: the HF rollout's micro-batch, computed from the model and the card."""

from __future__ import annotations

import importlib.util
import math

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import REPO

_spec = importlib.util.spec_from_file_location("rollout_filters", REPO / "filter_plugins" / "rollout.py")
rollout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rollout)

GROUP_VARS = REPO / "roles" / "stack" / "defaults" / "main"
MODELS = yaml.safe_load((GROUP_VARS / "model_architectures.yml").read_text())["stack_model_architectures"]
GPU_DATA = yaml.safe_load((GROUP_VARS / "gpu_profiles.yml").read_text())
PASCAL = GPU_DATA["stack_gpu_profiles"]["pascal"]
CARDS = GPU_DATA["stack_gpu_cards"]
P40 = CARDS["Tesla P40"]["memory_mib"]  # 22919: memory.total with ECC on
P40_NO_ECC = 24576
CARD_16GB = CARDS["Tesla P100-PCIE-16GB"]["memory_mib"]
GIB = 2**30


def plan(model: str, memory_mib: int, **kwargs):
    settings = dict(
        gpu_memory_mib=memory_mib,
        prompt_length=512,
        response_length=256,
        precision=PASCAL["precision"],
        attn_implementation=PASCAL["attn_implementation"],
        train_batch_size=64,
        memory_margin=PASCAL["hf_rollout"]["memory_margin"],
        cuda_context_mib=PASCAL["hf_rollout"]["cuda_context_mib"],
    )
    settings.update(kwargs)
    return rollout.hf_rollout_plan(MODELS[model], **settings)


@pytest.mark.parametrize(
    ("model", "parameters"),
    [
        # The parameter counts Qwen publishes for these checkpoints.
        ("Qwen2.5-0.5B-Instruct", 494_032_768),
        ("Qwen2.5-1.5B-Instruct", 1_543_714_304),
        ("Qwen2.5-3B-Instruct", 3_085_938_688),
    ],
)
def test_parameter_count_is_the_published_one(model: str, parameters: int):
    assert rollout.model_parameters(MODELS[model]) == parameters


def test_estimate_covers_the_measured_generation_peaks():
    # tests/gpu (issue 14's table): HF generate on Qwen2.5-0.5B's architecture,
    # fp32, eager, prompt 512 + response 256, peaked this far above the
    # resident weights (rollout peak allocated less resident 3.75 GiB).
    measured_gib = {16: 4.73 - 3.75, 32: 5.71 - 3.75, 64: 7.67 - 3.75}
    per_sequence = rollout.bytes_per_sequence(MODELS["Qwen2.5-0.5B-Instruct"], 512, 256, "float32", "eager")
    for prompts, gib in measured_gib.items():
        estimate = prompts * per_sequence / GIB
        # Never below what was measured, and not so far above it that the estimate says nothing.
        assert gib <= estimate <= 1.3 * gib, (prompts, gib, estimate)


def test_resident_weights_match_what_verl_kept_on_the_gpu():
    # Measured: 3.75 GiB resident (actor and critic) without a KL term, 5.59 GiB with the ref.
    config = MODELS["Qwen2.5-0.5B-Instruct"]
    without = rollout.resident_bytes(config, "float32", 1, critic=True, reference=False) / GIB
    with_ref = rollout.resident_bytes(config, "float32", 1, critic=True, reference=True) / GIB
    assert 3.6 <= without <= 3.75
    assert 5.45 <= with_ref <= 5.59


@pytest.mark.parametrize(
    ("model", "memory", "critic", "reference", "expected"),
    [
        # Qwen2.5-0.5B: the whole batch of 64 in one call on every card here.
        ("Qwen2.5-0.5B-Instruct", P40, True, False, 64),
        ("Qwen2.5-0.5B-Instruct", P40, True, True, 64),
        ("Qwen2.5-0.5B-Instruct", P40_NO_ECC, True, False, 64),
        ("Qwen2.5-0.5B-Instruct", CARD_16GB, True, True, 64),
        # 1.5B: actor and critic take 11.5 GiB, memory allows 45 prompts; 32 is the
        # largest size that splits 64 evenly.
        ("Qwen2.5-1.5B-Instruct", P40, True, False, 32),
        ("Qwen2.5-1.5B-Instruct", P40_NO_ECC, True, True, 4),
        ("Qwen2.5-1.5B-Instruct", P40, False, False, 64),
        ("Qwen2.5-1.5B-Instruct", CARD_16GB, False, False, 32),
        # 3B: only GRPO (no critic) leaves room on a 24 GB card.
        ("Qwen2.5-3B-Instruct", P40, False, False, 32),
        ("Qwen2.5-3B-Instruct", P40_NO_ECC, False, False, 32),
    ],
)
def test_micro_batch_per_model_and_card(model: str, memory: int, critic: bool, reference: bool, expected: int):
    result = plan(model, memory, critic=critic, reference=reference)
    assert result["micro_batch_size"] == expected
    assert result["val_batch_size"] == expected
    assert result["fits"] >= expected
    # The generation it plans for fits the usable memory beside the weights.
    per_prompt = rollout.bytes_per_sequence(MODELS[model], 512, 256, "float32", "eager")
    assert result["resident_mib"] * 2**20 + expected * per_prompt <= result["usable_mib"] * 2**20 * 1.001


@pytest.mark.parametrize(
    ("model", "memory", "critic", "reference"),
    [
        ("Qwen2.5-1.5B-Instruct", P40, True, True),
        ("Qwen2.5-1.5B-Instruct", CARD_16GB, True, False),
        ("Qwen2.5-3B-Instruct", P40, True, False),
        ("Qwen2.5-3B-Instruct", P40_NO_ECC, True, True),
        ("Qwen2.5-3B-Instruct", CARD_16GB, False, False),
    ],
)
def test_models_that_do_not_fit_stop_with_what_to_do(model: str, memory: int, critic: bool, reference: bool):
    with pytest.raises(AnsibleFilterError, match="does not fit.*train_rollout_micro_batch_size"):
        plan(model, memory, critic=critic, reference=reference)


def test_largest_even_split_not_the_memory_limit():
    # 48 prompts a GPU, room for 40 of them: verl would run micro 40 as ONE chunk of
    # 48 (48 // 40 = 1), more than fits. 24 splits 48 into two chunks of 24.
    config = MODELS["Qwen2.5-1.5B-Instruct"]
    result = plan("Qwen2.5-1.5B-Instruct", P40, train_batch_size=48)
    assert result["fits"] >= 40
    assert result["micro_batch_size"] == 24
    assert (
        rollout.bytes_per_sequence(config, 512, 256, "float32", "eager") * 48
        > (result["usable_mib"] - result["resident_mib"]) * 2**20
    )


def verl_chunks(batch: int, micro: int) -> list[int]:
    """What verl 0.4.1's HFRollout.generate_sequences does with a batch, or AssertionError."""
    chunks = max(batch // micro, 1)
    assert batch % chunks == 0, f"only support equal chunk: {batch} into {chunks}"
    return [batch // chunks] * chunks


@pytest.mark.parametrize("gpus", [1, 2, 4])
@pytest.mark.parametrize("batch", [8, 24, 48, 64, 96, 100, 128, 256])
@pytest.mark.parametrize("memory", [12000, 16384, 22919, 40000])
def test_every_batch_verl_sees_splits_into_chunks_that_fit(gpus: int, batch: int, memory: int):
    if batch % gpus:
        pytest.skip("verl needs the batch to divide among the GPUs")
    try:
        result = plan("Qwen2.5-1.5B-Instruct", memory, train_batch_size=batch, n_gpus=gpus, critic=False)
    except AnsibleFilterError as error:
        # Only a card too small for one prompt beside the weights may refuse (1.5B on 12 GB).
        assert "not even one prompt" in str(error) and memory <= 12000, error
        return
    micro = result["micro_batch_size"]
    # Training: every generate() call is at most what fits.
    assert max(verl_chunks(batch // gpus, micro)) <= result["fits"]
    # Validation: batches of val_batch_size rows, the last one smaller (GSM8K's
    # 1319 test rows and others), padded to a multiple of the GPUs, then split.
    for rows in (1, 7, 31, 1319, 1320):
        for start in range(0, rows, result["val_batch_size"]):
            size = min(result["val_batch_size"], rows - start)
            per_gpu = math.ceil(size / gpus)
            assert max(verl_chunks(per_gpu, micro)) <= micro


def test_rollout_n_multiplies_the_memory_per_prompt():
    one = plan("Qwen2.5-1.5B-Instruct", P40, critic=False)
    five = plan("Qwen2.5-1.5B-Instruct", P40, critic=False, rollout_n=5)
    assert five["fits"] == pytest.approx(one["fits"] / 5, abs=1)
    assert five["micro_batch_size"] == 16


def test_more_gpus_split_the_batch_and_the_validation_batch():
    result = plan("Qwen2.5-1.5B-Instruct", P40, n_gpus=2)
    assert result["per_gpu_batch"] == 32
    assert result["micro_batch_size"] == 32
    assert result["val_batch_size"] == 64


def test_override_wins_but_must_split_evenly():
    result = plan("Qwen2.5-0.5B-Instruct", P40, override=16)
    assert (result["micro_batch_size"], result["val_batch_size"], result["chosen_by"]) == (16, 16, "override")
    # Even a size that would not fit: the user knows better.
    assert plan("Qwen2.5-3B-Instruct", P40, override=8)["micro_batch_size"] == 8
    with pytest.raises(AnsibleFilterError, match=r"unequal chunks.*\[1, 2, 4, 5, 10, 20, 25, 50, 100\]"):
        plan("Qwen2.5-0.5B-Instruct", P40, train_batch_size=100, override=30)
    with pytest.raises(AnsibleFilterError, match="positive integer"):
        plan("Qwen2.5-0.5B-Instruct", P40, override=-4)


def test_bad_input_says_what_to_do():
    with pytest.raises(AnsibleFilterError, match="train_model_config"):
        rollout.hf_rollout_plan({}, P40, 512, 256, "float32", "eager", 64)
    with pytest.raises(AnsibleFilterError, match="num_hidden_layers"):
        rollout.hf_rollout_plan({"hidden_size": 8}, P40, 512, 256, "float32", "eager", 64)
    with pytest.raises(AnsibleFilterError, match="does not divide among 3 GPUs"):
        plan("Qwen2.5-0.5B-Instruct", P40, n_gpus=3)
    with pytest.raises(AnsibleFilterError, match="precision"):
        plan("Qwen2.5-0.5B-Instruct", P40, precision="float16")
    with pytest.raises(AnsibleFilterError, match="GPU memory"):
        plan("Qwen2.5-0.5B-Instruct", "lots")


def test_sdpa_needs_less_than_eager():
    config = MODELS["Qwen2.5-0.5B-Instruct"]
    assert rollout.bytes_per_sequence(config, 512, 256, "float32", "sdpa") < rollout.bytes_per_sequence(
        config, 512, 256, "float32", "eager"
    )


# -- the cards' peaks -----------------------------------------------------------


def test_every_card_states_its_peak_and_source():
    for name, card in CARDS.items():
        assert card["fp32_tflops"] > 0, name
        assert card["memory_mib"] > 0, name
        assert len(card["source"]) > 20, name
    assert CARDS["Tesla P40"]["fp32_tflops"] == 11.76


def test_reference_cards_are_in_the_table():
    for name, profile in GPU_DATA["stack_gpu_profiles"].items():
        assert profile["reference_card"] in CARDS, name


@pytest.mark.parametrize("name", ["Tesla P40", "NVIDIA Tesla P40", "tesla p40 "])
def test_card_peak_matches_driver_spellings(name: str):
    assert rollout.gpu_card_peak(CARDS, name, "float32") == {
        "name": "Tesla P40",
        "tflops": 11.76,
        "source": CARDS["Tesla P40"]["source"],
    }


def test_card_peak_unknown_card_or_precision_is_zero():
    assert rollout.gpu_card_peak(CARDS, "Tesla K80", "float32")["tflops"] == 0
    assert rollout.gpu_card_peak(CARDS, "Tesla P40", "bfloat16")["tflops"] == 0
    assert rollout.gpu_card_peak(CARDS, "NVIDIA H200", "bfloat16")["tflops"] == 989


def test_filter_module_exports():
    filters = rollout.FilterModule().filters()
    assert {"hf_rollout_plan", "gpu_card_peak", "model_parameters"} <= set(filters)
