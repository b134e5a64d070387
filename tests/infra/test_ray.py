"""The ray layer: the hosts of stack_ray_group are one Ray cluster, a systemd unit per node.

A host outside the group (the default scenario's) has no ray layer: the first test checks
that, and the others skip there, saying so. The cluster scenario (molecule/cluster) runs this
module on each node, one node at a time, the head first: there it submits a task to every
node, restarts each worker's unit and then its own, and each time waits for the cluster to be
whole again; then it runs the ray layer on part of the group (refused), and with a worker
whose Ray never starts (the timeout names it and the ports). On a worker, those tests of the
head skip, saying so. Each skip counts in the skip budget of the run's scenario (default,
cluster-head, cluster-worker: tests/conftest.py, set by each molecule/*/verify.yml).
"""

from __future__ import annotations

import json
import os
import time

import pytest
import testinfra

import playbook

# Every live node, as the head's Ray sees it (run as the training user, who runs the units).
NODES = r"""
import json, ray
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
print(json.dumps([{"id": n["NodeID"], "host": n["NodeManagerHostname"], "ip": n["NodeManagerAddress"],
                   "gpus": n["Resources"].get("GPU", 0)} for n in ray.nodes() if n["Alive"]]))
"""
# A task pinned to each live node, which says where it ran.
WHERE = r"""
import json, socket, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
@ray.remote(num_cpus=0)
def where():
    return socket.gethostname()
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
print(json.dumps({node: ray.get(where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(),
                                timeout=120) for node in nodes}))
"""


def part(stack) -> str:
    if not stack["__stack_ray_member"]:
        return ""
    return "head" if stack["inventory_hostname"] == stack["__stack_ray_head"] else "worker"


def only_on_a_member(stack) -> None:
    """Skip, saying why, on a host outside the Ray group (the default scenario's): it has no ray layer."""
    if not part(stack):
        pytest.skip(
            "%s is not in the Ray group %s: no ray layer here (test_the_layer_is_where_the_group_puts_it checks that)"
            % (stack["inventory_hostname"], stack["stack_ray_group"])
        )


def only_on_the_head(stack) -> None:
    """Skip, saying why, on every node but the head: the head's run drives the whole cluster."""
    only_on_a_member(stack)
    if part(stack) != "head":
        pytest.skip(
            "%s is a worker: this test drives the cluster from its head, %s, in the head's run"
            % (stack["inventory_hostname"], stack["__stack_ray_head"])
        )


def env_python(training_user, stack, code: str):
    """The env's python -c CODE, as the training user (conftest.py's training_user)."""
    return training_user.run("%s/bin/python -c %s", stack["stack_env_prefix"], code)


