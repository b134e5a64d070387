"""Tests for library/verl_patch.py and its catalog, on the real verl 0.4.1 source."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Dict, Tuple

import pytest
from ansible.module_utils.verl_fixes import CATALOG, NEVER_TOUCH

import verl_patch as vp

REPO = Path(__file__).resolve().parents[2]

ALL_FIXES = [
    "critic_eager_attention",
    "no_bf16_autocast",
    "optional_flash_attn",
    "hf_rollout_timing",
    "no_prefix_caching",
    "hf_rollout_lora_wrap",
]

# (fix, file, first changed line in pristine 0.4.1), as found by reading the
# release (docs/patch.md, "The fixes", has each site and why), with what that line held
# and what it must hold after patching.
FSDP = "verl/workers/fsdp_workers.py"
ACTOR = "verl/workers/actor/dp_actor.py"
CRITIC = "verl/workers/critic/dp_critic.py"
MODEL = "verl/utils/model.py"
HF = "verl/workers/rollout/hf_rollout.py"
SPMD = "verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py"
EXPECTED_SITES = {
    ("critic_eager_attention", FSDP, 910): ('attn_implementation="flash_attention_2"', 'attn_implementation="eager"'),
    ("critic_eager_attention", MODEL, 511): ('attn_implementation="flash_attention_2"', 'attn_implementation="eager"'),
    ("critic_eager_attention", MODEL, 531): ('attn_implementation="flash_attention_2"', 'attn_implementation="eager"'),
    ("no_bf16_autocast", ACTOR, 100): (
        "dtype=torch.bfloat16",
        "torch.autocast(device_type=self.device_name, enabled=False)",
    ),
    ("no_bf16_autocast", CRITIC, 65): (
        "dtype=torch.bfloat16",
        "torch.autocast(device_type=self.device_name, enabled=False)",
    ),
    ("no_bf16_autocast", HF, 109): (
        "dtype=torch.bfloat16",
        "torch.autocast(device_type=get_device_name(), enabled=False)",
    ),
    ("no_bf16_autocast", FSDP, 1300): (
        "dtype=torch.bfloat16",
        "torch.autocast(device_type=device_name, enabled=False)",
    ),
    ("optional_flash_attn", ACTOR, 42): ("from flash_attn.bert_padding import", "try:"),
    ("optional_flash_attn", CRITIC, 39): ("from flash_attn.bert_padding import", "try:"),
    ("hf_rollout_timing", FSDP, 671): (
        "timing_generate.update(self.rollout_sharding_manager.timing)",
        'timing_generate.update(getattr(self.rollout_sharding_manager, "timing", {}))',
    ),
    ("no_prefix_caching", SPMD, 164): ("enable_prefix_caching=True,", "enable_prefix_caching=False,"),
    ("hf_rollout_lora_wrap", FSDP, 306): (
        'if self._is_rollout and self.config.rollout.name == "hf":',
        'if self._is_rollout and self.config.rollout.name == "hf" and not self._is_lora:',
    ),
}
TOUCHED = sorted({site[1] for site in EXPECTED_SITES})
FLASH_HELPERS = ("index_first_axis", "pad_input", "rearrange", "unpad_input")


def tree_state(root: Path) -> Dict[str, Tuple[str, int]]:
    """Every file and directory under root with its content hash and permission bits."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            mode = path.lstat().st_mode & 0o7777
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            state[rel] = (digest, mode)
    return state


def text(root: Path, rel: str) -> str:
    return (root / rel).read_text(encoding="utf-8")


def line_at(root: Path, rel: str, line: int) -> str:
    return text(root, rel).splitlines()[line - 1]


# ---------------------------------------------------------------- the catalog


def test_catalog_records_are_complete_and_stay_out_of_protected_files():
    for version, fixes in CATALOG.items():
        names = [fix["name"] for fix in fixes]
        assert len(names) == len(set(names)), version
        for fix in fixes:
            assert {"name", "what", "reason", "preferred_config", "edits"} <= set(fix), fix.get("name")
            assert fix["reason"].strip() and fix["preferred_config"].strip()
            for edit in fix["edits"]:
                assert edit["anchor"] != edit["replacement"]
                assert "verl_p40_patch: %s" % fix["name"] in edit["replacement"], (fix["name"], edit["file"])
                assert not any(edit["file"].startswith(path) for path in NEVER_TOUCH), edit["file"]
    assert [fix["name"] for fix in CATALOG["0.4.1"]] == ALL_FIXES


# ---------------------------------------------------------------- applying


def test_every_fix_lands_on_its_intended_line(verl_041_pristine: Path, verl_041: Path):
    result = vp.run(str(verl_041))

    assert result["changed"] is True
    assert result["verl_version"] == "0.4.1"
    assert result["fixes"] == ALL_FIXES
    assert sorted(result["changed_files"]) == TOUCHED
    assert {(e["fix"], e["file"], e["line"]) for e in result["applied"]} == set(EXPECTED_SITES)
    for entry in result["applied"]:
        old, new = EXPECTED_SITES[(entry["fix"], entry["file"], entry["line"])]
        assert old in line_at(verl_041_pristine, entry["file"], entry["line"])
        assert old not in line_at(verl_041, entry["file"], entry["patched_line"])
        assert new in line_at(verl_041, entry["file"], entry["patched_line"])
        assert "verl_p40_patch: " + entry["fix"] in text(verl_041, entry["file"])


