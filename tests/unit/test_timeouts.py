import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import timeouts


def test_seed_values_are_the_floor():
    env = timeouts.plan(8)
    assert env["RAY_agent_register_timeout_ms"] == "900000"
    assert env["RAY_health_check_initial_delay_ms"] == "900000"
    assert env["RAY_health_check_timeout_ms"] == "180000"
    assert env["RAY_health_check_period_ms"] == "10000"
    assert env["RAY_health_check_failure_threshold"] == "2000"
    assert env["RAY_grpc_keepalive_time_ms"] == "60000"
    assert env["RAY_grpc_keepalive_timeout_ms"] == "600000"
    assert env["VLLM_RPC_TIMEOUT"] == "14400000"
    assert env["RAY_memory_monitor_refresh_ms"] == "0"
    assert all(isinstance(v, str) for v in env.values())


def test_budgets_grow_with_the_model():
    small = timeouts.plan(16, model_bytes=10**9)
    huge = timeouts.plan(16, model_bytes=600 * 10**9, read_bps=0.5e9)  # 20 min ideal read per rank
    assert int(small["RAY_agent_register_timeout_ms"]) == 900000
    assert int(huge["RAY_agent_register_timeout_ms"]) == 3 * 1200 * 1000
    assert int(huge["VLLM_ENGINE_READY_TIMEOUT_S"]) > 3600


def test_overrides_win_and_are_checked():
    assert timeouts.plan(2, overrides={"RAY_health_check_period_ms": 1})["RAY_health_check_period_ms"] == "1"
    with pytest.raises(ValueError, match="NCCL_DEBUG"):
        timeouts.plan(2, overrides={"NCCL_DEBUG": "INFO"})
    with pytest.raises(ValueError):
        timeouts.plan(0)
