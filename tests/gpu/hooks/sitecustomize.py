"""Make a big GPU behave like a P40 in memory, and record what verl's roles use.

Python imports `sitecustomize` at start-up from the first directory on
sys.path that holds one, so with this directory on PYTHONPATH it runs in
every Python process of the run: the launcher, Ray's driver and every Ray
worker (workers inherit the environment train.env exports). It does
nothing unless one of the variables below is set, and imports nothing
heavy itself: it waits for the process to import torch or verl.

P40_GPU_MEM_GB=24
    Caps the process's CUDA caching allocator at that many GiB with
    torch.cuda.set_per_process_memory_fraction(GiB / total), registered with
    torch.cuda._lazy_call so that it runs when the process initialises CUDA,
    before its first allocation. Past the cap torch raises its usual
    out-of-memory error, as on a 24 GB card. (The CUDA context, ~0.5 GiB,
    lives outside the allocator and is not counted: see mem_report.py.)
P40_MEM_LOG=FILE
    Appends one JSON line per event: the cap applied (pid, fraction), and for
    each call of verl's worker methods (generate_sequences, compute_log_prob,
    compute_ref_log_prob, update_actor, compute_values, update_critic,
    init_model, save_checkpoint) the role, seconds, memory allocated before
    and after, and the peak allocated and reserved during the call (peak
    stats reset at its start). The methods are wrapped when
    verl.workers.fsdp_workers is imported; functools.wraps keeps verl's
    dispatch attributes, so the worker groups bind them as before.
P40_SAVE_HEADROOM_GIB=3,1
    How much a checkpoint's save may take above what is allocated when it
    starts: for the Nth save_checkpoint call the Nth value, applied as the
    allocator's cap for that call only (the P40_GPU_MEM_GB cap comes back
    after it; the allocator's cache is emptied first, since the cap binds only
    new segments). A save that needs more runs out of memory and the call's
    line says so (error), with the count of tensors torch's FSDP state_dict
    failed to clone (clone_failures: it then keeps the parameter itself).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import json
import os
import sys
import time
import warnings

_CAP_GB = os.environ.get("P40_GPU_MEM_GB")
_LOG = os.environ.get("P40_MEM_LOG")
_SAVE_HEADROOM = [float(value) for value in os.environ.get("P40_SAVE_HEADROOM_GIB", "").split(",") if value.strip()]

# method -> role it runs for; the ref and the actor are one class in verl 0.4.1.
_ROLE_OF = {
    "ActorRolloutRefWorker": {
        "init_model": "actor/rollout/ref init",
        "generate_sequences": "rollout (actor weights)",
        "compute_log_prob": "actor (old log-prob)",
        "update_actor": "actor (update)",
        "compute_ref_log_prob": "ref (log-prob)",
        "save_checkpoint": "actor (checkpoint)",
    },
    "CriticWorker": {
        "init_model": "critic init",
        "compute_values": "critic (values)",
        "update_critic": "critic (update)",
        "save_checkpoint": "critic (checkpoint)",
    },
}


def _record(event: dict) -> None:
    if not _LOG:
        return
    event = {"pid": os.getpid(), "time": round(time.time(), 3), **event}
    with open(_LOG, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(event) + "\n")


def _on_torch(torch) -> None:
    if not _CAP_GB:
        return
    cap = float(_CAP_GB) * 2**30

    def apply_cap() -> None:
        try:
            for index in range(torch.cuda.device_count()):
                total = torch.cuda.get_device_properties(index).total_memory
                fraction = min(1.0, cap / total)
                torch.cuda.set_per_process_memory_fraction(fraction, index)
                _record(
                    {
                        "event": "cap",
                        "device": index,
                        "cap_gib": float(_CAP_GB),
                        "total_gib": round(total / 2**30, 2),
                        "fraction": round(fraction, 5),
                        "argv": " ".join(sys.argv)[:200],
                    }
                )
        except Exception as error:  # a cap that silently did not apply would void the run
            _record({"event": "cap_failed", "error": repr(error)})
            raise

    torch.cuda._lazy_call(apply_cap)


def _wrap(cls, name: str, role: str) -> None:
    import functools

    import torch

    method = cls.__dict__.get(name)
    if method is None:
        return

    @functools.wraps(method)
    def measured(self, *args, **kwargs):
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if cuda:
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        headroom = _SAVE_HEADROOM.pop(0) if cuda and name == "save_checkpoint" and _SAVE_HEADROOM else None
        caught = contextlib.nullcontext([])
        if headroom is not None:
            # The cap binds only new segments: cached blocks would serve the save past it.
            torch.cuda.empty_cache()
            total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, (before + headroom * 2**30) / total))
            caught = warnings.catch_warnings(record=True)
        start = time.time()
        error = None
        try:
            with caught as seen:
                if headroom is not None:
                    warnings.simplefilter("always")
                return method(self, *args, **kwargs)
        except BaseException as raised:
            error = repr(raised)[:300]
            raise
        finally:
            event = {
                "event": "call",
                "role": role,
                "method": f"{cls.__name__}.{name}",
                "seconds": round(time.time() - start, 3),
            }
            if headroom is not None:
                cap = float(_CAP_GB) * 2**30 if _CAP_GB else total
                torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
                event["save_headroom_gib"] = headroom
                # torch's FSDP state_dict keeps a parameter's own tensor when its clone() runs out of memory.
                event["clone_failures"] = sum("Failed to clone()" in str(w.message) for w in seen)
                for w in seen:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
            if error:
                event["error"] = error
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
                event.update(
                    before_gib=round(before / 2**30, 3) if cuda else None,
                    after_gib=round(torch.cuda.memory_allocated() / 2**30, 3),
                    peak_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3),
                    peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 3),
                )
            _record(event)

    setattr(cls, name, measured)


def _on_fsdp_workers(module) -> None:
    if not _LOG:
        return
    for class_name, methods in _ROLE_OF.items():
        cls = getattr(module, class_name, None)
        for name, role in methods.items():
            if cls is not None:
                _wrap(cls, name, role)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback once a watched module has finished executing."""

    def __init__(self, callbacks: dict) -> None:
        self.callbacks = callbacks

    def find_spec(self, name, path, target=None):
        callback = self.callbacks.get(name)
        if callback is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        del self.callbacks[name]
        original = loader.exec_module

        def exec_module(module):
            original(module)
            callback(module)

        loader.exec_module = exec_module
        return spec


if _CAP_GB or _LOG:
    sys.meta_path.insert(0, _AfterImport({"torch": _on_torch, "verl.workers.fsdp_workers": _on_fsdp_workers}))
