"""Size the HF rollout (how many prompts one generate() call takes), and look up a card's peak.

verl 0.4.1's HF rollout (verl/workers/rollout/hf_rollout.py) splits the
prompts each GPU gets into ``max(B // micro_batch_size, 1)`` chunks and
generates them one after the other; DataProto.chunk asserts that the chunks
divide B evenly. Fewer, larger calls are much faster (a step on Qwen2.5-0.5B
spent 26.5 s generating 4 x 16 prompts and 7.0 s generating 1 x 64), so the
launcher asks for the largest size that fits beside the weights verl keeps
on the GPU, with a stated margin, and that verl can split.

The estimate, per GPU, in MiB:

    usable    = (memory.total - cuda_context_mib) * (1 - memory_margin)
    resident  = fp32 master weights of the actor, the critic (GAE) and the
                reference model (a KL term), which verl 0.4.1 keeps on the
                GPU through generation on one GPU although the critic's and
                the ref's param_offload are set (measured: tests/gpu/README.md);
                with several GPUs FSDP shards them, and the root module's
                (embedding, lm_head) weights are gathered whole
    per prompt = rollout.n sequences, each the larger of
                prefill: KV cache of the prompt, plus the larger of the
                         attention sub-layer (eager attention keeps two
                         heads x prompt^2 score tensors) and the MLP's
                         three prompt x intermediate tensors, plus the
                         hidden-state stream and the 4-D mask
                decode:  KV cache of prompt + response, plus the sampler's
                         copies of one row of logits
                times ESTIMATE_FACTOR (what these terms miss: allocator
                rounding, rotary and matmul temporaries)
    fits      = (usable - resident) // per prompt

and the micro-batch is the largest divisor of the per-GPU batch
(train_batch_size / GPUs) that is at most ``fits``: every chunk is then
exactly that size. Validation sends batches of micro-batch x GPUs prompts,
so each GPU gets one chunk, and the last, smaller batch one chunk too.

Calibration (tests/gpu/README.md, Qwen2.5-0.5B's architecture, fp32, eager,
prompt 512 + response 256, H200 capped at 24 GiB): generation peaked at
0.98 / 1.96 / 3.92 GiB above the resident weights for 16 / 32 / 64 prompts,
62.7 MiB per prompt; the terms above give 53.75 MiB, so ESTIMATE_FACTOR is
1.25 (67.2 MiB), and the margin comes on top of that.
"""

from __future__ import annotations

import math
from typing import Any

from ansible.errors import AnsibleFilterError

MIB = 2**20
# Measured growth / the terms below on the calibration run, rounded up (62.7 / 53.75 = 1.17).
ESTIMATE_FACTOR = 1.25
# Copies of one row of fp32 logits that sampling holds at once (logits, scaled,
# top-k/top-p sorted values, their indices, the softmax): a generous count.
SAMPLER_LOGIT_COPIES = 8
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
REQUIRED = ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size", "vocab_size")


def architecture(config: dict[str, Any]) -> dict[str, Any]:
    """The shapes the estimate needs from a Hugging Face config.json mapping."""
    if not isinstance(config, dict) or not config:
        raise AnsibleFilterError(
            "The model's config is unknown, so the HF rollout cannot be sized. On a host the "
            "train role reads config.json from train_model_path (build the model layer: --tags "
            "model); tools/render.py takes --model-config FILE; or set train_model_config."
        )
    missing = [key for key in REQUIRED if not isinstance(config.get(key), int) or config.get(key) <= 0]
    if missing:
        raise AnsibleFilterError(
            f"The model's config lacks positive integers for {', '.join(missing)}; the HF rollout "
            "sizing reads a decoder-only config.json (Qwen2/Llama style)."
        )
    heads = config["num_attention_heads"]
    return {
        "layers": config["num_hidden_layers"],
        "heads": heads,
        "kv_heads": config.get("num_key_value_heads") or heads,
        "head_dim": config.get("head_dim") or config["hidden_size"] // heads,
        "hidden": config["hidden_size"],
        "intermediate": config["intermediate_size"],
        "vocab": config["vocab_size"],
        "tied": bool(config.get("tie_word_embeddings", False)),
    }


