# -*- coding: utf-8 -*-
"""Source fixes that verl needs to train on Pascal GPUs (Tesla P40), as data.

The verl_patch module (library/verl_patch.py) reads this catalog; nothing
here does any work. One entry per verl release, because anchors are exact
text of that release: a fix that was checked against 0.4.1 says nothing
about 0.4.2, so a release without an entry is refused instead of guessed at.

A fix record is a dict:
  name             short identifier, used in the module's `fixes` option
  what             one line for people: what the fix changes
  reason           why no P40 run works without it
  preferred_config the Hydra override we would rather have used, and why it
                   does not reach this code in that release
  edits            list of {file, anchor, replacement}:
                     file         path relative to the checkout root
                     anchor       exact text, with enough surrounding lines to
                                  match exactly once in the pristine file
                     replacement  the text the anchor becomes

Lines that a fix adds or changes carry a "verl_p40_patch: <name>" comment so
that a patched tree explains itself to someone reading it or grepping it.
Replacements may contain the placeholders listed in PLACEHOLDERS; the
module substitutes the option value for each before matching anything.
"""

from __future__ import annotations

# Option name -> the token that stands for its value inside a replacement.
# A token rather than str.format(), because Python source is full of braces.
PLACEHOLDERS = {
    "attn_implementation": "@ATTN_IMPLEMENTATION@",
}

# Where verl keeps its version string, relative to the checkout root.
VERSION_FILE = "verl/version/version"

# Paths (relative to the checkout root) that no fix may ever edit, whatever
# a future catalog entry says. torch_dtypes.py maps the strings "bf16" and
# "bfloat16" for configs that still name them; megatron, sglang and
# third_party code is not on the P40 path and is not ours to change.
NEVER_TOUCH = (
    "verl/utils/torch_dtypes.py",
    "verl/third_party/",
    "verl/utils/megatron/",
    "verl/models/mcore/",
    "verl/workers/megatron_workers.py",
    "verl/workers/rollout/sglang_rollout/",
    "verl/workers/sharding_manager/fsdp_sglang.py",
    "verl/workers/sharding_manager/megatron_sglang.py",
)

_FLASH_ATTN_IMPORT = (
    "if is_cuda_available:\n"
    "    from flash_attn.bert_padding import index_first_axis, pad_input, rearrange, unpad_input\n"
    "elif is_npu_available:\n"
)

# The four helpers are only called under `if self.use_remove_padding:`.
# A stub that raises keeps the names bound, so the module imports, and turns
# a misconfigured run into a message rather than "'NoneType' is not callable".
_FLASH_ATTN_IMPORT_OPTIONAL = (
    "if is_cuda_available:\n"
    "    try:  # verl_p40_patch: optional_flash_attn\n"
    "        from flash_attn.bert_padding import index_first_axis, pad_input, rearrange, unpad_input\n"
    "    except ImportError:\n"
    "        def _flash_attn_missing(*args, **kwargs):\n"
    '            raise ImportError("flash_attn is not installed (verl_p40_patch: optional_flash_attn); it is only needed with use_remove_padding=True")\n'
    "\n"
    "        index_first_axis = pad_input = rearrange = unpad_input = _flash_attn_missing\n"
    "elif is_npu_available:\n"
)

