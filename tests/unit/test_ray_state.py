from ansible_collections.sparkfleet.vllm.plugins.module_utils.ray_state import gate, summarize


def node(ip, alive=True, gpus=1.0):
    return {"NodeID": ip, "Alive": alive, "NodeManagerAddress": ip, "Resources": {"CPU": 2.0, "GPU": gpus}}


IPS = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]


def test_all_nodes_and_gpus():
    s = summarize([node(ip) for ip in IPS])
    assert gate(s, 4, 4, IPS) == (True, "4/4 nodes alive, 4/4 GPUs")


def test_a_node_that_never_joined_is_named():
    ok, desc = gate(summarize([node(ip) for ip in IPS[:3]]), 4, 4, IPS)
    assert not ok and "not joined: 10.0.0.4" in desc


def test_nodes_without_gpus_do_not_pass():
    """The gate needs both counts: four alive nodes with a GPU missing is not ready."""
    s = summarize([node(ip) for ip in IPS[:3]] + [node(IPS[3], gpus=0)])
    ok, desc = gate(s, 4, 4, IPS)
    assert not ok and "3/4 GPUs" in desc


def test_dead_entries_from_restarts_do_not_count():
    s = summarize([node(ip) for ip in IPS] + [node("10.0.0.2", alive=False)])
    assert s["alive"] == 4 and s["dead"] == 1
    assert gate(s, 4, 4, IPS)[0]


def test_unexpected_node_fails():
    s = summarize([node(ip) for ip in [*IPS[:3], "10.9.9.9"]])
    ok, desc = gate(s, 4, 4, IPS)
    assert not ok and "unexpected nodes: 10.9.9.9" in desc