def test_patched_files_differ_from_pristine_only_by_the_recorded_edits(verl_041_pristine: Path, verl_041: Path):
    applied = vp.run(str(verl_041))["applied"]

    for rel in TOUCHED:
        lines = text(verl_041, rel).splitlines(keepends=True)
        # Undo the edits bottom-up so earlier line numbers stay valid.
        for entry in sorted((e for e in applied if e["file"] == rel), key=lambda e: -e["patched_line"]):
            after = entry["after"].splitlines(keepends=True)
            start = entry["patched_line"] - 1
            assert "".join(lines[start : start + len(after)]) == entry["after"], (rel, entry["line"])
            lines[start : start + len(after)] = entry["before"].splitlines(keepends=True)
        assert "".join(lines) == text(verl_041_pristine, rel), rel


def test_what_config_reaches_is_left_alone(verl_041: Path):
    vp.run(str(verl_041))

    # The actor's attention is set by override_config; the reward model and SFT
    # trainer are off the P40 PPO path. None of them is the patch's business.
    assert 'attn_implementation="flash_attention_2")' in line_at(verl_041, FSDP, 221)
    assert 'attn_implementation="flash_attention_2"' in line_at(verl_041, FSDP, 1241)
    assert "dtype=torch.bfloat16" in line_at(verl_041, "verl/trainer/fsdp_sft_trainer.py", 310)
    for rel in (ACTOR, CRITIC, HF, FSDP):
        autocasts = [line for line in text(verl_041, rel).splitlines() if "torch.autocast(" in line]
        assert autocasts and all("bfloat16" not in line and "enabled=False" in line for line in autocasts), rel


def test_protected_files_are_byte_identical(verl_041_pristine: Path, verl_041: Path):
    vp.run(str(verl_041))

    before, after = tree_state(verl_041_pristine), tree_state(verl_041)
    assert after["verl/utils/torch_dtypes.py"] == before["verl/utils/torch_dtypes.py"]
    changed = {rel for rel in before if after.get(rel) != before[rel]}
    assert changed == set(TOUCHED)
    added = {rel for rel in after if rel not in before}
    assert added and all(rel.startswith(vp.STATE_DIR) for rel in added)


def test_patched_files_compile(verl_041: Path):
    vp.run(str(verl_041))

    for rel in TOUCHED:
        compile(text(verl_041, rel), rel, "exec", dont_inherit=True)


def test_flash_attn_helpers_are_only_used_under_use_remove_padding(verl_041: Path):
    vp.run(str(verl_041), fixes=["optional_flash_attn"])

    for rel in (ACTOR, CRITIC):
        tree = ast.parse(text(verl_041, rel))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        uses = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Name) and n.id in FLASH_HELPERS and isinstance(n.ctx, ast.Load)
        ]
        assert uses, rel
        for use in uses:
            node, guarded = use, False
            while node in parents:
                parent = parents[node]
                if (
                    isinstance(parent, ast.If)
                    and "use_remove_padding" in ast.unparse(parent.test)
                    and node in parent.body
                ):
                    guarded = True
                    break
                node = parent
            assert guarded, "%s:%d uses %s outside use_remove_padding" % (rel, use.lineno, use.id)


def guard_block(root: Path, rel: str) -> str:
    source = text(root, rel)
    start = source.index("if is_cuda_available:\n")
    return source[start : source.index("elif is_npu_available:\n", start)]


def test_flash_attn_guard_binds_a_stub_without_flash_attn(verl_041: Path, monkeypatch: pytest.MonkeyPatch):
    vp.run(str(verl_041), fixes=["optional_flash_attn"])
    # None in sys.modules makes the import raise ImportError, as on a host without flash-attn.
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    monkeypatch.setitem(sys.modules, "flash_attn.bert_padding", None)

    for rel in (ACTOR, CRITIC):
        namespace = {"is_cuda_available": True}
        exec(guard_block(verl_041, rel), namespace)
        for name in FLASH_HELPERS:
            with pytest.raises(ImportError, match="use_remove_padding"):
                namespace[name]()


def test_flash_attn_guard_uses_flash_attn_when_present(verl_041: Path, monkeypatch: pytest.MonkeyPatch):
    vp.run(str(verl_041), fixes=["optional_flash_attn"])
    fake = types.ModuleType("flash_attn.bert_padding")
    for name in FLASH_HELPERS:
        setattr(fake, name, name)
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    monkeypatch.setitem(sys.modules, "flash_attn.bert_padding", fake)

    namespace = {"is_cuda_available": True}
    exec(guard_block(verl_041, ACTOR), namespace)
    assert [namespace[name] for name in FLASH_HELPERS] == list(FLASH_HELPERS)


