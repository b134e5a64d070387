"""filter_plugins/rollout.py: the HF rollout's micro-batch, computed from the model and the card."""

from __future__ import annotations

import math

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import REPO

import rollout

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


# -- the estimate, term by term -------------------------------------------------
#
# Small made-up shapes, so that each term of the module docstring's estimate can be made the larger
# one in turn (a max() hides the other side): grouped-query attention (kv_heads != heads), a head_dim
# given apart from hidden // heads, untied embeddings unless said otherwise.
SMALL = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "hidden_size": 40,
    "intermediate_size": 96,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
}
NARROW_MLP = {**SMALL, "intermediate_size": 16}  # sdpa's attention tensors outweigh the MLP's
WIDE_VOCAB = {**SMALL, "vocab_size": 50000}  # decoding's logits outweigh the prefill


def documented_terms(config: dict, prompt: int, response: int, dtype_bytes: int, eager: bool) -> dict:
    """The per-sequence terms exactly as the module docstring states them (before ESTIMATE_FACTOR)."""
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    kv, d = config["num_key_value_heads"], config["head_dim"]
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv_token = 2 * layers * kv * d * dtype_bytes  # K and V of every layer
    scores = 2 * heads * prompt * prompt * dtype_bytes if eager else 0
    qkv_out = (heads + 2 * kv) * d * prompt * dtype_bytes + 2 * heads * d * prompt * dtype_bytes
    attention = scores + qkv_out
    mlp = 3 * prompt * inter * dtype_bytes
    stream = 4 * prompt * hidden * dtype_bytes + (prompt * prompt * 4 if eager else 0)
    prefill = kv_token * prompt + max(attention, mlp) + stream
    decode = kv_token * (prompt + response) + 8 * vocab * 4
    return {"attention": attention, "mlp": mlp, "prefill": prefill, "decode": decode}


@pytest.mark.parametrize(
    ("config", "prompt", "response", "precision", "attn", "larger"),
    [
        (SMALL, 512, 8, "float32", "eager", "attention"),
        (SMALL, 512, 8, "float32", "sdpa", "mlp"),
        (NARROW_MLP, 512, 8, "float32", "sdpa", "attention"),
        (NARROW_MLP, 300, 8, "bfloat16", "sdpa", "attention"),
        (SMALL, 300, 8, "bfloat16", "eager", "attention"),
        (WIDE_VOCAB, 4, 4096, "float32", "eager", "decode"),
        (WIDE_VOCAB, 4, 4096, "bfloat16", "sdpa", "decode"),
    ],
)
def test_bytes_per_sequence_is_the_documented_estimate(config, prompt, response, precision, attn, larger):
    """Catches any changed number, operator or branch in bytes_per_sequence (the KV cache, eager versus
    sdpa attention, the MLP, the stream and the mask, the sampler's logit copies, prompt + response,
    the bf16 size, ESTIMATE_FACTOR): each case makes a different term the one the max() keeps, and the
    bytes must be exactly the docstring's."""
    terms = documented_terms(config, prompt, response, {"float32": 4, "bfloat16": 2}[precision], attn == "eager")
    if larger == "decode":
        assert terms["decode"] > terms["prefill"]
    else:
        assert terms["prefill"] > terms["decode"]
        other = "mlp" if larger == "attention" else "attention"
        assert terms[larger] > terms[other]
    expected = math.ceil(max(terms["prefill"], terms["decode"]) * 1.25)
    assert rollout.bytes_per_sequence(config, prompt, response, precision, attn) == expected


def test_the_qwen_half_b_estimate_is_pinned():
    """Catches a drift of the calibrated estimate itself (ESTIMATE_FACTOR, SAMPLER_LOGIT_COPIES, any term)
    on the model it was calibrated on: 67.2 MiB a sequence (the module docstring)."""
    per_sequence = rollout.bytes_per_sequence(MODELS["Qwen2.5-0.5B-Instruct"], 512, 256, "float32", "eager")
    assert per_sequence == math.ceil(
        max(documented_terms({**MODELS["Qwen2.5-0.5B-Instruct"], "head_dim": 64}, 512, 256, 4, True).values()) * 1.25
    )
    assert round(per_sequence / 2**20, 1) == 67.2


def test_parameter_count_of_untied_embeddings_and_biases():
    """Catches the untied LM head counted other than once more than the embedding (x1, x3, a division),
    `tie_word_embeddings` defaulting to tied, and the q/k/v biases counted without Qwen2 (or kept when
    attention_bias says no). Qwen2.5-7B-Instruct (untied, no tie key needed) has 7,615,616,512 published."""
    qwen7b = {
        "model_type": "qwen2",
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "vocab_size": 152064,
    }
    assert rollout.model_parameters(qwen7b) == 7_615_616_512
    assert rollout.model_parameters({**qwen7b, "tie_word_embeddings": False}) == 7_615_616_512
    assert rollout.model_parameters({**qwen7b, "tie_word_embeddings": True}) == 7_615_616_512 - 152064 * 3584
    layer = 40 * 4 * 8 + 2 * 40 * 2 * 8 + 4 * 8 * 40 + 3 * 40 * 96 + 2 * 40
    assert rollout.model_parameters(SMALL) == 2 * layer + 40 + 2 * 1000 * 40
    bias = (4 + 2 * 2) * 8
    assert rollout.model_parameters({**SMALL, "model_type": "qwen2"}) == 2 * (layer + bias) + 40 + 2 * 1000 * 40
    assert rollout.model_parameters({**SMALL, "attention_bias": True}) == 2 * (layer + bias) + 40 + 2 * 1000 * 40
    assert rollout.model_parameters(
        {**SMALL, "model_type": "qwen2", "attention_bias": False}
    ) == rollout.model_parameters(SMALL)


