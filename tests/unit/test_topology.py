import itertools
import re

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.topology import TopologyError, plan, suggest, widest

ADVICE = re.compile(r"TP=(\d+) x PP=(\d+)")


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


def nodes(n):
    return ["s0"], [f"s{i}" for i in range(1, n)], hv(n)


def advised(err):
    found = ADVICE.findall(str(err.value))
    assert len(found) == 1, str(err.value)
    return int(found[0][0]), int(found[0][1])


def test_tp16_on_four_gpus_advises_tp4():
    """-e sparkfleet_tensor_parallel_size=16 on 4 nodes with max_tp 8: the advice must fit these 4 GPUs."""
    with pytest.raises(TopologyError) as err:
        plan(*nodes(4), 16, max_tp=8, model="mimo-v2.5-pro")
    assert "exceeds mimo-v2.5-pro's max_tp of 8" in str(err.value)
    assert "TP=4 x PP=1" in str(err.value)
    assert "TP=8" not in str(err.value)
    assert plan(*nodes(4), *advised(err), max_tp=8)["world_size"] == 4


@pytest.mark.parametrize(
    ("total", "max_tp", "expected"),
    [(4, 8, (4, 1)), (16, 8, (8, 2)), (16, None, (16, 1)), (12, 8, (6, 2)), (7, 4, (1, 7)), (6, 4, (3, 2)),
     (1, 16, (1, 1)), (16, 1, (1, 16)), (10, 0, (10, 1))],
)
def test_suggest(total, max_tp, expected):
    assert suggest(total, max_tp) == expected


def test_suggest_rejects_an_empty_cluster():
    with pytest.raises(ValueError, match="total_gpus must be >= 1"):
        suggest(0, 8)


