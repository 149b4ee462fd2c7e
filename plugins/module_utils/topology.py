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


def _fits(tp, heads):
    """Whether vLLM can split ``heads`` attention heads over ``tp`` ranks (None: the recipe does not say)."""
    return not heads or int(heads) % tp == 0


def suggest(total_gpus, max_tp=None, heads=None):
    """The sizes to advise for ``total_gpus`` GPUs: ``(tp, pp)`` with ``tp * pp == total_gpus``.

    ``tp`` is the largest divisor of ``total_gpus`` that is <= ``max_tp`` (the model's largest working TP;
    ``None`` or 0: no limit) and divides ``heads`` (the model's attention heads; ``None``: not checked),
    ``pp`` the rest. Pure; ``plan()`` accepts what it returns.
    """
    total = int(total_gpus)
    if total < 1:
        raise ValueError("total_gpus must be >= 1, got %d" % total)
    cap = min(total, int(max_tp)) if max_tp else total
    tp = max(d for d in range(1, max(cap, 1) + 1) if total % d == 0 and _fits(d, heads))
    return tp, total // tp


def widest(max_tp=None, heads=None):
    """The model's widest TP whatever the GPUs: the largest TP <= ``max_tp`` that divides ``heads``
    (None when neither is known)."""
    if not max_tp:
        return int(heads) if heads else None
    return max(d for d in range(1, int(max_tp) + 1) if _fits(d, heads))


def _advice(total, max_tp, model, name_limit=True, where=None, heads=None):
    tp, pp = suggest(total, max_tp, heads)
    limit = " and %s's max_tp of %d" % (model or "the model", int(max_tp)) if max_tp and name_limit else ""
    return ("for %s%s use TP=%d x PP=%d (tensor_parallel_size=%d, pipeline_parallel_size=%d)"
            % (where or "the %d GPUs of this inventory" % total, limit, tp, pp, tp, pp))


def plan(heads, workers, hostvars, tensor_parallel_size=0, pipeline_parallel_size=0, max_tp=None, model="",
         replicas=0, attention_heads=None):
    """Validate the inventory and return the plan the rest of the deploy follows.

    ``replicas`` R splits the nodes, in inventory order (the head first), into R engines of TP x PP ranks
    each, every one its own Ray cluster with its own head (the first node of its share). 0 (unset): when TP
    and PP are unset too and the model's widest TP (widest()) divides the GPUs, as many replicas of that TP as
    the GPUs hold (MiMo-V2.5-Pro, max TP 8, on 16 Sparks: 2 x TP8); else 1, which spreads the model over every
    node (MiMo on 12 Sparks: TP4 x PP3), since a smaller replica may not hold the model.

    ``tensor_parallel_size`` 0 (unset) lets the recipe's ``max_tp`` and ``attention_heads`` decide with
    suggest(); a ``pipeline_parallel_size`` of 0 is 1 when TP is set. A TP that does not divide
    ``attention_heads`` is refused: vLLM would fail to load the model after its whole boot.

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
    tp, pp, count = int(tensor_parallel_size or 0), int(pipeline_parallel_size or 0), int(replicas or 0)
    if count < 0:
        raise TopologyError("replicas must be >= 1 (got %d); set sparkfleet_replicas, or leave it unset" % count)
    if not count:
        # Unset: replicas rather than pipeline stages when nothing else is set (a second replica doubles the
        # throughput; a second stage adds a hop to every token). Sizes the inventory sets keep one replica.
        wide = widest(max_tp, attention_heads)
        count = total // wide if not tp and not pp and wide and total % wide == 0 else 1
    elif total % count:
        raise TopologyError("sparkfleet_replicas=%d does not divide the %d GPUs of this inventory; choose a "
                            "divisor of %d, or add or remove nodes" % (count, total, total))
    per = total // count
    where = ("the %d GPUs of this inventory" % total if count == 1 else
             "the %d GPUs of each of the %d replicas" % (per, count))
    sizes_from = "inventory"
    if not tp:
        # Unset: the recipe decides. TP as wide as the model allows on these GPUs, PP for the rest (Kimi-K2.5
        # on 16 Sparks: TP=16, as seed 000 runs it). A PP given alone keeps its value and TP takes the rest.
        sizes_from = "recipe"
        if pp:
            tp = per // pp if per % pp == 0 else 0
            if tp < 1:
                raise TopologyError("pipeline_parallel_size=%d does not divide %s; %s"
                                    % (pp, where, _advice(per, max_tp, model, where=where, heads=attention_heads)))
        else:
            tp, pp = suggest(per, max_tp, attention_heads)
    elif not pp:
        pp = 1
    if tp < 1 or pp < 1:
        raise TopologyError("tensor_parallel_size and pipeline_parallel_size must be >= 1 (got %d, %d); %s"
                            % (tp, pp, _advice(per, max_tp, model, where=where, heads=attention_heads)))
    world = tp * pp
    if max_tp and tp > int(max_tp):
        raise TopologyError("tensor_parallel_size=%d exceeds %s's max_tp of %d; %s"
                            % (tp, model or "the model", int(max_tp),
                               _advice(per, max_tp, model, name_limit=False, where=where, heads=attention_heads)))
    if world != per:
        has = ("the inventory has %d GPUs on %d nodes" % (total, len(nodes)) if count == 1 else
               "each of the %d replicas has %d GPUs" % (count, per))
        raise TopologyError("tensor_parallel_size x pipeline_parallel_size = %d x %d = %d ranks, but %s; make them "
                            "equal: %s, or add or remove nodes"
                            % (tp, pp, world, has, _advice(per, max_tp, model, where=where, heads=attention_heads)))
    if not _fits(tp, attention_heads):
        raise TopologyError("tensor_parallel_size=%d does not divide %s's %d attention heads, so vLLM would fail to "
                            "load it after its whole boot; %s"
                            % (tp, model or "the model", int(attention_heads),
                               _advice(per, max_tp, model, name_limit=False, where=where, heads=attention_heads)))
    shares, share = [], []
    for host in nodes:
        share.append(host)
        held = sum(gpus[h] for h in share)
        if held == per:
            shares.append(share)
            share = []
        elif held > per:
            raise TopologyError("the nodes %s hold %d GPUs, more than one replica's %d: a node cannot be split "
                                "between replicas; set sparkfleet_replicas so each replica gets whole nodes"
                                % (", ".join(share), held, per))
    sizes = {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "world_size": world}
    replica_plans = [dict(sizes, index=i, name="replica-%d" % i, head=s[0], head_ip=ips[s[0]], workers=s[1:],
                          nodes=s, node_ips={h: ips[h] for h in s}, node_count=len(s), gpu_count=per)
                     for i, s in enumerate(shares)]
    return dict(
        sizes,
        head=head,
        head_ip=ips[head],
        workers=list(workers),
        nodes=nodes,
        node_ips=ips,
        node_count=len(nodes),
        gpu_count=total,
        sizes_from=sizes_from,
        replica_count=count,
        replicas=replica_plans,
        replica_of={h: r["index"] for r in replica_plans for h in r["nodes"]},
        heads=[r["head"] for r in replica_plans],
    )
