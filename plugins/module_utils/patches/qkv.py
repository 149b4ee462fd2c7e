# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Pure functions that the MiMo patches insert into vLLM (their source is copied verbatim), tested here.

They take plain integers and names, so they can be tested with numpy on a machine without torch or GPUs.
"""

from __future__ import annotations


def _sparkfleet_qkv_rows(total_rows, num_heads, num_kv_heads, head_dim, v_head_dim):
    """Row counts of Q, K and V in a plain fused [Q|K|V] qkv_proj tensor (weights or per-row scales)."""
    q, k, v = num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * v_head_dim
    if q + k + v != total_rows:
        raise ValueError(
            "fused qkv_proj has %d rows, but %d Q heads x %d + %d KV heads x (%d + %d) = %d; the checkpoint is "
            "not a plain [Q|K|V] stack (set VLLM_SPARKFLEET_MIMO_QKV_LAYOUT=interleaved for a pre-sharded one)"
            % (total_rows, num_heads, head_dim, num_kv_heads, head_dim, v_head_dim, q + k + v))
    return [q, k, v]


def _sparkfleet_scale_name(name, param_names):
    """ModelOpt stores MXFP8 scales as ``weight_scale_inv``; vLLM's MXFP8 linear registers ``weight_scale``.

    The bytes are forward E8M0 scales, so only the name changes (flipping them, 254 - byte, makes the
    output worse). A name vLLM already knows is left alone.
    """
    if name.endswith(".weight_scale_inv") and name not in param_names:
        renamed = name[: -len("_inv")]
        if renamed in param_names:
            return renamed
    return name


def shard_rows(q, k, v, tp_size, tp_rank):
    """Rows of the fused tensor that QKVParallelLinear's weight_loader gives ``tp_rank`` for shards q, k, v.

    Mirrors vLLM: each of Q, K, V is split evenly over the ranks (KV heads are replicated when there are
    fewer than ranks). Used by the tests to compare the proper split with the naive chunk.
    """
    def part(offset, size):
        if size % tp_size == 0:
            step = size // tp_size
            return list(range(offset + tp_rank * step, offset + (tp_rank + 1) * step))
        return list(range(offset, offset + size))  # replicated

    return part(0, q), part(q, k), part(q + k, v)
