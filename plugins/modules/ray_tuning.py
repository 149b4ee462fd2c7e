#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ray_tuning
short_description: Plan the Ray and vLLM timeout environment for a Spark cluster
version_added: 0.1.0
description:
  - Returns the C(RAY_*) and C(VLLM_*) variables that every node's Ray and vLLM containers get, identical
    on every node. The floor is the profile that booted MiMo-V2.5-Pro on 8 Sparks (registration and first
    health check after 15 min, RPC timeout 4 h); budgets grow when a full read of the model would outlast it.
  - Pure planning; touches no node.
options:
  node_count:
    description: Nodes in the Ray cluster.
    type: int
    required: true
  model_bytes:
    description: Bytes of weights each rank reads (the whole checkpoint with vLLM's default loader).
    type: int
    default: 0
  read_bps:
    description: Expected read speed of a node's weights, bytes per second.
    type: float
    default: 1000000000.0
  overrides:
    description: Variables to set instead of the planned values (only C(RAY_*) and C(VLLM_*) names).
    type: dict
    default: {}
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Plan timeouts
  sparkfleet.vllm.ray_tuning:
    node_count: 16
    model_bytes: 600000000000
  register: tuning
"""

RETURN = r"""
env:
  description: Variable name to string value, for every Ray and vLLM container of the cluster.
  returned: success
  type: dict
  sample: {RAY_agent_register_timeout_ms: "900000", VLLM_RPC_TIMEOUT: "14400000"}
"""

from ansible_collections.sparkfleet.vllm.plugins.module_utils.timeouts import plan
from ansible_collections.sparkfleet.vllm.plugins.module_utils.validation import PlanFailure, planner_main

ARGUMENT_SPEC = dict(
    node_count=dict(type="int", required=True),
    model_bytes=dict(type="int", default=0),
    read_bps=dict(type="float", default=1.0e9),
    overrides=dict(type="dict", default={}),
)


def compute(p):
    """The result from validated parameters; the action plugin of the same name runs it on the controller."""
    try:
        return {"changed": False, "env": plan(p["node_count"], p["model_bytes"], p["read_bps"], p["overrides"])}
    except ValueError as exc:
        raise PlanFailure("ray_tuning: %s" % exc) from None


def main():
    planner_main(ARGUMENT_SPEC, compute)


if __name__ == "__main__":
    main()