def test_attn_implementation_option_is_used_and_changing_it_is_a_change(verl_041: Path):
    vp.run(str(verl_041), fixes=["critic_eager_attention"])
    result = vp.run(str(verl_041), fixes=["critic_eager_attention"], attn_implementation="sdpa")

    assert result["changed"] is True
    assert sorted(result["changed_files"]) == [MODEL, FSDP]
    assert 'attn_implementation="sdpa"' in line_at(verl_041, FSDP, 910)
    assert 'attn_implementation="sdpa"' in line_at(verl_041, MODEL, 511)
    assert 'attn_implementation="sdpa"' in line_at(verl_041, MODEL, 531)
    # The option only matters to the critic fix; without it, a new value changes nothing.
    vp.run(str(verl_041), fixes=["no_prefix_caching"])
    assert vp.run(str(verl_041), fixes=["no_prefix_caching"], attn_implementation="eager")["changed"] is False


# ---------------------------------------------------------------- idempotence and revert


def test_second_run_changes_nothing(verl_041: Path):
    vp.run(str(verl_041))
    state = tree_state(verl_041)

    result = vp.run(str(verl_041))

    assert result["changed"] is False
    assert result["changed_files"] == []
    assert len(result["applied"]) == len(EXPECTED_SITES)
    assert tree_state(verl_041) == state


def test_absent_restores_the_tree_byte_for_byte(verl_041: Path):
    # Unusual permission bits must survive the patch and the revert.
    (verl_041 / HF).chmod(0o755)
    (verl_041 / SPMD).chmod(0o600)
    pristine = tree_state(verl_041)

    vp.run(str(verl_041))
    assert (verl_041 / HF).stat().st_mode & 0o777 == 0o755
    assert (verl_041 / SPMD).stat().st_mode & 0o777 == 0o600
    result = vp.run(str(verl_041), state="absent")

    assert result["changed"] is True
    assert result["applied"] == [] and result["fixes"] == []
    assert sorted(result["changed_files"]) == TOUCHED
    assert tree_state(verl_041) == pristine
    assert vp.run(str(verl_041), state="absent")["changed"] is False


def test_changing_the_fix_set_ends_with_exactly_that_set(verl_041_pristine: Path, verl_041: Path, tmp_path: Path):
    subset = ["no_bf16_autocast", "hf_rollout_timing"]
    vp.run(str(verl_041))

    result = vp.run(str(verl_041), fixes=list(reversed(subset)))

    assert result["changed"] is True
    assert result["fixes"] == subset
    assert {e["fix"] for e in result["applied"]} == set(subset)
    record = json.loads((verl_041 / vp.STATE_DIR / vp.RECORD_FILE).read_text())
    assert record["fixes"] == subset
    assert sorted(record["files"]) == sorted({ACTOR, CRITIC, HF, FSDP})
    assert not (verl_041 / vp.STATE_DIR / "originals" / (SPMD + ".orig")).exists()
    # The same subset applied to a fresh tree gives the same bytes.
    fresh = Path(vp.shutil.copytree(verl_041_pristine, tmp_path / "fresh"))
    vp.run(str(fresh), fixes=subset)
    patched, expected = tree_state(verl_041), tree_state(fresh)
    assert {k: v for k, v in patched.items() if not k.startswith(vp.STATE_DIR)} == {
        k: v for k, v in expected.items() if not k.startswith(vp.STATE_DIR)
    }
    assert vp.run(str(verl_041), fixes=subset)["changed"] is False
    vp.run(str(verl_041), state="absent")
    assert tree_state(verl_041) == tree_state(verl_041_pristine)


@pytest.mark.parametrize(
    "first, then",
    [(None, ALL_FIXES), (ALL_FIXES, ["no_prefix_caching"])],
    ids=["first-patch", "switching-sets"],
)
def test_an_interrupted_run_is_finished_by_the_next(
    verl_041_pristine: Path, verl_041: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first, then
):
    if first:
        vp.run(str(verl_041), fixes=first)
    real_write = vp.write_atomic
    written = []

    def write_then_die(path: str, data: bytes) -> None:
        if vp.STATE_DIR not in path:
            written.append(path)
            if len(written) == 2:
                raise OSError(28, "No space left on device", path)
        real_write(path, data)

    monkeypatch.setattr(vp, "write_atomic", write_then_die)
    with pytest.raises(OSError):
        vp.run(str(verl_041), fixes=then)
    monkeypatch.setattr(vp, "write_atomic", real_write)
    # Half written: one file in the new state, the others still in the old one.
    assert len(written) == 2

    assert vp.run(str(verl_041), fixes=then)["changed"] is True
    assert vp.run(str(verl_041), fixes=then)["changed"] is False
    fresh = Path(vp.shutil.copytree(verl_041_pristine, tmp_path / "fresh"))
    vp.run(str(fresh), fixes=then)
    for rel in TOUCHED:
        assert text(verl_041, rel) == text(fresh, rel), rel
    vp.run(str(verl_041), state="absent")
    assert tree_state(verl_041) == tree_state(verl_041_pristine)


# ---------------------------------------------------------------- check and diff mode