def test_architecture_reads_the_shapes_and_refuses_what_is_not_positive():
    """Catches head_dim derived with true division (a float), the positivity test moved (a 1 refused,
    a 0 let through), and kv_heads not defaulting to the heads."""
    shapes = rollout.architecture({**SMALL, "head_dim": None, "hidden_size": 40, "num_attention_heads": 6})
    assert shapes["head_dim"] == 6 and isinstance(shapes["head_dim"], int)
    assert rollout.architecture({**SMALL, "num_key_value_heads": None})["kv_heads"] == 4
    one_layer = rollout.architecture({**SMALL, "num_hidden_layers": 1})
    assert one_layer["layers"] == 1
    for key in ("num_hidden_layers", "vocab_size"):
        for bad in (0, -1):
            with pytest.raises(AnsibleFilterError, match=key):
                rollout.architecture({**SMALL, key: bad})


def documented_resident(config: dict, precision_bytes: int, gpus: int, critic: bool, reference: bool) -> int:
    """resident_bytes as the module docstring states it."""
    params = rollout.model_parameters(config)
    head = config["vocab_size"] * config["hidden_size"]
    tied = bool(config.get("tie_word_embeddings"))
    total = params * 4
    if critic:
        total += (params - (0 if tied else head) + config["hidden_size"]) * 4
    if reference:
        total += params * precision_bytes
    if precision_bytes != 4:
        total += params * precision_bytes
    if gpus > 1:
        total = total // gpus + head * (1 if tied else 2) * 4
    return total


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("gpus", [1, 2, 3])
@pytest.mark.parametrize(("critic", "reference"), [(True, False), (False, True), (True, True), (False, False)])
def test_resident_bytes_is_the_documented_sum(tied, precision, gpus, critic, reference):
    """Catches any changed term of resident_bytes: the critic's value head in place of an untied LM head
    (or of nothing, tied), the reference and the compute copy in bf16 (2 bytes, not 1 or 3, multiplied),
    FSDP's sharding from 2 GPUs on (floor division), and the root weights gathered whole (x1 tied, x2
    untied, fp32)."""
    config = {**SMALL, "tie_word_embeddings": tied}
    expected = documented_resident(config, {"float32": 4, "bfloat16": 2}[precision], gpus, critic, reference)
    got = rollout.resident_bytes(config, precision, gpus, critic, reference)
    assert got == expected and isinstance(got, int)


def test_the_defaults_cuda_context_and_margin_set_the_usable_memory():
    """Catches a changed default cuda_context_mib (1536) or memory_margin (0.2)."""
    result = rollout.hf_rollout_plan(SMALL, 11536, 64, 8, "float32", "eager", 4)
    assert result["usable_mib"] == 8000
    assert result["gpu_memory_mib"] == 11536


def test_the_margin_must_be_a_share_in_zero_to_one():
    """Catches the margin bounds moved: 0 must be allowed, 1 (nothing usable) and a negative share refused
    with the margin's own message."""
    assert plan("Qwen2.5-0.5B-Instruct", P40, memory_margin=0)["usable_mib"] == P40 - 1536
    for margin in (1, 1.5, -0.5, -1):
        with pytest.raises(AnsibleFilterError, match="share of the card"):
            plan("Qwen2.5-0.5B-Instruct", P40, memory_margin=margin)


def test_per_prompt_mib_is_rounded_to_a_tenth():
    """Catches per_prompt_mib rounded to another digit or not divided by a MiB."""
    result = plan("Qwen2.5-0.5B-Instruct", P40)
    per_prompt = rollout.bytes_per_sequence(MODELS["Qwen2.5-0.5B-Instruct"], 512, 256, "float32", "eager")
    assert result["per_prompt_mib"] == round(per_prompt / 2**20, 1) == 67.2


def fits_exactly_one(model: str, **kwargs) -> int:
    """The smallest card (MiB) on which `fits` is 1 (read with an override, which never refuses)."""
    for memory_mib in range(8000, 80000, 8):
        if plan(model, memory_mib, override=1, **kwargs)["fits"] == 1:
            return memory_mib
    raise AssertionError("no card size gives fits == 1")


