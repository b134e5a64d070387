"""The Ray cluster's checks (filter_plugins/cluster.py): the head, GPU counts, patch records, ray.nodes()."""

import json

import pytest
from ansible.errors import AnsibleFilterError

from cluster import cluster_gpu_problems, cluster_patch_problems, ray_cluster_problems, ray_head


def test_the_head_is_the_marked_host_or_the_first():
    group = ["p40-a", "p40-b", "p40-c"]
    assert ray_head(group, {}) == "p40-a"
    assert ray_head(group, {"p40-b": {"ray_head": True}}) == "p40-b"
    assert ray_head(group, {"p40-c": {"ray_head": "yes"}, "p40-a": {"ray_head": False}}) == "p40-c"


def test_two_heads_or_an_empty_group_are_refused():
    with pytest.raises(AnsibleFilterError, match="p40-a, p40-b all set ray_head: true"):
        ray_head(["p40-a", "p40-b"], {"p40-a": {"ray_head": True}, "p40-b": {"ray_head": "true"}})
    with pytest.raises(AnsibleFilterError, match="no hosts"):
        ray_head([], {})


def test_equal_gpu_counts_pass_and_different_ones_name_the_fix():
    assert cluster_gpu_problems({"a": 2, "b": "2"}) == []
    assert cluster_gpu_problems({"a": 4}) == []
    (problem,) = cluster_gpu_problems({"a": 4, "b": 2, "c": 4})
    assert "a: 4, b: 2, c: 4" in problem and "STRICT_PACK" in problem and "pick 2 GPUs" in problem
    (problem,) = cluster_gpu_problems({"a": 0, "b": 2})
    assert "no GPU" in problem


RECORD = {
    "verl_version": "0.4.1",
    "fixes": ["bf16_to_fp32", "no_flash_attn"],
    "files": {"verl/workers/fsdp_workers.py": {"original_sha256": "o1", "patched_sha256": "p1"}},
}


def test_the_same_patch_everywhere_passes():
    other = dict(RECORD, fixes=list(reversed(RECORD["fixes"])), applied="another time")
    assert cluster_patch_problems({"a": RECORD, "b": other}, "a") == []
    # A profile without fixes leaves no record anywhere: the nodes agree.
    assert cluster_patch_problems({"a": {}, "b": {}}, "a") == []
    (problem,) = cluster_patch_problems({"a": {}, "b": RECORD}, "a")
    assert problem.startswith("b runs another verl than the head a (files, fixes, verl_version differ")


def test_a_node_patched_otherwise_or_not_at_all_is_named():
    changed = dict(RECORD, files={"verl/workers/fsdp_workers.py": {"original_sha256": "o1", "patched_sha256": "p2"}})
    problems = cluster_patch_problems({"a": RECORD, "b": changed, "c": {}}, "a")
    assert problems[0].startswith("b runs another verl than the head a (files differ: verl/workers/fsdp_workers.py)")
    assert problems[1].startswith("c has no verl patch record")
    (problem,) = cluster_patch_problems({"a": RECORD, "b": dict(RECORD, verl_version="0.4.0")}, "a")
    assert "verl_version differ" in problem
    with pytest.raises(AnsibleFilterError, match="head x"):
        cluster_patch_problems({"a": RECORD}, "x")


def node(ip, gpus, alive=True):
    return {"NodeManagerAddress": ip, "Alive": alive, "Resources": {"CPU": 8.0, "GPU": float(gpus)}}


EXPECTED = {"head": {"ip": "10.0.0.1", "gpus": 2}, "worker": {"ip": "10.0.0.2", "gpus": 2}}


def test_every_host_with_its_gpus_is_a_cluster():
    assert ray_cluster_problems([node("10.0.0.1", 2), node("10.0.0.2", 2)], EXPECTED) == []


def test_a_missing_or_dead_node_is_named_with_the_ports():
    ports = "6379/tcp, 10002-10100/tcp"
    (problem,) = ray_cluster_problems([node("10.0.0.1", 2), node("10.0.0.2", 2, alive=False)], EXPECTED, ports)
    assert problem == "not in the cluster: worker (10.0.0.2); check that these ports are open: " + ports


def test_a_node_with_another_gpu_count_is_refused():
    (problem,) = ray_cluster_problems([node("10.0.0.1", 2), node("10.0.0.2", 1)], EXPECTED)
    assert problem == "node worker (10.0.0.2) offers 1 GPUs to Ray, not the 2 preflight found"


