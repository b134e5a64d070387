"""The Ray cluster's checks (filter_plugins/cluster.py): the head, GPU counts, patch records, ray.nodes()."""

import json

import pytest
from ansible.errors import AnsibleFilterError

from filter_plugins.cluster import cluster_gpu_problems, cluster_patch_problems, ray_cluster_problems, ray_head


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
    from filter_plugins.cluster import systemd_environment_file

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
    from filter_plugins.cluster import systemd_environment_file

    with pytest.raises(AnsibleFilterError, match=match):
        systemd_environment_file(env, "ray_extra_env")


def test_unit_command_lines_quote_every_argument():
    from filter_plugins.cluster import systemd_exec

    assert systemd_exec(["/opt/env/bin/ray", "start", "--block", "--node-ip-address=10.0.0.1"]) == (
        '"/opt/env/bin/ray" "start" "--block" "--node-ip-address=10.0.0.1"'
    )
    assert systemd_exec(["/bin/echo", "$HOME 50%"]) == '"/bin/echo" "$$HOME 50%%"'
    with pytest.raises(AnsibleFilterError, match="needs a program"):
        systemd_exec([])
    with pytest.raises(AnsibleFilterError, match="argument 1 of ExecStart holds a control character"):
        systemd_exec(["/bin/echo", "a\nExecStartPre=/bin/id"])


def test_the_probe_result_gives_the_clusters_problems():
    from filter_plugins.cluster import ray_probe_problems

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
    from filter_plugins.cluster import ray_probe_problems

    failed = {"rc": 124, "stdout_lines": [], "stderr": "one\ntwo\nthree\nConnectionError: GCS at 10.0.0.1:6379"}
    assert ray_probe_problems(failed, EXPECTED) == [
        "cannot reach the head: two three ConnectionError: GCS at 10.0.0.1:6379"
    ]
    # rc 0 without the JSON line (Ray printed something else last) is not a cluster either.
    assert ray_probe_problems({"rc": 0, "stdout": "no json", "stderr": ""}, EXPECTED) == ["cannot reach the head: rc 0"]
    assert ray_probe_problems({"rc": 124, "stderr": ""}, EXPECTED) == ["cannot reach the head: rc 124"]
