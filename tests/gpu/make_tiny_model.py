#!/usr/bin/env python3
"""Write a random-weight Qwen2 model directory that verl can train, with no hub.

    python3 tests/gpu/make_tiny_model.py --out DIR                 # tiny: 2 layers, hidden 128
    python3 tests/gpu/make_tiny_model.py --out DIR --qwen05b-arch  # Qwen2.5-0.5B-Instruct's shapes
    python3 tests/gpu/make_tiny_model.py --out DIR --arch Qwen2.5-1.5B-Instruct
        # any entry of roles/stack/defaults/main/model_architectures.yml (1.5B, 3B)

Unlike tests/fixtures/tiny_model.py (a layout stand-in that nothing loads),
this is a real model: transformers loads it, generates with it and trains it.
Its weights are random, so it answers nonsense; the GPU proof needs the code
paths and the memory, not the answers.

The tokenizer is trained here: a byte-level BPE (the same kind of tokenizer
as Qwen2's) learnt from GSM8K-format text made by tests/fixtures/gsm8k_fixture.py,
with Qwen's special tokens <|endoftext|> (padding), <|im_start|> and
<|im_end|> (end of turn) and a chat template in Qwen's format (a default
system prompt, <|im_start|>role\\n...<|im_end|> turns), so verl's prompt
building, padding and end-of-response masking run as they do with the real
model.

--qwen05b-arch takes the published config of Qwen2.5-0.5B-Instruct (hidden
896, 24 layers, 14 query and 2 key/value heads, intermediate 4864, vocabulary
151936, tied embeddings, rope theta 1e6) with random float32 weights (494M
parameters, ~2 GB): the memory a P40 run needs is set by these shapes, the
151936-wide logits above all, not by the values. Its embedding rows past the
trained tokenizer's few thousand ids are never produced by the tokenizer, but
sampling from random logits picks them, so responses run to the full length:
the worst case for memory. Made on the GPU when there is one (seconds).

Needs torch, transformers (4.51.3 was used) and tokenizers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "fixtures"))

import gsm8k_fixture  # noqa: E402

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SYSTEM_PROMPT = "You are a helpful assistant."
# Qwen's turn format: a default system turn unless the conversation brings one.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\n" + SYSTEM_PROMPT + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

TINY = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rope_theta=10000.0,
)
# Qwen2.5-0.5B-Instruct's config.json, less its token ids and dtype.
QWEN25_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    vocab_size=151936,
    max_window_layers=21,
    sliding_window=32768,
    use_sliding_window=False,
)
COMMON = dict(
    hidden_act="silu",
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    attention_dropout=0.0,
    initializer_range=0.02,
    use_cache=True,
)


def corpus(rows: int) -> list[str]:
    """Text the tokenizer learns from: fixture problems, answers and the prompt wording verl sends."""
    texts = [SYSTEM_PROMPT, 'Let\'s think step by step and output the final answer after "####".']
    for seed in (0, 1, 2):
        for row in gsm8k_fixture.make_rows(rows, seed):
            texts += [row["question"], row["answer"]]
    return texts


def train_tokenizer(vocab_size: int, rows: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(rows), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
        padding_side="left",
    )


def published_shapes(name: str) -> dict:
    """An entry of the stack's model_architectures.yml as Qwen2Config keywords (Qwen2.5's published shapes)."""
    import yaml

    path = REPO / "roles" / "stack" / "defaults" / "main" / "model_architectures.yml"
    entry = yaml.safe_load(path.read_text())["stack_model_architectures"][name]
    keys = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
    )
    return dict(
        {key: entry[key] for key in keys},
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        max_window_layers=entry["num_hidden_layers"],
        sliding_window=32768,
        use_sliding_window=False,
    )


def build(out: Path, qwen05b_arch: bool, vocab_size: int, rows: int, seed: int, arch: str = "") -> dict:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = train_tokenizer(vocab_size, rows)
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if arch:
        shapes = published_shapes(arch)
    else:
        shapes = dict(QWEN25_05B) if qwen05b_arch else dict(TINY, vocab_size=-(-len(tokenizer) // 64) * 64)
    config = Qwen2Config(
        **shapes, **COMMON, bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id, torch_dtype="float32"
    )
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = Qwen2ForCausalLM(config).float()
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id, eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=True
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    parameters = sum(p.numel() for p in model.parameters())
    summary = {
        "out": str(out),
        "architecture": arch or ("Qwen2.5-0.5B-Instruct" if qwen05b_arch else "tiny Qwen2"),
        "parameters": parameters,
        "dtype": str(next(model.parameters()).dtype),
        "tokenizer_vocab": len(tokenizer),
        "config_vocab": config.vocab_size,
        "made_on": device,
        **{
            key: shapes[key]
            for key in (
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "intermediate_size",
            )
        },
    }
    (out / "MADE_BY").write_text(
        "tests/gpu/make_tiny_model.py: random weights, locally trained tokenizer; not a trained model.\n"
        + json.dumps(summary, indent=2)
        + "\n"
    )
    return summary


def check(out: Path) -> None:
    """Load it back the way verl does and round-trip a chat prompt."""
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    AutoConfig.from_pretrained(out)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == prompt, (tokenizer.decode(ids), prompt)
    assert prompt.endswith("<|im_start|>assistant\n"), prompt
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="model directory to write")
    parser.add_argument(
        "--qwen05b-arch",
        action="store_true",
        help="Qwen2.5-0.5B-Instruct's exact architecture (random fp32 weights, ~2 GB)",
    )
    parser.add_argument("--arch", default="", help="an entry of model_architectures.yml (random fp32 weights)")
    parser.add_argument("--vocab-size", type=int, default=2048, help="BPE vocabulary to train (tokenizer)")
    parser.add_argument("--corpus-rows", type=int, default=512, help="fixture rows per seed to train it on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    summary = build(args.out, args.qwen05b_arch, args.vocab_size, args.corpus_rows, args.seed, args.arch)
    check(args.out)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