def test_unit_environment_file_keeps_each_value_exactly():
    from cluster import systemd_environment_file

    assert systemd_environment_file({"TORCHDYNAMO_DISABLE": 1, "NCCL_SOCKET_IFNAME": "eth0"}) == (
        'TORCHDYNAMO_DISABLE="1"\nNCCL_SOCKET_IFNAME="eth0"\n'
    )
    # In double quotes systemd unescapes backslash, quote, $ and backquote (checked against systemd
    # by the cluster scenario's VERL_P40_QUOTING_PROBE); % and a space are literal.
    assert systemd_environment_file({"X": 'a "b" \\c 100% $HOME `id`'}) == 'X="a \\"b\\" \\\\c 100% \\$HOME \\`id\\`"\n'
    assert systemd_environment_file({}) == ""


@pytest.mark.parametrize(
    "env, match",
    [
        ({"X=1 Y": "v"}, "not an environment variable name"),
        ({"X": "a\nLD_PRELOAD=/tmp/x.so"}, "control character"),
        ({"X": None}, "give a string or a number"),
    ],
)
def test_unit_environment_refuses_what_would_change_the_file(env, match):
    from cluster import systemd_environment_file

    with pytest.raises(AnsibleFilterError, match=match):
        systemd_environment_file(env, "ray_extra_env")


def test_unit_command_lines_quote_every_argument():
    from cluster import systemd_exec

    assert systemd_exec(["/opt/env/bin/ray", "start", "--block", "--node-ip-address=10.0.0.1"]) == (
        '"/opt/env/bin/ray" "start" "--block" "--node-ip-address=10.0.0.1"'
    )
    assert systemd_exec(["/bin/echo", "$HOME 50%"]) == '"/bin/echo" "$$HOME 50%%"'
    with pytest.raises(AnsibleFilterError, match="needs a program"):
        systemd_exec([])
    with pytest.raises(AnsibleFilterError, match="argument 1 of ExecStart holds a control character"):
        systemd_exec(["/bin/echo", "a\nExecStartPre=/bin/id"])


def test_the_probe_result_gives_the_clusters_problems():
    from cluster import ray_probe_problems

    seen = {"version": "2.43.0", "nodes": [node("10.0.0.1", 2), node("10.0.0.2", 2)]}
    whole = {"rc": 0, "stdout_lines": ["a Ray warning", json.dumps(seen)], "stderr": ""}
    assert ray_probe_problems(whole, EXPECTED) == []
    # Ray may log a line of its own to stdout after the probe's JSON (seen as a driver disconnects
    # from a head that restarts). Broken case: reading the very last line.
    logged = dict(whole, stdout_lines=[json.dumps(seen), "[2026-12-03 18:58:21,876 I 2961 2961] (raylet) stats.h:120"])
    assert ray_probe_problems(logged, EXPECTED) == []
    half = dict(whole, stdout_lines=[json.dumps(dict(seen, nodes=seen["nodes"][:1]))])
    assert ray_probe_problems(half, EXPECTED, "6379/tcp") == [
        "not in the cluster: worker (10.0.0.2); check that these ports are open: 6379/tcp"
    ]


def test_a_probe_that_did_not_reach_the_head_says_why():
    from cluster import ray_probe_problems

    failed = {"rc": 124, "stdout_lines": [], "stderr": "one\ntwo\nthree\nConnectionError: GCS at 10.0.0.1:6379"}
    assert ray_probe_problems(failed, EXPECTED) == [
        "cannot reach the head: two three ConnectionError: GCS at 10.0.0.1:6379"
    ]
    # rc 0 without the JSON line (Ray printed something else last) is not a cluster either.
    assert ray_probe_problems({"rc": 0, "stdout": "no json", "stderr": ""}, EXPECTED) == ["cannot reach the head: rc 0"]
    assert ray_probe_problems({"rc": 124, "stderr": ""}, EXPECTED) == ["cannot reach the head: rc 124"]


# ---------------------------------------------------------------- the survivors of docs/mutation/2026-12-03.json


def test_ray_head_reads_a_string_false_as_false():
    """ray_head: "no" or "false" from an inventory (a string, not a bool) is not a head. Broken case:
    the string returned as it is (truthy), which made a host marked `ray_head: "no"` the head."""
    group = ["p40-a", "p40-b"]
    assert ray_head(group, {"p40-b": {"ray_head": "no"}}) == "p40-a"
    assert ray_head(group, {"p40-a": {"ray_head": "false"}, "p40-b": {"ray_head": "on"}}) == "p40-b"


