#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_server
short_description: Run vllm serve over the Ray cluster on the head, and follow its boot to the end
version_added: 0.1.0
description:
  - Starts C(vllm serve) with C(--distributed-executor-backend ray) in a container on the Ray head (host
    network, the head's C(/tmp/ray) shared so vLLM joins the running cluster).
  - Follows the startup log until uvicorn's C(Application startup complete.). Fails at once, with the
    phase reached and the last log lines, when the container exits or the engine reports a failure.
  - The API key reaches vLLM as C(VLLM_API_KEY) in its environment, never on the command line.
  - The container asks Docker for the head's GPU (C(--gpus all)); vLLM finds its CUDA device through it.
  - A memory watchdog stops the boot before the head runs out of unified memory (O(min_free_memory_mib)).
  - An unchanged, running server that finished booting is left alone (C(changed=false)).
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
  startup_timeout:
    description: Seconds the boot may take.
    type: int
    default: 7200
  min_free_memory_mib:
    description:
      - Head memory watchdog. While the server boots, the head's free memory (MemAvailable, bounded by any
        cgroup limit) is read at every poll. When it stays below this many MiB for O(memory_grace) seconds,
        the serve container is stopped and the run fails naming the head and the figures, before the head
        thrashes (a starved Spark head stretches a 30 min boot to 2 h). C(0) turns the watchdog off.
    type: int
    default: 2048
  memory_grace:
    description: Seconds free memory may stay below O(min_free_memory_mib) before the watchdog stops the boot.
    type: int
    default: 15
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
    support: none
  idempotent:
    support: full
requirements:
  - Docker SDK for Python on the node
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
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
boot:
  description: Facts read from the startup log (phases reached, load seconds, KV cache, MoE backend).
  returned: state is present and not in check mode
  type: dict
argv:
  description: The vllm serve command line (holds no secret).
  returned: state is present
  type: list
  elements: str
"""

import hashlib
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, memory, vllm_logs
from ansible_collections.sparkfleet.vllm.plugins.module_utils.serve_plan import serve_argv
from ansible_collections.sparkfleet.vllm.plugins.module_utils.waiter import WaitAborted, WaitTimeout, wait_for


def follow(container, timeout, watchdog):
    def probe():
        container.reload()
        return {"status": container.status, "facts": vllm_logs.parse(_docker.logs(container)),
                "free": memory.read()["available_bytes"], "now": time.monotonic()}

    def predicate(obs):
        facts = obs["facts"]
        if facts["errors"]:
            raise WaitAborted("vLLM reported: %s" % "; ".join(facts["errors"]))
        if obs["status"] != "running":
            raise WaitAborted("the serve container is %s" % obs["status"])
        done = "app_started" in facts["phases"]
        low = None if done else watchdog.observe(obs["free"], obs["now"])
        if low:
            container.stop(timeout=10)
            raise WaitAborted(
                "memory watchdog: %s while %s; the boot was stopped before the head thrashes. Free memory on "
                "the head (stop other processes, drop caches), or lower --gpu-memory-utilization / "
                "--max-model-len in the recipe" % (low, ", ".join(facts["phases"]) or "starting"))
        return done, "phases reached: %s" % (", ".join(facts["phases"]) or "none yet")

    return wait_for("vllm serve", probe, predicate, timeout, 3)


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
            startup_timeout=dict(type="int", default=7200),
            min_free_memory_mib=dict(type="int", default=2048),
            memory_grace=dict(type="int", default=15),
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
        if not _docker.needs_change(state, digest):
            facts = vllm_logs.parse(_docker.logs(existing))
            if "app_started" in facts["phases"] and not facts["errors"]:
                module.exit_json(changed=False, boot=facts, argv=argv)
        if module.check_mode:
            module.exit_json(changed=True, argv=argv)
        run_spec = dict(spec, environment=dict(env, VLLM_API_KEY=p["api_key"]) if p["api_key"] else env)
        container = _docker.replace(cli, name, run_spec, "vllm-serve", digest=digest)
        try:
            watchdog = memory.Watchdog(p["min_free_memory_mib"] * 2**20, p["memory_grace"])
            _unused, _unused, waited = follow(container, p["startup_timeout"], watchdog)
        except (WaitAborted, WaitTimeout) as exc:
            tail = _docker.logs(container, tail=40)
            module.fail_json(msg="vllm serve on %s failed to boot: %s\n--- last log lines ---\n%s"
                                 % (p["host"], exc, tail), argv=argv, boot=vllm_logs.parse(_docker.logs(container)))
        facts = vllm_logs.parse(_docker.logs(container))
        facts["boot_s"] = round(waited, 1)
    except _docker.DockerFailure as exc:
        module.fail_json(msg="vllm_server: %s" % exc)
    module.exit_json(changed=True, boot=facts, argv=argv)


if __name__ == "__main__":
    main()
