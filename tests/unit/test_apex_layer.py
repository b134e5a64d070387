"""The apex layer's switch on localhost: apex_enabled false skips it (said in the summary, a rerun
changes nothing), true asks for its record, and false is refused where the profile or model needs Apex."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import run_play

REPO = Path(__file__).resolve().parents[2]
# What a stage playbook gives its layers: the stack role's values and layer_state's shared arguments.
PLAY = {
    "vars_files": [str(path) for path in sorted((REPO / "roles/stack/defaults/main").glob("*.yml"))],
    "module_defaults": {"layer_state": "{{ stack_layer_args }}"},
}
PROFILES = yaml.safe_load((REPO / "roles/stack/defaults/main/gpu_profiles.yml").read_text())["stack_gpu_profiles"]


def apex_play(tmp_path: Path, **extra: object):
    """The apex role in a play of its own, then the end-of-run summary's line for it, as a stage and
    playbooks/summary.yml run them (the host lock taken first, released last)."""
    state = tmp_path / "layers"
    variables = {
        "stack_state_dir": str(state),
        "stack_lock_file": str(tmp_path / "run.lock"),
        "preflight_gpus": [],
        "preflight_profile": dict(PROFILES["pascal"], name="pascal"),
        **extra,
    }
    lock = {"name": "The run lock", "host_lock": {"path": "{{ stack_lock_file }}", "run": "{{ lookup('stack_run') }}"}}
    task = {"name": "The apex layer", "ansible.builtin.include_role": {"name": "apex"}}
    summary = {
        "name": "The summary line",
        "ansible.builtin.debug": {"msg": "SUMMARY {{ ansible_facts | stack_summary(['apex']) | first }}"},
    }
    release = {
        "name": "Release the run lock",
        "host_lock": {"path": "{{ stack_lock_file }}", "run": "{{ lookup('stack_run') }}", "state": "released"},
    }
    done = run_play(tmp_path, [lock, task, summary, release], "-e", json.dumps(variables), callback="default", **PLAY)
    return done, state


def recap_changed(stdout: str) -> int:
    return int(re.search(r"localhost\s*:.*changed=(\d+)", stdout).group(1))


def test_off_it_is_skipped_said_so_and_a_rerun_changes_nothing(tmp_path: Path):
    for _ in range(2):
        done, state = apex_play(tmp_path, apex_enabled=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        # No record is read or written, nothing is built: the layer's own tasks are all skipped.
        assert "Read the layer state of apex" not in done.stdout.replace("skipping", "")
        assert not (state / "apex.json").exists()
        line = re.search(r"SUMMARY ([^'\n]+)", done.stdout).group(1)
        assert re.match(r"apex\s+-\s+skipped \(apex_enabled: false\)$", line.strip()), line
        assert recap_changed(done.stdout) == 0, done.stdout[-2000:]


def test_on_it_asks_for_its_record(tmp_path: Path):
    # No cuda or torch record here: the layer's first look at its record stops, naming what is missing.
    done, state = apex_play(tmp_path, apex_enabled=True)
    assert done.returncode != 0
    assert "TASK [stack : Layer | Read the layer state of apex]" in done.stdout
    assert "skipped (apex_enabled: false)" not in done.stdout
    assert "cuda" in done.stdout.split("TASK [stack : Layer | Read the layer state of apex]")[1]


def test_off_is_refused_where_the_profile_needs_apex(tmp_path: Path):
    profile = dict(PROFILES["pascal"], name="pascal", needs_apex=True)
    done, state = apex_play(tmp_path, apex_enabled=False, preflight_profile=profile)
    assert done.returncode != 0
    assert "apex_enabled is false, but the GPU profile pascal (needs_apex: true" in done.stdout, done.stdout[-3000:]
    assert "skipped (apex_enabled: false)" not in done.stdout


def test_off_is_refused_where_the_model_needs_apex(tmp_path: Path):
    done, state = apex_play(
        tmp_path,
        apex_enabled=False,
        model_name="Qwen/Qwen2.5-0.5B-Instruct",
        apex_needed_by_models=["Qwen/Qwen2.5-0.5B-Instruct"],
    )
    assert done.returncode != 0
    assert "the model Qwen/Qwen2.5-0.5B-Instruct (in apex_needed_by_models) needs Apex" in done.stdout, done.stdout[
        -3000:
    ]
    # No profile and no model needs it today: the defaults let it be skipped (the test above).
    assert not any(profile.get("needs_apex") for profile in PROFILES.values())


# -- What Apex compiles for: the cards preflight found ------------------------------------------

SMI_SAMPLES = REPO / "tests/unit/samples/nvidia-smi"


def arch_list(tmp_path: Path, sample: str | None, **extra: object) -> str:
    """apex_cuda_arch_list as the apex role reads it once preflight chose the profile (its own
    profile.yml) for the GPUs of a recorded nvidia-smi sample (None: a host without a GPU, as CI).
    `extra` are play variables: what a user sets in group_vars, host_vars or the play."""
    text = "" if sample is None else (SMI_SAMPLES / sample).read_text()
    smi = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    gpus = "{{ __smi | nvidia_smi_gpus }}"
    play = {
        # What gpu.yml hands over: the GPUs, and a peer-to-peer query that failed (profile.yml reads it).
        "vars": {
            "__smi": smi,
            "preflight_gpus": gpus,
            "preflight_gpus_found": gpus,
            "__preflight_topo": {"rc": 1, "stdout": "", "stderr": "not asked"},
            **extra,
        },
        "pre_tasks": [
            {
                "name": "Preflight's profile",
                "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "profile.yml"},
            }
        ],
        # The apex role's defaults, as its layer reads them; none of its tasks runs.
        "roles": [{"role": "apex", "when": False}],
    }
    task = {
        "name": "The arch list",
        "ansible.builtin.debug": {"msg": "ARCH [{{ apex_cuda_arch_list }}] [{{ __apex_inputs.arch }}]"},
    }
    done = run_play(tmp_path, [task], callback="default", **play)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found, recorded = re.search(r"ARCH \[([^\]]*)\] \[([^\]]*)\]", done.stdout).groups()
    assert recorded == found  # the layer's record (and so its wheel key) holds what it builds for
    return found


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        # A constant 6.1 fails the P100: an sm_61-only Apex has no code for sm_60.
        ("p100-x2.txt", "6.0"),
        ("p40-x2-ecc.txt", "6.1"),
        ("gtx1080ti-x2.txt", "6.1"),
        ("p40-x2-p100-x2.txt", "6.0;6.1"),
        # No GPU (CI, make demo): the pascal profile's 6.1, what CI has always built; a change here
        # would change CI's Apex check and its wheel cache key.
        (None, "6.1"),
    ],
)
def test_apex_builds_for_the_cards_found(tmp_path: Path, sample: str | None, expected: str):
    assert arch_list(tmp_path, sample) == expected


def test_apex_cuda_arch_list_set_by_the_user_wins(tmp_path: Path):
    # Set at play level (as group_vars or host_vars would be): a preflight that set_fact'ed
    # apex_cuda_arch_list itself would beat it, and fail here.
    assert arch_list(tmp_path, "p100-x2.txt", apex_cuda_arch_list="6.0;6.1;7.0") == "6.0;6.1;7.0"
