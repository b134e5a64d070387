"""filter_plugins/memory.py: every memory knob sized from the model, the algorithm and the card."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import REPO

_spec = importlib.util.spec_from_file_location("memory_filters", REPO / "filter_plugins" / "memory.py")
memory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(memory)

STACK = REPO / "roles" / "stack" / "defaults" / "main"
ARCH = yaml.safe_load((STACK / "model_architectures.yml").read_text())
MODELS = ARCH["stack_model_architectures"]
PRESETS = ARCH["stack_train_presets"]
PASCAL = yaml.safe_load((STACK / "gpu_profiles.yml").read_text())["stack_gpu_profiles"]["pascal"]
# Qwen2.5-7B-Instruct's published config.json (the shapes the sizing reads).
QWEN7B = {
    "model_type": "qwen2",
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
}
SHAPES = {**{name: MODELS[name] for name in MODELS}, "Qwen2.5-7B-Instruct": QWEN7B}
CARDS = {"11 GB (GTX 1080 Ti)": 11264, "16 GB (P100)": 16384, "22.9 GB (P40, ECC)": 22919, "24 GB (P40)": 24576}
RESULTS = REPO / "tests" / "gpu" / "results"


def plan(model: str, memory_mib: int, gpus: int = 1, **kwargs):
    args = dict(
        gpu_memory_mib=memory_mib,
        prompt_length=512,
        response_length=256,
        train_batch_size=32,
        ppo_mini_batch_size=16,
        n_gpus=gpus,
        memory_margin=PASCAL["hf_rollout"]["memory_margin"],
        cuda_context_mib=PASCAL["hf_rollout"]["cuda_context_mib"],
    )
    args.update(kwargs)
    return memory.memory_plan(SHAPES[model], **args)


GRPO_LORA = dict(adv_estimator="grpo", rollout_n=4, reference=True, lora_rank=32)
PPO_FULL = dict(adv_estimator="gae", rollout_n=1, train_batch_size=64, ppo_mini_batch_size=32)


# What the model says for every shape, card and GPU count: a plan under the usable memory, or a
# refusal that names the term. The expectations are the model's own predictions, written down so
# that a change to the model shows here; the device measured 0.5B PPO and 1.5B GRPO LoRA only.
EXPECTED = {
    # (model, algorithm, card, gpus): fits?
    ("Qwen2.5-0.5B-Instruct", "ppo", "11 GB (GTX 1080 Ti)", 1): False,
    ("Qwen2.5-0.5B-Instruct", "ppo", "16 GB (P100)", 1): False,
    ("Qwen2.5-0.5B-Instruct", "ppo", "22.9 GB (P40, ECC)", 1): True,
    ("Qwen2.5-0.5B-Instruct", "ppo", "24 GB (P40)", 1): True,
    ("Qwen2.5-1.5B-Instruct", "ppo", "22.9 GB (P40, ECC)", 1): False,
    ("Qwen2.5-1.5B-Instruct", "ppo", "24 GB (P40)", 1): False,
    ("Qwen2.5-1.5B-Instruct", "grpo-lora", "11 GB (GTX 1080 Ti)", 1): False,
    ("Qwen2.5-1.5B-Instruct", "grpo-lora", "16 GB (P100)", 1): True,
    ("Qwen2.5-1.5B-Instruct", "grpo-lora", "22.9 GB (P40, ECC)", 1): True,
    ("Qwen2.5-1.5B-Instruct", "grpo-lora", "24 GB (P40)", 1): True,
    ("Qwen2.5-3B-Instruct", "grpo-lora", "11 GB (GTX 1080 Ti)", 1): False,
    ("Qwen2.5-3B-Instruct", "grpo-lora", "16 GB (P100)", 1): False,
    ("Qwen2.5-3B-Instruct", "grpo-lora", "22.9 GB (P40, ECC)", 1): True,
    ("Qwen2.5-3B-Instruct", "grpo-lora", "24 GB (P40)", 1): True,
    ("Qwen2.5-3B-Instruct", "ppo", "24 GB (P40)", 1): False,
    ("Qwen2.5-7B-Instruct", "grpo-lora", "22.9 GB (P40, ECC)", 1): False,
    ("Qwen2.5-7B-Instruct", "grpo-lora", "24 GB (P40)", 1): False,
    ("Qwen2.5-7B-Instruct", "grpo-lora", "24 GB (P40)", 2): False,
    ("Qwen2.5-7B-Instruct", "ppo", "24 GB (P40)", 2): False,
    ("Qwen2.5-0.5B-Instruct", "ppo", "22.9 GB (P40, ECC)", 2): True,
    ("Qwen2.5-1.5B-Instruct", "grpo-lora", "22.9 GB (P40, ECC)", 2): True,
    ("Qwen2.5-3B-Instruct", "grpo-lora", "11 GB (GTX 1080 Ti)", 2): False,
}


@pytest.mark.parametrize(("model", "algorithm", "card", "gpus"), sorted(EXPECTED))
def test_every_shape_card_and_gpu_count(model, algorithm, card, gpus):
    algo = PPO_FULL if algorithm == "ppo" else GRPO_LORA
    memory_mib = CARDS[card]
    if EXPECTED[(model, algorithm, card, gpus)]:
        result = plan(model, memory_mib, gpus, **algo)
        assert result["peak_mib"] <= result["usable_mib"]
        assert all(value <= result["usable_mib"] for value in result["peaks_mib"].values())
        micro = result["micro_batch_size_per_gpu"]
        mini_per_gpu = algo.get("ppo_mini_batch_size", 16) * algo["rollout_n"] // gpus
        assert mini_per_gpu % micro["actor"] == 0
        if algorithm == "ppo":
            assert mini_per_gpu % micro["critic"] == 0
        assert (algo.get("train_batch_size", 32) // gpus) % result["rollout_micro_batch_size"] == 0
        assert result["offload"]["actor_params"] is False  # the HF rollout generates with them
    else:
        with pytest.raises(AnsibleFilterError, match="does not fit"):
            plan(model, memory_mib, gpus, **algo)


def test_a_refusal_names_the_term_and_what_would_fit():
    with pytest.raises(AnsibleFilterError) as error:
        plan("Qwen2.5-1.5B-Instruct", 22919, **PPO_FULL)
    message = str(error.value)
    assert "The actor update: its optimizer step" in message and "LoRA and GRPO" in message
    with pytest.raises(AnsibleFilterError) as error:
        plan("Qwen2.5-3B-Instruct", 22919, adv_estimator="grpo", rollout_n=4, reference=True)
    message = str(error.value)
    assert "It would fit with LoRA (train_lora_rank: 32)" in message and "predicted peak" in message
    with pytest.raises(AnsibleFilterError) as error:
        plan("Qwen2.5-7B-Instruct", 24576, **GRPO_LORA)
    assert "the actor's weights 28.37 GiB" in str(error.value) and "It would fit with 4 GPUs" in str(error.value)
    with pytest.raises(AnsibleFilterError) as error:
        plan("Qwen2.5-3B-Instruct", 11264, **GRPO_LORA)
    assert "It would fit with 4 GPUs" in str(error.value)


def test_more_memory_never_gives_smaller_micro_batches():
    small = plan("Qwen2.5-1.5B-Instruct", 16384, **GRPO_LORA)
    large = plan("Qwen2.5-1.5B-Instruct", 24576, **GRPO_LORA)
    for key in ("actor", "log_prob"):
        assert large["micro_batch_size_per_gpu"][key] >= small["micro_batch_size_per_gpu"][key]
    assert large["rollout_micro_batch_size"] >= small["rollout_micro_batch_size"]


def test_lora_removes_the_reference_model_and_the_big_optimizer_state():
    full = plan("Qwen2.5-0.5B-Instruct", 24576, adv_estimator="grpo", rollout_n=4, reference=True)
    lora = plan("Qwen2.5-0.5B-Instruct", 24576, adv_estimator="grpo", rollout_n=4, reference=True, lora_rank=32)
    assert full["reference_model"] is True and lora["reference_model"] is False
    assert lora["resident_mib"] < full["resident_mib"]
    assert lora["offload"]["actor_optimizer"] is False  # an adapter's Adam state is small


def test_lora_parameter_count_matches_peft_all_linear():
    # PEFT's all-linear on Qwen2.5-1.5B with r=32: 28 layers x 32 x (in + out) of its 7 linear layers.
    h, kv, i = 1536, 256, 8960
    expected = 28 * 32 * ((h + h) + (h + kv) * 2 + (h + h) + (h + i) * 2 + (i + h))
    assert memory.lora_parameters(MODELS["Qwen2.5-1.5B-Instruct"], 32) == expected == 36929536
    assert memory.lora_parameters(MODELS["Qwen2.5-1.5B-Instruct"], 32, ["q_proj", "v_proj"]) == 28 * 32 * (
        2 * h + h + kv
    )
    with pytest.raises(AnsibleFilterError, match="no linear layer"):
        memory.lora_parameters(MODELS["Qwen2.5-1.5B-Instruct"], 8, ["lm_head"])


def test_pinned_knobs_are_kept_and_still_checked():
    result = plan(
        "Qwen2.5-0.5B-Instruct",
        24576,
        **PPO_FULL,
        fixed={"actor": 2, "critic": 8, "log_prob": 4, "actor_checkpointing": True, "actor_optimizer_offload": True},
    )
    assert result["micro_batch_size_per_gpu"] == {"actor": 2, "log_prob": 4, "critic": 8}
    assert result["gradient_checkpointing"]["actor"] is True and result["offload"]["actor_optimizer"] is True
    with pytest.raises(AnsibleFilterError, match="actor update"):
        plan("Qwen2.5-0.5B-Instruct", 24576, **PPO_FULL, fixed={"actor": 32, "actor_checkpointing": False})


@pytest.mark.parametrize(
    ("rank", "alpha", "targets", "error"),
    [
        (0, "x", "nonsense", None),
        (32, 32, "all-linear", None),
        (8, 16.5, ["q_proj", "v_proj"], None),
        (-1, 32, "all-linear", "train_lora_rank"),
        (True, 32, "all-linear", "train_lora_rank"),
        (4096, 32, "all-linear", "above 1024"),
        (8, 0, "all-linear", "train_lora_alpha"),
        (8, "a", "all-linear", "train_lora_alpha"),
        (8, 16, "q_proj", "non-empty list"),
        (8, 16, [], "non-empty list"),
        (8, 16, ["q_proj;rm"], "not module names"),
        (8, 16, ["q\nproj"], "not module names"),
    ],
)
def test_lora_settings_are_checked_at_render_time(rank, alpha, targets, error):
    if error is None:
        assert memory.lora_check(rank, alpha, targets) == ""
    else:
        with pytest.raises(AnsibleFilterError, match=error):
            memory.lora_check(rank, alpha, targets)


def test_presets_name_a_known_model_and_their_model_is_checked():
    for name, preset in PRESETS.items():
        assert preset["model"].split("/")[-1] in MODELS, name
        assert memory.preset_model_check(f"/x/{preset['model'].split('/')[-1]}", name, preset) == ""
        with pytest.raises(AnsibleFilterError, match="set model_name"):
            memory.preset_model_check("/x/other-model", name, preset)
    with pytest.raises(AnsibleFilterError, match="is no preset"):
        memory.preset_check("", "nope", PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_fits_a_p40_with_ecc(name):
    preset = PRESETS[name]
    result = plan(
        preset["model"].split("/")[-1],
        22919,
        train_batch_size=preset["batch_size"],
        ppo_mini_batch_size=preset["ppo_mini_batch_size"],
        rollout_n=preset["rollout_n"],
        adv_estimator=preset["adv_estimator"],
        reference=preset["use_kl_loss"],
        lora_rank=preset.get("lora_rank", 0),
    )
    assert result["peak_mib"] <= result["usable_mib"]


def _measured(stem: str) -> dict[str, float]:
    """Peak allocated GiB per role from a run's calls log (tests/gpu/hooks/sitecustomize.py)."""
    peaks: dict[str, float] = {}
    for line in (RESULTS / f"{stem}-calls.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "call":
            peaks[event["role"]] = max(peaks.get(event["role"], 0), event["peak_allocated_gib"])
    return peaks


def _predicted(stem: str) -> dict[str, float]:
    """The predictions the rendered train.sh stated before the run (its summary's first lines)."""
    head = (RESULTS / f"{stem}-summary.txt").read_text()
    line = re.search(
        r"# rollout (\d+), log-prob (\d+), actor update (\d+)(?:, critic update (\d+), values (\d+))?", head
    )
    names = ("rollout", "log_prob", "actor_update", "critic_update", "critic_values")
    return {k: int(v) / 1024 for k, v in zip(names, line.groups()) if v}


ROLES = {
    "rollout": ["rollout (actor weights)"],
    "log_prob": ["actor (old log-prob)", "ref (log-prob)"],
    "actor_update": ["actor (update)"],
    "critic_update": ["critic (update)"],
    "critic_values": ["critic (values)"],
}
# The prediction error allowed: the profile's margin of the usable memory of the 22 GiB cap
# the runs had (22528 MiB card, 1536 MiB context). The 1.5B LoRA actor update is
# over-predicted by more than that (a known miss, docs/memory.md): listed, not hidden.
MARGIN_GIB = (22528 - 1536) * (1 - 0.2) * 0.2 / 1024
KNOWN_MISSES = {("lora15b-b16-22gib", "actor_update"), ("lora15b-22gib", "actor_update")}


@pytest.mark.parametrize("stem", ["sized05b-22gib", "lora15b-22gib", "lora15b-b16-22gib"])
def test_predictions_against_the_device_measurements(stem):
    predicted, measured = _predicted(stem), _measured(stem)
    assert predicted
    for phase, value in predicted.items():
        for role in ROLES[phase]:
            if role not in measured:
                continue
            error = value - measured[role]
            if (stem, phase) in KNOWN_MISSES:
                assert error > 0, (stem, phase)  # over-predicted: the safe side
            else:
                assert abs(error) <= MARGIN_GIB, (stem, phase, value, measured[role])
