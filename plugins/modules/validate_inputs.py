#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: validate_inputs
short_description: Refuse a deploy's hostile or mistaken inputs before any node is touched
version_added: 0.2.0
description:
  - Checks, on the controller, every value a deploy is given, and fails with all findings at once. Each
    names the field as the user wrote it, what is wrong, and the fix.
  - "Addresses: each node's O(nodes) C(sparkfleet_node_ip) is an IP address that other nodes can reach
    (not unspecified, loopback, multicast, link-local or reserved, in IPv4, IPv6 or IPv4-mapped form) and
    no two nodes share one. A DGX Spark has one GPU (C(sparkfleet_gpus_per_node) is 1); TP x PP against the
    nodes listed is M(sparkfleet.vllm.topology_plan)'s, which runs next, before any node is touched."
  - "Integers are integers: a boolean is not one; a string of digits (C(-e key=value)) is."
  - "The model: C(repo_id) is C(ORG/NAME) with no C(..); the revision is a 40-hex commit, with nothing
    around it; the recipe follows its schema (required keys, types, no unknown key)."
  - "Versions are PEP 440 releases; the image build receives them as build arguments (data), never as code."
  - "Extra C(vllm serve) arguments are compared with the flags the collection owns after normalising their
    spelling (C(--tensor_parallel_size=4) is C(--tensor-parallel-size)); C(--api-key) in any spelling is
    refused."
  - "Environment passthrough: names of capitals, digits and C(_); loader and interpreter variables
    (C(LD_*), C(PYTHON*), C(PATH), C(BASH_ENV), ...) and the variables the collection sets are refused;
    values hold no line break."
  - "Ports are in 1024..65535 and collide neither with each other nor with Ray's pinned ports."
options:
  settings:
    description: The C(sparkfleet_*) inventory values, by name; unset ones left out.
    type: dict
    required: true
  recipe:
    description: The recipe, with the inventory's overrides applied.
    type: dict
    required: true
  nodes:
    description: Host name to its C(sparkfleet_node_ip) and C(sparkfleet_gpus_per_node), for every node.
    type: dict
    required: true
  ports:
    description: Setting name to port, for every port the deploy opens besides Ray's.
    type: dict
    default: {}
  ray_port:
    description: The Ray head's GCS port; Ray's other ports are pinned by the collection.
    type: int
    default: 6379
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Refuse hostile or mistaken inputs
  sparkfleet.vllm.validate_inputs:
    settings:
      sparkfleet_tensor_parallel_size: 8
      sparkfleet_ray_version: 2.60.0
    recipe: "{{ recipe }}"
    nodes: {spark-00: {sparkfleet_node_ip: 192.168.0.10}}
    ports:
      sparkfleet_api_port: 5001
"""

RETURN = r"""
findings:
  description: "Every finding, C(field: problem; fix: ...); empty on success."
  returned: always
  type: list
  elements: str
"""

from ansible_collections.sparkfleet.vllm.plugins.module_utils.validation import PlanFailure, check_inputs, planner_main

ARGUMENT_SPEC = dict(
    settings=dict(type="dict", required=True),
    recipe=dict(type="dict", required=True),
    nodes=dict(type="dict", required=True),
    ports=dict(type="dict", default={}),
    ray_port=dict(type="int", default=6379),
)


def compute(p):
    """The result from validated parameters; the action plugin of the same name runs it on the controller."""
    findings = check_inputs(p["settings"], p["recipe"], p["nodes"], p["ports"], p["ray_port"])
    if findings:
        raise PlanFailure("%d problem(s) in the deploy's inputs, nothing was changed:\n- %s"
                          % (len(findings), "\n- ".join(findings)), findings=findings)
    return {"changed": False, "findings": []}


def main():
    planner_main(ARGUMENT_SPEC, compute)


if __name__ == "__main__":
    main()
