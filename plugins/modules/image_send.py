#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_send
short_description: Stream the built image from the head down the transfer chain
version_added: 0.2.0
description:
  - On the node that built the image, checks that O(image) has the wanted ID, then streams C(docker save),
    uncompressed, to the first node of the chain, where M(sparkfleet.vllm.image_receive) listens.
  - The stream is never gzipped (single-core gzip was the bottleneck in the field).
  - Run it with C(async) and report it with M(sparkfleet.vllm.job_progress) on O(progress_file).
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
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.docker
  - sparkfleet.vllm.chain
  - sparkfleet.vllm.chain.send
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Stream the image from the head to the first node of the chain
  sparkfleet.vllm.image_send:
    image: "{{ image.tag }}"
    image_id: "{{ image.image_id }}"
    target_host: 10.0.0.2
    progress_file: /var/tmp/sparkfleet/image-send.json
  async: 3600
  poll: 0
"""

RETURN = r"""
transfer:
  description: Bytes sent, the stream's sha256 and seconds taken.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker
from ansible_collections.sparkfleet.vllm.plugins.module_utils.progress import Progress
from ansible_collections.sparkfleet.vllm.plugins.module_utils.stream_chain import (
    ChainError,
    send,
    send_argument_spec,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(send_argument_spec(29400), image=dict(type="str", required=True),
                           image_id=dict(type="str", required=True)),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    if module.check_mode:
        module.exit_json(changed=True)
    progress = Progress(p["progress_file"], p["image_id"], phase="connecting to %s" % p["target_host"])
    try:
        cli = _docker.connect()
        local = _docker.image_id(cli, p["image"])
        if local != p["image_id"]:
            raise _docker.DockerFailure("this node has %s as %s, not the wanted %s"
                                        % (p["image"], local, p["image_id"]))
        progress.total = cli.images.get(p["image"]).attrs.get("Size")  # about what docker save streams
        result = send(["docker", "save", p["image"]], p["target_host"], p["port"], p["image_id"], p["chain_key"],
                      p["timeout"], progress=progress, stall_seconds=p["stall_timeout"])
    except (ChainError, _docker.DockerFailure, OSError) as exc:
        progress.fail(str(exc))
        module.fail_json(msg="image_send: %s" % exc)
    module.exit_json(changed=True, transfer=result)


if __name__ == "__main__":
    main()
