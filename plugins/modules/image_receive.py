#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_receive
short_description: Receive the image from the transfer chain, load it and forward it
version_added: 0.2.0
description:
  - Run with C(async) on every node that needs the image. It listens for the stream that
    M(sparkfleet.vllm.image_send) starts, refuses a sender that does not prove the run's O(chain_key),
    feeds the stream to C(docker load) and forwards every chunk to the next node as it arrives.
  - Every frame of the stream is authenticated before C(docker load) reads it or the next node gets it; a
    stream that fails is cut off before its end and C(docker load) is killed, so nothing is loaded. The
    loaded image must then have the wanted ID.
  - The bytes received are kept in O(progress_file) for M(sparkfleet.vllm.job_progress).
options:
  image:
    description: Image reference (tag).
    type: str
    required: true
  image_id:
    description: The wanted image ID (the builder's); a stream of another session is refused.
    type: str
    required: true
  port:
    default: 29400
attributes:
  diff_mode:
    support: full
    details: This node's image ID before and after (the play reads it through C(async_status)).
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.docker
  - sparkfleet.vllm.chain
  - sparkfleet.vllm.chain.receive
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Receive the image stream, load it and forward it to the next node
  sparkfleet.vllm.image_receive:
    image: "{{ image.tag }}"
    image_id: "{{ image.image_id }}"
    bind_address: "{{ sparkfleet_node_ip }}"
    forward_host: 10.0.0.3
    progress_file: /var/tmp/sparkfleet/image-receive.json
  async: 3600
  poll: 0
"""

RETURN = r"""
local_id:
  description: The image ID on this node after the transfer.
  returned: success
  type: str
transfer:
  description: Bytes received, frames verified (each by its HMAC), seconds, and whether it was forwarded.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker
from ansible_collections.sparkfleet.vllm.plugins.module_utils.progress import Progress
from ansible_collections.sparkfleet.vllm.plugins.module_utils.stream_chain import (
    ChainError,
    process_sink,
    receive,
    receive_argument_spec,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(receive_argument_spec(29400), image=dict(type="str", required=True),
                           image_id=dict(type="str", required=True)),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    progress = Progress(None if module.check_mode else p["progress_file"], p["image_id"],
                        phase="waiting for the stream on port %d" % p["port"])

    def fail(msg, **extra):
        progress.fail(msg)
        module.fail_json(msg=msg, **extra)

    try:
        cli = _docker.connect()
        before = _docker.image_id(cli, p["image"])
        diff = {"before": {"image": p["image"], "image_id": before},
                "after": {"image": p["image"], "image_id": p["image_id"]}}
        if module.check_mode:
            module.exit_json(changed=True, diff=diff)
        forward = (p["forward_host"], p["port"]) if p["forward_host"] else None
        # Every frame is authenticated before `docker load` reads it; a stream that fails is cut off before
        # its end and `docker load` is killed, so it loads nothing.
        result = receive(p["port"], p["image_id"], p["chain_key"], process_sink(["docker", "load"]),
                         forward=forward, bind=p["bind_address"], accept_timeout=p["timeout"], progress=progress,
                         stall_seconds=p["stall_timeout"])
        if not result["sink_ok"]:
            fail("docker load failed: %s" % result["sink_output"], transfer=result)
        local = _docker.image_id(cli, p["image"])
        if local != p["image_id"]:
            fail("after docker load, %s is %s, expected %s" % (p["image"], local, p["image_id"]), transfer=result)
        if result["forward_error"]:
            fail("loaded here, but forwarding to %s failed: %s" % (p["forward_host"], result["forward_error"]),
                 transfer=result)
    except (ChainError, _docker.DockerFailure, OSError) as exc:
        fail("image_receive: %s" % exc)
    out = dict(local_id=local, transfer=result)
    progress.finish(out)
    module.exit_json(changed=True, diff=diff, **out)


if __name__ == "__main__":
    main()