def model_parameters(config: dict[str, Any]) -> int:
    """Parameters of a Qwen2/Llama-style causal LM (q/k/v biases as Qwen2 has them)."""
    a = architecture(config)
    h, d = a["hidden"], a["head_dim"]
    attention = h * a["heads"] * d + 2 * h * a["kv_heads"] * d + a["heads"] * d * h
    if config.get("attention_bias", config.get("model_type") == "qwen2"):
        attention += (a["heads"] + 2 * a["kv_heads"]) * d
    layer = attention + 3 * h * a["intermediate"] + 2 * h
    embeddings = a["vocab"] * h * (1 if a["tied"] else 2)
    return a["layers"] * layer + h + embeddings


def bytes_per_sequence(
    config: dict[str, Any], prompt_length: int, response_length: int, precision: str, attn_implementation: str
) -> int:
    """Estimated GPU bytes one generated sequence needs at generate()'s peak."""
    a = architecture(config)
    s = _dtype_bytes(precision)
    p, total = prompt_length, prompt_length + response_length
    kv_per_token = 2 * a["layers"] * a["kv_heads"] * a["head_dim"] * s
    eager = attn_implementation == "eager"
    attention = (
        (2 * a["heads"] * p * p * s if eager else 0)
        + (a["heads"] + 2 * a["kv_heads"]) * a["head_dim"] * p * s
        + 2 * a["heads"] * a["head_dim"] * p * s
    )
    mlp = 3 * p * a["intermediate"] * s
    stream = 4 * p * a["hidden"] * s + (p * p * 4 if eager else 0)
    prefill = kv_per_token * p + max(attention, mlp) + stream
    decode = kv_per_token * total + SAMPLER_LOGIT_COPIES * a["vocab"] * 4
    return math.ceil(max(prefill, decode) * ESTIMATE_FACTOR)


def resident_bytes(config: dict[str, Any], precision: str, n_gpus: int, critic: bool, reference: bool) -> int:
    """Weights verl keeps on each GPU while the HF rollout generates."""
    a = architecture(config)
    params = model_parameters(config)
    total = params * 4  # the actor's fp32 master weights (model_dtype float32)
    if critic:
        # The critic replaces the LM head by a one-output value head.
        total += (params - (0 if a["tied"] else a["vocab"] * a["hidden"]) + a["hidden"]) * 4
    if reference:
        total += params * _dtype_bytes(precision)
    if precision != "float32":
        total += params * _dtype_bytes(precision)  # FSDP's compute-dtype copy of the actor
    if n_gpus > 1:
        # Sharded by FSDP; generate() gathers the root module's weights whole.
        total = total // n_gpus + a["vocab"] * a["hidden"] * (1 if a["tied"] else 2) * 4
    return total


def valid_micro_batches(batch: int) -> list[int]:
    """Sizes verl 0.4.1 splits ``batch`` prompts into equal chunks of (divisors)."""
    return [size for size in range(1, batch + 1) if batch % size == 0]


