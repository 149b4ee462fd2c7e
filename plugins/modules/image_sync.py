#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_sync
short_description: Send the built image to the nodes through a pipelined chain
version_added: 0.1.0
description:
  - C(action=check) reports whether this node's copy of the image differs from the wanted image ID.
  - C(action=receive) (run with C(async)) listens for the stream, feeds it to C(docker load) and forwards
    every chunk to the next node as it arrives; it then checks that the loaded image has the wanted ID.
  - C(action=send) (on the node that built the image) streams C(docker save), uncompressed, to the first node.
  - The stream is never gzipped (single-core gzip was the bottleneck in the field).
options:
  image:
    description: Image reference (tag).
    type: str
    required: true
  image_id:
    description: The wanted image ID (the builder's); the stream's session name.
    type: str
    required: true
  port:
    default: 29400
attributes:
  check_mode:
    support: full
    details: C(check) runs; C(receive) and C(send) predict C(changed=true) and move nothing.
  diff_mode:
    support: partial
    details: C(receive) shows this node's image ID before and after, in a run with C(--diff) (the role reads
      it through C(async_status)); C(check) and C(send) change nothing here.
  idempotent:
    support: full
requirements:
  - Docker SDK for Python and the docker CLI on the node
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.chain
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Which nodes need the image
  sparkfleet.vllm.image_sync:
    action: check
    image: "{{ image.tag }}"
    image_id: "{{ image.image_id }}"
  register: need
"""

RETURN = r"""
needed:
  description: Whether this node lacks the wanted image (C(check)).
  returned: action is check
  type: bool
local_id:
  description: The image ID on this node before (check) or after (receive) the transfer.
  returned: action is check or receive
  type: str
transfer:
  description: Bytes moved, the stream's sha256 and seconds taken.
  returned: action is receive or send
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker
from ansible_collections.sparkfleet.vllm.plugins.module_utils.stream_chain import (
    ChainError,
    Progress,
    argument_spec,
    receive,
    send,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            argument_spec(29400),
            image=dict(type="str", required=True),
            image_id=dict(type="str", required=True),
        ),
        required_if=[("action", "send", ["target_host"])],
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    try:
        cli = _docker.connect()
        local = _docker.image_id(cli, p["image"])
        if p["action"] == "check":
            module.exit_json(changed=False, needed=local != p["image_id"], local_id=local)
        diff = {"before": {"image": p["image"], "image_id": local}, "after": {"image": p["image"],
                                                                              "image_id": p["image_id"]}}
        if module.check_mode:
            module.exit_json(changed=True, diff=diff if p["action"] == "receive" else {})
        if p["action"] == "send":
            progress = Progress(p["progress_file"], p["image_id"])
            if local != p["image_id"]:
                msg = "this node has %s as %s, not the wanted %s" % (p["image"], local, p["image_id"])
                progress.fail(msg)
                module.fail_json(msg=msg)
            progress.total = cli.images.get(p["image"]).attrs.get("Size")  # about what docker save streams
            try:
                result = send(["docker", "save", p["image"]], p["target_host"], p["port"], p["image_id"],
                              p["timeout"], progress=progress)
            except (ChainError, OSError) as exc:
                progress.fail(str(exc))
                raise
            progress.finish(result)
            module.exit_json(changed=True, transfer=result)
        forward = (p["forward_host"], p["port"]) if p["forward_host"] else None
        result = receive(p["port"], p["image_id"], ["docker", "load"], forward=forward,
                         bind=p["bind_address"], accept_timeout=p["timeout"])
        if result["sink_rc"] != 0:
            module.fail_json(msg="docker load failed: %s" % result["sink_output"], transfer=result)
        local = _docker.image_id(cli, p["image"])
        if local != p["image_id"]:
            module.fail_json(msg="after docker load, %s is %s, expected %s" % (p["image"], local, p["image_id"]),
                             transfer=result)
        if result["forward_error"]:
            module.fail_json(msg="loaded here, but forwarding to %s failed: %s" % (p["forward_host"],
                                                                                   result["forward_error"]),
                             transfer=result)
    except (ChainError, _docker.DockerFailure, OSError) as exc:
        module.fail_json(msg="image_sync %s: %s" % (p["action"], exc))
    module.exit_json(changed=True, local_id=local, transfer=result, diff=diff)


if __name__ == "__main__":
    main()
