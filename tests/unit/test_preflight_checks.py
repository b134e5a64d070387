"""Preflight's arithmetic (filter_plugins/preflight.py) and its wiring through the role.

The OS: Debian 11, 12 and 13 are converged in CI, Ubuntu 20.04/22.04/24.04 accepted with a warning,
anything else refused. Free disk: every path the stack writes,
each sized by a variable or by the model, left out once its layer is built, added up per
filesystem by the disk_space module. RAM: what the profile's CPU offload, the model loading and
Ray take on a host that trains.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conftest import REPO, run_play
from repo import tasks_in

import disk_space
import preflight

ROLE = REPO / "roles" / "preflight"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
SPEC = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
TABLE = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__preflight_disk_paths"]
STACK = yaml.safe_load((REPO / "roles/stack/defaults/main/stack.yml").read_text())
PROFILES = yaml.safe_load((REPO / "roles/stack/defaults/main/gpu_profiles.yml").read_text())["stack_gpu_profiles"]


def profile(name: str) -> dict[str, Any]:
    return dict(PROFILES[name], name=name)


# -- The OS ------------------------------------------------------------------------------------------

TESTED = DEFAULTS["preflight_supported_os"]
UNTESTED = DEFAULTS["preflight_untested_os"]


def test_the_lists_claim_only_what_ci_converges():
    # Nothing but Debian 11, 12 and 13 is converged in CI: an Ubuntu release in this list is the old claim.
    assert TESTED == {"Debian": ["11", "12", "13"]}
    assert UNTESTED == {"Ubuntu": ["20.04", "22.04", "24.04"]}


def test_every_release_said_to_be_converged_has_a_scenario():
    # The Debian images the Molecule scenarios converge are the releases the list says CI converges:
    # a release added to the list without a scenario (or a scenario dropped) fails here.
    images = set()
    for scenario in sorted(REPO.glob("molecule/*/molecule.yml")):
        for platform in yaml.safe_load(scenario.read_text()).get("platforms", []):
            images.update(re.findall(r"^localhost/verl-p40-debian:(\d+)$", platform.get("image", "")))
    assert sorted(images, key=int) == TESTED["Debian"]


@pytest.mark.parametrize("version", ["11", "12", "13"])
def test_a_release_ci_converges_is_said_to_be_tested(version: str):
    found = preflight.preflight_os("Debian", version, TESTED, UNTESTED)
    assert found["accepted"] and found["tested"]
    assert "converged in CI" in found["message"] and "WARNING" not in found["message"]


@pytest.mark.parametrize("version", ["20.04", "22.04", "24.04"])
def test_ubuntu_goes_on_with_a_warning_that_it_is_not_tested(version: str):
    found = preflight.preflight_os("Ubuntu", version, TESTED, UNTESTED)
    assert found["accepted"] and not found["tested"]
    assert found["message"].startswith("WARNING: Ubuntu %s is accepted but NOT tested here" % version)
    assert "Debian 11/12/13" in found["message"]


@pytest.mark.parametrize(
    ("distribution", "version"), [("Debian", "14"), ("Debian", "10"), ("Ubuntu", "18.04"), ("Fedora", "40")]
)
def test_other_releases_are_refused_naming_both_lists(distribution: str, version: str):
    found = preflight.preflight_os(distribution, version, TESTED, UNTESTED)
    assert not found["accepted"] and not found["tested"]
    # The wording the fault test of a built host (tests/infra/test_preflight.py) looks for.
    assert found["message"].startswith("%s %s is not supported." % (distribution, version))
    assert "Converged in CI: Debian 11/12/13" in found["message"]
    assert "not tested here: Ubuntu 20.04/22.04/24.04" in found["message"]
    assert "preflight_untested_os" in found["message"]


def test_a_release_written_as_a_number_still_matches():
    assert preflight.preflight_os("Debian", "12", {"Debian": [11, 12]}, {})["tested"]


CODENAMES = {
    "Debian": {"11": "bullseye", "12": "bookworm", "13": "trixie"},
    "Ubuntu": {"20.04": "focal", "22.04": "jammy", "24.04": "noble"},
}


@pytest.mark.parametrize("meta", sorted(REPO.glob("roles/*/meta/main.yml")), ids=lambda path: path.parts[-3])
def test_every_roles_platforms_are_the_releases_preflight_accepts(meta: Path):
    platforms = yaml.safe_load(meta.read_text())["galaxy_info"]["platforms"]
    accepted: dict[str, set[str]] = {}
    for releases in (TESTED, UNTESTED):
        for distribution, versions in releases.items():
            accepted.setdefault(distribution, set()).update(CODENAMES[distribution][str(v)] for v in versions)
    assert {platform["name"]: set(platform["versions"]) for platform in platforms} == accepted


def test_the_readme_says_which_releases_are_tested():
    text = " ".join((REPO / "README.md").read_text().split())
    assert "Converged in CI: Debian 12 and 13 (the whole stack), Debian 11 (the system layers" in text
    assert "Accepted but not tested here, expected to work: Ubuntu 20.04, 22.04 and 24.04" in text


def test_ubuntu_24_04_builds_with_gcc_11():
    # Its default gcc is 13, which nvcc 11.8 refuses: the cuda layer must install and use gcc-11 there,
    # as on Debian 12, or accepting 24.04 only moves the failure to the cuda layer.
    data = yaml.safe_load((REPO / "roles/cuda/vars/Ubuntu-24.yml").read_text())
    assert data["__cuda_default_host_compiler"] == "/usr/bin/g++-11"
    assert {"gcc-11", "g++-11"} <= set(data["__cuda_default_compiler_packages"])
    assert "__cuda_compiler_apt_suite" not in data  # gcc-11 is in 24.04's own archive


def test_debian_13_takes_gcc_11_from_bookworm():
    # Its gcc is 14 and its archive has no gcc-11 (the oldest is gcc-12): without the suite the
    # packages the cuda layer installs do not exist there. The trixie scenario converges it.
    data = yaml.safe_load((REPO / "roles/cuda/vars/Debian-13.yml").read_text())
    assert data["__cuda_default_host_compiler"] == "/usr/bin/g++-11"
    assert {"gcc-11", "g++-11"} <= set(data["__cuda_default_compiler_packages"])
    assert data["__cuda_compiler_apt_suite"] == "bookworm"


# -- Free disk -----------------------------------------------------------------------------------------

# What the system stage's play holds: the stack role's paths, cuDNN's (its role is in the play), and
# preflight's sizes; the data, model and train roles' paths are not there ('' as the lookup gives them).
SYSTEM_STAGE = {
    "cuda_prefix": "/usr/local/cuda-11.8",
    "cudnn_prefix": "/opt/cudnn/8.9.7.29-cuda11",
    "stack_cache_dir": "/var/cache/verl-p40",
    "stack_conda_prefix": "/opt/miniforge3",
    "stack_verl_dir": "/home/verl/verl-p40/verl",
    "stack_work_dir": "/home/verl/verl-p40",
    "data_output_dir": "",
    "model_dir": "",
    "train_checkpoint_dir": "",
    "train_work_dir": "",
    "train_max_checkpoints": STACK["train_max_checkpoints"],
    **{name: value for name, value in DEFAULTS.items() if re.fullmatch(r"preflight_disk_\w+_gb", name)},
}


def requirements(values: dict[str, Any] = SYSTEM_STAGE, **kwargs: Any) -> list[dict[str, Any]]:
    kwargs.setdefault("model_params_b", DEFAULTS["preflight_model_params_b"])
    return preflight.disk_requirements(TABLE, values, **kwargs)


def sizes(found: list[dict[str, Any]]) -> dict[str, float]:
    return {req["why"].split(" ")[0].rstrip(";"): req["min_free_gb"] for req in found}


def test_every_path_the_stack_writes_is_checked_on_a_fresh_gpu_host():
    found = requirements()
    assert sizes(found) == {
        "cuda_prefix": 8,
        "cudnn_prefix": 3,
        "stack_cache_dir": 6,
        "stack_conda_prefix": 10,
        "stack_verl_dir": 1,
        "data_output_dir": 1,
        # 0.5e9 parameters: 4 bytes each in the model directory, 24 in each of the 2 checkpoints kept.
        "model_dir": 1.9,
        "train_checkpoint_dir": 22.4,
    }
    assert round(sum(req["min_free_gb"] for req in found), 1) == 53.3


def test_the_variables_it_looks_up_are_the_tables():
    names = preflight.disk_requirement_vars(TABLE)
    assert set(names) == set(SYSTEM_STAGE)


def test_each_size_is_a_documented_option_of_preflight():
    for entry in TABLE:
        if "gib" in entry:
            assert entry["gib"] in DEFAULTS and entry["gib"] in SPEC, entry
            assert SPEC[entry["gib"]]["default"] == DEFAULTS[entry["gib"]]
    assert SPEC["preflight_model_params_b"]["default"] == DEFAULTS["preflight_model_params_b"]


def test_a_path_outside_this_play_is_measured_where_its_default_lies():
    found = {req["why"].split(" ")[0].rstrip(";"): req for req in requirements()}
    assert found["model_dir"]["path"] == "/home/verl/verl-p40"
    assert found["model_dir"]["why"].startswith("model_dir (its default lies under this stack_work_dir);")
    # Set (by the user, or in the play that holds its role): that path, named by its own variable.
    moved = dict(SYSTEM_STAGE, model_dir="/data/models/Qwen2.5-0.5B-Instruct", train_work_dir="/big/train")
    found = {req["why"].split(" ")[0].rstrip(";"): req for req in requirements(moved)}
    assert found["model_dir"]["path"] == "/data/models/Qwen2.5-0.5B-Instruct"
    assert found["model_dir"]["why"].startswith("model_dir; ")
    # The checkpoints' default lies under train_work_dir: moved with it.
    assert found["train_checkpoint_dir"]["path"] == "/big/train"


def test_a_path_nothing_in_this_play_names_is_left_out():
    found = requirements(dict(SYSTEM_STAGE, cudnn_prefix=""))
    assert "cudnn_prefix" not in sizes(found)
    # Only that one: every path after it in the table is still checked.
    assert set(sizes(found)) == set(sizes(requirements())) - {"cudnn_prefix"}


def test_without_a_model_size_the_fixed_sizes_are_still_checked():
    # The filter called with the table and the values alone (model_params_b left at its default):
    # nothing is asked for the model's trees, every fixed size is.
    found = sizes(preflight.disk_requirements(TABLE, SYSTEM_STAGE))
    assert found["model_dir"] == 0 and found["train_checkpoint_dir"] == 0
    assert found["cuda_prefix"] == 8 and found["stack_conda_prefix"] == 10


def test_checkpoints_are_the_retention_times_the_model():
    # A constant, or one checkpoint whatever train_max_checkpoints says, fails here.
    found = sizes(requirements(dict(SYSTEM_STAGE, train_max_checkpoints=3), model_params_b=1.5))
    one = 33.6  # 1.5e9 x 24 bytes = 33.53 GiB, rounded up
    assert found["train_checkpoint_dir"] == round(3 * one, 1)
    assert found["model_dir"] == 5.6  # 1.5e9 x 4 bytes = 5.59 GiB
    why = [req["why"] for req in requirements(dict(SYSTEM_STAGE, train_max_checkpoints=3), model_params_b=1.5)]
    assert any("train_max_checkpoints 3 x 33.6 GiB (preflight_model_params_b 1.5 x 24 bytes)" in text for text in why)


def test_a_host_without_a_gpu_writes_no_checkpoints():
    assert "train_checkpoint_dir" not in sizes(requirements(training=False))
    assert "model_dir" in sizes(requirements(training=False))
    # Wherever the training entry stands in the table, the entries after it are still checked.
    table = [TABLE[-1], *TABLE[:-1]]
    assert set(sizes(preflight.disk_requirements(table, SYSTEM_STAGE, training=False, model_params_b=0.5))) == set(
        sizes(requirements(training=False))
    )


def test_a_size_of_whole_tenths_of_a_gib_is_not_rounded_up_and_one_byte_more_is():
    # 2**30 parameters: the model directory is exactly 4 GiB, a checkpoint exactly 24 GiB; one
    # parameter more (4 and 24 bytes more) needs the next tenth, as a need is never rounded down.
    exact = sizes(requirements(dict(SYSTEM_STAGE, train_max_checkpoints=1), model_params_b=2**30 / 1e9))
    assert (exact["model_dir"], exact["train_checkpoint_dir"]) == (4.0, 24.0)
    over = sizes(requirements(dict(SYSTEM_STAGE, train_max_checkpoints=1), model_params_b=(2**30 + 1) / 1e9))
    assert (over["model_dir"], over["train_checkpoint_dir"]) == (4.1, 24.1)


def test_a_built_layer_needs_no_more_room():
    # A rerun on a built host: asking again for the room its trees already take would refuse a host
    # that is fine (55 GiB free on top of the stack and its checkpoints).
    records = {
        "cuda": {"status": "complete"},
        "conda": {"status": "complete"},
        "verl": {"status": "building"},  # half built: its room is still needed
        "train": {"status": "complete"},
    }
    found = sizes(requirements(records=records))
    assert set(found) == {"cudnn_prefix", "stack_conda_prefix", "stack_verl_dir", "data_output_dir", "model_dir"}
    assert requirements(records={entry["layer"]: {"status": "complete"} for entry in TABLE}) == []


@pytest.mark.parametrize("bad", ["many", -1, True, None, float("nan"), float("inf")])
def test_a_size_that_is_no_number_is_refused_by_name(bad: Any):
    with pytest.raises(AnsibleFilterError, match="preflight_disk_cuda_gb"):
        requirements(dict(SYSTEM_STAGE, preflight_disk_cuda_gb=bad))


def test_paths_on_one_filesystem_add_up_and_the_refusal_names_what_to_change(tmp_path: Path):
    values = {
        name: (str(tmp_path / name) if value == "" or isinstance(value, str) else value)
        for name, value in SYSTEM_STAGE.items()
    }
    free = disk_space.check([{"path": str(tmp_path), "min_free_gb": 0}])[0][0]["free_gb"]
    values["preflight_disk_cuda_gb"] = free  # alone it fits; with the others on this filesystem it does not
    found = requirements(values)
    filesystems, shortfalls = disk_space.check(found)
    assert len(filesystems) == 1 and filesystems[0]["needed_gb"] == pytest.approx(sum(r["min_free_gb"] for r in found))
    [shortfall] = shortfalls
    assert "needs %.1f GiB for " % filesystems[0]["needed_gb"] in shortfall
    for text in (
        "cuda_prefix; preflight_disk_cuda_gb",
        "stack_conda_prefix; preflight_disk_conda_gb",
        "train_max_checkpoints 2 x",
    ):
        assert text in shortfall
    problems = preflight.resource_problems(shortfalls, 64 * 1024, {})
    assert problems[0].startswith("Not enough free disk space: ") and "preflight_disk_requirements" in problems[0]


# -- RAM ---------------------------------------------------------------------------------------------


def test_one_p40_with_the_pascal_profile():
    need = preflight.training_ram(profile("pascal"), 0.5, 1)
    # Offload 24 bytes a parameter (actor optimizer 8, critic params 4 + optimizer 8, ref 4) = 11.2,
    # loading 1.9, two Ray workers 5.0, Ray and the OS 2.0.
    assert need["gib"] == 20.1
    # The message preflight prints: each part with the figures it is made of.
    assert need["why"] == (
        "the pascal profile on 1 GPU(s), preflight_model_params_b 0.5: CPU offload 11.2 (24 B per parameter: "
        "the profile's offload and the ref), model loading 1.9 (an fp32 copy per GPU), Ray workers 5.0 (2 x 2.5), "
        "Ray and the OS 2.0"
    )


def test_the_profiles_offload_decides_the_memory():
    # A fixed figure whatever the profile fails here: volta offloads the actor's parameters too,
    # ampere_plus nothing but the ref (bf16).
    needs = {name: preflight.training_ram(profile(name), 0.5, 1)["gib"] for name in ("pascal", "volta", "ampere_plus")}
    assert needs == {"pascal": 20.1, "volta": 22.0, "ampere_plus": 9.9}


def test_more_gpus_more_workers_and_copies_while_loading():
    need = preflight.training_ram(profile("pascal"), 0.5, 4)
    assert need["gib"] == round(11.2 + 7.5 + 5 * 2.5 + 2.0, 1)
    assert "model loading 7.5 (an fp32 copy per GPU), Ray workers 12.5 (5 x 2.5)" in need["why"]


def test_a_memory_of_whole_tenths_of_a_gib_is_not_rounded_up_and_one_parameter_more_is():
    # 2**30 parameters on one P40: offload exactly 24 GiB, loading exactly 4 GiB; one more parameter
    # needs a tenth more of each.
    assert preflight.training_ram(profile("pascal"), 2**30 / 1e9, 1)["gib"] == 24 + 4 + 5 + 2
    assert preflight.training_ram(profile("pascal"), (2**30 + 1) / 1e9, 1)["gib"] == 24.1 + 4.1 + 5 + 2


def test_a_host_without_a_gpu_is_not_checked():
    assert preflight.training_ram(profile("pascal"), 0.5, 0) == {}


def test_the_minimum_set_replaces_the_estimate_and_zero_turns_it_off():
    assert preflight.training_ram(profile("pascal"), 0.5, 0, 64) == {"gib": 64.0, "why": "preflight_min_ram_gb"}
    assert preflight.training_ram(profile("pascal"), 0.5, 4, 0) == {}
    # Any minimum above zero is checked, a fraction of a GiB too.
    assert preflight.training_ram(profile("pascal"), 0.5, 4, 0.5) == {"gib": 0.5, "why": "preflight_min_ram_gb"}


def test_the_memory_refusal_names_the_figures_and_the_variables():
    need = preflight.training_ram(profile("pascal"), 0.5, 1)
    assert preflight.resource_problems([], 24 * 1024, need) == []
    [problem] = preflight.resource_problems([], 16 * 1024, need)
    assert problem.startswith("Not enough memory: 16.0 GiB RAM, training needs 20.1 GiB")
    for name in ("preflight_min_ram_gb", "preflight_model_params_b", "train_gpus"):
        assert name in problem


def test_exactly_the_memory_needed_is_enough_and_a_megabyte_less_is_not():
    # memtotal_mb is in MiB: 20480 MiB is 20 GiB.
    ram = {"gib": 20.0, "why": "preflight_min_ram_gb"}
    assert preflight.resource_problems([], 20480, ram) == []
    [problem] = preflight.resource_problems([], 20479, ram)
    assert problem.startswith("Not enough memory: 20.0 GiB RAM, training needs 20.0 GiB (preflight_min_ram_gb)")


def test_an_unknown_precision_is_refused():
    with pytest.raises(AnsibleFilterError, match="precision"):
        preflight.training_ram(dict(profile("pascal"), precision="float16"), 0.5, 1)


# -- Through the role --------------------------------------------------------------------------------


def preflight_resources(tmp_path: Path, **variables: Any):
    """The role's resources.yml on localhost with its facts, as the system stage runs it: the data,
    model and train roles are not in the play."""
    play = {
        "gather_facts": True,
        "gather_subset": ["!all", "!min", "distribution"],
        "vars": {
            "preflight_gpus": [{"index": 0, "name": "Tesla P40", "compute_capability": "6.1", "memory_mib": 22919}],
            "preflight_profile": "{{ stack_gpu_profiles.pascal | combine({'name': 'pascal'}) }}",
            "stack_work_dir": str(tmp_path / "work"),
            **variables,
        },
    }
    # The shared values, as each stage's setup imports them (playbooks/tasks/setup.yml).
    shared = {"name": "The shared values", "ansible.builtin.import_role": {"name": "stack"}}
    task = {"name": "Resources", "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "resources.yml"}}
    return run_play(tmp_path, [shared, task], callback="default", **play)


def test_the_role_refuses_too_little_disk_naming_paths_and_variables(tmp_path: Path):
    done = preflight_resources(tmp_path, preflight_disk_cuda_gb=1000000)
    assert done.returncode != 0
    said = " ".join(done.stdout.split())
    assert "Not enough free disk space" in said and "1000000.0 GiB (cuda_prefix; preflight_disk_cuda_gb)" in said
    # Paths of layers outside this play, where their defaults lie, each named by its own variable.
    assert (
        "%s 22.4 GiB (train_checkpoint_dir (its default lies under this stack_work_dir)" % (tmp_path / "work") in said
    )
    assert "train_max_checkpoints 2 x 11.2 GiB" in said


def test_the_role_refuses_too_little_memory(tmp_path: Path):
    done = preflight_resources(
        tmp_path, preflight_model_params_b=1000, preflight_disk_requirements=[{"path": str(tmp_path), "min_free_gb": 0}]
    )
    assert done.returncode != 0
    said = " ".join(done.stdout.split())
    assert "Not enough memory" in said and "the pascal profile on 1 GPU(s), preflight_model_params_b 1000" in said
    assert "Not enough free disk space" not in said


def test_the_role_passes_and_says_what_it_checked(tmp_path: Path):
    done = preflight_resources(
        tmp_path, preflight_min_ram_gb=1, preflight_disk_requirements=[{"path": str(tmp_path), "min_free_gb": 0}]
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(r"GiB RAM \(training needs 1.0 GiB\); free disk checked for 1 path", " ".join(done.stdout.split()))


def preflight_gpus(tmp_path: Path, script: str | None, **variables: Any) -> str:
    """The role's gpu.yml and profile.yml on localhost, nvidia-smi a script of the test's (None: a path
    with nothing there); the play's output."""
    smi = tmp_path / "bin" / "nvidia-smi"
    if script is not None:
        smi.parent.mkdir(parents=True)
        smi.write_text("#!/bin/sh\n" + script)
        smi.chmod(0o755)
    play = {"vars": {"preflight_nvidia_smi": str(smi), "train_gpus": [], **variables}}
    shared = {"name": "The shared values", "ansible.builtin.import_role": {"name": "stack"}}
    task = {"name": "GPUs", "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "gpu.yml"}}
    profile = {"name": "Profile", "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "profile.yml"}}
    said = {
        "name": "Say",
        "ansible.builtin.debug": {
            "msg": "gpus={{ preflight_gpus | map(attribute='index') | join('+') }} p2p_ok={{ preflight_gpu_p2p.ok | default('-') }}"
        },
    }
    done = run_play(tmp_path, [shared, task, profile, said], callback="default", **play)
    return done.stdout + done.stderr


def test_the_role_reads_the_gpus_past_warnings_and_cr_lf_and_the_peer_to_peer_matrix(tmp_path: Path):
    # nvidia-smi's WARNING lines (a corrupted infoROM) and CR LF line ends do not stop the parse.
    two = "0, Tesla P40, 6.1, 24576, 580.105.08, 00000000:3B:00.0\\r\\n1, Tesla P40, 6.1, 24576, 580.105.08, 00000000:5E:00.0\\r\\n"
    topo = " \\tGPU0\\tGPU1\\r\\nGPU0\\tX\\tCNS\\r\\nGPU1\\tCNS\\tX\\r\\n"
    script = (
        'if [ "$1" = topo ]; then printf "%s"; else echo "WARNING: infoROM is corrupted at gpu 0000:3B:00.0"; printf "%s"; fi\n'
        % (topo, two)
    )
    out = " ".join(preflight_gpus(tmp_path, script).split())
    assert "gpus=0+1 p2p_ok=False" in out, out[-3000:]
    assert "not available (GPU 0 - GPU 1: CNS (Chipset not supported)" in out


def test_the_role_says_a_missing_nvidia_smi_is_not_installed(tmp_path: Path):
    out = " ".join(preflight_gpus(tmp_path, None).split())
    assert "nvidia-smi is not installed" in out, out[-3000:]


def test_the_role_names_each_gpu_whose_driver_is_too_old_and_passes_a_new_one(tmp_path: Path):
    line = "%s, Tesla P40, 6.1, 24576, {}, 00000000:%s:00.0"
    lines = [line % ("0", "3B"), line % ("1", "5E")]
    topo = 'if [ "$1" = topo ]; then printf " GPU0 GPU1\\nGPU0 X OK\\nGPU1 OK X\\n"; exit 0; fi\n'
    old = topo + "printf '%s\\n'\n" % "\\n".join(lines).format("470.256.02", "580.105.08")
    out = " ".join(preflight_gpus(tmp_path, old, preflight_require_gpu=True).split())
    assert "GPU 0 (Tesla P40) runs driver 470.256.02; CUDA 11.8 needs 520.61.05 or newer" in out, out[-3000:]
    assert "GPU 1 (Tesla P40) runs driver" not in out
    new = topo + "printf '%s\\n'\n" % "\\n".join(lines).format("580.105.08", "580.105.08")
    out = " ".join(preflight_gpus(tmp_path / "new", new, preflight_require_gpu=True).split())
    assert "gpus=0+1 p2p_ok=True" in out and "runs driver" not in out, out[-3000:]
    assert "peer-to-peer: every pair of the 2 GPUs reaches each other" in out


def test_the_role_stops_without_a_gpu_when_one_is_required(tmp_path: Path):
    out = " ".join(preflight_gpus(tmp_path, "exit 0\n", preflight_require_gpu=True).split())
    assert "No usable NVIDIA GPU: nvidia-smi lists no GPU" in out and "preflight_require_gpu: false" in out, out[-3000:]
    out = " ".join(preflight_gpus(tmp_path / "optional", "exit 0\n", preflight_require_gpu=False).split())
    assert "gpus= p2p_ok=-" in out and "No usable" not in out, out[-3000:]


def test_the_role_names_every_launcher_variable_name_that_is_no_name(tmp_path: Path):
    """launcher_env.yml: train_extra_env's names and each GPU profile's env names, in one check that
    names every bad one (train.env exports them unquoted)."""
    profiles = {"pascal": {"env": {"OK": "1"}}, "mine": {"env": {"X=1;touch /tmp/p;Y": "1"}}}
    play = {"vars": {"train_extra_env": {"OK": "1", "A B": "2"}, "stack_gpu_profiles": profiles}}
    task = {"name": "Names", "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "launcher_env.yml"}}
    done = run_play(tmp_path, [task], callback="default", **play)
    said = " ".join(done.stdout.split())
    assert done.returncode != 0
    assert (
        "train_extra_env: 'A B' is not" in said and "stack_gpu_profiles.mine.env: 'X=1;touch /tmp/p;Y' is not" in said
    ), said[-3000:]
    assert "nothing was changed on the host" in said
    play["vars"]["train_extra_env"] = {"OK": "1"}
    del profiles["mine"]
    assert run_play(tmp_path, [task], callback="default", **play).returncode == 0


# -- Which inputs are checked before the first layer --------------------------------------------------


def test_the_inputs_checked_after_the_profile_are_those_of_the_roles_whose_defaults_read_it():
    """Preflight checks every input before the driver layer, but the options of the roles whose defaults
    read what preflight finds (roles/preflight/vars/main.yml's __preflight_input_roles): those are checked
    once the profile is chosen. Broken cases: a role whose defaults start to read the profile, checked
    before it is chosen (its defaults would not template); a role listed that reads nothing of it,
    checked later than it could be."""
    found = re.compile(r"\bpreflight_(profile|gpus|cuda_arch_list)\b")

    def reads(path: Path) -> bool:
        return any(found.search(line) for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))

    reading = sorted(
        role.name for role in (REPO / "roles").iterdir() if any(map(reads, (role / "defaults").rglob("*.yml")))
    )
    listed = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__preflight_input_roles"]
    assert sorted(listed) == reading


def test_the_run_checks_the_inputs_before_the_driver_layer():
    """playbooks/tasks/setup.yml includes preflight's inputs.yml before the driver's role, so a bad input
    stops the run before the driver layer installs anything or asks for a reboot; preflight's own tasks
    check the rest once the profile is chosen."""
    tasks = tasks_in(yaml.safe_load((REPO / "playbooks" / "tasks" / "setup.yml").read_text()))
    includes = [
        (task["ansible.builtin.include_role"]["name"], task["ansible.builtin.include_role"].get("tasks_from", "main"))
        for task in tasks
        if "ansible.builtin.include_role" in task
    ]
    assert includes == [("preflight", "inputs"), ("driver", "main"), ("preflight", "main")]
    main = (ROLE / "tasks" / "main.yml").read_text()
    assert "import_tasks: profile_inputs.yml" in main and "import_tasks: inputs.yml" not in main
