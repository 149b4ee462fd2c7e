#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_status
short_description: Judge what every node reported and name each node that is lost, stopped or failing
version_added: 0.3.0
description:
  - Takes the states that M(sparkfleet.vllm.node_state) read on every node (or that a node did not answer)
    and the plan, and reports whether the cluster serves. Each finding names the node, its fabric IP, what
    was seen and what to do.
  - "Findings: a node that does not answer; a Ray container that is missing, stopped or paused; a node Ray
    lists dead or not at all, or an alive node outside the plan; a GPU count short of the plan; a server
    container that is missing or exited (with the errors of its log, the lost Ray rank's node named) or whose
    C(/health) fails."
  - Runs on the controller; changes nothing.
options:
  nodes:
    description: "{node name: fabric IP} of the plan."
    type: dict
    required: true
  head:
    description:
      - The inventory's Ray head. Every other node whose Ray container is a head heads a replica of its own,
        judged with the workers that joined it (their containers name its IP).
    type: str
    required: true
  states:
    description: "{node name: what Ansible registered for the node's M(sparkfleet.vllm.node_state) task}; an
      unreachable node's or a failed read's result is a finding."
    type: dict
    required: true
  gpus:
    description: GPUs each replica needs; defaults to one per node of the replica.
    type: int
  ray_container:
    description: The Ray container's name.
    type: str
    default: sparkfleet-ray
  server_container:
    description: The vllm serve container's name.
    type: str
    default: sparkfleet-vllm
  fail:
    description: Fail when the cluster does not serve (the findings are the message).
    type: bool
    default: true
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Judge the cluster
  sparkfleet.vllm.cluster_status:
    nodes: "{{ plan.node_ips }}"
    head: "{{ plan.head }}"
    states: "{{ states }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
healthy:
  description: Whether every node runs Ray, Ray lists every node alive with its GPUs, and the server answers.
  returned: always
  type: bool
findings:
  description: One line per defect, naming the node.
  returned: always
  type: list
  elements: str
  sample: ["sim-spark-02 (172.29.0.12): Ray lists it dead; run the deploy again ..."]
nodes:
  description: "{node name: one line of what it runs}"
  returned: always
  type: dict
endpoint:
  description: The server's state in a few words; with replicas, each replica's head and its server's state.
  returned: always
  type: str
advice:
  description: What to do about the findings; empty when there are none.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import cluster_state


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="dict", required=True),
            head=dict(type="str", required=True),
            states=dict(type="dict", required=True),
            gpus=dict(type="int"),
            ray_container=dict(type="str", default="sparkfleet-ray"),
            server_container=dict(type="str", default="sparkfleet-vllm"),
            fail=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["head"] not in p["nodes"]:
        module.fail_json(msg="cluster_status: head %r is not among the nodes (%s)"
                         % (p["head"], ", ".join(sorted(p["nodes"]))))
    verdict = cluster_state.judge_replicas(p["nodes"], p["head"], p["states"], p["ray_container"],
                                           p["server_container"], p["gpus"])
    if p["fail"] and not verdict["healthy"]:
        msg = "the cluster does not serve: %s; %s" % (" | ".join(verdict["findings"]), verdict["advice"])
        module.fail_json(msg=msg, changed=False, **verdict)
    module.exit_json(changed=False, **verdict)


if __name__ == "__main__":
    main()
