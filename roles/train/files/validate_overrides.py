#!/usr/bin/env python3
"""Compose Hydra overrides with a verl checkout's own config; name every override verl refuses.

    python roles/train/files/validate_overrides.py --verl /opt/verl --script /var/lib/verl-p40/train/train.sh
    python roles/train/files/validate_overrides.py --verl /opt/verl --overrides-file list.txt
    python roles/train/files/validate_overrides.py --verl /opt/verl -- trainer.total_epochs=2 ...

--verl is a checkout root (holding verl/trainer/config), the verl package
directory, or the config directory itself. --script takes a rendered
train.sh and asks it for its list (`train.sh --print-overrides`, which stops
before sourcing anything). Needs only hydra-core and omegaconf, not torch.

Besides the keys, it checks the batch arithmetic verl 0.4.1 asserts only
after its workers have loaded the model (minutes into a run on a P40).

Prints what it found to stderr and one JSON line to stdout:
{"ok": ..., "overrides": N, "refused": [{"override", "key", "reason"}], "problems": [...], "warnings": [...]}
Exit status: 0 valid, 1 refused overrides or problems, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

CONFIG_NAME = "ppo_trainer"

# Keys that recipes use and verl 0.4.1 has never had, with the keys that do the job.
KNOWN_REPLACEMENTS = {
    "actor_rollout_ref.fsdp_config.cpu_offload": "actor_rollout_ref.actor.fsdp_config.param_offload / optimizer_offload",
    "actor_rollout_ref.fsdp_config.offload_params": "actor_rollout_ref.actor.fsdp_config.param_offload",
    "actor_rollout_ref.rollout.micro_batch_size": "+actor_rollout_ref.rollout.micro_batch_size (the hf rollout reads it, the YAML lacks it)",
}


@dataclass
class Refusal:
    override: str
    key: str
    reason: str


@dataclass
class Result:
    overrides: list[str]
    refused: list[Refusal] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refused and not self.problems

    def summary(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "overrides": len(self.overrides),
            "refused": [asdict(item) for item in self.refused],
            "problems": self.problems,
            "warnings": self.warnings,
        }


def config_dir(verl_path: Path) -> Path:
    """The directory holding <CONFIG_NAME>.yaml, from a checkout, package or config path."""
    for candidate in (verl_path / "verl" / "trainer" / "config", verl_path / "trainer" / "config", verl_path):
        if (candidate / f"{CONFIG_NAME}.yaml").is_file():
            return candidate.resolve()
    raise FileNotFoundError(
        f"no {CONFIG_NAME}.yaml under {verl_path}; give the verl checkout root, "
        "its verl/ package directory or verl/trainer/config"
    )


def override_key(override: str) -> str:
    """The config key an override sets: '+a.b=1' -> 'a.b'."""
    return override.split("=", 1)[0].lstrip("+~")


def overrides_from_script(script: Path, extra: list[str] | None = None) -> list[str]:
    """The override list a rendered train.sh passes to verl, as bash expands it."""
    done = subprocess.run(
        ["bash", str(script), "--print-overrides", *(extra or [])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script} --print-overrides failed ({done.returncode}): {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line]


def overrides_from_file(path: Path) -> list[str]:
    """One override per line; blank lines and lines starting with # are skipped."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _first_lines(error: BaseException, count: int = 3) -> str:
    text = str(error).strip() or type(error).__name__
    return " ".join(text.splitlines()[:count])


def _reason(override: str, error: BaseException) -> str:
    key = override_key(override)
    reason = _first_lines(error)
    if key in KNOWN_REPLACEMENTS:
        # Hydra's own hint (add a '+') would only make it accept a key nothing reads.
        return f"{_first_lines(error, 1)} Use {KNOWN_REPLACEMENTS[key]}."
    if "To append to your config use +" in reason:
        # Hydra's hint would make the error go away, not the setting take effect.
        return reason + " (A '+' makes Hydra accept a new key, but only keys verl's code reads do anything.)"
    return reason


def _compose(overrides: list[str]) -> Any:
    from hydra import compose

    return compose(config_name=CONFIG_NAME, overrides=overrides)