@pytest.mark.parametrize("heads", [None, 128, 64, 40])
@pytest.mark.parametrize("max_tp", [None, 1, 2, 4, 8, 16])
@pytest.mark.parametrize("total", range(1, 17))
def test_every_refusal_advises_sizes_plan_accepts(total, max_tp, heads):
    """Property: for every requested TP x PP the plan refuses, the advised sizes are accepted by plan(), and
    every TP it plans or accepts divides the model's attention heads."""
    tp_s, pp_s = suggest(total, max_tp, heads)
    assert tp_s * pp_s == total and total % tp_s == 0 and (heads is None or heads % tp_s == 0)
    assert max_tp is None or tp_s <= max_tp
    # tp_s is the largest such divisor: no divisor above it fits under the cap and divides the heads.
    assert not [d for d in range(tp_s + 1, total + 1)
                if total % d == 0 and (max_tp is None or d <= max_tp) and (heads is None or heads % d == 0)]
    wide = widest(max_tp, heads)
    refused = 0
    for tp, pp in itertools.product(range(0, 18), range(0, 5)):
        try:
            got = plan(*nodes(total), tp, pp, max_tp=max_tp, model="m", attention_heads=heads)
        except TopologyError as err:
            refused += 1
            found = ADVICE.findall(str(err))
            assert len(found) == 1, "refusal without one TP x PP advice: %s" % err
            a_tp, a_pp = int(found[0][0]), int(found[0][1])
            assert (a_tp, a_pp) == (tp_s, pp_s), str(err)
            p = plan(*nodes(total), a_tp, a_pp, max_tp=max_tp, model="m", attention_heads=heads)
            assert p["world_size"] == p["gpu_count"] == total
        else:
            # 0 is unset: the plan fills it in; a size that was given is kept.
            g_tp, g_pp, count = got["tensor_parallel_size"], got["pipeline_parallel_size"], got["replica_count"]
            # Nothing set: replicas of the model's widest TP where it divides the GPUs, else one spread over
            # every node; any size set: one replica.
            assert count == (total // wide if not tp and not pp and wide and total % wide == 0 else 1)
            assert g_tp * g_pp * count == total and (max_tp is None or g_tp <= max_tp)
            assert heads is None or heads % g_tp == 0
            assert (tp in (0, g_tp)) and (pp in (0, g_pp)) and (pp or not tp or g_pp == 1)
            assert got["sizes_from"] == ("inventory" if tp else "recipe")
    assert refused > 0


@pytest.mark.parametrize(("max_tp", "want"), [(16, (1, 16, 1)), (8, (2, 8, 1)), (None, (1, 16, 1))])
def test_unset_sizes_on_16_sparks_follow_the_model(max_tp, want):
    """Kimi-K2.5 (max TP 16) runs TP=16 on 16 Sparks, as seed 000 does; MiMo-V2.5-Pro (max TP 8) 2 x TP=8."""
    got = plan(*nodes(16), max_tp=max_tp, model="m")
    assert (got["replica_count"], got["tensor_parallel_size"], got["pipeline_parallel_size"]) == want
    assert got["sizes_from"] == "recipe"


@pytest.mark.parametrize(("count", "heads", "max_tp", "want"), [
    (16, 128, 8, (2, 8, 1)),   # MiMo-V2.5-Pro on 16 Sparks: two replicas of TP8
    (8, 128, 8, (1, 8, 1)),
    (12, 128, 8, (1, 4, 3)),   # not two replicas of TP6: 128 heads do not split 6 ways
    (10, 128, 8, (1, 2, 5)),   # not two replicas of TP5
    (6, 128, 8, (1, 2, 3)),
    (16, 64, 16, (1, 16, 1)),  # Kimi-K2.5 on 16 Sparks: TP16, as seed 000 runs it
    (12, 64, 16, (1, 4, 3)),
])
def test_unset_sizes_follow_the_attention_heads(count, heads, max_tp, want):
    """A TP that does not divide the model's attention heads fails in vLLM at the end of a boot of up to two
    hours; the plan never chooses one, and keeps the model spread over every node when no replica of the
    widest TP fits the GPUs."""
    got = plan(*nodes(count), max_tp=max_tp, model="m", attention_heads=heads)
    assert (got["replica_count"], got["tensor_parallel_size"], got["pipeline_parallel_size"]) == want


def test_a_tp_that_does_not_divide_the_heads_is_refused_with_sizes_that_do():
    with pytest.raises(TopologyError) as err:
        plan(*nodes(12), 6, 2, max_tp=8, model="mimo-v2.5-pro", attention_heads=128)
    said = str(err.value)
    assert said.startswith("tensor_parallel_size=6 does not divide mimo-v2.5-pro's 128 attention heads") and \
        "use TP=4 x PP=3" in said, said
    assert plan(*nodes(12), 4, 3, max_tp=8, model="m", attention_heads=128)["world_size"] == 12


def test_a_pp_given_alone_keeps_its_value_and_tp_takes_the_rest():
    got = plan(*nodes(16), 0, 4, max_tp=16, model="m")
    assert (got["tensor_parallel_size"], got["pipeline_parallel_size"]) == (4, 4)
    with pytest.raises(TopologyError, match="pipeline_parallel_size=3 does not divide the 16 GPUs"):
        plan(*nodes(16), 0, 3, max_tp=16, model="m")


def test_two_replicas_each_get_a_head_and_whole_nodes_in_inventory_order():
    got = plan(*nodes(16), max_tp=8, model="m")
    first, second = got["replicas"]
    assert first["head"] == got["head"] == "s0" and first["nodes"] == ["s%d" % i for i in range(8)]
    assert second["head"] == "s8" and second["workers"] == ["s%d" % i for i in range(9, 16)]
    assert second["head_ip"] == got["node_ips"]["s8"] and set(second["node_ips"]) == set(second["nodes"])
    assert (second["node_count"], second["gpu_count"], second["world_size"]) == (8, 8, 8)
    assert got["heads"] == ["s0", "s8"] and got["replica_of"]["s9"] == 1 and got["replica_of"]["s7"] == 0
    assert (got["node_count"], got["gpu_count"]) == (16, 16)  # the whole cluster, for images and weights


def test_replicas_set_in_the_inventory():
    got = plan(*nodes(4), 2, 0, max_tp=8, model="m", replicas=2)
    assert [r["nodes"] for r in got["replicas"]] == [["s0", "s1"], ["s2", "s3"]]
    assert (got["tensor_parallel_size"], got["pipeline_parallel_size"]) == (2, 1)
    assert plan(*nodes(4), 4, 0, max_tp=8, model="m")["replica_count"] == 1  # a size set keeps one replica
    assert plan(*nodes(4), 0, 0, max_tp=8, model="m", replicas=1)["tensor_parallel_size"] == 4


@pytest.mark.parametrize(("kwargs", "needle"), [
    (dict(replicas=3), "sparkfleet_replicas=3 does not divide the 4 GPUs of this inventory"),
    (dict(replicas=2, tensor_parallel_size=4),
     "= 4 ranks, but each of the 2 replicas has 2 GPUs; make them equal: for the 2 GPUs of each of the 2 replicas"),
    (dict(replicas=-1), "replicas must be >= 1"),
])
def test_bad_replica_counts_name_the_field(kwargs, needle):
    with pytest.raises(TopologyError, match=re.escape(needle)):
        plan(*nodes(4), max_tp=8, model="m", **kwargs)


def test_a_node_is_never_split_between_replicas():
    heads, workers, hostvars = nodes(3)
    hostvars["s1"]["sparkfleet_gpus_per_node"] = 2  # 4 GPUs: s0 (1), s1 (2), s2 (1)
    with pytest.raises(TopologyError, match="the nodes s0, s1 hold 3 GPUs, more than one replica's 2"):
        plan(heads, workers, hostvars, max_tp=8, model="m", replicas=2)
