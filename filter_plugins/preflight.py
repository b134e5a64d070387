"""Preflight's arithmetic: which OS releases are tested, the free disk each path needs, the RAM training needs.

roles/preflight/tasks/os.yml and resources.yml call these; each is plain Python, tested in
tests/unit/test_preflight_checks.py without Ansible.

Free disk (``disk_requirements``): every path the stack writes, with the GiB it needs. The fixed
sizes are preflight's variables (preflight_disk_*_gb); what scales with the model is computed
from preflight_model_params_b:

    model directory  MODEL_DIR_BYTES per parameter
    checkpoints      train_max_checkpoints x CHECKPOINT_BYTES per parameter

A path whose layer is recorded complete needs no more room (its tree is there; a rebuild deletes
it before writing it again), so a rerun on a built host asks only for what is still to come.
Checkpoints are written by training, which needs a GPU: they count only where GPUs were found.
The disk_space module adds up the paths on one filesystem.

RAM (``training_ram``), on a host with GPUs, in GiB (2**30 bytes), P = preflight_model_params_b x 1e9:

    offload   = P x (the profile's offload, verl 0.4.1 FSDP, fp32 master weights:
                     actor:  4 B if actor_params,  8 B if actor_optimizer (Adam's two fp32 moments)
                     critic: 4 B if critic_params, 8 B if critic_optimizer (GAE, the default)
                     ref:    the precision's bytes (2 or 4); verl 0.4.1 always keeps the reference
                             model on the CPU (fsdp_workers.py:317); counted since a KL term in
                             train_extra_overrides adds it)
    loading   = P x 4 B x GPUs   (verl builds each model from a full fp32 copy on the CPU in every
                                  worker when the embeddings are tied, as Qwen2.5's are:
                                  fsdp_workers.py:240, fsdp_utils.get_init_weight_context_manager)
    processes = (GPUs + 1) x WORKER_GIB  (one Ray worker per GPU, plus verl's TaskRunner)
    base      = BASE_GIB                 (Ray's raylet, GCS and dashboard, and the OS)
    need      = offload + loading + processes + base

The byte counts follow from the dtypes and the profile; WORKER_GIB and BASE_GIB are estimates
(a Python process with torch, CUDA, transformers and verl imported), not measured on a P40 host.
Qwen2.5-0.5B on one P40 with the pascal profile: 11.2 + 1.9 + 5.0 + 2.0 = 20.1 GiB.
"""

from __future__ import annotations

import math
from typing import Any

from ansible.errors import AnsibleFilterError

GIB = 2**30
# A model directory: fp32 safetensors at most (Qwen2.5 ships bf16, half of it), tokenizer beside.
MODEL_DIR_BYTES = 4
# One verl 0.4.1 checkpoint of PPO with a critic (trainer.default_local_dir/global_step_N): actor
# and critic, each fp32 weights (4 B) and Adam's two moments (8 B); with the tied embeddings saved
# twice and the dataloader state it is a little more, with GRPO (no critic) half.
CHECKPOINT_BYTES = 24
ADAM_BYTES = 8
FP32_BYTES = 4
PRECISION_BYTES = {"float32": 4, "bfloat16": 2}
WORKER_GIB = 2.5
BASE_GIB = 2.0


# -- The OS -----------------------------------------------------------------------------------------


