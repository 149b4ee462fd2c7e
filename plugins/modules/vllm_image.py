#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_image
short_description: Build the vLLM+Ray image once, under a content-addressed tag
version_added: 0.1.0
description:
  - Builds C(FROM base_image) an image with the pinned Ray version (installed only when the base lacks it or
    has another) and optional pinned pip packages, on the node it runs on (the Ray head).
  - The tag is a hash of the base image's ID, the Ray version and the whole build context. When that tag
    already exists nothing is built and C(changed=false).
  - Reports the vLLM, Ray and torch versions inside the image, and torch's compiled CUDA arch list.
options:
  base_image:
    description:
      - The vLLM image to build from (for example C(vllm/vllm-openai:nightly)).
      - It must already be in the Docker engine of the node that builds.
    type: str
    required: true
  ray_version:
    description: Ray version every node runs.
    type: str
    required: true
  pip_packages:
    description: Extra packages, each pinned as C(name==version).
    type: list
    elements: str
    default: []
  build_args:
    description: Extra Docker build arguments.
    type: dict
    default: {}
  tag_prefix:
    description: Repository part of the tag.
    type: str
    default: sparkfleet/vllm
  build_timeout:
    description: Seconds the build may take.
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    details: Predicts whether a build would happen; the image ID is then C(unknown).
  diff_mode:
    support: none
  idempotent:
    support: full
requirements:
  - Docker SDK for Python on the node
author:
  - sparkfleet maintainers
"""

EXAMPLES = r"""
- name: Build the image on the Ray head
  sparkfleet.vllm.vllm_image:
    base_image: vllm/vllm-openai:nightly
    ray_version: 2.60.0
  register: image
"""

RETURN = r"""
tag:
  description: The content-addressed tag.
  returned: always
  type: str
  sample: sparkfleet/vllm:3f2a9c0d1e2b3a4c5d6e
image_id:
  description: The image ID (C(unknown) in check mode when a build is needed).
  returned: always
  type: str
built:
  description: Whether this run built the image.
  returned: always
  type: bool
versions:
  description: Versions found inside the image, and torch's compiled arch list (or null without torch).
  returned: when the image exists
  type: dict
  sample: {vllm: 0.21.0, ray: 2.60.0, torch: null, torch_arch_list: null}
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image_build import context_tar, render, tag_for


def read_versions(cli, tag):
    out = cli.containers.run(tag, ["cat", "/etc/sparkfleet/versions.json"], entrypoint=[], remove=True,
                             network_mode="none")
    return json.loads(out.decode())


def build(cli, tag, dockerfile, ray_version, build_args):
    args = dict(build_args or {}, RAY_VERSION=ray_version)
    log, error = [], None
    for chunk in cli.api.build(fileobj=context_tar(dockerfile), custom_context=True, tag=tag, rm=True,
                           forcerm=True, pull=False, network_mode="host", buildargs=args, decode=True):
        if "stream" in chunk:
            log.append(chunk["stream"])
        if "error" in chunk:
            error = chunk["error"]
    if error:
        raise _docker.DockerFailure("building %s failed: %s\n%s" % (tag, error.strip(), "".join(log)[-3000:]))
    return "".join(log)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_image=dict(type="str", required=True),
            ray_version=dict(type="str", required=True),
            pip_packages=dict(type="list", elements="str", default=[]),
            build_args=dict(type="dict", default={}),
            tag_prefix=dict(type="str", default="sparkfleet/vllm"),
            build_timeout=dict(type="int", default=3600),
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    try:
        cli = _docker.connect(timeout=p["build_timeout"])
        base_id = _docker.image_id(cli, p["base_image"])
        if base_id is None:
            module.fail_json(msg="base_image %s is not in the Docker engine of this node; load or pull it there "
                                 "first (docker pull / docker load)" % p["base_image"])
        try:
            dockerfile = render(p["base_image"], base_id, p["ray_version"], p["pip_packages"])
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        tag = tag_for(p["tag_prefix"], base_id, p["ray_version"], dockerfile, p["build_args"])
        existing = _docker.image_id(cli, tag)
        if existing:
            module.exit_json(changed=False, built=False, tag=tag, image_id=existing,
                             versions=read_versions(cli, tag))
        if module.check_mode:
            module.exit_json(changed=True, built=False, tag=tag, image_id="unknown")
        build(cli, tag, dockerfile, p["ray_version"], p["build_args"])
        versions = read_versions(cli, tag)
    except _docker.DockerFailure as exc:
        module.fail_json(msg=str(exc))
    except _docker.DockerException as exc:
        module.fail_json(msg="vllm_image: the image does not start: %s" % exc)
    if versions.get("ray") != p["ray_version"]:
        module.fail_json(msg="image %s has Ray %s, expected %s" % (tag, versions.get("ray"), p["ray_version"]))
    module.exit_json(changed=True, built=True, tag=tag, image_id=_docker.image_id(cli, tag), versions=versions)


if __name__ == "__main__":
    main()