def test_room_for_exactly_one_prompt_gives_micro_batch_one():
    """Catches the "does not fit" test moved to `fits < 2` or `<= 1`, and the divisor choice made strict
    (`d < fits`): room for exactly one prompt is a micro-batch of 1, chosen by memory."""
    card = fits_exactly_one("Qwen2.5-1.5B-Instruct", critic=True, reference=True)
    result = plan("Qwen2.5-1.5B-Instruct", card, critic=True, reference=True)
    assert (result["fits"], result["micro_batch_size"], result["chosen_by"]) == (1, 1, "memory")


def test_fits_is_never_negative():
    """Catches fits floored at -1 instead of 0 when the weights alone exceed the card (read with an override)."""
    result = plan("Qwen2.5-3B-Instruct", 12000, critic=True, reference=True, override=4)
    assert result["resident_mib"] > result["usable_mib"]
    assert result["fits"] == 0


def test_chosen_by_says_whether_the_batch_or_the_memory_set_the_size():
    """Catches chosen_by inverted (`not`, `!=`): the whole per-GPU batch is "batch", a smaller divisor "memory"."""
    assert plan("Qwen2.5-0.5B-Instruct", P40)["chosen_by"] == "batch"
    assert plan("Qwen2.5-1.5B-Instruct", P40)["chosen_by"] == "memory"


def test_override_one_and_zero():
    """Catches the "no override" values changed: 1 is an override of 1 (not the computed size), 0 means none."""
    one = plan("Qwen2.5-0.5B-Instruct", P40, override=1)
    assert (one["micro_batch_size"], one["chosen_by"]) == (1, "override")
    for none in (0, None, ""):
        assert plan("Qwen2.5-0.5B-Instruct", P40, override=none)["chosen_by"] == "batch"


def test_override_larger_than_the_per_gpu_batch_is_one_chunk():
    """Catches splits_evenly's "at least one chunk" changed (2 chunks refuse an odd batch, 0 divides by
    zero): a size above the per-GPU batch is one chunk of the whole batch, as verl runs it."""
    result = plan("Qwen2.5-0.5B-Instruct", P40, train_batch_size=63, override=100)
    assert (result["micro_batch_size"], result["val_batch_size"]) == (63, 63)
    assert rollout.splits_evenly(63, 100) and rollout.splits_evenly(7, 8)
    assert not rollout.splits_evenly(100, 30)


def test_override_validation_batch_covers_every_gpu():
    """Catches val_batch_size of an override divided by the GPUs instead of multiplied."""
    result = plan("Qwen2.5-0.5B-Instruct", P40, n_gpus=2, override=8)
    assert (result["micro_batch_size"], result["val_batch_size"]) == (8, 16)


def test_override_refusal_counts_whole_chunks():
    """Catches the chunk count of the refusal written with true division (3.33 chunks)."""
    with pytest.raises(AnsibleFilterError, match=r"verl would split 100 prompts per GPU into 3 unequal chunks"):
        plan("Qwen2.5-0.5B-Instruct", P40, train_batch_size=100, override=30)


@pytest.mark.parametrize("value", [0, -1, True, 4.5, "4.5", "x"])
def test_positive_int_refuses_zero_booleans_and_fractions(value):
    """Catches _positive_int's guards loosened: 0 (`< 0`, `<= -1`), True (`or` made `and`), 4.5."""
    with pytest.raises(AnsibleFilterError, match="positive integer"):
        rollout._positive_int(value, "it")


@pytest.mark.parametrize(("value", "number"), [(4, 4), (4.0, 4), ("4", 4), (1, 1)])
def test_positive_int_takes_whole_numbers(value, number):
    """Catches a whole float refused (the `not value.is_integer()` turned around)."""
    assert rollout._positive_int(value, "it") == number


def test_card_peak_keeps_the_name_it_was_given():
    """Catches the unknown card's name replaced by "unknown" (`or` made `and`) while an empty name is "unknown"."""
    assert rollout.gpu_card_peak(CARDS, "Tesla K80", "float32")["name"] == "Tesla K80"
    assert rollout.gpu_card_peak(CARDS, "", "float32")["name"] == "unknown"
    assert rollout.gpu_card_peak(CARDS, None, "float32")["name"] == "unknown"


def test_chunks_are_counted_in_whole_numbers_as_verl_does():
    """Catches splits_evenly counting chunks with true division: 9 prompts at 4 are verl's 2 chunks
    (9 // 4), which do not split 9, though 9 / 2.25 would; 48 at 40 are one chunk of 48, which always
    splits (48 % 1.2 is not 0 in floating point)."""
    assert not rollout.splits_evenly(9, 4)
    assert rollout.splits_evenly(48, 40) and rollout.splits_evenly(63, 40)
    with pytest.raises(AnsibleFilterError, match="split 9 prompts per GPU into 2 unequal chunks"):
        plan("Qwen2.5-0.5B-Instruct", P40, train_batch_size=9, override=4)
    assert plan("Qwen2.5-0.5B-Instruct", P40, train_batch_size=48, override=40)["micro_batch_size"] == 40
