# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Keep only some keys of a mapping (for example the few host variables a planner needs)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: pick
short_description: Keep only the named keys of a mapping, skipping absent ones
version_added: 0.1.0
description:
  - Returns a plain dict with the keys of O(keys) that the input has. Useful on C(hostvars[host]), so a
    planner receives the variables it needs and nothing else (no secrets, no facts).
positional: _input, keys
options:
  _input:
    description: A mapping.
    type: dict
    required: true
  keys:
    description: Keys to keep.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
node: "{{ hostvars['spark-00'] | sparkfleet.vllm.pick(['sparkfleet_node_ip']) }}"
"""

RETURN = r"""
_value:
  description: The kept keys and their values.
  type: dict
"""


def pick(mapping, keys):
    return {k: mapping[k] for k in keys if k in mapping}


class FilterModule:
    def filters(self):
        return {"pick": pick}
