# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The Ray and vLLM environment for a cluster, planned once and set identically on every node.

Ray's defaults suit small, fast clusters: a worker must register within 30 s and a node missing five
3-second health checks is declared dead. A Spark head that loads weights into unified memory stalls far
longer than that, and the cluster falls apart mid-boot. The floor below is the profile that booted
MiMo-V2.5-Pro on 8 Sparks; boot-time budgets grow with the model's size per node.
"""

from __future__ import annotations

# The seed recipe's values (8 Sparks, MiMo-V2.5-Pro, ~30 min boot).
SEED_PROFILE = {
    "RAY_agent_register_timeout_ms": 900000,
    "RAY_health_check_initial_delay_ms": 900000,
    "RAY_health_check_timeout_ms": 180000,
    "RAY_health_check_period_ms": 10000,
    "RAY_health_check_failure_threshold": 2000,
    "RAY_grpc_keepalive_time_ms": 60000,
    "RAY_grpc_keepalive_timeout_ms": 600000,
    "VLLM_RPC_TIMEOUT": 14400000,
}

# What the field adds: unified memory confuses Ray's OOM killer; compiled-graph gets and the engine's
# readiness wait must outlast a slow head.
FIELD_PROFILE = {
    "RAY_memory_monitor_refresh_ms": 0,
    "RAY_CGRAPH_get_timeout": 1800,
    "VLLM_ENGINE_READY_TIMEOUT_S": 3600,
}

# Conservative cold-read speed of a Spark's NVMe through the page cache, bytes/s, used only to scale
# boot budgets; measured values may be passed in.
DEFAULT_READ_BPS = 1.0e9


def plan(node_count, model_bytes=0, read_bps=DEFAULT_READ_BPS, overrides=None):
    """Return {VAR: "value"}: the seed floor, scaled up when a rank's full read would outlast it."""
    if node_count < 1:
        raise ValueError("node_count must be >= 1, got %r" % (node_count,))
    if read_bps <= 0:
        raise ValueError("read_bps must be > 0, got %r" % (read_bps,))
    env = dict(SEED_PROFILE)
    env.update(FIELD_PROFILE)
    # Every rank reads every shard with vLLM's default loader; allow 3x the ideal read plus the floor.
    load_ms = int(3 * 1000 * model_bytes / read_bps)
    for key in ("RAY_agent_register_timeout_ms", "RAY_health_check_initial_delay_ms"):
        env[key] = max(env[key], load_ms)
    env["VLLM_ENGINE_READY_TIMEOUT_S"] = max(env["VLLM_ENGINE_READY_TIMEOUT_S"], load_ms // 1000 * 2)
    env["VLLM_RPC_TIMEOUT"] = max(env["VLLM_RPC_TIMEOUT"], load_ms * 4)
    unknown = sorted(k for k in (overrides or {}) if not (k.startswith("RAY_") or k.startswith("VLLM_")))
    if unknown:
        raise ValueError("timeout overrides must be RAY_* or VLLM_* variables; got %s" % ", ".join(unknown))
    env.update(overrides or {})
    return {k: str(v) for k, v in sorted(env.items())}
