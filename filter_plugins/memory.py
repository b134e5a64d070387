"""Size every memory knob of a verl 0.4.1 run on the pascal path from the model and the card.

The launcher (templates/train.sh.j2) calls ``memory_plan`` at render time.
From the model's config.json (layers, hidden, heads, vocabulary, tied
embeddings), the algorithm (PPO with a critic or GRPO with n samples, a KL
reference model or not, a LoRA rank), the token budgets, the GPU count and each
card's memory it picks

- the actor update micro-batch, the critic micro-batch (update and values),
  the log-prob micro-batch (old and ref log-probs),
- the HF rollout micro-batch (filter_plugins/rollout.py's estimate),
- gradient checkpointing of the actor and of the critic,
- whether each optimizer's state is offloaded to the CPU between updates,

the fastest setting whose predicted peak stays under the usable memory
(``(memory.total - cuda_context_mib) * (1 - memory_margin)``), and refuses a
run that cannot fit, naming the term that is too big and what would fit.

Everything is a PREDICTION: bytes per GPU of torch's allocator (what
``torch.cuda.max_memory_allocated`` reports), phase by phase, one process for
every role as verl runs them on one GPU. The terms and the factors that
calibrate them (docs/memory.md has the measurements and the table of
predictions against measurements):

  W          fp32 weights, 4 bytes a parameter (P: model_parameters)
  resident   what stays on the GPU between calls: the actor's weights (the HF
             rollout generates with them, so they are never offloaded), the
             critic's (measured: verl 0.4.1 keeps them on one GPU although
             critic param_offload is set), the reference model's (a KL term
             without LoRA; with LoRA the reference is the actor with its
             adapter off and costs nothing), the LoRA adapter and its Adam
             state, and each optimizer's state that is not offloaded
  rollout    resident + prompts x n x rollout.bytes_per_sequence
  log-prob   resident + micro x LOGPROB_FACTOR x (S*V*4 + 2*R*V*4 + layer)
             (S = prompt + response, R = response, V = vocabulary; the fp32
             logits of the whole sequence, two response-sized copies for the
             log-softmax and the entropy, one layer's forward temporaries)
  values     resident + micro x VALUES_FACTOR x layer
  update     resident + the larger of
               backward: gradients of the trainable weights (with several GPUs
                 also the reduced shard of earlier micro-batches; an offloaded
                 optimizer's two moments, loaded back for the whole update) + micro x
                 activations, where
                 activations are the logits path (2*S*V*4 + 2*R*V*4, actor only)
                 plus, with gradient checkpointing, each layer's input and one
                 layer recomputed, without it every layer's saved tensors
               step: STEP_COPIES x the trainable weights (gradients, Adam's two
                 moments loaded back, the foreach temporaries)
  layer      one decoder layer's forward temporaries for one sequence: eager
             attention's three heads x S x S score tensors or the MLP's three
             S x intermediate tensors, whichever is larger, plus the stream

With several GPUs, FSDP shards the weights, gradients and optimizer states;
the actor without LoRA is one FSDP unit on the HF rollout path (verl drops the
wrap policy there), so its whole weights are gathered while it computes.
Nothing with several GPUs has been measured.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

# The HF rollout's estimate (filter_plugins/rollout.py), loaded by path: Ansible loads
# filter plugins as files, not as a package.
_spec = importlib.util.spec_from_file_location("verl_p40_rollout_sizing", Path(__file__).with_name("rollout.py"))
rollout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rollout)

MIB = 2**20
GIB = 2**30

# Calibration on Qwen2.5-0.5B's architecture (tests/gpu/results/memory-24gib-computed-*,
# H200 capped at 24 GiB): measured peak above the resident weights / the terms above.
# Old log-prob, micro 4: 2.90 GiB measured, 3.15 GiB of terms: the terms are kept (factor 1).
LOGPROB_FACTOR = 1.0
# Critic values, micro 8: 1.98 GiB measured, 0.84 GiB of terms (eager attention's
# score tensors, the MLP's): the terms miss something, so they are scaled up.
VALUES_FACTOR = 2.4
# Activations of an update (backward), per sequence, refitted on 2026-12-06 on seven runs of
# 0.5B (every weight, PPO), 1.5B and 3B (GRPO, LoRA), each capped at 22 GiB on an H100 or an
# H200 (tests/gpu/results: sized05b, recal05b, plan05b, plan05b-offload, lora15b-b16,
# recal15b-b16, lora3b-3steps), once an offloaded optimizer's moments are counted in the
# backward (_Run.update): with gradient checkpointing, 0.8 x the layer terms and 0.7 x the
# logits path predict each run's actor and critic update from 0.06 to 0.63 GiB above its
# measured peak (0.8 and 0.65 fit them within -0.08 to +0.16; fewer points than runs: two
# of the 0.5B runs share their knobs, every critic point is 0.5B at micro-batch 16, and at
# micro-batch 4 0.5B's update peaks with its optimizer step). Before, the backward was
# fitted on no run whose update peaked there (1.5 and 1.25: the 1.5B LoRA update was
# over-predicted by 3.60 GiB). Without gradient checkpointing no run was measured: every
# layer's saved tensors keep the old, larger factor.
TRAIN_LAYER_FACTOR = 1.5
TRAIN_LOGITS_FACTOR = 0.7
CHECKPOINTED_FACTOR = 0.8
# Copies of the trainable fp32 weights at the optimizer step, above the resident ones:
# actor 9.20 GiB = 5 x 1.84, critic 7.36 GiB = 4 x 1.84 (both optimizers offloaded,
# so Adam's two moments are among them). Without offload the moments are resident.
STEP_COPIES = {"actor": 5, "critic": 4}
# Speed model (relative time of an update's compute, a heuristic, not measured): recomputing
# activations costs a third more; each micro-batch costs a fixed overhead of one sequence
# (a micro-batch of one runs at half the speed of a large one).
CHECKPOINT_COST = 4 / 3
MICRO_OVERHEAD = 1.0
# Offloading an optimizer moves its state over PCIe twice a step; prefer not to, unless
# keeping it on the GPU would take prompts from the rollout's generate() calls: the HF
# rollout reads every weight for each token of each call, so a call of half the prompts
# takes about as long as a whole one, and generation is the longest phase of a step (a
# third of 0.5B's, three quarters of 1.5B LoRA's: docs/memory.md). Plans are ranked by
# the rollout's prompts per call first, then by the update's cost.
OFFLOAD_COST = 0.1
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_parameters(config: dict[str, Any], rank: int, target_modules: Any = "all-linear") -> int:
    """Parameters of a LoRA adapter of ``rank`` on the decoder's linear layers (PEFT's all-linear: not the LM head)."""
    rank = int(rank or 0)
    if rank <= 0:
        return 0
    a = rollout.architecture(config)
    h, d, i = a["hidden"], a["head_dim"], a["intermediate"]
    shapes = {
        "q_proj": (h, a["heads"] * d),
        "k_proj": (h, a["kv_heads"] * d),
        "v_proj": (h, a["kv_heads"] * d),
        "o_proj": (a["heads"] * d, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }
    names = LORA_MODULES if target_modules in ("all-linear", None, "") else [str(t) for t in target_modules]
    unknown = [n for n in names if n not in shapes]
    if unknown:
        raise AnsibleFilterError(
            f"train_lora_target_modules: {', '.join(unknown)} is no linear layer of a Qwen2/Llama decoder; "
            f"use all-linear or names among {', '.join(LORA_MODULES)}."
        )
    return a["layers"] * sum(rank * (shapes[n][0] + shapes[n][1]) for n in names)


def _layer_forward(a: dict[str, Any], seq: int, eager: bool) -> int:
    attention = 3 * a["heads"] * seq * seq * 4 if eager else 4 * a["heads"] * a["head_dim"] * seq * 4
    mlp = 3 * seq * a["intermediate"] * 4
    stream = 4 * seq * a["hidden"] * 4 + (seq * seq * 4 if eager else 0)
    return max(attention, mlp) + stream


def _layer_saved(a: dict[str, Any], seq: int, eager: bool, lora_rank: int) -> int:
    """Tensors one decoder layer keeps for its backward without checkpointing, one sequence."""
    attention = 3 * a["heads"] * seq * seq * 4 if eager else 0
    qkv = 2 * (a["heads"] + 2 * a["kv_heads"]) * a["head_dim"] * seq * 4
    mlp = 4 * seq * a["intermediate"] * 4
    stream = 10 * seq * a["hidden"] * 4
    lora = 7 * seq * lora_rank * 4
    return attention + qkv + mlp + stream + lora


def phase_terms(
    config: dict[str, Any],
    prompt_length: int,
    response_length: int,
    attn_implementation: str = "eager",
    lora_rank: int = 0,
) -> dict[str, int]:
    """Bytes per sequence of each phase's activations (after the calibration factors)."""
    a = rollout.architecture(config)
    eager = attn_implementation == "eager"
    seq, resp, vocab = prompt_length + response_length, response_length, a["vocab"]
    layer = _layer_forward(a, seq, eager)
    logits_fwd = seq * vocab * 4 + 2 * resp * vocab * 4
    logits_train = 2 * seq * vocab * 4 + 2 * resp * vocab * 4
    checkpointed = a["layers"] * seq * a["hidden"] * 4 + 2 * layer
    saved = a["layers"] * _layer_saved(a, seq, eager, lora_rank)
    return {
        "log_prob": math.ceil(LOGPROB_FACTOR * (logits_fwd + layer)),
        "values": math.ceil(VALUES_FACTOR * layer),
        "actor_ckpt": math.ceil(TRAIN_LOGITS_FACTOR * logits_train + CHECKPOINTED_FACTOR * checkpointed),
        "actor_full": math.ceil(TRAIN_LOGITS_FACTOR * logits_train + TRAIN_LAYER_FACTOR * saved),
        "critic_ckpt": math.ceil(CHECKPOINTED_FACTOR * checkpointed),
        "critic_full": math.ceil(TRAIN_LAYER_FACTOR * saved),
    }


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _positive(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"{what} should be a positive integer, got {value!r}.") from None
    if number <= 0 or isinstance(value, bool):
        raise AnsibleFilterError(f"{what} should be a positive integer, got {value!r}.")
    return number


