# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The verdict on a running cluster, from what every node reported (status.yml, and verify on a failure).

Pure: the node_state module gathers each node's containers, the head's Ray table and the server's log; this
judges them against the plan and names, for every defect, the node, what was seen and what to do.
"""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.vllm.plugins.module_utils import haproxy

_ON_IP = re.compile(r"\(on ([0-9A-Fa-f.:]+)\)")


def _container_line(state):
    """'exited (exit 137, since 2026-12-05T18:30:01Z)' for a container that is not running."""
    if not state or not state.get("exists"):
        return "does not exist"
    line = state.get("status") or "unknown"
    extra = []
    if state.get("status") == "exited":
        extra.append("exit %s" % state.get("exit_code"))
        if state.get("oom_killed"):
            extra.append("killed for memory")
    if state.get("finished_at") and state.get("status") != "running":
        extra.append("since %s" % _stamp(state["finished_at"]))
    if state.get("error"):
        extra.append(state["error"])
    return line + (" (%s)" % ", ".join(extra) if extra else "")


def _named(text, names_by_ip):
    """Put the node's name beside an address a log line gave: '(on 10.0.0.2)' -> '(on spark-02, 10.0.0.2)'."""
    def sub(m):
        name = names_by_ip.get(m.group(1))
        return "(on %s, %s)" % (name, m.group(1)) if name else m.group(0)
    return _ON_IP.sub(sub, text)


def as_state(result):
    """A node's state from what Ansible registered for its node_state task: the module's ``state``, or
    ``{"unreachable": why}`` for a node that did not answer or whose read failed."""
    result = result or {}
    if result.get("unreachable"):
        return {"unreachable": result.get("msg") or "unreachable"}
    if result.get("failed") or "state" not in result:
        return {"unreachable": result.get("msg") or "no state reported"}
    return result["state"]


def _stamp(value):
    """Docker's RFC 3339 stamp to the second: 2026-12-05T18:33:40.584084128Z -> 2026-12-05T18:33:40Z."""
    return re.sub(r"\.\d+(?=Z|[+-]\d\d:\d\d$)", "", value or "")


REDEPLOY = "run the deploy again: it rejoins lost nodes and restarts the server, with no teardown first"


def judge(nodes, head, states, ray_container="sparkfleet-ray", server_container="sparkfleet-vllm", gpus=None):
    """Judge the cluster.

    ``nodes`` maps node name -> fabric IP (the plan's); ``head`` is the Ray head's name; ``states`` maps node
    name -> what Ansible registered for its node_state task (see as_state()). ``gpus`` is the GPU count the
    plan needs (default: one per node).

    Returns ``{"healthy", "findings": [str], "nodes": {name: str}, "endpoint": str, "advice": str}``: one
    finding per node at fault, naming it, its fabric IP and everything seen there.
    """
    gpus = len(nodes) if gpus is None else gpus
    names_by_ip = {ip: name for name, ip in nodes.items()}
    states = {name: as_state(states.get(name)) for name in nodes}
    seen = {name: [] for name in nodes}  # what is wrong on each node, in words
    lines, others = {}, []
    for name in sorted(nodes):
        state = states[name]
        if "unreachable" in state:
            seen[name].append("no state from the node (%s); check its power, SSH and network" % state["unreachable"])
            lines[name] = "unreachable"
            continue
        ray = (state.get("containers") or {}).get(ray_container)
        if not (ray and ray.get("running")):
            seen[name].append("its Ray container %s %s" % (ray_container, _container_line(ray)))
            lines[name] = "Ray %s" % _container_line(ray)
        else:
            lines[name] = "Ray running"

    head_state = states[head]
    table = head_state.get("ray")
    if table is not None and "error" in table:
        seen[head].append("Ray's node table cannot be read: %s" % table["error"])
    elif table is not None:
        alive, dead = set(table.get("alive_ips") or ()), set(table.get("dead_ips") or ())
        for name in sorted(nodes):
            if nodes[name] not in alive and "unreachable" not in states[name]:
                seen[name].append("Ray lists it dead" if nodes[name] in dead else "Ray does not list it")
                lines[name] += "; not alive in Ray"
        for ip, why in sorted((table.get("silent") or {}).items()):
            if ip in names_by_ip and "unreachable" not in states[names_by_ip[ip]]:
                seen[names_by_ip[ip]].append("Ray lists it alive, but it gives the head no answer over the fabric "
                                             "(%s); check its firewall and fabric link" % why)
        for ip in sorted(alive - set(names_by_ip)):
            others.append("Ray has an alive node at %s, which is not a node of this cluster; stop Ray there or add "
                          "the node to the inventory" % ip)
        if table.get("gpus") != gpus and not any(seen.values()):
            seen[head].append("Ray registers %s GPUs, the plan needs %d" % (table.get("gpus"), gpus))
        counts = (table.get("alive", 0), table.get("dead", 0), table.get("gpus"))
        lines[head] += "; cluster %d alive, %d dead, %s GPUs" % counts

    server = (head_state.get("containers") or {}).get(server_container)
    log = head_state.get("server") or {}
    health = head_state.get("health")
    errors = [_named(e, names_by_ip) for e in log.get("errors") or ()]
    said = (", its log: %s" % "; ".join(errors[-3:])) if errors else ""
    if "unreachable" in head_state:
        endpoint = "unknown (the head gave no state)"
    elif not (server and server.get("exists")):
        endpoint = "not started"
        seen[head].append("no vllm serve container %s" % server_container)
    elif not server.get("running"):
        endpoint = "vllm serve %s" % _container_line(server)
        seen[head].append("vllm serve %s%s" % (_container_line(server), said))
    elif health is not None and not health.get("ok"):
        endpoint = "running, /health failing"
        seen[head].append("vllm serve is %s but %s answers %s%s" % (
            server.get("status"), health.get("url", "/health"), health.get("error") or health.get("status"), said))
    else:
        endpoint = "serving" if health and health.get("ok") else "running (health not asked)"
    findings = ["%s (%s%s): %s" % (name, nodes[name], ", the Ray head" if name == head else "", "; ".join(seen[name]))
                for name in sorted(nodes) if seen[name]] + others
    return {"healthy": not findings, "findings": findings, "nodes": lines, "endpoint": endpoint,
            "advice": REDEPLOY if findings else ""}


