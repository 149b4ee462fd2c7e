# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Keep only the keys of a mapping whose names match a pattern (a node's settings of the collection's names)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: pick_matching
short_description: Keep only the keys of a mapping whose names match a regular expression
version_added: 0.4.0
description:
  - Returns a plain dict, sorted by key, with the keys of the input that O(pattern) matches at their start.
    On C(hostvars[host]) it gathers a node's settings of some names (inventory, group and extra vars) without
    naming each one.
positional: _input, pattern
options:
  _input:
    description: A mapping.
    type: dict
    required: true
  pattern:
    description: A Python regular expression, matched at the start of each key.
    type: str
    required: true
"""

EXAMPLES = r"""
settings: "{{ hostvars['spark-00'] | sparkfleet.vllm.pick_matching('^sparkfleet_') }}"
"""

RETURN = r"""
_value:
  description: The matching keys and their values.
  type: dict
"""

import re


def pick_matching(mapping, pattern):
    rx = re.compile(pattern)
    return {k: mapping[k] for k in sorted(mapping) if rx.match(k)}


class FilterModule:
    def filters(self):
        return {"pick_matching": pick_matching}