def _gib(value: float) -> float:
    return round(value / GIB, 2)


class _Run:
    """The fixed inputs of one plan, and the memory of each phase for given knobs."""

    def __init__(self, **k: Any) -> None:
        self.__dict__.update(k)
        cfg = k["config"]
        a = rollout.architecture(cfg)
        self.a = a
        self.params = rollout.model_parameters(cfg)
        self.lora = lora_parameters(cfg, k["lora_rank"], k["lora_target_modules"])
        n = k["n_gpus"]
        w = self.params * 4
        embed = a["vocab"] * a["hidden"] * 4 * (1 if a["tied"] else 2)
        layer_w = (w - embed) // max(a["layers"], 1)
        # The actor: one FSDP unit on the HF rollout path without LoRA (gathered whole while
        # it computes); with LoRA the wrap policy (hf_rollout_lora_wrap fix) gathers a unit at a time.
        self.actor_w = w // n
        self.actor_gather = 0 if n == 1 else (w - w // n if not self.lora else embed + layer_w)
        critic_params = self.params - (0 if a["tied"] else a["vocab"] * a["hidden"]) + a["hidden"]
        self.critic_w = critic_params * 4 // n if k["critic"] else 0
        self.critic_gather = 0 if n == 1 or not k["critic"] else embed + layer_w
        self.ref_w = (w // n + (0 if n == 1 else embed + layer_w)) if k["reference"] and not self.lora else 0
        # Trainable fp32 weights per GPU (the gradients and Adam's moments scale with them).
        self.actor_t = (self.lora * 4) if self.lora else w // n
        self.actor_t_full = (self.lora * 4) if self.lora else w  # unsharded gradient in backward
        self.critic_t = critic_params * 4 // n if k["critic"] else 0
        self.critic_t_full = critic_params * 4 if k["critic"] else 0
        self.terms = phase_terms(
            cfg, k["prompt_length"], k["response_length"], k["attn_implementation"], k["lora_rank"]
        )
        self.seq_bytes = rollout.bytes_per_sequence(
            cfg, k["prompt_length"], k["response_length"], "float32", k["attn_implementation"]
        )

    def resident(self, offload: dict[str, bool]) -> int:
        total = self.actor_w + self.critic_w + self.ref_w
        if self.lora:
            total += self.lora * 4 + (0 if offload["actor_optimizer"] else 2 * self.actor_t)
        elif not offload["actor_optimizer"]:
            total += 2 * self.actor_t
        if self.critic and not offload["critic_optimizer"]:
            total += 2 * self.critic_t
        return total

    def update(self, role: str, micro: int, ckpt: bool, accumulate: bool, offload: dict[str, bool]) -> dict[str, int]:
        t, t_full = (self.actor_t, self.actor_t_full) if role == "actor" else (self.critic_t, self.critic_t_full)
        gather = self.actor_gather if role == "actor" else self.critic_gather
        act = self.terms[f"{role}_{'ckpt' if ckpt else 'full'}"]
        # One GPU (NO_SHARD): autograd accumulates into the gradient in place. Several: FSDP
        # keeps the reduced shard of earlier micro-batches beside the new unsharded gradient.
        saved = t if accumulate and self.n_gpus > 1 else 0
        # An offloaded optimizer's two moments are loaded back when the update starts and offloaded
        # when it ends (verl 0.4.1's fsdp_workers.py, update_actor / update_critic), so they are on
        # the GPU through the backward, not only the step (measured: 0.5B's update peaks at the
        # same 13.04 GiB with the actor's Adam state offloaded or kept, plan05b-*-22gib).
        offloaded = offload[f"{role}_optimizer"]
        loaded = 2 * t if offloaded else 0
        backward = gather + t_full + saved + loaded + micro * act
        copies = STEP_COPIES[role] - (0 if offloaded else 2)
        step = copies * t
        return {"backward": backward, "step": step}


def memory_plan(
    model_config: dict[str, Any],
    gpu_memory_mib: int,
    prompt_length: int,
    response_length: int,
    train_batch_size: int,
    ppo_mini_batch_size: int,
    n_gpus: int = 1,
    rollout_n: int = 1,
    adv_estimator: str = "gae",
    reference: bool = False,
    lora_rank: int = 0,
    lora_target_modules: Any = "all-linear",
    attn_implementation: str = "eager",
    memory_margin: float = 0.2,
    cuda_context_mib: int = 1536,
    fixed: dict[str, Any] | None = None,
    suggest: bool = True,
) -> dict[str, Any]:
    """Every micro-batch, gradient checkpointing and optimizer offload for one run, with predicted peaks.

    ``fixed`` pins knobs instead of choosing them (keys: actor, critic, log_prob,
    rollout, actor_checkpointing, critic_checkpointing, actor_optimizer_offload,
    critic_optimizer_offload); a pinned knob is still checked against the memory.
    Raises AnsibleFilterError, naming the term that is too big and what would fit,
    when nothing fits.
    """
    gpu_memory_mib = _positive(gpu_memory_mib, "the GPU memory (MiB)")
    prompt_length = _positive(prompt_length, "max_prompt_length")
    response_length = _positive(response_length, "max_response_length")
    batch = _positive(train_batch_size, "train_batch_size")
    mini = _positive(ppo_mini_batch_size, "train_ppo_mini_batch_size")
    n_gpus = _positive(n_gpus, "the number of GPUs")
    n = _positive(rollout_n, "train_rollout_n")
    lora_rank = int(lora_rank or 0)
    if lora_rank < 0:
        raise AnsibleFilterError(f"train_lora_rank is {lora_rank}; 0 (full fine-tuning) or a positive rank.")
    memory_margin = float(memory_margin)
    if not 0 <= memory_margin < 1:
        raise AnsibleFilterError(f"memory_margin is {memory_margin}; it is a share of the card in [0, 1).")
    if batch % n_gpus or (mini * n) % n_gpus:
        raise AnsibleFilterError(
            f"train_batch_size {batch} and train_ppo_mini_batch_size {mini} x train_rollout_n {n} must "
            f"divide among {n_gpus} GPUs."
        )
    fixed = {k: v for k, v in (fixed or {}).items() if v not in (None, "")}
    critic = adv_estimator == "gae"
    run = _Run(
        config=model_config,
        n_gpus=n_gpus,
        critic=critic,
        reference=bool(reference),
        lora_rank=lora_rank,
        lora_target_modules=lora_target_modules,
        prompt_length=prompt_length,
        response_length=response_length,
        attn_implementation=attn_implementation,
    )
    usable = int((gpu_memory_mib - int(cuda_context_mib)) * (1 - memory_margin) * MIB)
    prompts_per_gpu = batch // n_gpus
    seqs_per_gpu = prompts_per_gpu * n
    mini_per_gpu = mini * n // n_gpus

    def bool_options(key: str, fastest_first: list[bool]) -> list[bool]:
        return [bool(fixed[key])] if key in fixed else fastest_first

    best: dict[str, Any] | None = None
    failures: list[dict[str, Any]] = []
    for actor_off in bool_options("actor_optimizer_offload", [False, True]):
        for critic_off in bool_options("critic_optimizer_offload", [False, True]) if critic else [True]:
            offload = {"actor_optimizer": actor_off, "critic_optimizer": critic_off}
            plan = _plan_for(run, offload, usable, fixed, prompts_per_gpu, seqs_per_gpu, mini_per_gpu, n)
            if "problem" in plan:
                failures.append(plan)
                continue
            plan["cost"] += OFFLOAD_COST * ((actor_off and (0.1 if run.lora else 1)) + (critic and critic_off))
            if best is None or _faster(plan, best):
                best = plan
    if best is None:
        # The setting that saves the most (every optimizer offloaded) says what is left too big.
        worst = failures[-1]
        message = (
            f"The run does not fit {n_gpus} GPU(s) of {gpu_memory_mib} MiB: {_gib(usable)} GiB usable per GPU "
            f"after the CUDA context ({int(cuda_context_mib)} MiB) and the {memory_margin:.0%} margin. "
            f"{worst['problem']}"
        )
        if suggest:
            message += _suggestions(
                model_config,
                gpu_memory_mib=gpu_memory_mib,
                prompt_length=prompt_length,
                response_length=response_length,
                train_batch_size=batch,
                ppo_mini_batch_size=mini,
                n_gpus=n_gpus,
                rollout_n=n,
                adv_estimator=adv_estimator,
                reference=reference,
                lora_rank=lora_rank,
                lora_target_modules=lora_target_modules,
                attn_implementation=attn_implementation,
                memory_margin=memory_margin,
                cuda_context_mib=cuda_context_mib,
            )
        raise AnsibleFilterError(message)
    peaks = best["peaks"]
    best.update(
        {
            "gpu_memory_mib": gpu_memory_mib,
            "usable_mib": round(usable / MIB),
            "n_gpus": n_gpus,
            "parameters": run.params,
            "lora_parameters": run.lora,
            "lora_rank": lora_rank,
            "critic": critic,
            "reference_model": bool(reference) and not run.lora,
            "peak_phase": max(peaks, key=peaks.get),
            "peak_mib": round(max(peaks.values()) / MIB),
            "peaks_mib": {k: round(v / MIB) for k, v in peaks.items()},
            "peaks_gib": {k: _gib(v) for k, v in peaks.items()},
        }
    )
    best.pop("cost")
    return best


def _faster(plan: dict[str, Any], than: dict[str, Any]) -> bool:
    """More prompts per generate() call first (OFFLOAD_COST's note), then the cheaper update."""
    if plan["rollout_micro_batch_size"] != than["rollout_micro_batch_size"]:
        return plan["rollout_micro_batch_size"] > than["rollout_micro_batch_size"]
    return plan["cost"] < than["cost"] - 1e-9


def _plan_for(
    run: _Run,
    offload: dict[str, bool],
    usable: int,
    fixed: dict[str, Any],
    prompts_per_gpu: int,
    seqs_per_gpu: int,
    mini_per_gpu: int,
    n: int,
) -> dict[str, Any]:
    resident = run.resident(offload)
    room = usable - resident
    names = {
        "actor": "the actor's weights",
        "critic": "the critic's weights",
        "ref": "the reference model's weights",
    }
    if room <= 0:
        parts = [f"{names['actor']} {_gib(run.actor_w)} GiB"]
        if run.critic_w:
            parts.append(f"{names['critic']} {_gib(run.critic_w)} GiB")
        if run.ref_w:
            parts.append(f"{names['ref']} {_gib(run.ref_w)} GiB")
        return {
            "problem": f"The weights verl keeps on the GPU alone ({', '.join(parts)}; {_gib(resident)} GiB with "
            "optimizer state) exceed it.",
        }
    peaks: dict[str, int] = {}
    # HF rollout: prompts per generate() call, a divisor of the per-GPU batch.
    per_prompt = run.seq_bytes * n
    fits = int(room // per_prompt)
    if "rollout" in fixed:
        # Pinned (train_rollout_micro_batch_size): not held to the memory (rollout.py's override), but
        # verl must still split the per-GPU batch into equal chunks.
        rollout_mb = rollout._positive_int(fixed["rollout"], "train_rollout_micro_batch_size")
        if not rollout.splits_evenly(prompts_per_gpu, rollout_mb):
            raise AnsibleFilterError(
                f"train_rollout_micro_batch_size {rollout_mb}: verl would split {prompts_per_gpu} prompts per GPU "
                f"into {prompts_per_gpu // rollout_mb} unequal chunks and stop. Choose one of "
                f"{rollout.valid_micro_batches(prompts_per_gpu)}."
            )
        rollout_mb = min(rollout_mb, prompts_per_gpu)
    else:
        options = [d for d in _divisors(prompts_per_gpu) if d <= fits]
        if not options:
            return {
                "problem": f"The HF rollout: one prompt with {n} answers needs {_gib(per_prompt)} GiB beside "
                f"{_gib(resident)} GiB of resident weights.",
            }
        rollout_mb = max(options)
    peaks["rollout"] = resident + rollout_mb * per_prompt
    # Log-prob forwards (old, and the ref's): the largest micro-batch that fits, up to the per-GPU sequences.
    lp = run.terms["log_prob"]
    if "log_prob" in fixed:
        log_prob_mb = rollout._positive_int(fixed["log_prob"], "train_memory_fixed.log_prob")
        over = resident + run.actor_gather + log_prob_mb * lp - usable
        if over > 0:
            return {
                "problem": f"The log-prob forward: the pinned micro-batch {log_prob_mb} (train_memory_fixed.log_prob) "
                f"needs {_gib(run.actor_gather + log_prob_mb * lp)} GiB beside {_gib(resident)} GiB of resident "
                f"weights, {_gib(over)} GiB too much.",
            }
    else:
        log_prob_mb = min(int((room - run.actor_gather) // lp), seqs_per_gpu)
        if log_prob_mb < 1:
            return {
                "problem": f"The log-prob forward: one sequence's fp32 logits and temporaries need {_gib(lp)} GiB "
                f"beside {_gib(resident)} GiB of resident weights.",
            }
    peaks["log_prob"] = resident + run.actor_gather + log_prob_mb * lp
    cost = 0.0
    choice: dict[str, Any] = {"rollout": rollout_mb, "log_prob": log_prob_mb}
    for role in ["actor"] + (["critic"] if run.critic else []):
        best = None
        smallest_short = None
        ckpts = [bool(fixed[f"{role}_checkpointing"])] if f"{role}_checkpointing" in fixed else [False, True]
        micros = [int(fixed[role])] if role in fixed else _divisors(mini_per_gpu)
        for ckpt in ckpts:
            for micro in micros:
                parts = run.update(role, micro, ckpt, micro < mini_per_gpu, offload)
                peak = resident + max(parts.values())
                if role == "critic":
                    peak = max(peak, resident + run.critic_gather + micro * run.terms["values"])
                over = peak - usable
                if over > 0:
                    if smallest_short is None or over < smallest_short[0]:
                        smallest_short = (over, micro, ckpt, parts)
                    continue
                time = (CHECKPOINT_COST if ckpt else 1.0) * (1 + MICRO_OVERHEAD / micro)
                if best is None or time < best[0] - 1e-9 or (abs(time - best[0]) < 1e-9 and micro > best[1]):
                    best = (time, micro, ckpt, peak)
        if best is None:
            over, micro, ckpt, parts = smallest_short
            term = max(parts, key=parts.get)
            what = (
                f"its optimizer step ({STEP_COPIES[role]} copies of the trainable fp32 weights: "
                f"{_gib(parts['step'])} GiB)"
                if term == "step"
                else f"its backward at micro-batch {micro} ({_gib(parts['backward'])} GiB of gradients, optimizer "
                f"state and activations, gradient checkpointing {'on' if ckpt else 'off'})"
            )
            return {
                "problem": f"The {role} update: {what} beside {_gib(resident)} GiB of resident weights is "
                f"{_gib(over)} GiB too much.",
            }
        time, micro, ckpt, peak = best
        peaks[f"{role}_update"] = peak
        choice[role] = micro
        choice[f"{role}_checkpointing"] = ckpt
        cost += time
    if run.critic:
        peaks["critic_values"] = resident + run.critic_gather + choice["critic"] * run.terms["values"]
    return {
        "micro_batch_size_per_gpu": {
            "actor": choice["actor"],
            "log_prob": choice["log_prob"],
            "critic": choice.get("critic", 1),
        },
        "rollout_micro_batch_size": choice["rollout"],
        "val_batch_size": choice["rollout"] * run.n_gpus,
        "rollout_fits": fits,
        "gradient_checkpointing": {
            "actor": choice["actor_checkpointing"],
            "critic": choice.get("critic_checkpointing", True),
        },
        "offload": {
            "actor_params": False,
            "actor_optimizer": offload["actor_optimizer"],
            "critic_params": True,
            "critic_optimizer": offload["critic_optimizer"],
        },
        "resident_mib": round(resident / MIB),
        "per_prompt_mib": round(per_prompt / MIB, 1),
        "peaks": peaks,
        "cost": cost,
    }


def _suggestions(config: dict[str, Any], **k: Any) -> str:
    """What would fit instead: LoRA, more GPUs, shorter responses (each tried with the model)."""
    tries = []
    if not k["lora_rank"]:
        tries.append(("LoRA (train_lora_rank: 32)", {"lora_rank": 32}))
    if k["adv_estimator"] == "gae":
        tries.append(("GRPO without a critic (train_adv_estimator: grpo)", {"adv_estimator": "grpo"}))
        if not k["lora_rank"]:
            tries.append(("LoRA and GRPO", {"lora_rank": 32, "adv_estimator": "grpo"}))
    for gpus in (2, 4, 8):
        if (
            gpus > k["n_gpus"]
            and k["train_batch_size"] % gpus == 0
            and (k["ppo_mini_batch_size"] * k["rollout_n"]) % gpus == 0
        ):
            tries.append((f"{gpus} GPUs", {"n_gpus": gpus}))
    if k["response_length"] > 128:
        tries.append(
            (f"train_max_response_length {k['response_length'] // 2}", {"response_length": k["response_length"] // 2})
        )
    fitting: list[str] = []
    for label, change in tries:
        if label.endswith(" GPUs") and any(f.split(" (")[0].endswith(" GPUs") for f in fitting):
            continue  # the fewest GPUs that fit is enough
        try:
            plan = memory_plan(config, **{**k, **change, "suggest": False})
        except AnsibleFilterError:
            continue
        fitting.append(f"{label} (predicted peak {_gib(plan['peak_mib'] * MIB)} GiB)")
    if not fitting:
        return " Neither LoRA, more GPUs nor shorter responses alone make it fit: choose a smaller model."
    return " It would fit with " + ", or ".join(fitting) + "."


_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
# The ranks vLLM 0.8.5 (the vllm layer's wheel) takes as max_lora_rank, LoRAConfig's possible_max_ranks
# (vllm/config.py); verl 0.4.1 gives it the actor's LoRA rank, and vLLM refuses any other when its
# engine starts, minutes into a run.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
# The patch fix without which verl 0.4.1's HF rollout cannot train a LoRA adapter (docs/patch.md).
HF_LORA_FIX = "hf_rollout_lora_wrap"


def lora_check(rank: Any, alpha: Any, target_modules: Any, rollout_backend: str = "", patch_fixes: Any = None) -> str:
    """Refuse LoRA settings verl would choke on, at render time; '' when they are fine (for a template).

    With the profile's rollout_backend: vLLM's rollout takes only the ranks it has kernels for
    (VLLM_LORA_RANKS), and the HF rollout needs the patch fix HF_LORA_FIX among patch_fixes."""
    if isinstance(rank, bool) or not isinstance(rank, int) and not str(rank).isdigit() or int(rank) < 0:
        raise AnsibleFilterError(f"train_lora_rank should be 0 (full fine-tuning) or a positive integer, got {rank!r}.")
    if int(rank) == 0:
        return ""
    if int(rank) > 1024:
        raise AnsibleFilterError(f"train_lora_rank {rank}: a LoRA rank above 1024 is no low-rank adapter.")
    if rollout_backend == "vllm" and int(rank) not in VLLM_LORA_RANKS:
        raise AnsibleFilterError(
            f"train_lora_rank {rank}: the profile's vLLM rollout (vLLM 0.8.5, which verl 0.4.1 gives the rank as "
            f"max_lora_rank) takes {', '.join(map(str, VLLM_LORA_RANKS))} only and would refuse it when its engine "
            "starts; set train_lora_rank to one of them (or the preset's lora_rank)."
        )
    if rollout_backend == "hf" and patch_fixes is not None and HF_LORA_FIX not in patch_fixes:
        raise AnsibleFilterError(
            f"train_lora_rank {rank}: verl 0.4.1's HF rollout trains a LoRA adapter only with the patch fix "
            f"{HF_LORA_FIX} (docs/patch.md), which the profile's patch_fixes lack; add it there, or set "
            "train_lora_rank: 0."
        )
    try:
        alpha_value = float(alpha)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"train_lora_alpha should be a positive number, got {alpha!r}.") from None
    if isinstance(alpha, bool) or alpha_value <= 0 or not math.isfinite(alpha_value):
        raise AnsibleFilterError(f"train_lora_alpha should be a positive number, got {alpha!r}.")
    if target_modules == "all-linear":
        return ""
    if isinstance(target_modules, str) or not isinstance(target_modules, (list, tuple)) or not target_modules:
        raise AnsibleFilterError(
            "train_lora_target_modules should be all-linear or a non-empty list of module names "
            f"(e.g. [q_proj, v_proj]), got {target_modules!r}."
        )
    bad = [m for m in target_modules if not isinstance(m, str) or not _MODULE_NAME.match(m)]
    if bad:
        raise AnsibleFilterError(f"train_lora_target_modules: {bad!r} are not module names (letters, digits, _ and .).")
    return ""


def preset_check(_: Any, name: Any, presets: dict[str, Any]) -> dict[str, Any]:
    """Raise for a train_preset that names no preset (listing the presets)."""
    raise AnsibleFilterError(
        f"train_preset {name!r} is no preset; stack_train_presets has {', '.join(sorted(presets or {}))} "
        "(roles/stack/defaults/main/model_architectures.yml), or leave train_preset empty."
    )


def preset_model_check(model_path: Any, name: Any, preset: dict[str, Any]) -> str:
    """A preset is sized for its model: refuse a train_model_path that holds another; '' when it matches."""
    if not name or not preset or not preset.get("model"):
        return ""
    want = str(preset["model"]).rstrip("/").rsplit("/", 1)[-1]
    have = str(model_path).rstrip("/").rsplit("/", 1)[-1]
    if want != have:
        raise AnsibleFilterError(
            f"train_preset {name} trains {preset['model']}, but train_model_path is {model_path}: set "
            f"model_name: {preset['model']} (the model layer downloads it into a directory named {want}), "
            "or point train_model_path at a copy of that model."
        )
    return ""


class FilterModule:
    """Memory sizing of every knob, LoRA settings and presets."""

    def filters(self) -> dict[str, Any]:
        return {
            "memory_plan": memory_plan,
            "lora_parameters": lora_parameters,
            "lora_check": lora_check,
            "preset_check": preset_check,
            "preset_model_check": preset_model_check,
        }
