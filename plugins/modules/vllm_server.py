#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_server
short_description: Start vllm serve over the Ray cluster on the head
version_added: 0.1.0
description:
  - Starts C(vllm serve) with C(--distributed-executor-backend ray) in a container on the Ray head (host
    network, the head's C(/tmp/ray) shared so vLLM joins the running cluster).
  - Returns once the container runs; M(sparkfleet.vllm.vllm_boot) then follows the boot, one short poll at
    a time, so that the play reports the boot's progress.
  - The API key reaches vLLM as C(VLLM_API_KEY) in its environment, never on the command line.
  - The container asks Docker for the head's GPU (C(--gpus all)); vLLM finds its CUDA device through it.
  - An unchanged, running server whose log reports no failure is left alone (C(changed=false)), whether it
    serves already or is still booting.
options:
  image:
    description: The vLLM+Ray image (by tag). Required when O(state=present).
    type: str
  model_path:
    description: Snapshot path as seen inside the container. Required when O(state=present).
    type: str
  served_model_name:
    description: Name clients use. Required when O(state=present).
    type: str
  tensor_parallel_size:
    description: TP size. Required when O(state=present).
    type: int
  pipeline_parallel_size:
    description: PP size.
    type: int
    default: 1
  host:
    description: Address vLLM binds.
    type: str
    required: true
  port:
    description: API port.
    type: int
    default: 8000
  extra_args:
    description: Further C(vllm serve) flags from the recipe.
    type: list
    elements: str
    default: []
  env:
    description: Environment (the planned timeouts and any recipe variables).
    type: dict
    default: {}
  api_key:
    description: API key for C(/v1); passed as C(VLLM_API_KEY).
    type: str
  volumes:
    description: Bind mounts, C(host:container[:mode]).
    type: list
    elements: str
    default: []
  ray_address:
    description: The Ray GCS address, C(ip:port). Required when O(state=present).
    type: str
  ray_tmp_volume:
    description: Named volume holding the head's /tmp/ray.
    type: str
    default: sparkfleet-ray-tmp
  container_name:
    description: Name of the serve container.
    type: str
    default: sparkfleet-vllm
  state:
    description: C(present) serves; C(absent) removes the container.
    type: str
    choices: [present, absent]
    default: present
attributes:
  check_mode:
    support: full
    details: Predicts whether the server would be (re)started.
  diff_mode:
    support: full
    details:
      - The serve container's image, C(vllm serve) command line and environment, as running and as declared;
        a variable named like a secret (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL) shows only as set or
        changed.
  idempotent:
    support: full
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Serve
  sparkfleet.vllm.vllm_server:
    image: "{{ image_tag }}"
    model_path: /root/.cache/huggingface/hub/models--festr2--MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8/snapshots/abc
    served_model_name: mimo-v2.5-pro
    tensor_parallel_size: 8
    host: 192.168.0.10
    ray_address: 192.168.0.10:6379
    api_key: "{{ vault_api_key }}"
"""

RETURN = r"""
container_id:
  description: The serve container's ID.
  returned: state is present and not in check mode
  type: str
argv:
  description: The vllm serve command line (holds no secret).
  returned: state is present
  type: list
  elements: str
"""

import hashlib

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, vllm_logs
from ansible_collections.sparkfleet.vllm.plugins.module_utils.serve_plan import serve_argv


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str"),
            model_path=dict(type="str"),
            served_model_name=dict(type="str"),
            tensor_parallel_size=dict(type="int"),
            pipeline_parallel_size=dict(type="int", default=1),
            host=dict(type="str", required=True),
            port=dict(type="int", default=8000),
            extra_args=dict(type="list", elements="str", default=[]),
            env=dict(type="dict", default={}),
            api_key=dict(type="str", no_log=True),
            volumes=dict(type="list", elements="str", default=[]),
            ray_address=dict(type="str"),
            ray_tmp_volume=dict(type="str", default="sparkfleet-ray-tmp"),
            container_name=dict(type="str", default="sparkfleet-vllm"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        required_if=[("state", "present", ["image", "model_path", "served_model_name", "tensor_parallel_size",
                                           "ray_address"])],
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    try:
        argv = None if p["state"] == "absent" else serve_argv(
            p["model_path"], p["served_model_name"], p["tensor_parallel_size"],
            p["pipeline_parallel_size"], p["port"], p["host"], p["extra_args"])
    except ValueError as exc:
        module.fail_json(msg="vllm_server: %s" % exc)
    try:
        cli = _docker.connect()
        name = p["container_name"]
        if p["state"] == "absent":
            exists = _docker.current(cli, name) is not None
            if exists and not module.check_mode:
                _docker.remove(cli, name)
            module.exit_json(changed=exists)
        env = dict(p["env"], RAY_ADDRESS=p["ray_address"], VLLM_HOST_IP=p["host"])
        volumes = _docker.binds(p["volumes"], {p["ray_tmp_volume"]: {"bind": "/tmp/ray", "mode": "rw"}})  # noqa: S108
        # The host's PID namespace and the head's /tmp/ray: Ray's driver finds the local raylet by its process
        # and its sockets, and vLLM's engine is a Ray driver on the head node.
        spec = {"image": p["image"], "command": argv, "environment": env, "network_mode": "host",
                "ipc_mode": "host", "pid_mode": "host", "volumes": volumes,
                "device_requests": _docker.gpu_request()}
        # The key is part of what is declared (a new key restarts the server) but only as a hash.
        key_hash = hashlib.sha256((p["api_key"] or "").encode()).hexdigest()
        digest = _docker.spec_digest(dict(spec, api_key_sha256=key_hash))
        existing = _docker.current(cli, name)
        state = _docker.container_state(existing)
        # A server that is still booting is left to boot; one whose log reports a failure is started anew.
        if not _docker.needs_change(state, digest) and not vllm_logs.parse(_docker.logs(existing))["errors"]:
            module.exit_json(changed=False, container_id=existing.id, argv=argv)
        run_spec = dict(spec, environment=dict(env, VLLM_API_KEY=p["api_key"]) if p["api_key"] else env)
        diff = _docker.container_diff(cli, existing, run_spec)
        if module.check_mode:
            module.exit_json(changed=True, argv=argv, diff=diff)
        container = _docker.replace(cli, name, run_spec, "vllm-serve", digest=digest)
    except _docker.DockerFailure as exc:
        module.fail_json(msg="vllm_server: %s" % exc)
    module.exit_json(changed=True, container_id=container.id, argv=argv, diff=diff)


if __name__ == "__main__":
    main()
