# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Inventory validation and the topology plan: which node is the Ray head, how ranks map onto GPUs.

Every error names the field at fault and the fix, before anything on a node is touched.
"""

from __future__ import annotations

import ipaddress


class TopologyError(ValueError):
    pass


def _ip(host, value):
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        raise TopologyError("host %s: sparkfleet_node_ip %r is not an IP address; set it to the node's fabric IP"
                            % (host, value)) from None


def suggest(total_gpus, max_tp=None):
    """The sizes to advise for ``total_gpus`` GPUs: ``(tp, pp)`` with ``tp * pp == total_gpus``.

    ``tp`` is the largest divisor of ``total_gpus`` that is <= ``max_tp`` (the model's largest working TP;
    ``None`` or 0: no limit), ``pp`` the rest. Pure; ``plan()`` accepts what it returns.
    """
    total = int(total_gpus)
    if total < 1:
        raise ValueError("total_gpus must be >= 1, got %d" % total)
    cap = min(total, int(max_tp)) if max_tp else total
    tp = max(d for d in range(1, max(cap, 1) + 1) if total % d == 0)
    return tp, total // tp


def _advice(total, max_tp, model, name_limit=True):
    tp, pp = suggest(total, max_tp)
    limit = " and %s's max_tp of %d" % (model or "the model", int(max_tp)) if max_tp and name_limit else ""
    return ("for the %d GPUs of this inventory%s use TP=%d x PP=%d (tensor_parallel_size=%d, "
            "pipeline_parallel_size=%d)" % (total, limit, tp, pp, tp, pp))


def plan(heads, workers, hostvars, tensor_parallel_size=0, pipeline_parallel_size=0, max_tp=None, model=""):
    """Validate the inventory and return the plan the rest of the deploy follows.

    ``tensor_parallel_size`` 0 (unset) lets the recipe's ``max_tp`` decide with suggest(); a
    ``pipeline_parallel_size`` of 0 is 1 when TP is set.

    ``hostvars[host]`` must carry ``sparkfleet_node_ip`` and may carry ``sparkfleet_gpus_per_node``
    (default 1: a DGX Spark has one GB10).
    """
    if len(heads) != 1:
        raise TopologyError("inventory group ray_head must hold exactly one host, it holds %d (%s); put the node "
                            "that runs the Ray head and vllm serve there" % (len(heads), ", ".join(heads) or "none"))
    head = heads[0]
    if head in workers:
        raise TopologyError("host %s is in both ray_head and ray_workers; remove it from ray_workers" % head)
    dupes = sorted({w for w in workers if workers.count(w) > 1})
    if dupes:
        raise TopologyError("ray_workers lists %s more than once" % ", ".join(dupes))
    nodes = [head] + list(workers)
    ips, gpus = {}, {}
    for host in nodes:
        hv = hostvars.get(host) or {}
        if not hv.get("sparkfleet_node_ip"):
            raise TopologyError("host %s: sparkfleet_node_ip is not set; set it to the node's fabric (ConnectX) IP, "
                                "the address Ray and NCCL use" % host)
        ips[host] = _ip(host, hv["sparkfleet_node_ip"])
        gpus[host] = int(hv.get("sparkfleet_gpus_per_node", 1))
        if gpus[host] < 1:
            raise TopologyError("host %s: sparkfleet_gpus_per_node must be >= 1" % host)
    seen = {}
    for host, ip in ips.items():
        if ip in seen:
            raise TopologyError("hosts %s and %s share sparkfleet_node_ip %s; each node needs its own"
                                % (seen[ip], host, ip))
        seen[ip] = host
    total = sum(gpus.values())
    tp, pp = int(tensor_parallel_size or 0), int(pipeline_parallel_size or 0)
    sizes_from = "inventory"
    if not tp:
        # Unset: the recipe decides. TP as wide as the model allows on these GPUs, PP for the rest (Kimi-K2.5
        # on 16 Sparks: TP=16, as seed 000 runs it; MiMo-V2.5-Pro, max TP 8: TP=8 x PP=2). A PP given alone
        # keeps its value and TP takes the rest.
        sizes_from = "recipe"
        if pp:
            tp = total // pp if total % pp == 0 else 0
            if tp < 1:
                raise TopologyError("pipeline_parallel_size=%d does not divide the %d GPUs of this inventory; %s"
                                    % (pp, total, _advice(total, max_tp, model)))
        else:
            tp, pp = suggest(total, max_tp)
    elif not pp:
        pp = 1
    if tp < 1 or pp < 1:
        raise TopologyError("tensor_parallel_size and pipeline_parallel_size must be >= 1 (got %d, %d); %s"
                            % (tp, pp, _advice(total, max_tp, model)))
    world = tp * pp
    if max_tp and tp > int(max_tp):
        raise TopologyError("tensor_parallel_size=%d exceeds %s's max_tp of %d; %s"
                            % (tp, model or "the model", int(max_tp), _advice(total, max_tp, model, name_limit=False)))
    if world != total:
        raise TopologyError("tensor_parallel_size x pipeline_parallel_size = %d x %d = %d ranks, but the inventory "
                            "has %d GPUs on %d nodes; make them equal: %s, or add or remove nodes"
                            % (tp, pp, world, total, len(nodes), _advice(total, max_tp, model)))
    return {
        "head": head,
        "head_ip": ips[head],
        "workers": list(workers),
        "nodes": nodes,
        "node_ips": ips,
        "node_count": len(nodes),
        "gpu_count": total,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "world_size": world,
        "sizes_from": sizes_from,
    }