def test_check_mode_writes_nothing(verl_041: Path):
    pristine = tree_state(verl_041)

    result = vp.run(str(verl_041), check_mode=True)

    assert result["changed"] is True
    assert sorted(result["changed_files"]) == TOUCHED
    assert {(e["fix"], e["file"], e["line"]) for e in result["applied"]} == set(EXPECTED_SITES)
    assert tree_state(verl_041) == pristine

    vp.run(str(verl_041))
    patched = tree_state(verl_041)
    assert vp.run(str(verl_041), state="absent", check_mode=True)["changed"] is True
    assert vp.run(str(verl_041), fixes=["no_prefix_caching"], check_mode=True)["changed"] is True
    assert tree_state(verl_041) == patched


def test_diff_mode_shows_each_changed_file(verl_041: Path):
    result = vp.run(str(verl_041), fixes=["no_prefix_caching", "hf_rollout_timing"], check_mode=True, want_diff=True)

    diffs = {d["before_header"]: d for d in result["diff"]}
    assert sorted(diffs) == sorted([SPMD, FSDP])
    assert all(d["after_header"] == d["before_header"] for d in diffs.values())
    assert "enable_prefix_caching=True," in diffs[SPMD]["before"]
    assert "enable_prefix_caching=True," not in diffs[SPMD]["after"]
    assert "enable_prefix_caching=False," in diffs[SPMD]["after"]
    assert diffs[FSDP]["before"] == text(verl_041, FSDP)
    assert 'getattr(self.rollout_sharding_manager, "timing", {})' in diffs[FSDP]["after"]

    vp.run(str(verl_041), fixes=["no_prefix_caching", "hf_rollout_timing"])
    assert vp.run(str(verl_041), fixes=["no_prefix_caching", "hf_rollout_timing"], want_diff=True)["diff"] == []


# ---------------------------------------------------------------- refusals


def test_unknown_verl_version_is_refused_and_untouched(verl_091: Path):
    before = tree_state(verl_091)

    with pytest.raises(vp.PatchError) as refusal:
        vp.run(str(verl_091))

    message = str(refusal.value)
    assert "verl 0.9.1" in message and "0.4.1" in message and "Nothing was changed" in message
    assert tree_state(verl_091) == before


@pytest.mark.parametrize(
    "rel, old, new, fix",
    [
        (SPMD, "enable_prefix_caching=True,", "enable_prefix_caching=True, ", "no_prefix_caching"),
        # Only a context line of the anchor differs: still refused.
        (
            FSDP,
            "output = self.rollout_sharding_manager.postprocess_data(output)\n",
            "output = self.rollout_sharding_manager.postprocess_data(output)  # local\n",
            "hf_rollout_timing",
        ),
    ],
    ids=["changed-line", "changed-context"],
)
def test_one_edited_anchor_refuses_the_whole_set(verl_041: Path, rel: str, old: str, new: str, fix: str):
    source = text(verl_041, rel)
    assert source.count(old) == 1
    (verl_041 / rel).write_text(source.replace(old, new), encoding="utf-8")
    before = tree_state(verl_041)

    with pytest.raises(vp.PatchError) as refusal:
        vp.run(str(verl_041))

    message = str(refusal.value)
    assert "verl 0.4.1" in message and "nothing was written" in message
    assert "%s: %s: anchor matched 0 times" % (fix, rel) in message
    assert message.count("anchor matched") == 1
    assert tree_state(verl_041) == before
    assert not (verl_041 / vp.STATE_DIR).exists()


def test_an_anchor_found_twice_is_refused(verl_041: Path):
    source = text(verl_041, SPMD)
    block = (
        "            enable_chunked_prefill=config.enable_chunked_prefill,\n            enable_prefix_caching=True,\n"
    )
    (verl_041 / SPMD).write_text(source + "\n_ = dict(\n" + block + ")\n", encoding="utf-8")
    before = tree_state(verl_041)

    with pytest.raises(vp.PatchError, match="no_prefix_caching: %s: anchor matched 2 times" % SPMD):
        vp.run(str(verl_041))
    assert tree_state(verl_041) == before


def test_unknown_fix_name_fails_clearly(verl_041: Path):
    before = tree_state(verl_041)

    with pytest.raises(vp.PatchError) as refusal:
        vp.run(str(verl_041), fixes=["no_bf16_autocast", "flash_attention_off"])

    message = str(refusal.value)
    assert "flash_attention_off" in message and "0.4.1" in message
    assert all(name in message for name in ALL_FIXES)
    assert tree_state(verl_041) == before


def test_empty_fix_list_points_to_state_absent(verl_041: Path):
    with pytest.raises(vp.PatchError, match="state=absent"):
        vp.run(str(verl_041), fixes=[])


def test_not_a_verl_tree_is_refused(tmp_path: Path):
    with pytest.raises(vp.PatchError, match="not a verl checkout"):
        vp.run(str(tmp_path))


