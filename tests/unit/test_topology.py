import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.topology import TopologyError, plan


def hv(n, start=10):
    return {f"s{i}": {"sparkfleet_node_ip": f"10.0.0.{start + i}"} for i in range(n)}


def test_plan_of_four_nodes():
    p = plan(["s0"], ["s1", "s2", "s3"], hv(4), 4)
    assert p["head"] == "s0" and p["head_ip"] == "10.0.0.10"
    assert p["node_count"] == 4 and p["gpu_count"] == 4 and p["world_size"] == 4
    assert p["nodes"] == ["s0", "s1", "s2", "s3"]


def test_tp8_pp2_on_sixteen():
    p = plan(["s0"], [f"s{i}" for i in range(1, 16)], hv(16), 8, 2, max_tp=8)
    assert p["world_size"] == 16 and p["pipeline_parallel_size"] == 2


@pytest.mark.parametrize(
    ("heads", "workers", "hostvars", "tp", "kwargs", "needle"),
    [
        ([], ["s1"], hv(2), 2, {}, "ray_head must hold exactly one host"),
        (["s0", "s1"], [], hv(2), 2, {}, "exactly one host"),
        (["s0"], ["s0"], hv(1), 1, {}, "both ray_head and ray_workers"),
        (["s0"], ["s1"], {"s0": {"sparkfleet_node_ip": "10.0.0.1"}, "s1": {}}, 2, {}, "s1: sparkfleet_node_ip is not set"),
        (["s0"], ["s1"], {"s0": {"sparkfleet_node_ip": "10.0.0.1"}, "s1": {"sparkfleet_node_ip": "banana"}}, 2, {},
         "'banana' is not an IP address"),
        (["s0"], ["s1"], {"s0": {"sparkfleet_node_ip": "10.0.0.1"}, "s1": {"sparkfleet_node_ip": "10.0.0.1"}}, 2, {},
         "share sparkfleet_node_ip 10.0.0.1"),
        (["s0"], ["s1", "s2", "s3"], hv(4), 3, {}, "3 x 1 = 3 ranks, but the inventory has 4 GPUs"),
        (["s0"], [f"s{i}" for i in range(1, 16)], hv(16), 16, {"max_tp": 8, "model": "mimo-v2.5-pro"},
         "tensor_parallel_size=16 exceeds mimo-v2.5-pro's max_tp of 8"),
    ],
)
def test_bad_inventories_name_the_field(heads, workers, hostvars, tp, kwargs, needle):
    with pytest.raises(TopologyError) as err:
        plan(heads, workers, hostvars, tp, **kwargs)
    assert needle in str(err.value)


def test_tp16_error_suggests_pp2():
    with pytest.raises(TopologyError) as err:
        plan(["s0"], [f"s{i}" for i in range(1, 16)], hv(16), 16, max_tp=8)
    assert "TP=8 x PP=2" in str(err.value)