def splits_evenly(batch: int, micro_batch_size: int) -> bool:
    """verl's own test: B // micro chunks (at least one) must divide B."""
    chunks = max(batch // micro_batch_size, 1)
    return batch % chunks == 0


def hf_rollout_plan(
    model_config: dict[str, Any],
    gpu_memory_mib: int,
    prompt_length: int,
    response_length: int,
    precision: str,
    attn_implementation: str,
    train_batch_size: int,
    n_gpus: int = 1,
    rollout_n: int = 1,
    critic: bool = True,
    reference: bool = False,
    memory_margin: float = 0.2,
    cuda_context_mib: int = 1536,
    override: int | None = None,
) -> dict[str, Any]:
    """The HF rollout micro-batch and validation batch for a run, with the figures behind them.

    ``override`` (a positive integer) replaces the computed size; it must
    still split the per-GPU batch the way verl requires.
    """
    gpu_memory_mib = _positive_int(gpu_memory_mib, "the GPU memory (MiB)")
    prompt_length = _positive_int(prompt_length, "max_prompt_length")
    response_length = _positive_int(response_length, "max_response_length")
    train_batch_size = _positive_int(train_batch_size, "train_batch_size")
    n_gpus = _positive_int(n_gpus, "the number of GPUs")
    rollout_n = _positive_int(rollout_n, "rollout.n")
    cuda_context_mib = int(cuda_context_mib)
    memory_margin = float(memory_margin)
    if not 0 <= memory_margin < 1:
        raise AnsibleFilterError(f"memory_margin is {memory_margin}; it is a share of the card in [0, 1).")
    if train_batch_size % n_gpus:
        raise AnsibleFilterError(
            f"train_batch_size {train_batch_size} does not divide among {n_gpus} GPUs; verl needs a multiple."
        )
    per_gpu = train_batch_size // n_gpus
    per_prompt = bytes_per_sequence(model_config, prompt_length, response_length, precision, attn_implementation)
    per_prompt *= rollout_n
    resident = resident_bytes(model_config, precision, n_gpus, critic, reference)
    usable = (gpu_memory_mib - cuda_context_mib) * (1 - memory_margin) * MIB
    fits = max(int((usable - resident) // per_prompt), 0)
    plan = {
        "per_gpu_batch": per_gpu,
        "fits": fits,
        "per_prompt_mib": round(per_prompt / MIB, 1),
        "resident_mib": round(resident / MIB),
        "usable_mib": round(usable / MIB),
        "gpu_memory_mib": gpu_memory_mib,
    }
    if override not in (None, "", 0):
        size = _positive_int(override, "train_rollout_micro_batch_size")
        if not splits_evenly(per_gpu, size):
            raise AnsibleFilterError(
                f"train_rollout_micro_batch_size {size}: verl would split {per_gpu} prompts per GPU into "
                f"{per_gpu // size} unequal chunks and stop. Choose one of {valid_micro_batches(per_gpu)}."
            )
        size = min(size, per_gpu)
        return {**plan, "micro_batch_size": size, "val_batch_size": size * n_gpus, "chosen_by": "override"}
    if fits < 1:
        raise AnsibleFilterError(
            f"The HF rollout does not fit: a GPU of {gpu_memory_mib} MiB leaves {plan['usable_mib']} MiB "
            f"after the CUDA context and the {memory_margin:.0%} margin, and the weights verl keeps "
            f"there take {plan['resident_mib']} MiB, so not even one prompt ({plan['per_prompt_mib']} MiB) "
            "fits. Use a smaller model, more GPUs, or set train_rollout_micro_batch_size if you "
            "know better."
        )
    size = max(d for d in valid_micro_batches(per_gpu) if d <= fits)
    return {
        **plan,
        "micro_batch_size": size,
        "val_batch_size": size * n_gpus,
        "chosen_by": "batch" if size == per_gpu else "memory",
    }


def gpu_card_peak(cards: dict[str, dict[str, Any]], name: str, precision: str) -> dict[str, Any]:
    """The peak TFLOP/s of card ``name`` at ``precision`` from stack_gpu_cards.

    Returns {"name", "tflops", "source"}; tflops is 0 for a card (or a
    precision) the table lacks, which the run report then says. Names match
    without a leading "NVIDIA " and without regard to case, since drivers
    differ in how they spell them.
    """
    key = {"float32": "fp32_tflops", "bfloat16": "bf16_tflops"}.get(precision)
    if key is None:
        raise AnsibleFilterError(f"precision {precision!r}: expected one of {', '.join(DTYPE_BYTES)}.")
    wanted = _card_key(str(name or ""))
    for card, figures in (cards or {}).items():
        if _card_key(card) == wanted:
            return {"name": card, "tflops": figures.get(key, 0) or 0, "source": figures.get("source", "")}
    return {"name": str(name or "unknown"), "tflops": 0, "source": ""}


def _card_key(name: str) -> str:
    name = name.strip().lower()
    return name[len("nvidia ") :] if name.startswith("nvidia ") else name


def _dtype_bytes(precision: str) -> int:
    if precision not in DTYPE_BYTES:
        raise AnsibleFilterError(f"precision {precision!r}: expected one of {', '.join(DTYPE_BYTES)}.")
    return DTYPE_BYTES[precision]


def _positive_int(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"{what} should be a positive integer, got {value!r}.") from None
    if number <= 0 or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise AnsibleFilterError(f"{what} should be a positive integer, got {value!r}.")
    return number


class FilterModule:
    """HF rollout sizing."""

    def filters(self) -> dict[str, Any]:
        return {
            "hf_rollout_plan": hf_rollout_plan,
            "model_parameters": model_parameters,
            "gpu_card_peak": gpu_card_peak,
        }
