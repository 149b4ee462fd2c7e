#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: topology_plan
short_description: Validate a Spark cluster inventory and plan the Ray/vLLM topology
version_added: 0.1.0
description:
  - Checks that the inventory names exactly one Ray head, that every node has a unique fabric IP, and that
    tensor x pipeline parallel ranks equal each replica's GPUs and respect the model's largest working TP.
  - Splits the nodes, in inventory order with the head first, into O(replicas) engines; each is its own Ray
    cluster whose head is the first node of its share.
  - Pure planning; touches no node. Every error names the field at fault and the fix.
options:
  heads:
    description: Hosts of the C(ray_head) group.
    type: list
    elements: str
    required: true
  workers:
    description: Hosts of the C(ray_workers) group.
    type: list
    elements: str
    default: []
  hostvars:
    description: Per-host variables; each host needs C(sparkfleet_node_ip), may set C(sparkfleet_gpus_per_node).
    type: dict
    required: true
  tensor_parallel_size:
    description:
      - vLLM C(--tensor-parallel-size). C(0) (unset) lets the model decide - the widest TP up to O(max_tp)
        that divides a replica's GPUs, and PP for the rest (Kimi-K2.5 on 16 Sparks - TP=16).
    type: int
    default: 0
  replicas:
    description:
      - How many engines share the GPUs, each TP x PP ranks and its own Ray cluster.
      - C(0) (unset) - when TP and PP are unset too and the model's widest TP (the largest up to O(max_tp) that
        divides O(attention_heads)) divides the GPUs, as many replicas of that TP (MiMo-V2.5-Pro, max TP 8, on
        16 Sparks - 2 x TP=8); otherwise 1, spread over every node (MiMo-V2.5-Pro on 12 Sparks - TP=4 x PP=3).
    type: int
    default: 0
  pipeline_parallel_size:
    description: vLLM C(--pipeline-parallel-size). C(0) (unset) is 1 when TP is set, else the GPUs over TP.
    type: int
    default: 0
  max_tp:
    description: The model's largest TP that loads correctly (MiMo-V2.5-Pro has 8 KV heads, so 8).
    type: int
  attention_heads:
    description:
      - The model's attention heads (the recipe's C(attention_heads)). A TP must divide them, or vLLM fails to
        load the model at the end of its boot; an unset TP is planned among those that do. Unset, not checked.
    type: int
  model:
    description: Model name, used in messages.
    type: str
    default: ""
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Plan the cluster
  sparkfleet.vllm.topology_plan:
    heads: "{{ groups['ray_head'] }}"
    workers: "{{ groups['ray_workers'] | default([]) }}"
    hostvars: "{{ dict(groups['spark_cluster'] | zip(groups['spark_cluster'] | map('extract', hostvars))) }}"
    tensor_parallel_size: 8
    max_tp: 8
  register: plan
"""

RETURN = r"""
plan:
  description: The topology the deploy follows.
  returned: success
  type: dict
  sample:
    head: spark-00
    head_ip: 192.168.0.10
    workers: [spark-01]
    nodes: [spark-00, spark-01]
    node_ips: {spark-00: 192.168.0.10, spark-01: 192.168.0.11}
    node_count: 2
    gpu_count: 2
    tensor_parallel_size: 2
    pipeline_parallel_size: 1
    world_size: 2
    sizes_from: inventory
    replica_count: 1
    replicas:
      - {index: 0, name: replica-0, head: spark-00, head_ip: 192.168.0.10, workers: [spark-01],
         nodes: [spark-00, spark-01], node_ips: {spark-00: 192.168.0.10, spark-01: 192.168.0.11},
         node_count: 2, gpu_count: 2, tensor_parallel_size: 2, pipeline_parallel_size: 1, world_size: 2}
    replica_of: {spark-00: 0, spark-01: 0}
    heads: [spark-00]
"""

from ansible_collections.sparkfleet.vllm.plugins.module_utils.topology import TopologyError, plan
from ansible_collections.sparkfleet.vllm.plugins.module_utils.validation import PlanFailure, planner_main

ARGUMENT_SPEC = dict(
    heads=dict(type="list", elements="str", required=True),
    workers=dict(type="list", elements="str", default=[]),
    hostvars=dict(type="dict", required=True),
    tensor_parallel_size=dict(type="int", default=0),
    pipeline_parallel_size=dict(type="int", default=0),
    max_tp=dict(type="int"),
    model=dict(type="str", default=""),
    replicas=dict(type="int", default=0),
    attention_heads=dict(type="int"),
)


def compute(p):
    """The result from validated parameters; the action plugin of the same name runs it on the controller."""
    try:
        return {"changed": False, "plan": plan(p["heads"], p["workers"], p["hostvars"], p["tensor_parallel_size"],
                                               p["pipeline_parallel_size"], p["max_tp"], p["model"], p["replicas"],
                                               p["attention_heads"])}
    except TopologyError as exc:
        raise PlanFailure("inventory: %s" % exc) from None


def main():
    planner_main(ARGUMENT_SPEC, compute)


if __name__ == "__main__":
    main()
