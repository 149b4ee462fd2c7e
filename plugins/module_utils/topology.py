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


def plan(heads, workers, hostvars, tensor_parallel_size, pipeline_parallel_size=1, max_tp=None, model=""):
    """Validate the inventory and return the plan the rest of the deploy follows.

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
    tp, pp = int(tensor_parallel_size), int(pipeline_parallel_size)
    if tp < 1 or pp < 1:
        raise TopologyError("tensor_parallel_size and pipeline_parallel_size must be >= 1 (got %d, %d)" % (tp, pp))
    total = sum(gpus.values())
    world = tp * pp
    if max_tp and tp > int(max_tp):
        raise TopologyError("tensor_parallel_size=%d exceeds %s's max_tp of %d; keep TP <= %d and use "
                            "pipeline_parallel_size (TP=%d x PP=%d) for the other nodes"
                            % (tp, model or "the model", int(max_tp), int(max_tp), int(max_tp),
                               max(1, total // int(max_tp))))
    if world != total:
        raise TopologyError("tensor_parallel_size x pipeline_parallel_size = %d x %d = %d ranks, but the inventory "
                            "has %d GPUs on %d nodes; make them equal (add or remove nodes, or change the sizes)"
                            % (tp, pp, world, total, len(nodes)))
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
    }
