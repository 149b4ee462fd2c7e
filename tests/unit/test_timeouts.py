import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import timeouts


def test_seed_values_are_the_floor():
    env = timeouts.plan(8)
    assert env["RAY_agent_register_timeout_ms"] == "900000"
    assert env["RAY_grpc_keepalive_time_ms"] == "60000"
    assert env["RAY_grpc_keepalive_timeout_ms"] == "600000"
    assert env["VLLM_RPC_TIMEOUT"] == "14400000"
    assert env["RAY_memory_monitor_refresh_ms"] == "0"
    assert all(isinstance(v, str) for v in env.values())


def test_a_lost_node_is_dropped_in_seconds_and_a_sluggish_one_is_kept():
    """Seed 004's health check never drops a node (the gate then sees 5 of 4 after a worker is replaced);
    ours drops a refused raylet in seconds and still keeps one that answers within a minute."""
    seed = timeouts.liveness(timeouts.SEED_PROFILE)
    assert seed["lost"] >= 2000 * 10 and seed["silent"] > 86400
    for env in (timeouts.plan(4), timeouts.plan(16, model_bytes=600 * 10**9, read_bps=0.5e9)):
        bounds = timeouts.liveness(env)
        assert bounds["lost"] <= 30
        assert int(env["RAY_health_check_initial_delay_ms"]) <= 30000  # a loss soon after the join counts too
        assert int(env["RAY_health_check_timeout_ms"]) >= 60000  # one slow answer of a loading node is no miss
        assert bounds["silent"] >= 300  # 5 min of unbroken silence before a sluggish node is dropped
    assert timeouts.liveness(timeouts.plan(4)) == {"lost": 15.0, "silent": 315.0}


def test_budgets_grow_with_the_model():
    small = timeouts.plan(16, model_bytes=10**9)
    huge = timeouts.plan(16, model_bytes=600 * 10**9, read_bps=0.5e9)  # 20 min ideal read per rank
    assert int(small["RAY_agent_register_timeout_ms"]) == 900000
    assert int(huge["RAY_agent_register_timeout_ms"]) == 3 * 1200 * 1000
    assert int(huge["VLLM_ENGINE_READY_TIMEOUT_S"]) > 3600
    # The health check does not grow with the model: a lost node is dropped as fast on a big one.
    assert huge["RAY_health_check_initial_delay_ms"] == small["RAY_health_check_initial_delay_ms"]


def test_overrides_win_and_are_checked():
    assert timeouts.plan(2, overrides={"RAY_health_check_period_ms": 1})["RAY_health_check_period_ms"] == "1"
    with pytest.raises(ValueError, match="NCCL_DEBUG"):
        timeouts.plan(2, overrides={"NCCL_DEBUG": "INFO"})
    with pytest.raises(ValueError):
        timeouts.plan(0)
