# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The TCP ports a Ray node of this collection holds, for the preflight's "ports are free" check."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: ray_ports
short_description: The ports and port ranges a Ray node started by this collection listens on
version_added: 0.2.0
description:
  - Returns C({ports, port_ranges}) as the preflight role expects them, from the same pinned port plan that
    M(sparkfleet.vllm.ray_node) starts Ray with (GCS on the head; node manager, object manager, agents,
    metrics and the worker range on every node).
positional: _input
options:
  _input:
    description: The GCS port of the head.
    type: int
    required: true
"""

EXAMPLES = r"""
expect: "{{ 6379 | sparkfleet.vllm.ray_ports }}"
"""

RETURN = r"""
_value:
  description: C(ports) (a list of C({port, what})) and C(port_ranges) (a list of C({from, to, what})).
  type: dict
"""

from ansible_collections.sparkfleet.vllm.plugins.module_utils._ray import port_plan


def ray_ports(gcs_port):
    single, ranges = port_plan(int(gcs_port))
    return {"ports": [{"port": p["port"], "what": p["what"]} for p in single], "port_ranges": ranges}


class FilterModule:
    def filters(self):
        return {"ray_ports": ray_ports}
