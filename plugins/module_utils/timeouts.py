# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The Ray and vLLM environment for a cluster, planned once and set identically on every node.

Ray's defaults suit small, fast clusters: a worker must register within 30 s and a node missing five
3-second health checks is declared dead. A Spark head that loads weights into unified memory stalls far
longer than that, and the cluster falls apart mid-boot. The floor below is the profile that booted
MiMo-V2.5-Pro on 8 Sparks, less its health check (see LIVENESS_PROFILE); boot-time budgets grow with the
model's size per node.
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

# Liveness: the seed's health check (first check after 15 min, then 2000 misses of up to 190 s each)
# never declares a node dead. A worker lost after serving then stays "alive" in Ray's table, its
# replacement joins beside it, and the gate sees 5 nodes of 4 until someone tears the cluster down.
#
# How Ray's GCS checks a node: the first check INITIAL_DELAY after the node registers, then one check at a
# time, PERIOD after the last one ended; a check fails when the raylet has not answered within TIMEOUT; the
# node is dead after THRESHOLD failures in a row, and one answer resets the count. So:
#   - a lost process or container (its port refuses at once): dead about THRESHOLD x PERIOD after the loss
#     (5 x 3 s = 15 s; INITIAL_DELAY only matters in the node's first 10 s);
#   - a silent node (frozen, or cut off the fabric): dead after THRESHOLD x (TIMEOUT + PERIOD) of unbroken
#     silence, 5 x 63 s = 5 min 15 s.
# The long weight loads are what the seed's values were for. They do not stop a raylet: it is its own
# process and answers from its own gRPC threads while the rank loads. What a Spark's load can do is make
# the whole node sluggish (page-cache churn in unified memory), so an answer may take tens of seconds:
# TIMEOUT is 60 s per answer, and a node must stay silent for over 5 min in a row before Ray drops it.
# The head is different: its GCS runs these checks, so a stalled head stalls no worker's count; what a
# stalled head breaks is the raylets' GCS connection (gcs_rpc_server_reconnect_timeout_s, 60 s), which is
# why a head paused for more than 60 s ends the cluster (the verify role and status.yml name it).
LIVENESS_PROFILE = {
    "RAY_health_check_initial_delay_ms": 10000,
    "RAY_health_check_period_ms": 3000,
    "RAY_health_check_timeout_ms": 60000,
    "RAY_health_check_failure_threshold": 5,
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
    env.update(LIVENESS_PROFILE)
    # Every rank reads every shard with vLLM's default loader; allow 3x the ideal read plus the floor.
    load_ms = int(3 * 1000 * model_bytes / read_bps)
    env["RAY_agent_register_timeout_ms"] = max(env["RAY_agent_register_timeout_ms"], load_ms)
    env["VLLM_ENGINE_READY_TIMEOUT_S"] = max(env["VLLM_ENGINE_READY_TIMEOUT_S"], load_ms // 1000 * 2)
    env["VLLM_RPC_TIMEOUT"] = max(env["VLLM_RPC_TIMEOUT"], load_ms * 4)
    unknown = sorted(k for k in (overrides or {}) if not (k.startswith("RAY_") or k.startswith("VLLM_")))
    if unknown:
        raise ValueError("timeout overrides must be RAY_* or VLLM_* variables; got %s" % ", ".join(unknown))
    env.update(overrides or {})
    return {k: str(v) for k, v in sorted(env.items())}


def liveness(env):
    """Seconds until Ray declares a node dead, from the planned env: ``lost`` for a process whose port
    refuses at once, ``silent`` for a node that answers nothing (frozen, or cut off the fabric)."""
    period = int(env["RAY_health_check_period_ms"]) / 1000.0
    timeout = int(env["RAY_health_check_timeout_ms"]) / 1000.0
    threshold = int(env["RAY_health_check_failure_threshold"])
    return {"lost": threshold * period, "silent": threshold * (timeout + period)}
