"""The status verdict: every node at fault named with its IP and what was seen, the healthy cluster clean."""

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import cluster_state

NODES = {"spark-00": "10.0.0.10", "spark-01": "10.0.0.11", "spark-02": "10.0.0.12", "spark-03": "10.0.0.13"}
RUNNING = {"exists": True, "running": True, "status": "running"}


def registered(**state):
    return {"changed": False, "state": state}


def healthy_states():
    states = {name: registered(containers={"sparkfleet-ray": dict(RUNNING)}) for name in NODES}
    states["spark-00"] = registered(
        containers={"sparkfleet-ray": dict(RUNNING), "sparkfleet-vllm": dict(RUNNING)},
        ray={"alive": 4, "dead": 0, "gpus": 4, "alive_ips": sorted(NODES.values()), "dead_ips": []},
        server={"errors": [], "stage": "serving", "rank_ips": {}},
        health={"ok": True, "status": 200, "url": "http://10.0.0.10:8000/health"})
    return states


def test_a_serving_cluster_has_no_finding():
    verdict = cluster_state.judge(NODES, "spark-00", healthy_states())
    assert verdict == {"healthy": True, "findings": [], "endpoint": "serving", "advice": "",
                       "nodes": {"spark-00": "Ray running; cluster 4 alive, 0 dead, 4 GPUs", "spark-01": "Ray running",
                                 "spark-02": "Ray running", "spark-03": "Ray running"}}


def test_a_lost_worker_is_named_once_with_all_that_was_seen_and_the_dead_rank_names_it_too():
    states = healthy_states()
    states["spark-02"]["state"]["containers"]["sparkfleet-ray"] = {
        "exists": True, "running": False, "status": "exited", "exit_code": 137,
        "finished_at": "2026-12-05T18:33:40.584084128Z"}
    head = states["spark-00"]["state"]
    head["ray"] = {"alive": 3, "dead": 1, "gpus": 3, "alive_ips": ["10.0.0.10", "10.0.0.11", "10.0.0.13"],
                   "dead_ips": ["10.0.0.12"]}
    head["containers"]["sparkfleet-vllm"] = {"exists": True, "running": False, "status": "exited", "exit_code": 1,
                                             "finished_at": "2026-12-05T18:33:42Z"}
    head["server"]["errors"] = ["Ray worker rank 2 died (on 10.0.0.12)"]
    del head["health"]
    verdict = cluster_state.judge(NODES, "spark-00", states)
    assert not verdict["healthy"]
    assert verdict["findings"] == [
        "spark-00 (10.0.0.10, the Ray head): vllm serve exited (exit 1, since 2026-12-05T18:33:42Z), its log: "
        "Ray worker rank 2 died (on spark-02, 10.0.0.12)",
        "spark-02 (10.0.0.12): its Ray container sparkfleet-ray exited (exit 137, since 2026-12-05T18:33:40Z); "
        "Ray lists it dead",
    ]
    assert "no teardown" in verdict["advice"]
    assert verdict["nodes"]["spark-02"].endswith("not alive in Ray")


def test_an_unreachable_node_and_a_failed_read_are_findings_not_crashes():
    states = healthy_states()
    states["spark-03"] = {"unreachable": True, "msg": "Failed to connect to the host via ssh: timed out"}
    states["spark-01"] = {"failed": True, "msg": "node_state: docker is not running"}
    head = states["spark-00"]["state"]
    head["ray"]["alive_ips"] = ["10.0.0.10", "10.0.0.12"]
    findings = cluster_state.judge(NODES, "spark-00", states)["findings"]
    assert findings == [
        "spark-01 (10.0.0.11): no state from the node (node_state: docker is not running); check its power, SSH "
        "and network",
        "spark-03 (10.0.0.13): no state from the node (Failed to connect to the host via ssh: timed out); check "
        "its power, SSH and network",
    ]