def test_a_hand_edit_of_a_patched_file_is_not_overwritten(verl_041: Path):
    vp.run(str(verl_041))
    edited = text(verl_041, HF) + "# local change\n"
    (verl_041 / HF).write_text(edited, encoding="utf-8")
    before = tree_state(verl_041)

    for state in ("present", "absent"):
        with pytest.raises(vp.PatchError, match="changed since verl_patch last wrote it") as refusal:
            vp.run(str(verl_041), state=state)
        assert HF in str(refusal.value) and "git checkout" in str(refusal.value)
    assert tree_state(verl_041) == before


# ---------------------------------------------------------------- through Ansible


def ansible(
    tree: Path, tmp_path: Path, args: str, *flags: str, json_output: bool = True
) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    (tmp_path / "ansible.cfg").touch()
    env.update(
        ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
        ANSIBLE_LIBRARY=str(REPO / "library"),
        ANSIBLE_MODULE_UTILS=str(REPO / "module_utils"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-remote"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json" if json_output else "ansible.builtin.default",
    )
    command = [
        str(Path(sys.executable).parent / "ansible"),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        "ansible_python_interpreter=%s" % sys.executable,
        "-m",
        "verl_patch",
        "-a",
        "path=%s %s" % (tree, args),
        *flags,
    ]
    return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


def host_result(done: subprocess.CompletedProcess) -> dict:
    return json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_end_to_end_through_ansible(verl_041_pristine: Path, verl_041: Path, tmp_path: Path):
    pristine = tree_state(verl_041)

    preview = ansible(verl_041, tmp_path, "", "--check", "--diff", json_output=False)
    assert preview.returncode == 0, preview.stdout + preview.stderr
    assert "changed: [localhost]" in preview.stdout
    assert "--- before: %s" % SPMD in preview.stdout
    assert "-            enable_prefix_caching=True," in preview.stdout
    assert "+            enable_prefix_caching=False,  # verl_p40_patch: no_prefix_caching" in preview.stdout
    assert tree_state(verl_041) == pristine

    applied = ansible(verl_041, tmp_path, "attn_implementation=sdpa")
    result = host_result(applied)
    assert applied.returncode == 0 and result["changed"] is True, applied.stdout + applied.stderr
    assert result["verl_version"] == "0.4.1" and result["fixes"] == ALL_FIXES
    assert 'attn_implementation="sdpa"' in line_at(verl_041, FSDP, 910)

    again = host_result(ansible(verl_041, tmp_path, "attn_implementation=sdpa"))
    assert again["changed"] is False

    refused = ansible(verl_041, tmp_path, "fixes=no_such_fix")
    assert refused.returncode != 0 and host_result(refused)["failed"] is True
    assert "Unknown fix name(s) for verl 0.4.1: no_such_fix" in host_result(refused)["msg"]

    reverted = host_result(ansible(verl_041, tmp_path, "state=absent"))
    assert reverted["changed"] is True
    assert tree_state(verl_041) == pristine


# ---------------------------------------------------------------- guards a bad catalog entry meets


def broken_catalog(monkeypatch: pytest.MonkeyPatch, replacement: str) -> None:
    """The 0.4.1 catalog with one extra fix whose replacement is `replacement`, at the HF rollout's
    bf16 autocast line."""
    anchor = "        with param_ctx, torch.autocast(device_type=get_device_name(), dtype=torch.bfloat16):\n"
    extra = {"name": "broken", "edits": [{"file": HF, "anchor": anchor, "replacement": replacement}]}
    catalog = [fix for fix in CATALOG["0.4.1"] if fix["name"] != "no_bf16_autocast"] + [extra]
    monkeypatch.setattr(vp, "CATALOG", {"0.4.1": catalog})


def test_a_fix_that_breaks_the_syntax_is_refused_and_nothing_is_written(verl_041: Path, monkeypatch):
    broken_catalog(monkeypatch, "        with param_ctx torch.autocast(:\n")
    before = tree_state(verl_041)
    with pytest.raises(vp.PatchError) as refusal:
        vp.run(str(verl_041))
    message = str(refusal.value)
    assert message.startswith("Catalog error: %s would not compile after patching (" % HF)
    assert "Nothing was written. Fix module_utils/verl_fixes.py." in message
    assert tree_state(verl_041) == before


def test_the_compile_check_judges_against_the_pristine_file():
    vp.check_compiles("ok.py", "x = 1\n", "x = 2\n")
    with pytest.raises(vp.PatchError, match=r"bad.py would not compile after patching \(.*, line 1\)"):
        vp.check_compiles("bad.py", "x = 1\n", "x = (\n")
    # Syntax this Python cannot read in the pristine file too (a newer verl's): not the fix's fault.
    vp.check_compiles("new.py", "match x\n  case\n", "match y\n  case\n")
    # verl's files are compiled as verl's, not with this module's own __future__ imports (annotations
    # would refuse a yield in an annotation, which plain Python accepts).
    yield_annotation = "def g():\n    def f(x: (yield)): pass\n"
    vp.check_compiles("y.py", "x = 1\n", yield_annotation)
    with pytest.raises(vp.PatchError, match="y.py would not compile"):
        vp.check_compiles("y.py", yield_annotation, "x = (\n")


def test_changed_lines_skips_the_anchor_s_unchanged_context():
    assert vp.changed_lines("a\nb\nc\n", "a\nB\nc\n") == (1, "b\n", "B\n")
    assert vp.changed_lines("a\nb\nc\n", "a\nB\nC\n") == (1, "b\nc\n", "B\nC\n")
    assert vp.changed_lines("a\nb\nc\n", "A\nb\nc\n") == (0, "a\n", "A\n")
    assert vp.changed_lines("a\nb\n", "a\nx\ny\nb\n") == (1, "", "x\ny\n")
    assert vp.changed_lines("a\nb\n", "a\nb\n") == (2, "", "")
    assert vp.changed_lines("a\n", "b\n") == (0, "a\n", "b\n")
    # A repeated line is counted once, from the head: the tail never reaches into it.
    assert vp.changed_lines("a\n", "a\na\n") == (1, "", "a\n")


def test_the_state_directory_keeps_itself_out_of_git(verl_041: Path):
    vp.run(str(verl_041))
    ignore = verl_041 / vp.STATE_DIR / ".gitignore"
    assert ignore.read_bytes() == b"# Written by verl_patch: originals and record of the P40 fixes.\n*\n"
    # A later run leaves it as it is.
    ignore.write_text("*\n# mine\n")
    vp.run(str(verl_041), fixes=["no_prefix_caching"])
    assert ignore.read_text() == "*\n# mine\n"


def test_a_leftover_copy_the_record_does_not_vouch_for_is_replaced(verl_041_pristine: Path, verl_041: Path):
    # An interrupted first run may have left a copy of an original before writing its record.
    kept = Path(vp.original_path(str(verl_041), HF))
    kept.parent.mkdir(parents=True)
    kept.write_text("not the original\n")
    vp.run(str(verl_041))
    assert kept.read_bytes() == (verl_041_pristine / HF).read_bytes()
    vp.run(str(verl_041), state="absent")
    assert tree_state(verl_041) == tree_state(verl_041_pristine)


def test_a_catalog_entry_that_reaches_a_protected_file_is_refused():
    def fix(path: str) -> dict:
        return {"name": "bad", "edits": [{"file": "verl/trainer/main_ppo.py"}, {"file": path}]}

    for path in ("verl/utils/torch_dtypes.py", "verl/third_party/vllm/x.py", "verl/utils/megatron/a/b.py"):
        with pytest.raises(vp.PatchError, match="Catalog error: fix bad edits %s, which verl_patch must never" % path):
            vp.check_protected([fix(path)])
    vp.check_protected([fix("verl/utils/torch_dtypes_extra.py"), fix("verl/third_party_x.py")])


def test_a_damaged_or_missing_kept_original_stops_the_run(verl_041: Path):
    vp.run(str(verl_041))
    kept = Path(vp.original_path(str(verl_041), HF))
    good = kept.read_bytes()
    kept.write_bytes(good + b"# damaged\n")
    before = tree_state(verl_041)
    for state in ("present", "absent"):
        with pytest.raises(vp.PatchError, match="The kept original of %s .* is missing or damaged" % HF):
            vp.run(str(verl_041), state=state)
    assert tree_state(verl_041) == before
    kept.unlink()
    with pytest.raises(vp.PatchError, match="missing or damaged"):
        vp.run(str(verl_041), state="absent")
    kept.write_bytes(good)
    assert vp.run(str(verl_041), state="absent")["changed"] is True


def test_a_run_stopped_before_its_final_record_is_finished_by_the_next(verl_041: Path, monkeypatch):
    real_write = vp.write_atomic
    records = []

    def fail_final_record(path: str, data: bytes) -> None:
        if path.endswith(vp.RECORD_FILE):
            records.append(path)
            if len(records) == 2:
                raise OSError(28, "No space left on device", path)
        real_write(path, data)

    monkeypatch.setattr(vp, "write_atomic", fail_final_record)
    with pytest.raises(OSError):
        vp.run(str(verl_041))
    monkeypatch.setattr(vp, "write_atomic", real_write)
    record_file = verl_041 / vp.STATE_DIR / vp.RECORD_FILE
    # Every file is written; the record still holds each one's content before the run.
    assert all("previous_sha256" in entry for entry in json.loads(record_file.read_text())["files"].values())
    assert vp.run(str(verl_041))["changed"] is True
    assert not any("previous_sha256" in entry for entry in json.loads(record_file.read_text())["files"].values())
    assert vp.run(str(verl_041))["changed"] is False


def test_no_diff_unless_asked_for(verl_041: Path):
    result = vp.run(str(verl_041), check_mode=True)
    assert "diff" not in result and result["changed"] is True
    assert result["record"] == str(verl_041 / vp.STATE_DIR / vp.RECORD_FILE)


def test_check_mode_through_the_module_writes_nothing(verl_041: Path, capsys: pytest.CaptureFixture):
    from ansible.module_utils.testing import patch_module_args

    before = tree_state(verl_041)
    with patch_module_args({"path": str(verl_041), "_ansible_check_mode": True}), pytest.raises(SystemExit) as done:
        vp.main()
    result = json.loads(capsys.readouterr().out)
    assert done.value.code == 0 and result["changed"] is True and "skipped" not in result
    assert sorted(result["changed_files"]) == TOUCHED
    assert tree_state(verl_041) == before


def test_every_anchor_problem_is_reported_at_once():
    fixes = [
        {
            "name": "one",
            "edits": [{"file": "gone.py", "anchor": "a", "replacement": "b"}, {"file": "x.py", "anchor": "zz"}],
        },
        {"name": "two", "edits": [{"file": "x.py", "anchor": "q", "replacement": "r"}, {"file": "gone2.py"}]},
    ]
    with pytest.raises(vp.PatchError) as refusal:
        vp.patch_texts({"x.py": "q q\n"}, fixes, {}, "0.4.1")
    problems = str(refusal.value).split("\n  ")[1:]
    assert [line.split("\n")[0] for line in problems] == [
        "one: gone.py does not exist",
        "one: x.py: anchor matched 0 times, expected exactly once",
        "two: x.py: anchor matched 2 times, expected exactly once",
        "two: gone2.py does not exist",
    ]


def test_pristine_bytes_skips_missing_files_and_reads_the_rest(tmp_path: Path):
    (tmp_path / "b.py").write_bytes(b"b\n")
    (tmp_path / "d.py").write_bytes(b"d\n")
    assert vp.pristine_bytes(str(tmp_path), None, "0.4.1", ["a.py", "b.py", "c.py", "d.py"]) == {
        "b.py": b"b\n",
        "d.py": b"d\n",
    }


def test_the_final_record_lists_only_the_files_a_fix_changes():
    plan = {
        "version": "0.4.1",
        "fixes": ["f"],
        "params": {},
        "applied": [],
        "pristine": {"a.py": b"same", "b.py": b"old"},
        "desired": {"a.py": b"same", "b.py": b"new"},
        "current": {"a.py": b"same", "b.py": b"old"},
    }
    final = vp.new_record(plan, with_previous=False)
    assert final["files"] == {"b.py": {"original_sha256": vp.sha256(b"old"), "patched_sha256": vp.sha256(b"new")}}
    during = vp.new_record(plan, with_previous=True)
    assert sorted(during["files"]) == ["a.py", "b.py"]
    assert during["files"]["b.py"]["previous_sha256"] == vp.sha256(b"old")


def test_a_record_that_is_not_json_or_of_another_format_is_refused(verl_041: Path):
    record = verl_041 / vp.STATE_DIR / vp.RECORD_FILE
    record.parent.mkdir()
    record.write_text("{half")
    with pytest.raises(vp.PatchError, match="record.json is not valid JSON"):
        vp.run(str(verl_041))
    record.write_text('{"format": 99}')
    with pytest.raises(vp.PatchError, match="has format 99; this module reads format 1"):
        vp.run(str(verl_041))
    # Format 1 is what hosts hold: the records earlier versions wrote must still be read.
    record.unlink()
    vp.run(str(verl_041))
    assert json.loads(record.read_text())["format"] == 1


def test_a_target_file_that_is_not_utf8_is_refused(verl_041: Path):
    (verl_041 / HF).write_bytes((verl_041 / HF).read_bytes() + b"# \xff\n")
    before = tree_state(verl_041)
    with pytest.raises(vp.PatchError, match="%s is not UTF-8 text" % HF):
        vp.run(str(verl_041))
    assert tree_state(verl_041) == before


def test_a_write_that_fails_names_the_path_through_the_module(verl_041: Path, capsys: pytest.CaptureFixture):
    from ansible.module_utils.testing import patch_module_args

    (verl_041 / vp.STATE_DIR).write_text("a file where the state directory goes\n")
    with patch_module_args({"path": str(verl_041)}), pytest.raises(SystemExit) as done:
        vp.main()
    result = json.loads(capsys.readouterr().out)
    assert done.value.code == 1
    assert result["msg"].startswith("verl_patch could not read or write %s" % (verl_041 / vp.STATE_DIR))
    assert "writable by the user the task runs as (become)" in result["msg"]


def test_the_applied_line_counts_every_newline_before_the_anchor():
    fix = {"name": "f", "edits": [{"file": "x.py", "anchor": "a = 1\nb = 2\n", "replacement": "a = 1\nb = 3\n"}]}
    patched, applied = vp.patch_texts(
        {"x.py": "\n# c\na = 1\nb = 2\n"}, [fix], {"attn_implementation": "eager"}, "0.4.1"
    )
    assert patched == {"x.py": "\n# c\na = 1\nb = 3\n"}
    assert applied == [
        {"fix": "f", "file": "x.py", "line": 4, "patched_line": 4, "before": "b = 2\n", "after": "b = 3\n"}
    ]


def test_the_record_is_written_indented_for_a_reader(verl_041: Path, monkeypatch):
    record = verl_041 / vp.STATE_DIR / vp.RECORD_FILE
    first = []
    real_write = vp.write_atomic
    monkeypatch.setattr(
        vp,
        "write_atomic",
        lambda path, data: (first.append(data) if path == str(record) else None) or real_write(path, data),
    )
    vp.run(str(verl_041))
    for text in (first[0].decode(), record.read_text()):
        assert text == json.dumps(json.loads(text), indent=2) + "\n"


def test_edits_may_touch_but_not_overlap():
    params = {"attn_implementation": "eager"}

    def fix(*anchors: str) -> dict:
        return {"name": "f", "edits": [{"file": "x.py", "anchor": a, "replacement": a.upper()} for a in anchors]}

    patched, applied = vp.patch_texts({"x.py": "ab\ncd\nef\n"}, [fix("ab\n", "cd\n")], params, "0.4.1")
    assert patched == {"x.py": "AB\nCD\nef\n"} and [entry["line"] for entry in applied] == [1, 2]
    with pytest.raises(vp.PatchError, match="Catalog error: two edits in x.py overlap \\(at fix f\\)"):
        vp.patch_texts({"x.py": "ab\ncd\nef\n"}, [fix("ab\ncd\n", "cd\nef\n")], params, "0.4.1")


def test_only_the_options_a_selected_fix_uses_are_recorded(verl_041: Path):
    record = verl_041 / vp.STATE_DIR / vp.RECORD_FILE
    vp.run(str(verl_041), fixes=["no_prefix_caching"])
    assert json.loads(record.read_text())["options"] == {}
    # An option no selected fix uses changes nothing.
    assert vp.run(str(verl_041), fixes=["no_prefix_caching"], attn_implementation="sdpa")["changed"] is False
    vp.run(str(verl_041))
    assert json.loads(record.read_text())["options"] == {"attn_implementation": "eager"}


def test_a_record_of_another_verl_version_is_refused(verl_041: Path):
    vp.run(str(verl_041))
    record = verl_041 / vp.STATE_DIR / vp.RECORD_FILE
    data = json.loads(record.read_text())
    record.write_text(json.dumps(dict(data, verl_version="0.3.0")))
    with pytest.raises(vp.PatchError, match="was written for verl 0.3.0 but the tree is now verl 0.4.1"):
        vp.run(str(verl_041))


def test_a_recorded_file_that_is_gone_is_named(verl_041: Path):
    vp.run(str(verl_041))
    (verl_041 / HF).unlink()
    with pytest.raises(vp.PatchError, match="%s, touched by verl_patch before, no longer exists" % HF):
        vp.run(str(verl_041), state="absent")


def test_a_run_refuses_a_catalog_that_reaches_a_protected_file(verl_041: Path, monkeypatch):
    dtypes = "verl/utils/torch_dtypes.py"
    anchor = text(verl_041, dtypes).splitlines(keepends=True)[0]
    extra = {"name": "bad", "edits": [{"file": dtypes, "anchor": anchor, "replacement": "# verl_p40_patch: bad\n"}]}
    monkeypatch.setattr(vp, "CATALOG", {"0.4.1": CATALOG["0.4.1"] + [extra]})
    before = tree_state(verl_041)
    with pytest.raises(vp.PatchError, match="Catalog error: fix bad edits %s" % dtypes):
        vp.run(str(verl_041))
    assert tree_state(verl_041) == before


def test_the_applied_list_is_in_catalog_order_then_file_then_line(verl_041: Path):
    applied = vp.run(str(verl_041))["applied"]
    keys = [(ALL_FIXES.index(entry["fix"]), entry["file"], entry["line"]) for entry in applied]
    assert keys == sorted(keys) and len(keys) == len(EXPECTED_SITES)
    assert [entry["fix"] for entry in applied][0] == ALL_FIXES[0]


def test_the_module_needs_a_path(capsys: pytest.CaptureFixture):
    from ansible.module_utils.testing import patch_module_args

    with patch_module_args({"state": "absent"}), pytest.raises(SystemExit) as done:
        vp.main()
    result = json.loads(capsys.readouterr().out)
    assert done.value.code == 1 and result["msg"] == "missing required arguments: path"


def test_hf_rollout_lora_wrap_keeps_the_lora_policy_and_nothing_else(verl_041: Path):
    """Only the HF rollout's drop of the wrap policy changes, and only with LoRA: the policy it keeps
    is get_fsdp_wrap_policy(is_lora=...) a few lines above, whose lambda puts each trainable leaf in
    its own FSDP unit; FSDP is still built with use_orig_params=False."""
    vp.run(str(verl_041), fixes=["hf_rollout_lora_wrap"])
    source = text(verl_041, FSDP)
    lines = source.splitlines()
    assert lines[303].strip().startswith("auto_wrap_policy = get_fsdp_wrap_policy(") and "is_lora=" in lines[303]
    assert "and not self._is_lora:" in lines[305] and lines[307].strip() == "auto_wrap_policy = None"
    assert "self._is_lora = self._lora_rank > 0" in source  # set in __init__, before _build_model_optimizer
    assert source.count("use_orig_params=False") == 3
    policy = text(verl_041, "verl/utils/fsdp_utils.py")
    assert "module.weight.requires_grad" in policy and "lambda_auto_wrap_policy" in policy
    vp.run(str(verl_041), fixes=["hf_rollout_lora_wrap"], state="absent")
