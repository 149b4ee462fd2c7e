#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ray_gate
short_description: Wait until the Ray cluster has every node alive and every GPU registered
version_added: 0.1.0
description:
  - Reads Ray's node table in the head's Ray container until alive nodes == C(nodes) B(and) GPUs ==
    C(gpus), and every expected IP has joined. Fails on timeout with what it saw last, including which
    nodes never joined.
  - "Once the counts pass, the head opens one TCP connection to each node's Ray node manager port:
    Ray keeps a node that went silent (a cut link, a dropping firewall) listed alive for minutes, so a node
    that gives no answer at all in 5 s fails the gate at once, named with its IP."
  - With O(poll_seconds), one call waits at most that long and returns RV(done) and a RV(progress) line; run
    it with C(until) and O(started_at) so that a long gate reports what it sees instead of blocking in
    silence. O(timeout) then counts from O(started_at).
options:
  nodes:
    description: Alive nodes required.
    type: int
    required: true
  gpus:
    description: GPUs required.
    type: int
    required: true
  expected_ips:
    description: Fabric IPs that must all be alive.
    type: list
    elements: str
    default: []
  node_names:
    description: "{fabric IP: node name}, to name a node that does not answer."
    type: dict
    default: {}
  reach_port:
    description: The port each node is asked over the fabric (Ray's node manager); C(0) asks none.
    type: int
    default: 6700
  container_name:
    description: The head's Ray container.
    type: str
    default: sparkfleet-ray
  timeout:
    description: Seconds to wait.
    type: int
    default: 600
  interval:
    description: Seconds between reads.
    type: int
    default: 5
  poll_seconds:
    description: Longest wait of one call; C(0) waits up to O(timeout) in one call.
    type: int
    default: 0
  started_at:
    description: When the gate began (seconds since the epoch); O(timeout) counts from it. Defaults to now.
    type: float
attributes:
  check_mode:
    details: Reads the table once and reports it; does not wait.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Gate on 16 nodes and 16 GPUs
  sparkfleet.vllm.ray_gate:
    nodes: 16
    gpus: 16
"""

RETURN = r"""
summary:
  description: Alive and dead node counts, GPUs, and addresses.
  returned: always
  type: dict
  sample: {alive: 4, dead: 0, gpus: 4, alive_ips: [172.29.0.10], dead_ips: []}
waited_s:
  description: Seconds spent waiting (since O(started_at) when given).
  returned: success, not in check mode
  type: float
done:
  description: Whether the gate is passed.
  returned: success, not in check mode
  type: bool
ready:
  description: Whether the one read made in check mode passes the gate.
  returned: in check mode, when the head's Ray container exists
  type: bool
progress:
  description: What the last read saw, for the play's output.
  returned: success, not in check mode
  type: str
  sample: "Ray gate: 3/4 nodes alive, 3/4 GPUs; not joined: 172.29.0.13 (25 s)"
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, _ray, fabric, ray_state
from ansible_collections.sparkfleet.vllm.plugins.module_utils.waiter import WaitTimeout, wait_for


def unanswered(p, summary):
    """Each alive node that gives no answer on the reach port, named: ['name (ip): port N, why'] (the head asks
    itself too, which costs a millisecond)."""
    quiet = fabric.silent(summary.get("alive_ips") or (), p["reach_port"])
    return ["%s (%s): port %d, %s" % (p["node_names"].get(ip, ip), ip, p["reach_port"], why)
            for ip, why in sorted(quiet.items())]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="int", required=True),
            gpus=dict(type="int", required=True),
            expected_ips=dict(type="list", elements="str", default=[]),
            node_names=dict(type="dict", default={}),
            reach_port=dict(type="int", default=6700),
            container_name=dict(type="str", default="sparkfleet-ray"),
            timeout=dict(type="int", default=600),
            interval=dict(type="int", default=5),
            poll_seconds=dict(type="int", default=0),
            started_at=dict(type="float"),
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    try:
        container = _docker.current(_docker.connect(), p["container_name"])
        if container is None:
            if module.check_mode:
                module.exit_json(changed=False, summary=None)
            module.fail_json(msg="no Ray head container %s on this node" % p["container_name"])
        seen = {}

        def probe():
            seen["summary"] = ray_state.summarize(_ray.nodes(container))
            return seen["summary"]

        def predicate(summary):
            return ray_state.gate(summary, p["nodes"], p["gpus"], p["expected_ips"])

        if module.check_mode:
            summary = probe()
            module.exit_json(changed=False, summary=summary, ready=predicate(summary)[0])
        started = p["started_at"] or time.time()
        remaining = p["timeout"] - (time.time() - started)
        window = min(p["poll_seconds"], remaining) if p["poll_seconds"] else remaining
        try:
            _unused, desc, _unused = wait_for("Ray cluster gate", probe, predicate, max(window, 0), p["interval"])
        except WaitTimeout as exc:
            if window >= remaining:
                raise WaitTimeout(exc.what, p["timeout"], exc.last) from None
            waited = time.time() - started
            module.exit_json(changed=False, done=False, summary=seen.get("summary"), waited_s=round(waited, 1),
                             progress="Ray gate: %s (%d s)" % (exc.last, waited))
    except WaitTimeout as exc:
        module.fail_json(msg=str(exc), summary=seen.get("summary"))
    except _docker.DockerFailure as exc:
        module.fail_json(msg="ray_gate: %s" % exc, summary=seen.get("summary"))
    silent = unanswered(p, seen["summary"])
    if silent:
        module.fail_json(msg="Ray lists every node alive, but the head gets no answer over the fabric from %s; "
                             "Ray drops a silent node only after minutes. Check the firewall and fabric link of "
                             "each, then run the deploy again" % "; ".join(silent), summary=seen["summary"])
    module.exit_json(changed=False, done=True, summary=seen["summary"], waited_s=round(time.time() - started, 1),
                     status=desc, progress="Ray gate: %s" % desc)


if __name__ == "__main__":
    main()
