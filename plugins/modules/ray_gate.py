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
  description: Seconds spent waiting.
  returned: success
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, _ray, ray_state
from ansible_collections.sparkfleet.vllm.plugins.module_utils.waiter import WaitTimeout, wait_for


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="int", required=True),
            gpus=dict(type="int", required=True),
            expected_ips=dict(type="list", elements="str", default=[]),
            container_name=dict(type="str", default="sparkfleet-ray"),
            timeout=dict(type="int", default=600),
            interval=dict(type="int", default=5),
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
        _unused, desc, waited = wait_for("Ray cluster gate", probe, predicate, p["timeout"], p["interval"])
    except WaitTimeout as exc:
        module.fail_json(msg=str(exc), summary=seen.get("summary"))
    except _docker.DockerFailure as exc:
        module.fail_json(msg="ray_gate: %s" % exc, summary=seen.get("summary"))
    module.exit_json(changed=False, summary=seen["summary"], waited_s=round(waited, 1), status=desc)


if __name__ == "__main__":
    main()