VERL_0_4_1 = [
    {
        "name": "critic_eager_attention",
        "what": "Load the critic with the attn_implementation option (default eager) instead of flash_attention_2.",
        "reason": (
            "flash-attn has no build for compute capability 6.1, so transformers refuses "
            "flash_attention_2 and the critic never loads. The actor and ref are not touched: "
            "their config override reaches from_pretrained (fsdp_workers.py:221-249)."
        ),
        "preferred_config": (
            "+critic.model.override_config._attn_implementation=eager; verl 0.4.1 builds the "
            "critic's override_config_kwargs but never passes them to AutoConfig or from_pretrained."
        ),
        "edits": [
            {
                "file": "verl/workers/fsdp_workers.py",
                "anchor": (
                    '        critic_model_config = AutoConfig.from_pretrained(local_path, attn_implementation="flash_attention_2", '
                    'trust_remote_code=config.model.get("trust_remote_code", False))\n'
                ),
                "replacement": (
                    '        critic_model_config = AutoConfig.from_pretrained(local_path, attn_implementation="@ATTN_IMPLEMENTATION@", '
                    'trust_remote_code=config.model.get("trust_remote_code", False))  # verl_p40_patch: critic_eager_attention\n'
                ),
            },
            {
                "file": "verl/utils/model.py",
                "anchor": (
                    "        model = AutoModelForTokenClassification.from_pretrained(\n"
                    "            pretrained_model_name_or_path=local_path,\n"
                    "            torch_dtype=torch_dtype,\n"
                    "            config=model_config,\n"
                    '            attn_implementation="flash_attention_2",\n'
                ),
                "replacement": (
                    "        model = AutoModelForTokenClassification.from_pretrained(\n"
                    "            pretrained_model_name_or_path=local_path,\n"
                    "            torch_dtype=torch_dtype,\n"
                    "            config=model_config,\n"
                    '            attn_implementation="@ATTN_IMPLEMENTATION@",  # verl_p40_patch: critic_eager_attention\n'
                ),
            },
            {
                "file": "verl/utils/model.py",
                "anchor": (
                    "    ori_model = module_class.from_pretrained(\n"
                    "        pretrained_model_name_or_path=local_path,\n"
                    "        torch_dtype=torch_dtype,\n"
                    "        config=model_config,\n"
                    '        attn_implementation="flash_attention_2",\n'
                ),
                "replacement": (
                    "    ori_model = module_class.from_pretrained(\n"
                    "        pretrained_model_name_or_path=local_path,\n"
                    "        torch_dtype=torch_dtype,\n"
                    "        config=model_config,\n"
                    '        attn_implementation="@ATTN_IMPLEMENTATION@",  # verl_p40_patch: critic_eager_attention\n'
                ),
            },
        ],
    },
    {
        "name": "no_bf16_autocast",
        "what": "Turn the hard-coded bf16 autocast off (enabled=False) in the actor, critic, HF rollout and reward model forwards.",
        "reason": (
            "Pascal has no bf16 arithmetic: autocast to bf16 either fails or runs slow emulated "
            "bf16 with bf16 rounding, whatever fp32 the FSDP config asks for. enabled=False "
            "(rather than dtype=torch.float32, which is not an autocast dtype: CUDA autocast "
            "casts to float16 or bfloat16) also switches off any autocast an outer caller "
            "opened, and skips torch's bf16 support check, so each forward runs in "
            "the dtype of the parameters, i.e. what fsdp_config.model_dtype/mixed_precision say."
        ),
        "preferred_config": (
            "None exists in 0.4.1. The natural home is the fsdp_config.mixed_precision.param_dtype "
            "that a P40 run already sets to fp32; these forwards ignore it."
        ),
        "edits": [
            {
                "file": "verl/workers/actor/dp_actor.py",
                "anchor": (
                    "        with torch.autocast(device_type=self.device_name, dtype=torch.bfloat16):\n"
                    '            input_ids = micro_batch["input_ids"]\n'
                ),
                "replacement": (
                    "        with torch.autocast(device_type=self.device_name, enabled=False):  # verl_p40_patch: no_bf16_autocast\n"
                    '            input_ids = micro_batch["input_ids"]\n'
                ),
            },
            {
                "file": "verl/workers/critic/dp_critic.py",
                "anchor": (
                    "        with torch.autocast(device_type=self.device_name, dtype=torch.bfloat16):\n"
                    '            input_ids = micro_batch["input_ids"]\n'
                ),
                "replacement": (
                    "        with torch.autocast(device_type=self.device_name, enabled=False):  # verl_p40_patch: no_bf16_autocast\n"
                    '            input_ids = micro_batch["input_ids"]\n'
                ),
            },
            {
                "file": "verl/workers/rollout/hf_rollout.py",
                "anchor": (
                    "        with param_ctx, torch.autocast(device_type=get_device_name(), dtype=torch.bfloat16):\n"
                    "            output = self.module.generate(\n"
                ),
                "replacement": (
                    "        with param_ctx, torch.autocast(device_type=get_device_name(), enabled=False):  # verl_p40_patch: no_bf16_autocast\n"
                    "            output = self.module.generate(\n"
                ),
            },
            {
                "file": "verl/workers/fsdp_workers.py",
                "anchor": (
                    "        with torch.no_grad(), torch.autocast(device_type=device_name, dtype=torch.bfloat16):\n"
                    '            input_ids = micro_batch["input_ids"]\n'
                ),
                "replacement": (
                    "        with torch.no_grad(), torch.autocast(device_type=device_name, enabled=False):  # verl_p40_patch: no_bf16_autocast\n"
                    '            input_ids = micro_batch["input_ids"]\n'
                ),
            },
        ],
    },
    {
        "name": "optional_flash_attn",
        "what": "Make the module-level flash_attn import in dp_actor.py and dp_critic.py optional.",
        "reason": (
            "flash-attn does not exist for Pascal, and both modules import it whenever CUDA is "
            "available, so the actor and critic fail at import. Its four helpers (index_first_axis, "
            "pad_input, rearrange, unpad_input) are only called under use_remove_padding=True, which "
            "a P40 run keeps False; without flash-attn they are bound to a stub that raises an "
            "ImportError naming that setting."
        ),
        "preferred_config": (
            "None can reach an import. actor_rollout_ref.model.use_remove_padding=False and "
            "critic.model.use_remove_padding=False keep the helpers unused, but the import runs anyway."
        ),
        "edits": [
            {
                "file": "verl/workers/actor/dp_actor.py",
                "anchor": _FLASH_ATTN_IMPORT,
                "replacement": _FLASH_ATTN_IMPORT_OPTIONAL,
            },
            {
                "file": "verl/workers/critic/dp_critic.py",
                "anchor": _FLASH_ATTN_IMPORT,
                "replacement": _FLASH_ATTN_IMPORT_OPTIONAL,
            },
        ],
    },
    {
        "name": "hf_rollout_timing",
        "what": "Read the rollout sharding manager's timing with a default of {}.",
        "reason": (
            "With the HF rollout (the rollout a P40 can run without a Pascal build of vLLM) the "
            "sharding manager is the plain BaseShardingManager, which has no `timing`: "
            "generate_sequences raises AttributeError at the first training step."
        ),
        "preferred_config": "None; it is a bug on the actor_rollout_ref.rollout.name=hf path.",
        "edits": [
            {
                "file": "verl/workers/fsdp_workers.py",
                "anchor": (
                    "            output = self.rollout_sharding_manager.postprocess_data(output)\n"
                    "\n"
                    "        timing_generate.update(self.rollout_sharding_manager.timing)\n"
                ),
                "replacement": (
                    "            output = self.rollout_sharding_manager.postprocess_data(output)\n"
                    "\n"
                    '        timing_generate.update(getattr(self.rollout_sharding_manager, "timing", {}))  # verl_p40_patch: hf_rollout_timing\n'
                ),
            },
        ],
    },
    {
        "name": "no_prefix_caching",
        "what": "Create the vLLM engine of the SPMD rollout with enable_prefix_caching=False.",
        "reason": (
            "Below cc 8.0 vLLM runs its V0 engine, and a cached prompt prefix launches the Triton "
            "kernel prefix_prefill._fwd_kernel, which needs 81920 B of shared memory in fp32 at "
            "head_dim 64 (computed for sm_61, not run); a P40 has 49152 B per block. Inferred, never "
            "reproduced on a P40: validation prompts share a cached prefix, so the first validation "
            "would launch it, the likely cause of the seed recipe's step-9 crash (docs/patch.md)."
        ),
        "preferred_config": (
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.enable_prefix_caching=False; in 0.4.1 it "
            "raises TypeError (keyword given twice), because the call passes enable_prefix_caching=True "
            "and **engine_kwargs."
        ),
        "edits": [
            {
                "file": "verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py",
                "anchor": (
                    "            enable_chunked_prefill=config.enable_chunked_prefill,\n"
                    "            enable_prefix_caching=True,\n"
                ),
                "replacement": (
                    "            enable_chunked_prefill=config.enable_chunked_prefill,\n"
                    "            enable_prefix_caching=False,  # verl_p40_patch: no_prefix_caching\n"
                ),
            },
        ],
    },
    {
        "name": "hf_rollout_lora_wrap",
        "what": (
            "Keep verl's LoRA wrap policy on the HF rollout path: with a LoRA adapter the actor is no "
            "longer wrapped as one FSDP unit."
        ),
        "reason": (
            "With actor_rollout_ref.rollout.name=hf, fsdp_workers.py:306-308 drops the auto-wrap policy, so "
            "the whole actor becomes one FSDP (v1) FlatParameter. With LoRA (model.lora_rank > 0) that "
            "parameter mixes frozen base weights and trainable adapter weights: with use_orig_params=False, "
            'which 0.4.1 hard-codes, FSDP refuses it at init ("Must flatten tensors with uniform '
            'requires_grad"); with use_orig_params=True edited in, the first backward allocates a gradient '
            "for the whole flat parameter, the size of every fp32 weight of the model (5.89 GiB for "
            "Qwen2.5-1.5B with a rank-32 adapter, measured on the H200 under a 22 GiB cap). The policy "
            "verl builds for LoRA (get_fsdp_wrap_policy(is_lora=True): every leaf module whose weight "
            "requires grad in its own unit, decoder layers in theirs) gives each FlatParameter a uniform "
            "requires_grad, so the frozen ones get no gradient at all. The policy was dropped for the HF "
            "rollout because nested FSDP units could hang generate() on several GPUs (its TODO names "
            "Gemma); transformers' generate() syncs the GPUs itself when the model is FSDP-managed on more "
            "than one (synced_gpus, transformers 4.51), and on one GPU FSDP runs NO_SHARD with no "
            "collectives. Without LoRA nothing changes."
        ),
        "preferred_config": (
            "actor_rollout_ref.actor.fsdp_config.wrap_policy: read by get_fsdp_wrap_policy, but on the HF "
            "rollout path its result is replaced by None right after, whatever the config says."
        ),
        "edits": [
            {
                "file": "verl/workers/fsdp_workers.py",
                "anchor": (
                    '        if self._is_rollout and self.config.rollout.name == "hf":\n'
                    "            # TODO(zhangchi.usc1992, shengguangming) fix me. Current, auto_wrap_policy causes HFRollout to hang in Gemma\n"
                    "            auto_wrap_policy = None\n"
                ),
                "replacement": (
                    '        if self._is_rollout and self.config.rollout.name == "hf" and not self._is_lora:  # verl_p40_patch: hf_rollout_lora_wrap\n'
                    "            # TODO(zhangchi.usc1992, shengguangming) fix me. Current, auto_wrap_policy causes HFRollout to hang in Gemma\n"
                    "            auto_wrap_policy = None\n"
                ),
            },
        ],
    },
]

# verl version string (as in VERSION_FILE) -> the fixes checked against it.
CATALOG = {
    "0.4.1": VERL_0_4_1,
}
