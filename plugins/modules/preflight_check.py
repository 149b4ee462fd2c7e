#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_check
short_description: Judge every node's preflight facts at once and report every defect in one failure
version_added: 0.2.0
description:
  - Takes the facts that M(sparkfleet.vllm.preflight_facts) gathered on every node and what the deploy
    expects, and fails when anything would break the deploy, listing every defect of every node together.
    Each names the node, what was found, what was expected and the fix.
  - "Checks: the GPU visible in a container that asks for it and invisible in one that does not; the GPU
    count and compute capability; free memory against the recipe's need per node; free disk for the weights
    where they are missing; the fabric IP on an interface (the named one, when given) and one MTU across the
    nodes; Ray's pinned ports and the API port free; no leftover containers; clock skew; the Docker and driver
    versions; no image on the known-bad list."
  - Runs on the controller; changes nothing.
options:
  facts:
    description: "{node: facts} from M(sparkfleet.vllm.preflight_facts), with C(time.before) and C(time.after)
      set to the controller's clock around the node's clock reading."
    type: dict
    required: true
  expect:
    description: What the deploy needs (node IPs, interface, compute capability, memory and disk needs, ports,
      managed container names, limits, known-bad images); see the preflight role.
    type: dict
    required: true
  known_bad_images:
    description: Image IDs to refuse on top of the built-in list (from field reports), each C({id, reason}).
    type: list
    elements: dict
    default: []
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Judge the whole cluster
  sparkfleet.vllm.preflight_check:
    facts: "{{ dict(nodes | zip(nodes | map('extract', hostvars, 'preflight_node_facts'))) }}"
    expect: {node_ips: {spark-00: 192.168.0.10}, memory_need_bytes: 107374182400}
"""

RETURN = r"""
defects:
  description: Every defect, as C({node, check, found, expected, fix}).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import preflight


def main():
    module = AnsibleModule(
        argument_spec=dict(
            facts=dict(type="dict", required=True),
            expect=dict(type="dict", required=True),
            known_bad_images=dict(type="list", elements="dict", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    expect = dict(p["expect"], known_bad_images=list(preflight.KNOWN_BAD_IMAGES) + p["known_bad_images"])
    defects = preflight.judge(p["facts"], expect)
    if defects:
        module.fail_json(msg=preflight.render(defects), defects=defects)
    module.exit_json(changed=False, defects=[], msg="preflight: %d node(s), no defect" % len(p["facts"]))


if __name__ == "__main__":
    main()
