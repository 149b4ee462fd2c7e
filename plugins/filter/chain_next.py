# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Filters for the transfer chain: who forwards to whom."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: chain_next
short_description: Map each node of a transfer chain to the node it forwards to
version_added: 0.1.0
description:
  - Given the ordered nodes that need an artifact, returns a dict from each node to the next one (an empty
    string for the last), the order in which a pipelined chain forwards the stream.
positional: _input
options:
  _input:
    description: Ordered host names.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
next_hop: "{{ ['a', 'b', 'c'] | sparkfleet.vllm.chain_next }}"  # {'a': 'b', 'b': 'c', 'c': ''}
"""

RETURN = r"""
_value:
  description: Host to next host.
  type: dict
"""

from ansible_collections.sparkfleet.vllm.plugins.module_utils.stream_chain import chain_order


def chain_next(hosts):
    _unused, nxt = chain_order(None, list(hosts))
    return {h: (n or "") for h, n in nxt.items()}


class FilterModule:
    def filters(self):
        return {"chain_next": chain_next}