def preflight_os(distribution: str, version: Any, tested: dict[str, list], untested: dict[str, list]) -> dict[str, Any]:
    """Whether this release is converged in CI (``tested``), accepted without tests (``untested``)
    or refused, with the line preflight prints: {"accepted": bool, "tested": bool, "message": str}."""
    name = "%s %s" % (distribution, version)

    def listed(releases: dict[str, list]) -> bool:
        return str(version) in [str(release) for release in (releases or {}).get(distribution) or []]

    def describe(releases: dict[str, list]) -> str:
        return "; ".join("%s %s" % (dist, "/".join(str(r) for r in rels)) for dist, rels in (releases or {}).items())

    if listed(tested):
        return {"accepted": True, "tested": True, "message": "%s: converged in CI (preflight_supported_os)." % name}
    if listed(untested):
        return {
            "accepted": True,
            "tested": False,
            "message": "WARNING: %s is accepted but NOT tested here: expected to work, never converged by this "
            "project's CI, which converges %s. Tell the maintainers what fails (preflight_untested_os lists "
            "these releases)." % (name, describe(tested) or "no release"),
        }
    return {
        "accepted": False,
        "tested": False,
        "message": "%s is not supported. Converged in CI: %s; expected to work, not tested here: %s. Use one of "
        "these, or add your release to preflight_untested_os at your own risk."
        % (name, describe(tested) or "none", describe(untested) or "none"),
    }


# -- Free disk --------------------------------------------------------------------------------------


def disk_requirement_vars(table: list[dict[str, Any]]) -> list[str]:
    """The variables ``disk_requirements`` reads: the paths' and the sizes' (the play looks them up)."""
    names: list[str] = []
    for entry in table:
        for name in [*entry.get("paths", []), entry.get("gib"), entry.get("times")]:
            if name and name not in names:
                names.append(name)
    return names


def disk_requirements(
    table: list[dict[str, Any]],
    values: dict[str, Any],
    records: dict[str, Any] | None = None,
    training: bool = True,
    model_params_b: Any = 0,
) -> list[dict[str, Any]]:
    """The disk_space module's requirements: one {path, min_free_gb, why} per entry of ``table``
    that still has something to write.

    An entry: ``paths`` (variable names; the first one set in ``values`` is the path: a layer's own
    variable is set only in the play holding its role or where the user set it, and its default lies
    under the next), ``layer`` (its record complete: nothing more to write), and either ``gib`` (the
    variable holding its size) or ``kind`` (model or checkpoints: sized from ``model_params_b``, the
    checkpoints ``times`` the variable naming how many are kept).
    An entry with no path set here is left out, as is one with ``training`` where no GPU trains."""
    records = records or {}
    params = _number(model_params_b, "preflight_model_params_b")
    requirements = []
    for entry in table:
        names = list(entry.get("paths") or [])
        found = next((name for name in names if str(values.get(name) or "") != ""), None)
        if found is None:
            continue
        if entry.get("training") and not training:
            continue
        if (records.get(entry.get("layer")) or {}).get("status") == "complete":
            continue
        own = names[0]
        where = own if found == own else "%s (its default lies under this %s)" % (own, found)
        kind = entry.get("kind")
        if kind == "model":
            gib = _gib(params * 1e9 * MODEL_DIR_BYTES)
            size = "preflight_model_params_b %s x %d bytes" % (_short(params), MODEL_DIR_BYTES)
        elif kind == "checkpoints":
            times_var = entry.get("times") or ""
            times = int(_number(values.get(times_var), times_var))
            one = _gib(params * 1e9 * CHECKPOINT_BYTES)
            gib = round(times * one, 1)
            size = "%s %d x %.1f GiB (preflight_model_params_b %s x %d bytes)" % (
                times_var,
                times,
                one,
                _short(params),
                CHECKPOINT_BYTES,
            )
        else:
            gib = _number(values.get(entry.get("gib")), entry.get("gib") or "gib")
            size = entry.get("gib")
        requirements.append({"path": str(values[found]), "min_free_gb": gib, "why": "%s; %s" % (where, size)})
    return requirements


# -- RAM --------------------------------------------------------------------------------------------


