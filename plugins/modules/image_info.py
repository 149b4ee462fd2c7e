#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_info
short_description: Say whether this node holds the wanted image
version_added: 0.2.0
description:
  - Reads the ID of the image O(image) in this node's Docker engine and compares it with O(image_id), the
    ID of the image built on the head, so that a play can send the image to the nodes that need it.
options:
  image:
    description: Image reference (tag).
    type: str
    required: true
  image_id:
    description: The wanted image ID (the builder's).
    type: str
    required: true
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Which nodes need the image
  sparkfleet.vllm.image_info:
    image: "{{ image.tag }}"
    image_id: "{{ image.image_id }}"
  register: need
"""

RETURN = r"""
needed:
  description: Whether this node lacks the wanted image.
  returned: success
  type: bool
local_id:
  description: The ID of O(image) on this node; null when it is absent.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker


def main():
    module = AnsibleModule(
        argument_spec=dict(image=dict(type="str", required=True), image_id=dict(type="str", required=True)),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    try:
        local = _docker.image_id(_docker.connect(), p["image"])
    except _docker.DockerFailure as exc:
        module.fail_json(msg="image_info: %s" % exc)
    module.exit_json(changed=False, needed=local != p["image_id"], local_id=local)


if __name__ == "__main__":
    main()