def last_json(stdout: str):
    """The last line of stdout that is JSON: Ray may log a line of its own to stdout after the
    probe's (seen when the driver disconnects from a head that is restarting)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def live_nodes(training_user, stack) -> list[dict]:
    done = env_python(training_user, stack, NODES)
    assert done.rc == 0, done.stderr
    nodes = last_json(done.stdout)
    assert nodes is not None, done.stdout
    return nodes


def wait_for_cluster(training_user, stack, timeout: float, replaced: set[str] = frozenset()) -> list[dict]:
    """Wait until every host of the group is a live node again (none of the node ids in replaced)."""
    want = sorted(stack["__stack_ray_hosts"])
    deadline = time.monotonic() + timeout
    seen: list[dict] = []
    while time.monotonic() < deadline:
        done = env_python(training_user, stack, NODES)
        if done.rc == 0 and last_json(done.stdout) is not None:
            seen = last_json(done.stdout)
            if sorted(n["host"] for n in seen) == want and not {n["id"] for n in seen} & set(replaced):
                return seen
        time.sleep(3)
    raise AssertionError("after %.0f s the cluster has %s, not every host of %s" % (timeout, seen, want))


def other_host(host, name: str):
    return testinfra.get_host("%s://%s" % (host.backend.NAME, name))


def test_the_layer_is_where_the_group_puts_it(host, stack):
    state_file = host.file(stack["stack_state_dir"] + "/ray.json")
    units = {kind: host.file("/etc/systemd/system/verl-ray-%s.service" % kind) for kind in ("head", "worker")}
    if not part(stack):
        assert not state_file.exists and not any(unit.exists for unit in units.values())
        return
    state = json.loads(state_file.content_string)
    assert state["status"] == "complete"
    assert state["details"]["kind"] == part(stack) and state["details"]["head"] == stack["__stack_ray_head"]
    assert state["details"]["nodes"] == len(stack["__stack_ray_hosts"])
    unit = units[part(stack)]
    assert unit.user == "root" and unit.group == "root" and unit.mode == 0o644
    assert not units["worker" if part(stack) == "head" else "head"].exists
    # The environment is in a file only root reads; no value is in the unit or what systemctl
    # show tells any local user (ray_extra_env may carry credentials).
    env_file = host.file("/etc/default/verl-ray-%s" % part(stack))
    assert env_file.user == "root" and env_file.group == "root" and env_file.mode == 0o600
    assert "EnvironmentFile=%s\n" % env_file.path in unit.content_string
    shown = host.check_output("systemctl show -p Environment verl-ray-%s.service" % part(stack))
    for name, value in (stack["ray_extra_env"] or {}).items():
        assert name in env_file.content_string
        assert name not in unit.content_string and name not in shown and str(value) not in shown


def test_the_node_runs_as_the_training_user_with_the_launchers_environment(host, training_user, stack):
    only_on_a_member(stack)
    service = "verl-ray-%s.service" % part(stack)
    assert host.service(service).is_running and host.service(service).is_enabled
    pid = host.check_output("systemctl show -p MainPID --value %s" % service)
    # The process is the training user's: root in a container may not read its environment.
    assert host.file("/proc/%s" % pid).user == stack["stack_user"]
    environ = dict(
        line.split("=", 1)
        for line in training_user.check_output("cat /proc/%s/environ | tr '\\0' '\\n'", pid).splitlines()
        if "=" in line
    )
    assert environ["PATH"].startswith(stack["stack_env_prefix"] + "/bin:")
    assert environ["CUDA_HOME"] == stack["cuda_prefix"]
    for name, value in (stack["preflight_profile"].get("env") or {}).items():
        assert environ.get(name) == str(value), name
    for name, value in (stack["ray_extra_env"] or {}).items():
        assert environ.get(name) == str(value), name
    interface = environ.get("NCCL_SOCKET_IFNAME")
    assert interface and environ.get("GLOO_SOCKET_IFNAME") == interface


def test_every_node_joined_and_runs_a_task_there(host, training_user, stack):
    only_on_the_head(stack)
    nodes = live_nodes(training_user, stack)
    assert sorted(n["host"] for n in nodes) == sorted(stack["__stack_ray_hosts"])
    gpus = json.loads(host.file(stack["stack_state_dir"] + "/ray.json").content_string)["details"]["gpus"]
    assert {n["gpus"] for n in nodes} == {gpus}
    done = env_python(training_user, stack, WHERE)
    assert done.rc == 0, done.stderr
    ran = json.loads(done.stdout.strip().splitlines()[-1])
    assert {node["id"]: node["host"] for node in nodes} == ran


def test_a_restarted_worker_rejoins(host, training_user, stack):
    only_on_the_head(stack)
    for worker in [name for name in stack["__stack_ray_hosts"] if name != stack["__stack_ray_head"]]:
        before = {n["id"] for n in live_nodes(training_user, stack) if n["host"] == worker}
        other_host(host, worker).check_output("systemctl restart verl-ray-worker.service")
        after = wait_for_cluster(training_user, stack, timeout=120, replaced=before)
        assert [n for n in after if n["host"] == worker]


def test_a_restarted_head_brings_the_cluster_back(host, training_user, stack):
    only_on_the_head(stack)
    before = {n["id"] for n in live_nodes(training_user, stack)}
    host.check_output("systemctl restart verl-ray-head.service")
    # The workers give up on the old head (RAY_gcs_rpc_server_reconnect_timeout_s) and their units restart them.
    wait_for_cluster(training_user, stack, timeout=240, replaced=before)


def play(*args: str):
    """ansible-playbook site.yml against the inventory and vars files this module was given (molecule/cluster)."""
    files = [path.strip() for path in os.environ.get("STACK_VARS_FILES", "").split(",") if path.strip()]
    done = playbook.run(os.environ["STACK_INVENTORY"], files, *args, timeout=600)
    return done.returncode, " ".join(done.output.split())


def test_a_play_that_misses_a_node_is_refused(host, stack):
    only_on_the_head(stack)
    worker = [name for name in stack["__stack_ray_hosts"] if name != stack["__stack_ray_head"]][0]
    rc, output = play("--tags", "ray", "--limit", stack["__stack_ray_head"])
    assert rc != 0
    assert "this play does not reach %s (--limit?)" % worker in output


def test_a_node_that_does_not_join_is_named_with_the_ports(host, training_user, stack):
    only_on_the_head(stack)
    worker = [name for name in stack["__stack_ray_hosts"] if name != stack["__stack_ray_head"]][0]
    node = other_host(host, worker)
    before = {n["id"] for n in live_nodes(training_user, stack) if n["host"] == worker}
    # The worker's unit runs, but its Ray never starts: a node the head cannot see.
    dropin = "/etc/systemd/system/verl-ray-worker.service.d"
    node.check_output(
        "mkdir -p %s && printf '[Service]\\nExecStart=\\nExecStart=/bin/sleep infinity\\n' > %s/never.conf"
        " && systemctl daemon-reload && systemctl restart verl-ray-worker.service" % (dropin, dropin)
    )
    try:
        deadline = time.monotonic() + 90
        while any(n["host"] == worker for n in live_nodes(training_user, stack)):
            assert time.monotonic() < deadline, "the head still lists %s 90 s after its Ray stopped" % worker
            time.sleep(3)
        rc, output = play("--tags", "ray", "-e", "verify=ray", "-e", "ray_join_timeout=10")
        assert rc != 0
        assert "is not complete after 10 s: not in the cluster: %s (" % worker in output, output[-3000:]
        assert (
            "check that these ports are open: %s/tcp (head), %s/tcp, %s/tcp"
            % (
                stack["stack_ray_port"],
                stack["ray_node_manager_port"],
                stack["ray_object_manager_port"],
            )
            in output
        )
    finally:
        node.check_output("rm -r %s && systemctl daemon-reload" % dropin)
    # The failed run left the layer building on every node: the next run rebuilds it and the cluster is whole.
    rc, output = play("--tags", "ray")
    assert rc == 0, output[-3000:]
    for name in stack["__stack_ray_hosts"]:
        state = json.loads(other_host(host, name).file(stack["stack_state_dir"] + "/ray.json").content_string)
        assert state["status"] == "complete", name
    wait_for_cluster(training_user, stack, timeout=60, replaced=before)