@pytest.mark.parametrize("change, finding", [
    (lambda h: h["ray"].update(error="timeout: the GCS did not answer"),
     "spark-00 (10.0.0.10, the Ray head): Ray's node table cannot be read: timeout: the GCS did not answer"),
    (lambda h: h["containers"]["sparkfleet-ray"].update(running=False, status="paused"),
     "spark-00 (10.0.0.10, the Ray head): its Ray container sparkfleet-ray paused"),
    (lambda h: h["health"].update(ok=False, status=503),
     "spark-00 (10.0.0.10, the Ray head): vllm serve is running but http://10.0.0.10:8000/health answers 503"),
    (lambda h: h["containers"].update({"sparkfleet-vllm": {"exists": False, "running": False}}),
     "spark-00 (10.0.0.10, the Ray head): no vllm serve container sparkfleet-vllm"),
    (lambda h: h["ray"].update(alive_ips=sorted(NODES.values()) + ["10.0.0.99"]),
     "Ray has an alive node at 10.0.0.99, which is not a node of this cluster; stop Ray there or add the node "
     "to the inventory"),
    (lambda h: h["ray"].update(gpus=3),
     "spark-00 (10.0.0.10, the Ray head): Ray registers 3 GPUs, the plan needs 4"),
    (lambda h: h["ray"].update(alive_ips=["10.0.0.10", "10.0.0.11", "10.0.0.12"]),
     "spark-03 (10.0.0.13): Ray does not list it"),
])
def test_each_defect_is_one_finding(change, finding):
    states = healthy_states()
    change(states["spark-00"]["state"])
    verdict = cluster_state.judge(NODES, "spark-00", states)
    assert verdict["findings"] == [finding] and not verdict["healthy"]


def test_a_node_ray_lists_alive_but_silent_on_the_fabric_is_named():
    states = healthy_states()
    states["spark-00"]["state"]["ray"]["silent"] = {"10.0.0.12": "no answer in 5 s"}
    verdict = cluster_state.judge(NODES, "spark-00", states)
    assert verdict["findings"] == ["spark-02 (10.0.0.12): Ray lists it alive, but it gives the head no answer over "
                                   "the fabric (no answer in 5 s); check its firewall and fabric link"]
    assert not verdict["healthy"]


def two_replicas():
    """spark-00 heads spark-01, spark-02 heads spark-03, as node_state reports their Ray containers."""
    states = {}
    for head, worker in (("spark-00", "spark-01"), ("spark-02", "spark-03")):
        ips = sorted([NODES[head], NODES[worker]])
        states[head] = registered(
            containers={"sparkfleet-ray": dict(RUNNING), "sparkfleet-vllm": dict(RUNNING)}, ray_role={"role": "head"},
            ray={"alive": 2, "dead": 0, "gpus": 2, "alive_ips": ips, "dead_ips": []},
            server={"errors": [], "stage": "serving", "rank_ips": {}},
            health={"ok": True, "status": 200, "url": "http://%s:8000/health" % NODES[head]})
        states[worker] = registered(containers={"sparkfleet-ray": dict(RUNNING)},
                                    ray_role={"role": "worker", "head_ip": NODES[head]})
    return states


def test_each_replica_is_judged_against_its_own_head():
    states = two_replicas()
    want = {"spark-00": ["spark-00", "spark-01"], "spark-02": ["spark-02", "spark-03"]}
    assert cluster_state.replicas(NODES, "spark-00", states) == want
    verdict = cluster_state.judge_replicas(NODES, "spark-00", states)
    assert verdict["healthy"] and verdict["endpoint"] == "spark-00: serving; spark-02: serving", verdict
    assert verdict["nodes"]["spark-02"] == "Ray running; cluster 2 alive, 0 dead, 2 GPUs"
    # Judged as one cluster, the second replica's nodes would be missing from the first head's table.
    assert not cluster_state.judge(NODES, "spark-00", states)["healthy"]


def test_a_lost_worker_of_the_second_replica_is_named_and_its_head_too():
    states = two_replicas()
    states["spark-03"]["state"]["containers"]["sparkfleet-ray"] = {"exists": True, "running": False,
                                                                   "status": "exited", "exit_code": 137}
    head = states["spark-02"]["state"]
    head["ray"] = {"alive": 1, "dead": 1, "gpus": 1, "alive_ips": ["10.0.0.12"], "dead_ips": ["10.0.0.13"]}
    head["health"] = {"ok": False, "error": "ConnectionRefusedError", "url": "http://10.0.0.12:8000/health"}
    verdict = cluster_state.judge_replicas(NODES, "spark-00", states)
    assert verdict["findings"] == [
        "spark-02 (10.0.0.12, the Ray head): vllm serve is running but http://10.0.0.12:8000/health answers "
        "ConnectionRefusedError",
        "spark-03 (10.0.0.13): its Ray container sparkfleet-ray exited (exit 137); Ray lists it dead",
    ]
    assert verdict["endpoint"] == "spark-00: serving; spark-02: running, /health failing"


