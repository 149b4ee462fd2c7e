#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_facts
short_description: Gather one node's facts for the preflight, changing nothing
version_added: 0.2.0
description:
  - Reads what a deploy depends on, on the node it runs on, and returns it as one facts dict for
    M(sparkfleet.vllm.preflight_check), which judges all nodes together.
  - "GPU: C(nvidia-smi -L) in a throwaway container of O(probe_images) that asks Docker for the GPU (as
    every container of the collection does) and in one that does not; the host's C(nvidia-smi) for name,
    compute capability and driver. The probe containers are removed; no other container is started."
  - Memory (MemAvailable bounded by cgroup limits), free disk under O(hf_cache_dir), the interface and MTU
    holding O(node_ip), listening TCP ports with the process and container that hold each, the node's
    containers, the Docker version, the IDs of O(images), and whether the snapshot O(snapshot_dir) is complete.
options:
  node_ip:
    description: The node's fabric IP.
    type: str
    required: true
  probe_images:
    description: Images to run the GPU probe with, first present wins (the built image, then the base image).
    type: list
    elements: str
    default: []
  images:
    description: Images whose IDs to report (checked against the known-bad list).
    type: list
    elements: str
    default: []
  hf_cache_dir:
    description: Hugging Face hub cache; free space is measured on its filesystem.
    type: path
    default: /root/.cache/huggingface/hub
  snapshot_dir:
    description: The snapshot the deploy needs; reported present when its index and every shard it names exist.
    type: path
  managed_containers:
    description:
      - The collection's own containers. The memory they hold is reported apart, as C(memory.managed_bytes).
        A re-deploy replaces them, so that memory counts as available to the deploy.
    type: list
    elements: str
    default: [sparkfleet-ray, sparkfleet-vllm]
attributes:
  check_mode:
    details: Runs the same in check mode. It starts two short-lived probe containers and removes them; nothing
      it creates remains.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Gather the preflight facts
  sparkfleet.vllm.preflight_facts:
    node_ip: "{{ sparkfleet_node_ip }}"
    probe_images: [vllm/vllm-openai:v0.34.0]
  register: facts
"""

RETURN = r"""
facts:
  description: The node's facts (see M(sparkfleet.vllm.preflight_check) for what is judged).
  returned: always
  type: dict
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, _gpu_probe, gpu, memory, netstat


def host_gpus(module):
    exe = module.get_bin_path("nvidia-smi")
    if not exe:
        return []
    rc, out, _unused = module.run_command([exe] + gpu.QUERY[1:])
    return gpu.parse_query(out) if rc == 0 else []


def net_facts(module, ip):
    rc, out, err = module.run_command(["ip", "-j", "addr", "show"])
    if rc != 0:
        module.fail_json(msg="ip -j addr show failed: %s" % err)
    for link in json.loads(out or "[]"):
        for addr in link.get("addr_info", []):
            if addr.get("local") == ip:
                return {"ip": ip, "interface": link.get("ifname"), "mtu": link.get("mtu")}
    return {"ip": ip, "interface": None, "mtu": None}


def disk_facts(path):
    probe_path = path
    while not os.path.exists(probe_path) and probe_path not in ("/", ""):
        probe_path = os.path.dirname(probe_path)
    st = os.statvfs(probe_path or "/")
    return {"path": probe_path, "free_bytes": st.f_bavail * st.f_frsize}


def snapshot_present(snapshot_dir):
    if not snapshot_dir:
        return False
    index = os.path.join(snapshot_dir, "model.safetensors.index.json")
    try:
        with open(index) as fh:
            names = set(json.load(fh).get("weight_map", {}).values())
    except (OSError, ValueError):
        return os.path.isfile(os.path.join(snapshot_dir, "model.safetensors"))
    return all(os.path.isfile(os.path.join(snapshot_dir, n)) for n in names)


def container_facts(cli):
    out = []
    for c in cli.containers.list(all=True):
        host = c.attrs.get("HostConfig") or {}
        env = (c.attrs.get("Config") or {}).get("Env") or []
        requested = any("gpu" in caps for r in host.get("DeviceRequests") or [] for caps in r.get("Capabilities") or [])
        nvidia_runtime = host.get("Runtime") == "nvidia" and "NVIDIA_VISIBLE_DEVICES=all" in env
        out.append({"name": c.name, "image": (c.attrs.get("Config") or {}).get("Image", ""), "status": c.status,
                    "labels": dict(c.labels), "gpu": requested or nvidia_runtime})
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node_ip=dict(type="str", required=True),
            probe_images=dict(type="list", elements="str", default=[]),
            images=dict(type="list", elements="str", default=[]),
            hf_cache_dir=dict(type="path", default="/root/.cache/huggingface/hub"),
            snapshot_dir=dict(type="path"),
            managed_containers=dict(type="list", elements="str", default=["sparkfleet-ray", "sparkfleet-vllm"]),
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    facts = {"time": {"node": time.time()}}
    try:
        cli = _docker.connect()
        names = {c.id: c.name for c in cli.containers.list(all=True)}
        managed_pids = [c.attrs.get("State", {}).get("Pid") for c in cli.containers.list()
                        if c.name in p["managed_containers"]]
        facts["containers"] = container_facts(cli)
        facts["listeners"] = netstat.listeners(container_names=names)
        # The base image where it is; on a node that already serves, the image of its Ray container.
        images = p["probe_images"] + [(c.attrs.get("Config") or {}).get("Image", "") for c in cli.containers.list()
                                      if c.name in p["managed_containers"]]
        facts["gpu_with_request"], facts["gpu_without_request"] = _gpu_probe.gpu_in_containers(cli, images)
        if facts["gpu_with_request"].get("deferred"):
            # No image to probe with yet: dockerd gives containers a GPU on request only through the NVIDIA
            # Container Toolkit's hook, so at least the toolkit must be there.
            facts["gpu_with_request"]["toolkit"] = any(
                module.get_bin_path(b) for b in ("nvidia-container-runtime-hook", "nvidia-ctk", "nvidia-container-cli"))
        facts["docker_version"] = cli.version().get("Version", "")
        facts["image_ids"] = {ref: _docker.image_id(cli, ref) for ref in p["images"] if _docker.image_id(cli, ref)}
    except _docker.DockerFailure as exc:
        module.fail_json(msg="preflight_facts: %s" % exc)
    try:
        facts["gpus"] = host_gpus(module)
    except ValueError as exc:
        module.fail_json(msg="preflight_facts: %s" % exc)
    facts["driver_version"] = facts["gpus"][0]["driver"] if facts["gpus"] else ""
    facts["memory"] = memory.read()
    facts["memory"]["managed_bytes"] = sum(memory.process_usage(pid) for pid in managed_pids if pid)
    facts["disk"] = disk_facts(p["hf_cache_dir"])
    facts["net"] = net_facts(module, p["node_ip"])
    facts["snapshot_present"] = snapshot_present(p["snapshot_dir"])
    module.exit_json(changed=False, facts=facts)


if __name__ == "__main__":
    main()