def _culprit(overrides: list[str], error: BaseException) -> Optional[int]:
    """Index of the one override a Hydra error names, or None when that is not clear."""
    named = set(re.findall(r"'([^'=]+)'", str(error).splitlines()[0] if str(error) else ""))
    hits = [index for index, item in enumerate(overrides) if override_key(item) in named]
    return hits[0] if len(hits) == 1 else None


def _refused_one_by_one(overrides: list[str]) -> list[Refusal]:
    """Every override that does not compose after the accepted ones before it (slow, sure)."""
    refused: list[Refusal] = []
    accepted: list[str] = []
    for item in overrides:
        try:
            _compose(accepted + [item])
        except Exception as error:
            refused.append(Refusal(item, override_key(item), _reason(item, error)))
        else:
            accepted.append(item)
    return refused


def composed(verl_path: Path, overrides: list[str]) -> Any:
    """The resolved config verl would start from; raises Hydra's error for a refused override."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir(verl_path)), version_base=None):
        cfg = _compose(overrides)
    OmegaConf.resolve(cfg)
    return cfg


def check(verl_path: Path, overrides: list[str]) -> Result:
    """Compose the overrides with verl's config; collect refusals and batch problems."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    result = Result(overrides=list(overrides))
    directory = config_dir(verl_path)
    # Another caller in this process (a test) may have left Hydra initialized.
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(directory), version_base=None):
        remaining = list(overrides)
        while True:
            try:
                cfg = _compose(remaining)
                break
            except Exception as error:  # Hydra raises several types; each names the override
                # Hydra stops at the first refusal: set it aside and compose the rest again.
                culprit = _culprit(remaining, error)
                if culprit is None:
                    result.refused.extend(_refused_one_by_one(remaining))
                    return result
                result.refused.append(
                    Refusal(remaining[culprit], override_key(remaining[culprit]), _reason(remaining[culprit], error))
                )
                del remaining[culprit]
        if result.refused:
            return result
        try:
            OmegaConf.to_container(cfg, resolve=True)
        except Exception as error:
            result.problems.append(f"the composed config does not resolve: {_first_lines(error)}")
            return result
        try:
            problems, warnings = batch_problems(cfg)
        except Exception as error:  # e.g. a batch size given as text, or a section removed with ~
            problems, warnings = [f"could not check the batch sizes: {_first_lines(error)}"], []
        result.problems.extend(problems)
        result.warnings.extend(warnings)
    return result


def _per_gpu(value: Optional[int], per_gpu: Optional[int], divisor: int) -> Optional[int]:
    """verl's normalization: a global micro batch is divided by the data-parallel size."""
    if per_gpu is not None:
        return per_gpu
    if value is not None:
        return value // divisor
    return None