def training_ram(profile: dict[str, Any], model_params_b: Any, n_gpus: Any, minimum: Any = None) -> dict[str, Any]:
    """The RAM a host that trains needs: {"gib": float, "why": str}; {} where nothing is checked
    (no GPU, or ``minimum`` (preflight_min_ram_gb) 0). A ``minimum`` set replaces the estimate."""
    if minimum not in (None, ""):
        gib = _number(minimum, "preflight_min_ram_gb")
        return {"gib": gib, "why": "preflight_min_ram_gb"} if gib > 0 else {}
    gpus = int(_number(n_gpus, "the GPU count"))
    if gpus < 1:
        return {}
    params = _number(model_params_b, "preflight_model_params_b") * 1e9
    offload = (profile or {}).get("offload") or {}
    precision = (profile or {}).get("precision", "float32")
    if precision not in PRECISION_BYTES:
        raise AnsibleFilterError(
            "the GPU profile's precision %r is none of %s" % (precision, ", ".join(PRECISION_BYTES))
        )
    per_param = (
        (FP32_BYTES if offload.get("actor_params") else 0)
        + (ADAM_BYTES if offload.get("actor_optimizer") else 0)
        + (FP32_BYTES if offload.get("critic_params") else 0)
        + (ADAM_BYTES if offload.get("critic_optimizer") else 0)
        + PRECISION_BYTES[precision]
    )
    parts = [
        ("CPU offload", _gib(params * per_param), "%d B per parameter: the profile's offload and the ref" % per_param),
        ("model loading", _gib(params * FP32_BYTES * gpus), "an fp32 copy per GPU"),
        ("Ray workers", (gpus + 1) * WORKER_GIB, "%d x %s" % (gpus + 1, _short(WORKER_GIB))),
        ("Ray and the OS", BASE_GIB, ""),
    ]
    need = round(sum(gib for _, gib, _ in parts), 1)
    why = ", ".join("%s %.1f%s" % (name, gib, " (%s)" % how if how else "") for name, gib, how in parts)
    name = (profile or {}).get("name") or "?"
    return {
        "gib": need,
        "why": "the %s profile on %d GPU(s), preflight_model_params_b %s: %s"
        % (name, gpus, _short(_number(model_params_b, "preflight_model_params_b")), why),
    }


# -- The refusal ------------------------------------------------------------------------------------


def resource_problems(shortfalls: list[str], memtotal_mb: Any, ram: dict[str, Any] | None) -> list[str]:
    """preflight's refusal, one sentence per problem; [] when the host has room and memory."""
    problems = []
    if shortfalls:
        problems.append(
            "Not enough free disk space: %s. Free space there, move a path to a larger disk (the variable named "
            "first), or change the size named after it (preflight's defaults); preflight_disk_requirements "
            "replaces the whole list." % "; ".join(shortfalls)
        )
    if ram:
        have = _number(memtotal_mb, "preflight_memory_mb (the host's MemTotal)") / 1024
        if have < float(ram["gib"]):
            problems.append(
                "Not enough memory: %.1f GiB RAM, training needs %.1f GiB (%s). Add RAM, train on fewer GPUs per "
                "host (train_gpus) or a smaller model (preflight_model_params_b), or set preflight_min_ram_gb "
                "(0: no check)." % (have, float(ram["gib"]), ram["why"])
            )
    return problems


def _gib(nbytes: float) -> float:
    """Bytes as GiB, rounded up to a tenth (a need is never rounded down)."""
    return math.ceil(nbytes / GIB * 10 - 1e-9) / 10


def _short(number: float) -> str:
    return ("%f" % number).rstrip("0").rstrip(".")


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise AnsibleFilterError("%s must be a number, not %r" % (name, value))
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError("%s must be a number, got %r" % (name, value)) from None
    if number < 0 or math.isnan(number) or math.isinf(number):
        raise AnsibleFilterError("%s must be a number of 0 or more, got %r" % (name, value))
    return number


class FilterModule:
    """Preflight's checks as arithmetic: OS releases, free disk, RAM."""

    def filters(self) -> dict[str, Any]:
        return {
            "preflight_os": preflight_os,
            "disk_requirement_vars": disk_requirement_vars,
            "disk_requirements": disk_requirements,
            "training_ram": training_ram,
            "resource_problems": resource_problems,
        }