def test_a_node_without_a_ray_role_is_judged_with_the_inventory_head():
    states = two_replicas()
    states["spark-03"] = registered(containers={"sparkfleet-ray": {"exists": False, "running": False}},
                                    ray_role={"role": None})
    assert cluster_state.replicas(NODES, "spark-00", states)["spark-00"] == ["spark-00", "spark-01", "spark-03"]


@pytest.mark.parametrize(("argv", "want"), [
    (["ray", "start", "--node-ip-address", "10.0.0.10", "--head", "--port", "6379"], {"role": "head"}),
    (["ray", "start", "--address", "10.0.0.12:6379"], {"role": "worker", "head_ip": "10.0.0.12"}),
    (["ray", "start", "--address=10.0.0.12:6379"], {"role": "worker", "head_ip": "10.0.0.12"}),
    (["sleep", "infinity"], {"role": None}),
])
def test_node_state_tells_a_head_from_a_worker_by_its_ray_command_line(argv, want):
    from ansible_collections.sparkfleet.vllm.plugins.modules import node_state

    assert node_state.ray_role({"Config": {"Cmd": argv}}) == want


def test_node_state_reads_the_command_lines_ray_node_starts():
    from ansible_collections.sparkfleet.vllm.plugins.module_utils import _ray
    from ansible_collections.sparkfleet.vllm.plugins.modules import node_state

    head = _ray.start_argv("head", "10.0.0.12", 6379)
    worker = _ray.start_argv("worker", "10.0.0.13", 6379, head_ip="10.0.0.12")
    assert node_state.ray_role({"Config": {"Cmd": head}}) == {"role": "head"}
    assert node_state.ray_role({"Config": {"Cmd": worker}}) == {"role": "worker", "head_ip": "10.0.0.12"}


def servers(**admin):
    """Summary rows of the balancer's backend as node_state reads them: replica -> admin state."""
    return [{"svname": name, "status": "UP", "check_status": "L7OK", "admin_state": state}
            for name, state in admin.items()]


def test_a_replica_held_out_of_the_balancer_is_a_finding_of_the_balancers_node():
    states = two_replicas()
    states["spark-00"]["state"]["balancer"] = {"servers": servers(**{"replica-0": "ready", "replica-1": "ready"})}
    assert cluster_state.judge_replicas(NODES, "spark-00", states)["healthy"]
    states["spark-00"]["state"]["balancer"] = {"servers": servers(**{"replica-0": "ready", "replica-1": "drain"})}
    verdict = cluster_state.judge_replicas(NODES, "spark-00", states)
    assert verdict["findings"] == ["spark-00 (10.0.0.10, the balancer): replica-1 is held out (drain); a redeploy "
                                   "that stopped after draining a replica leaves it so"]
    assert verdict["advice"] == cluster_state.REDEPLOY
    # A replica DOWN for its health check is its head's finding; the balancer adds none for it.
    states["spark-00"]["state"]["balancer"] = {"servers": [dict(servers(**{"replica-1": "ready"})[0],
                                                                status="DOWN", check_status="L4CON")]}
    assert cluster_state.judge_replicas(NODES, "spark-00", states)["healthy"]
    # One replica (judge() alone) gets the balancer's findings too, and an unreadable HAProxy is one.
    states = healthy_states()
    states["spark-00"]["state"]["balancer"] = {"error": "the balancer container sparkfleet-balancer is not running"}
    assert cluster_state.judge_replicas(NODES, "spark-00", states)["findings"] == [
        "spark-00 (10.0.0.10, the balancer): the balancer cannot be read: the balancer container sparkfleet-balancer "
        "is not running"]