def replicas(nodes, head, states):
    """{head name: [node names]}: the Ray clusters the nodes report (node_state's ``ray_role``), in the
    order of ``nodes``. Every node whose Ray container is a head heads one; a worker joins the head whose IP
    its container names; ``head`` (the inventory's) always heads one, and a node that reports no Ray role,
    or names a head that is not a node here, is judged with it."""
    roles = {name: (as_state(states.get(name)).get("ray_role") or {}) for name in nodes}
    heads = [name for name in nodes if name == head or roles[name].get("role") == "head"]
    by_ip = {nodes[name]: name for name in heads}
    groups = {name: [name] for name in heads}
    for name in nodes:
        if name not in groups:
            groups[by_ip.get(roles[name].get("head_ip"), head)].append(name)
    return groups


def judge_replicas(nodes, head, states, ray_container="sparkfleet-ray", server_container="sparkfleet-vllm",
                   gpus=None):
    """judge() for each Ray cluster that replicas() finds, merged into one verdict. With one cluster it is
    judge() itself; with more, ``endpoint`` names each replica's head and state, and ``gpus`` is per replica."""
    groups = replicas(nodes, head, states)
    if len(groups) == 1:
        verdict = judge(nodes, head, states, ray_container, server_container, gpus)
    else:
        verdict = {"findings": [], "nodes": {}, "endpoints": {}}
        for name, members in groups.items():
            one = judge({m: nodes[m] for m in members}, name, {m: states.get(m) for m in members}, ray_container,
                        server_container, gpus)
            verdict["findings"] += one["findings"]
            verdict["nodes"].update(one["nodes"])
            verdict["endpoints"][name] = one["endpoint"]
        verdict["endpoint"] = "; ".join("%s: %s" % kv for kv in verdict["endpoints"].items())
    verdict["findings"] += balancer_findings(nodes, states)
    verdict["healthy"] = not verdict["findings"]
    verdict["advice"] = REDEPLOY if verdict["findings"] else ""
    return verdict


def balancer_findings(nodes, states):
    """A finding for the balancer's node when HAProxy cannot be read, or holds a replica out by an admin state
    (drain, maint): the endpoint answers with fewer replicas than the plan's. A replica DOWN for its health
    check is its head's finding, not the balancer's."""
    out = []
    for name in nodes:
        balancer = as_state(states.get(name)).get("balancer")
        if not balancer:
            continue
        if "error" in balancer:
            said = "the balancer cannot be read: %s" % balancer["error"]
        else:
            held = haproxy.held_out(balancer.get("servers") or [])
            said = ("%s; a redeploy that stopped after draining a replica leaves it so" % "; ".join(held)
                    if held else "")
        if said:
            out.append("%s (%s, the balancer): %s" % (name, nodes[name], said))
    return out