def batch_problems(cfg: Any) -> tuple[list[str], list[str]]:
    """Checks verl 0.4.1 runs only once its workers exist (ray_trainer._validate_config,
    fsdp_workers normalization, hf_rollout chunking). Returns (problems, warnings)."""
    problems: list[str] = []
    warnings: list[str] = []
    arr = cfg.actor_rollout_ref
    actor, rollout, ref, critic, data, trainer = arr.actor, arr.rollout, arr.ref, cfg.critic, cfg.data, cfg.trainer
    n_gpus = trainer.n_gpus_per_node * trainer.nnodes
    n = rollout.n
    use_critic = cfg.algorithm.adv_estimator == "gae"

    if (data.train_batch_size * n) % n_gpus:
        problems.append(
            f"data.train_batch_size x rollout.n = {data.train_batch_size * n} is not divisible by the {n_gpus} GPUs"
        )
    if n_gpus % rollout.tensor_model_parallel_size:
        problems.append(
            f"{n_gpus} GPUs are not divisible by rollout.tensor_model_parallel_size={rollout.tensor_model_parallel_size}"
        )

    sections = [
        ("actor_rollout_ref.actor", actor, "ppo_micro_batch_size", actor.use_dynamic_bsz),
        ("actor_rollout_ref.rollout", rollout, "log_prob_micro_batch_size", rollout.log_prob_use_dynamic_bsz),
        ("actor_rollout_ref.ref", ref, "log_prob_micro_batch_size", ref.log_prob_use_dynamic_bsz),
    ]
    if use_critic:
        sections.append(("critic", critic, "ppo_micro_batch_size", critic.use_dynamic_bsz))
    for name, section, param, dynamic in sections:
        if dynamic:
            continue
        global_value, per_gpu = section.get(param), section.get(param + "_per_gpu")
        if global_value is None and per_gpu is None:
            problems.append(f"set {name}.{param}_per_gpu (verl refuses to start without a micro-batch size)")
        elif global_value is not None and per_gpu is not None:
            problems.append(f"set only {name}.{param}_per_gpu, not also {name}.{param}")

    for name, section, sp in (
        ("actor_rollout_ref.actor", actor, actor.ulysses_sequence_parallel_size),
        ("critic", critic, critic.ulysses_sequence_parallel_size),
    ):
        if name == "critic" and not use_critic:
            continue
        if section.use_dynamic_bsz:
            continue
        if data.train_batch_size < section.ppo_mini_batch_size:
            problems.append(
                f"data.train_batch_size={data.train_batch_size} is smaller than {name}.ppo_mini_batch_size={section.ppo_mini_batch_size}"
            )
        dp = max(n_gpus // sp, 1)
        mini = section.ppo_mini_batch_size * n // dp
        micro = _per_gpu(section.ppo_micro_batch_size, section.ppo_micro_batch_size_per_gpu, dp)
        if mini <= 0:
            problems.append(f"{name}.ppo_mini_batch_size x rollout.n / {dp} GPUs is 0")
        elif micro and mini % micro:
            problems.append(
                f"{name}: the per-GPU mini batch ({section.ppo_mini_batch_size} x {n} / {dp} = {mini}) is not a multiple of its micro batch ({micro})"
            )

    if rollout.name == "hf":
        if actor.fsdp_config.param_offload:
            problems.append(
                "the hf rollout generates with the actor's weights and never reloads offloaded ones: "
                "set actor_rollout_ref.actor.fsdp_config.param_offload=False"
            )
        mbs = rollout.get("micro_batch_size")
        if mbs is None:
            warnings.append(
                "the hf rollout generates the whole batch at once without +actor_rollout_ref.rollout.micro_batch_size"
            )
        else:
            # hf_rollout.py: num_chunks = B // mbs, then DataProto.chunk asserts B % num_chunks == 0.
            per_gpu = data.train_batch_size // n_gpus
            chunks = max(per_gpu // mbs, 1)
            if per_gpu % chunks:
                problems.append(
                    f"the hf rollout cannot split {per_gpu} prompts per GPU into {chunks} equal chunks "
                    f"(micro_batch_size={mbs}); make data.train_batch_size / GPUs a multiple of it"
                )
            if data.val_batch_size is None:
                problems.append(
                    "with the hf rollout, data.val_batch_size=null sends the whole validation set as one batch, "
                    "which it can split only if its size divides evenly (GSM8K test: 1319 rows, a prime); "
                    f"set data.val_batch_size={mbs * n_gpus}"
                )
            elif -(-data.val_batch_size // n_gpus) > mbs:
                warnings.append(
                    f"validation batches of {data.val_batch_size} may not split into equal hf rollout chunks of {mbs}; "
                    f"data.val_batch_size={mbs * n_gpus} always does"
                )
    return problems, warnings


def report(result: Result) -> None:
    for item in result.refused:
        print(f"refused: {item.override}\n  key {item.key}: {item.reason}", file=sys.stderr)
    for problem in result.problems:
        print(f"problem: {problem}", file=sys.stderr)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if result.ok:
        print(f"ok: verl composes all {len(result.overrides)} overrides", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verl", type=Path, required=True, help="verl checkout root, package or config directory")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--script", type=Path, help="a rendered train.sh; extra arguments are passed to it")
    source.add_argument("--overrides-file", type=Path, help="file with one override per line")
    parser.add_argument("overrides", nargs="*", help="overrides (after --script: extra train.sh arguments)")
    args = parser.parse_args(argv)

    try:
        if args.script:
            overrides = overrides_from_script(args.script, args.overrides)
        elif args.overrides_file:
            overrides = overrides_from_file(args.overrides_file) + args.overrides
        else:
            overrides = args.overrides
        if not overrides:
            parser.error("no overrides given")
        result = check(args.verl, overrides)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"validate_overrides.py: {error}", file=sys.stderr)
        print(json.dumps({"ok": False, "error": str(error)}))
        return 2
    report(result)
    print(json.dumps(result.summary()))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
