"""tests/gpu/summarize.py's memory verdict: a run whose only "out of memory" lines are FSDP's warnings
that a checkpoint's clone() was refused under the save's cap (P40_SAVE_HEADROOM_GIB) fits; any other
out-of-memory line does not. Broken case: the 1.5B save run (tests/gpu/results/save15b-cap-22gib-*)
exited 0 with every step and save done, and the summary said DOES NOT FIT from 504 such warnings."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from pathlib import Path

from repo import REPO, load_file

summarize = load_file(REPO / "tests" / "gpu" / "summarize.py", "summarize_under_test")

CLONE = (
    "(WorkerDict pid=1945) .../fsdp/_state_dict_utils.py:230: UserWarning: Failed to clone() tensor with name "
    "_fsdp_wrapped_module.self_attn.v_proj.lora_A.default.weight on rank 0. ... Error: CUDA out of memory. "
    "Tried to allocate 2.00 MiB."
)
STEP = "(TaskRunner pid=1) step:%d - timing_s/step:80.0 - timing_s/gen:40.0"


def verdict(tmp_path: Path, *extra: str, processes: int = 1) -> tuple[int, str]:
    log = tmp_path / "train.log"
    log.write_text("\n".join([STEP % 1, STEP % 2, *extra]) + "\n")
    mem = tmp_path / "mem.jsonl"
    cap = {"event": "cap", "cap_gib": 22.0, "total_gib": 139.8, "fraction": 0.157, "argv": ["python"]}
    events = [
        *({**cap, "pid": 7 + n} for n in range(processes)),
        {
            "event": "call",
            "role": "actor (checkpoint)",
            "peak_allocated_gib": 6.3,
            "peak_reserved_gib": 8.0,
            "before_gib": 6.28,
            "seconds": 10.0,
        },
    ]
    mem.write_text("".join(json.dumps(event) + "\n" for event in events))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = summarize.main(["memory", "--log", str(log), "--mem-log", str(mem), "--cap-gib", "22", "--steps", "2"])
    return rc, out.getvalue()


def test_clone_warnings_of_a_capped_save_are_counted_not_failed(tmp_path: Path):
    rc, said = verdict(tmp_path, CLONE, CLONE)
    assert rc == 0 and "memory: FITS under 22.0 GiB" in said, said
    assert "kept by FSDP (a warning): 2 line(s)" in said


def test_any_other_out_of_memory_line_fails(tmp_path: Path):
    rc, said = verdict(tmp_path, CLONE, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB")
    assert rc == 1 and "FAILED: the log reports CUDA out of memory" in said and "DOES NOT FIT" in said, said
    rc, said = verdict(tmp_path)
    assert rc == 0 and "clone()" not in said, said


def test_clone_fallbacks_with_more_than_one_gpu_process_fail(tmp_path: Path):
    rc, said = verdict(tmp_path, CLONE, processes=2)
    assert rc == 1 and "FAILED: clone() fell back to the parameter itself with more than one GPU process" in said, said


def test_the_committed_save_run_fits_on_its_own_log(tmp_path: Path):
    """The H200 run itself (tests/gpu/results/save15b-cap-22gib-*): its train log and the hooks' records."""
    results = REPO / "tests" / "gpu" / "results"
    log = tmp_path / "save15b-cap-22gib-train.log"
    log.write_bytes(gzip.decompress((results / "save15b-cap-22gib-train.log.gz").read_bytes()))
    argv = ["memory", "--log", str(log), "--mem-log", str(results / "save15b-cap-22gib-calls.jsonl")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = summarize.main([*argv, "--cap-gib", "22", "--steps", "4"])
    said = out.getvalue()
    assert rc == 0 and "memory: FITS under 22.0 GiB per process" in said, said
    assert "kept by FSDP (a warning): 504 line(s)" in said and "steps logged: [1, 2, 3, 4]" in said
