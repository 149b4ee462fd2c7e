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
