#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_release
short_description: Judge a vLLM image's release against the recipe before anything is built, sent or started
version_added: 0.2.0
description:
  - Reads the vLLM package of O(image) without running it (a created, never started, container, and Docker's
    archive API), on the node that holds the image (the Ray head).
  - Checks the release against the pins (O(vllm_version), O(min_vllm)), gives each requested source patch its
    verdict in a dry run (applied, already applied, fixed upstream, anchor not found), and checks the planned
    C(vllm serve) command line and C(VLLM_*) environment against what that release's own source accepts
    (flags, attention and MoE backends, quantization, KV-cache dtype, environment names and values).
  - Every problem is reported in one failure, each naming the flag (or variable, or patch), the release and
    the closest valid values. Nothing on the node changes.
options:
  image:
    description: The vLLM base image (it must be in this node's Docker engine).
    type: str
    required: true
  vllm_version:
    description: The release the inventory pins for O(image); a different release in the image is an error.
    type: str
  min_vllm:
    description: The lowest release the recipe needs.
    type: str
  patches:
    description: Source patches the build will apply, by id.
    type: list
    elements: str
    default: []
  required_patches:
    description: Patches that must not end in "anchor not found".
    type: list
    elements: str
    default: []
  served_model_name:
    description: Name clients use (part of the planned command line).
    type: str
    required: true
  tensor_parallel_size:
    description: Planned TP size.
    type: int
    required: true
  pipeline_parallel_size:
    description: Planned PP size.
    type: int
    default: 1
  host:
    description: Address vLLM will bind.
    type: str
    required: true
  port:
    description: API port.
    type: int
    required: true
  extra_args:
    description: The recipe's further C(vllm serve) flags.
    type: list
    elements: str
    default: []
  env:
    description:
      - The recipe's and the user's environment for C(vllm serve) and the Ray workers. Every C(VLLM_*) name
        must be one this release reads, with a value it accepts.
    type: dict
    default: {}
  planned_env:
    description:
      - The collection's own planned environment (the Ray/vLLM timeouts). A C(VLLM_*) name the release no
        longer reads (for example C(VLLM_RPC_TIMEOUT) after 0.22) is dropped and listed in RV(dropped_env),
        not set; values are judged like O(env).
    type: dict
    default: {}
attributes:
  check_mode:
    details: Runs the same in check mode. It creates a container of the image (never started) to read its files
      and removes it; nothing it creates remains.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Judge the base image's vLLM before building
  sparkfleet.vllm.vllm_release:
    image: vllm/vllm-openai:v0.34.0
    vllm_version: 0.34.0
    min_vllm: 0.34.0
    patches: [mxfp8_scale_name, mimo_qkv_split]
    required_patches: [mxfp8_scale_name, mimo_qkv_split]
    served_model_name: mimo-v2.5-pro
    tensor_parallel_size: 8
    host: 192.168.0.10
    port: 5001
    extra_args: [--attention-backend, TRITON_ATTN_DIFFKV, --kv-cache-dtype, fp8]
"""

RETURN = r"""
version:
  description: The vLLM release found in the image.
  returned: always
  type: str
  sample: 0.34.0
vllm_dir:
  description: Where the image keeps the vllm package.
  returned: always
  type: str
patch_plan:
  description: Each requested patch's verdict on this release.
  returned: always
  type: list
  elements: dict
capabilities:
  description: Counts of what the release accepts (flags, attention backends, MoE backends, ...).
  returned: always
  type: dict
env:
  description: The environment to run with, O(planned_env) less RV(dropped_env), then O(env).
  returned: always
  type: dict
dropped_env:
  description: Names of O(planned_env) this release does not read.
  returned: always
  type: list
  elements: str
argv:
  description: The command line that was judged (the model path is a placeholder).
  returned: always
  type: list
  elements: str
"""

import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, _image_files, patches, vllm_capabilities
from ansible_collections.sparkfleet.vllm.plugins.module_utils.serve_plan import serve_argv


def judge(module, p):
    try:
        selected = patches.select(p["patches"] + p["required_patches"])
    except ValueError as exc:
        module.fail_json(msg="vllm_release: %s" % exc)
    stray = sorted(set(p["required_patches"]) - set(p["patches"]))
    if stray:
        module.fail_json(msg="required_patches %s are not in patches; add them there" % ", ".join(stray))
    try:
        argv = serve_argv("/model", p["served_model_name"], p["tensor_parallel_size"], p["pipeline_parallel_size"],
                          p["port"], p["host"], p["extra_args"])
    except ValueError as exc:
        module.fail_json(msg="vllm_release: %s" % exc)
    paths = tuple(vllm_capabilities.SOURCE_PATHS) + ("_version.py",) + tuple(
        path for x in selected for path in x.targets)  # every candidate: a patch uses the first that exists
    cli = _docker.connect()
    if _docker.image_id(cli, p["image"]) is None:
        module.fail_json(msg="base image %s is not in the Docker engine of this node; load or pull it there first "
                             "(docker pull / docker load)" % p["image"])
    with _image_files.Created(cli, p["image"]) as image:
        vllm_dir = image.find_package("vllm")
        if vllm_dir is None:
            module.fail_json(msg="image %s has no vllm package in any of the usual site directories" % p["image"])
        sources = image.read_paths(vllm_dir, sorted(set(paths)))
    problems = []
    caps = vllm_capabilities.read(sources)
    version = caps.get("version") or patches.engine.vllm_version("/nonexistent")
    if p["vllm_version"] and version != p["vllm_version"]:
        problems.append("the inventory pins sparkfleet_vllm_version %s, but %s carries vLLM %s; pin the release "
                        "the image has, or use the image of that release" % (p["vllm_version"], p["image"], version))
    if p["min_vllm"] and not vllm_capabilities.at_least(version, p["min_vllm"]):
        problems.append("the recipe needs vLLM >= %s (min_vllm), but %s carries vLLM %s; use a newer base image"
                        % (p["min_vllm"], p["image"], version))
    scratch = tempfile.mkdtemp(prefix="sparkfleet-release-")
    plan = []
    try:
        _image_files.write_tree(sources, scratch)
        plan = patches.run(scratch, [x for x in selected if x.id in p["patches"]], required=p["required_patches"],
                           write=False)
    except patches.PatchError as exc:
        problems.append("%s (base image %s; nothing was built)" % (exc, p["image"]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    allowed_env = sorted({name for x in selected for name in x.env})
    known_env = caps.get("env") or {}
    dropped = sorted(k for k in p["planned_env"]
                     if k.startswith("VLLM_") and known_env and k not in known_env and k not in allowed_env)
    env = {k: v for k, v in p["planned_env"].items() if k not in dropped}
    env.update(p["env"])
    problems += vllm_capabilities.check(argv, env, caps, allowed_env=allowed_env)
    summary = {k: len(v) for k, v in caps.items() if isinstance(v, (list, dict))}
    result = {"version": version, "vllm_dir": vllm_dir, "patch_plan": plan, "capabilities": summary, "argv": argv,
              "env": env, "dropped_env": dropped}
    if problems:
        module.fail_json(msg="vLLM %s in %s cannot serve this recipe as planned (%d problem(s)):\n- %s"
                             % (version, p["image"], len(problems), "\n- ".join(problems)), **result)
    module.exit_json(changed=False, **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            vllm_version=dict(type="str"),
            min_vllm=dict(type="str"),
            patches=dict(type="list", elements="str", default=[]),
            required_patches=dict(type="list", elements="str", default=[]),
            served_model_name=dict(type="str", required=True),
            tensor_parallel_size=dict(type="int", required=True),
            pipeline_parallel_size=dict(type="int", default=1),
            host=dict(type="str", required=True),
            port=dict(type="int", required=True),
            extra_args=dict(type="list", elements="str", default=[]),
            env=dict(type="dict", default={}),
            planned_env=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    try:
        judge(module, module.params)
    except _docker.DockerFailure as exc:
        module.fail_json(msg="vllm_release: %s" % exc)


if __name__ == "__main__":
    main()
