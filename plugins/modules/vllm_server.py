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
  - The API key is read from O(api_key_file), mounted read-only. A small wrapper in the container gives it
    to vLLM as C(VLLM_API_KEY) and lists that name in C(ray_non_carry_over_env_vars.json), so vLLM's Ray
    executor does not copy it to the workers. It is in no command line and not in the container's declared
    environment (C(docker inspect)); the server refuses to start without it.
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
    description:
      - The API key for C(/v1), written to O(api_key_file) on this node (which the server reads); never put in
        argv or in the container's environment. Requires O(api_key_file).
    type: str
  api_key_file:
    description:
      - File on this node holding the API key for C(/v1) (0600); mounted read-only at the same path.
      - Without it the server runs without an API key.
      - The file's content is not part of what is declared. To restart the server when the key changes, put
        its digest in O(env) (the vllm_serve role sets C(SPARKFLEET_API_KEY_SHA256)).
      - With O(api_key), the module writes the file first (mode 0600; a missing directory is made with mode 0700).
    type: path
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
    details: Predicts whether the server would be (re)started (RV(restarts)) or O(api_key_file) rewritten; writes
      and starts nothing.
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
    api_key_file: /etc/sparkfleet/api-key
"""

RETURN = r"""
container_id:
  description: The serve container's ID.
  returned: state is present and not in check mode
  type: str
restarts:
  description: Whether the server is (re)started (in check mode, whether it would be); a rewrite of
    O(api_key_file) alone changes the node but restarts nothing.
  returned: state is present
  type: bool
argv:
  description: The vllm serve command line (holds no secret; the container runs it through the API key wrapper).
  returned: state is present
  type: list
  elements: str
"""


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, secret_file, vllm_logs
from ansible_collections.sparkfleet.vllm.plugins.module_utils.serve_plan import serve_argv, with_api_key_file


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
            api_key_file=dict(type="path"),
            api_key=dict(type="str", no_log=True),
            volumes=dict(type="list", elements="str", default=[]),
            ray_address=dict(type="str"),
            ray_tmp_volume=dict(type="str", default="sparkfleet-ray-tmp"),
            container_name=dict(type="str", default="sparkfleet-vllm"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        required_if=[("state", "present", ["image", "model_path", "served_model_name", "tensor_parallel_size",
                                           "ray_address"])],
        required_by={"api_key": "api_key_file"},
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
        try:
            wrote = secret_file.write(p["api_key_file"], p["api_key"], module.check_mode) if p["api_key"] else False
        except OSError as exc:
            module.fail_json(msg="vllm_server: writing the API key to %s: %s" % (p["api_key_file"], exc))
        env = dict(p["env"], RAY_ADDRESS=p["ray_address"], VLLM_HOST_IP=p["host"])
        extra_binds = {p["ray_tmp_volume"]: {"bind": "/tmp/ray", "mode": "rw"}}  # noqa: S108
        command = argv
        if p["api_key_file"]:
            command = with_api_key_file(argv, p["api_key_file"])
            extra_binds[p["api_key_file"]] = {"bind": p["api_key_file"], "mode": "ro"}
        volumes = _docker.binds(p["volumes"], extra_binds)
        # The host's PID namespace and the head's /tmp/ray: Ray's driver finds the local raylet by its process
        # and its sockets, and vLLM's engine is a Ray driver on the head node.
        spec = {"image": p["image"], "command": command, "environment": env, "network_mode": "host",
                "ipc_mode": "host", "pid_mode": "host", "volumes": volumes,
                "device_requests": _docker.gpu_request()}
        digest = _docker.spec_digest(spec)
        existing = _docker.current(cli, name)
        state = _docker.container_state(existing)
        # A server that is still booting is left to boot; one whose log reports a failure is started anew.
        if not _docker.needs_change(state, digest) and not vllm_logs.parse(_docker.logs(existing))["errors"]:
            module.exit_json(changed=wrote, restarts=False, container_id=existing.id, argv=argv)
        diff = _docker.container_diff(cli, existing, spec)
        if module.check_mode:
            module.exit_json(changed=True, restarts=True, argv=argv, diff=diff)
        container = _docker.replace(cli, name, spec, "vllm-serve", digest=digest)
    except _docker.DockerFailure as exc:
        module.fail_json(msg="vllm_server: %s" % exc)
    module.exit_json(changed=True, restarts=True, container_id=container.id, argv=argv, diff=diff)


if __name__ == "__main__":
    main()
