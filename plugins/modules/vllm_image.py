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
  patches:
    description:
      - vLLM source patches to apply in the build, by id (V(marlin_chunked_repack), V(modelopt_mxfp8_dispatch),
        V(mxfp8_scale_name), V(mimo_qkv_split), V(wna16_moe_backend)).
      - Each is reported as applied, already applied, fixed upstream (skipped) or anchor not found.
    type: list
    elements: str
    default: []
  required_patches:
    description:
      - Patches that must not end in "anchor not found"; the build fails naming the patch, the file, the vLLM
        version and the anchor. The deploy judges them earlier, without building or starting anything, with
        M(sparkfleet.vllm.vllm_release).
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
  progress_file:
    description:
      - A file on this node where the build's step (C(Step 4/9), its instruction and its last output line) is
        kept while it runs in the background (with C(async)), for M(sparkfleet.vllm.job_progress) to report.
        It ends as done, with the module's result, or as failed, with the reason.
    type: path
  progress_session:
    description: The session name written into O(progress_file), so that a poll never reads an older build's file.
    type: str
    default: build
attributes:
  check_mode:
    support: full
    details: Predicts whether a build would happen; the image ID is then C(unknown).
  diff_mode:
    support: full
    details: The Dockerfile of an image that is (or would be) built under its content-addressed tag.
  idempotent:
    support: full
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
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
  description: Versions found inside the image, torch's compiled arch list (or null without torch), and the
    per-patch report of the build.
  returned: when the image exists
  type: dict
  sample: {vllm: 0.21.0, ray: 2.60.0, torch: null, torch_arch_list: null,
           patches: [{id: mimo_qkv_split, verdict: applied, target: model_executor/models/mimo_v2.py}]}
"""

import json
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, _image_files, patches
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image_build import (
    context_tar,
    parse_patch_output,
    patch_sources,
    render,
    tag_for,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.progress import Progress, redact

STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")


def read_versions(cli, tag):
    """The image's /etc/sparkfleet/versions.json, read without starting it."""
    with _image_files.Created(cli, tag) as image:
        text = image.read_tree("/etc/sparkfleet/versions.json").get("", "")
    try:
        return json.loads(text)
    except ValueError:
        raise _docker.DockerFailure("image %s has no readable /etc/sparkfleet/versions.json" % tag) from None


def build(cli, tag, dockerfile, ray_version, build_args, files, progress):
    args = dict(build_args or {}, RAY_VERSION=ray_version)
    log, error, step, instruction = [], None, 0, ""
    for chunk in cli.api.build(fileobj=context_tar(dockerfile, files), custom_context=True, tag=tag, rm=True,
                               forcerm=True, pull=False, network_mode="host", buildargs=args, decode=True):
        if "stream" in chunk:
            log.append(chunk["stream"])
            for raw in chunk["stream"].splitlines():
                line = raw.strip()
                found = STEP.match(line)
                if found:
                    step, instruction = int(found.group(1)), redact(found.group(3)[:100])
                    progress.update(step, total=int(found.group(2)), note=instruction)
                elif line and step:
                    # Any output counts as progress: a long RUN (pip, patches) shows its last line.
                    progress.update(step, note=redact("%s | %s" % (instruction, line[:100])), alive=True)
        if "error" in chunk:
            error = chunk["error"]
    if error:
        _unused, patch_error = parse_patch_output("".join(log))
        if patch_error:
            raise _docker.DockerFailure("building %s failed: %s" % (tag, patch_error))
        raise _docker.DockerFailure("building %s failed: %s\n%s" % (tag, error.strip(), "".join(log)[-3000:]))
    return "".join(log)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_image=dict(type="str", required=True),
            ray_version=dict(type="str", required=True),
            pip_packages=dict(type="list", elements="str", default=[]),
            patches=dict(type="list", elements="str", default=[]),
            required_patches=dict(type="list", elements="str", default=[]),
            build_args=dict(type="dict", default={}),
            tag_prefix=dict(type="str", default="sparkfleet/vllm"),
            build_timeout=dict(type="int", default=3600),
            progress_file=dict(type="path"),
            progress_session=dict(type="str", default="build"),
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    progress = Progress(None if module.check_mode else p["progress_file"], p["progress_session"], unit="steps",
                        phase="checking the base image and the tag")

    def fail(msg):
        progress.fail(msg)
        module.fail_json(msg=msg)

    def done(**result):
        progress.finish(result)
        module.exit_json(**result)

    try:
        patches.select(p["patches"] + p["required_patches"])
    except ValueError as exc:
        fail("vllm_image: %s" % exc)
    stray = sorted(set(p["required_patches"]) - set(p["patches"]))
    if stray:
        fail("vllm_image: required_patches %s are not in patches; add them there" % ", ".join(stray))
    files = patch_sources(patches)  # always in the image: it can judge its own sources later
    try:
        cli = _docker.connect(timeout=p["build_timeout"])
        base_id = _docker.image_id(cli, p["base_image"])
        if base_id is None:
            fail("base_image %s is not in the Docker engine of this node; load or pull it there first "
                 "(docker pull / docker load)" % p["base_image"])
        try:
            dockerfile = render(p["base_image"], base_id, p["ray_version"], p["pip_packages"], p["patches"],
                                p["required_patches"])
        except ValueError as exc:
            fail(str(exc))
        tag = tag_for(p["tag_prefix"], base_id, p["ray_version"], dockerfile, p["build_args"], files)
        existing = _docker.image_id(cli, tag)
        if existing:
            done(changed=False, built=False, tag=tag, image_id=existing, versions=read_versions(cli, tag))
        diff = {"before": "", "after": "# %s\n%s" % (tag, dockerfile), "after_header": "Dockerfile of %s" % tag}
        if module.check_mode:
            module.exit_json(changed=True, built=False, tag=tag, image_id="unknown", diff=diff)
        progress.update(0, phase="building %s" % tag)
        build(cli, tag, dockerfile, p["ray_version"], p["build_args"], files, progress)
        versions = read_versions(cli, tag)
    except _docker.DockerFailure as exc:
        fail(str(exc))
    except _docker.DockerException as exc:
        fail("vllm_image: the image does not start: %s" % exc)
    if versions.get("ray") != p["ray_version"]:
        fail("image %s has Ray %s, expected %s" % (tag, versions.get("ray"), p["ray_version"]))
    done(changed=True, built=True, tag=tag, image_id=_docker.image_id(cli, tag), versions=versions, diff=diff)


if __name__ == "__main__":
    main()