def test_one_gpu_per_host_is_enough():
    """A host with one GPU offers one to the cluster. Broken case: `smallest < 2` or `<= 1`,
    which told a cluster of one-GPU and two-GPU hosts that a host offers none."""
    (problem,) = cluster_gpu_problems({"a": 1, "b": 2})
    assert "no GPU" not in problem and "pick 1 GPUs" in problem


def test_every_node_of_the_group_is_compared_after_one_that_matches_or_has_no_record():
    """Each host is checked, whatever comes before it in the group. Broken case: the loop ended
    (break for continue) at the first host that matches the head or has no record, so a host
    after it patched otherwise went unnamed."""
    changed = dict(RECORD, verl_version="0.4.0")
    problems = cluster_patch_problems({"a": RECORD, "b": RECORD, "c": changed}, "a")
    assert len(problems) == 1 and problems[0].startswith("c runs another verl than the head a")
    problems = cluster_patch_problems({"a": RECORD, "b": {}, "c": changed}, "a")
    assert [problem.split(" ")[0] for problem in problems] == ["b", "c"]
    assert problems[0].startswith("b has no verl patch record")


def test_a_file_only_one_side_patched_is_named():
    """A node that patched a file the head did not (or the other way round) names that file.
    Broken case: only the files both records hold were compared (& for |)."""
    extra = dict(RECORD["files"], **{"verl/trainer/main_ppo.py": {"patched_sha256": "p9"}})
    (problem,) = cluster_patch_problems({"a": RECORD, "b": dict(RECORD, files=extra)}, "a")
    assert problem.startswith("b runs another verl than the head a (files differ: verl/trainer/main_ppo.py)")
    (problem,) = cluster_patch_problems({"a": dict(RECORD, files=extra), "b": RECORD}, "a")
    assert "(files differ: verl/trainer/main_ppo.py)" in problem


def test_a_node_without_an_alive_field_is_not_alive():
    """A node of ray.nodes() that does not say it is alive counts as missing. Broken case: the
    default taken as alive, so a node Ray reports without the field passed as a member."""
    entry = {"NodeManagerAddress": "10.0.0.2", "Resources": {"GPU": 2.0}}
    (problem,) = ray_cluster_problems([node("10.0.0.1", 2), entry], EXPECTED)
    assert problem == "not in the cluster: worker (10.0.0.2)"
    # The lower-case spelling (older Ray) is read too.
    lower = {"NodeManagerAddress": "10.0.0.2", "alive": True, "Resources": {"GPU": 2.0}}
    assert ray_cluster_problems([node("10.0.0.1", 2), lower], EXPECTED) == []


def test_a_node_without_gpu_resources_offers_none():
    """A node whose resources list no GPU offers 0 GPUs (the message says 0), and a host expected
    without a GPU count expects 0. Broken cases: a default of 1 or -1 GPUs on either side."""
    bare = {"NodeManagerAddress": "10.0.0.2", "Alive": True, "Resources": {"CPU": 8.0}}
    (problem,) = ray_cluster_problems([node("10.0.0.1", 2), bare], EXPECTED)
    assert problem == "node worker (10.0.0.2) offers 0 GPUs to Ray, not the 2 preflight found"
    assert ray_cluster_problems([bare], {"cpu-only": {"ip": "10.0.0.2"}}) == []


def test_every_expected_host_is_checked_and_the_missing_ones_come_first():
    """A host missing from the cluster does not stop the check of the hosts after it, and the
    missing hosts are the first problem. Broken cases: break for continue after a missing host,
    and the missing line inserted at 1 or -1 (after or among the GPU count problems)."""
    expected = {
        "a": {"ip": "10.0.0.1", "gpus": 2},
        "b": {"ip": "10.0.0.2", "gpus": 2},
        "c": {"ip": "10.0.0.3", "gpus": 2},
    }
    assert ray_cluster_problems([node("10.0.0.2", 1), node("10.0.0.3", 4)], expected) == [
        "not in the cluster: a (10.0.0.1)",
        "node b (10.0.0.2) offers 1 GPUs to Ray, not the 2 preflight found",
        "node c (10.0.0.3) offers 4 GPUs to Ray, not the 2 preflight found",
    ]


def test_a_probe_with_stdout_only_is_read():
    """A result with `stdout` and no `stdout_lines` (a command module's result in check mode or a
    raw result) is read from its stdout. Broken case: `stdout and ""`, which read nothing."""
    from cluster import ray_probe_problems

    seen = {"nodes": [node("10.0.0.1", 2), node("10.0.0.2", 2)]}
    assert ray_probe_problems({"rc": 0, "stdout": "a Ray warning\n" + json.dumps(seen)}, EXPECTED) == []
