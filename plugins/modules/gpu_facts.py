#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Read a node's GPUs with nvidia-smi and check them against an image's CUDA arch list
version_added: 0.1.0
description:
  - Runs C(nvidia-smi --query-gpu=compute_cap,name,memory.total,driver_version --format=csv) and returns
    each GPU's compute capability, name, memory and driver. A GB10 reports its memory as C([N/A]) (unified
    memory); its C(memory_mib) is then the node's memory from C(/proc/meminfo) and C(unified_memory) is true.
  - Fails when the node has no NVIDIA GPU.
  - With O(torch_arch_list), fails when a GPU has no native code in the list (a GB10, compute capability
    12.1, needs C(sm_120) or C(sm_121); PTX alone does not count).
  - With O(probe_image), fails when containers do not get the GPU on request, or get it without asking.
options:
  torch_arch_list:
    description: The image's C(torch.cuda.get_arch_list()); null or empty skips the comparison.
    type: list
    elements: str
  probe_image:
    description:
      - An image on this node to check the container runtime with. The GPU must be visible (C(nvidia-smi -L))
        in a throwaway container of it that asks for the GPU the way the collection's containers do, and
        invisible in one that does not. The probe containers are removed.
    type: str
attributes:
  check_mode:
    details: Runs the same in check mode. With O(probe_image) it starts two short-lived probe containers and
      removes them; nothing it creates remains.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: GPU facts, checked against the image
  sparkfleet.vllm.gpu_facts:
    torch_arch_list: "{{ image.versions.torch_arch_list }}"
"""

RETURN = r"""
gpus:
  description: One entry per GPU.
  returned: always
  type: list
  elements: dict
  sample: [{compute_cap: "12.1", name: NVIDIA GB10, memory_mib: 124546, driver: "580.95.05", unified_memory: true}]
in_container:
  description: The container-runtime probe with and without a GPU request.
  returned: when probe_image is given
  type: dict
covered_by:
  description: Arch-list entries giving native code for each GPU's compute capability.
  returned: when torch_arch_list is given
  type: list
  elements: list
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, _gpu_probe, gpu, memory


def main():
    module = AnsibleModule(
        argument_spec=dict(
            torch_arch_list=dict(type="list", elements="str"),
            probe_image=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    exe = module.get_bin_path("nvidia-smi")
    gpus = []
    if exe:
        rc, out, err = module.run_command([exe] + gpu.QUERY[1:])
        if rc != 0:
            module.fail_json(msg="nvidia-smi failed", cmd=[exe] + gpu.QUERY[1:], rc=rc, stderr=err)
        try:
            gpus = gpu.parse_query(out)
        except ValueError as exc:
            module.fail_json(msg=str(exc))
    if not gpus:
        module.fail_json(msg="no NVIDIA GPU found on this node (%s); install the NVIDIA driver"
                             % ("nvidia-smi lists none" if exe else "nvidia-smi is not installed"))
    for g in gpus:
        # A GB10 reports no memory of its own ([N/A]): it shares the node's unified memory.
        g["unified_memory"] = g["memory_mib"] is None
        if g["unified_memory"]:
            g["memory_mib"] = memory.read()["total_bytes"] // 2**20
    result = {"changed": False, "gpus": gpus}
    if p["probe_image"]:
        _docker.require(module)
        try:
            with_req, without = _gpu_probe.gpu_in_containers(_docker.connect(), [p["probe_image"]])
        except _docker.DockerFailure as exc:
            module.fail_json(msg="gpu_facts: %s" % exc)
        result["in_container"] = {"with_request": with_req, "without_request": without}
        if with_req.get("deferred"):
            module.fail_json(msg="image %s is not on this node" % p["probe_image"], **result)
        if not with_req["visible"]:
            module.fail_json(msg="a container of %s that asks for the GPU (--gpus all) sees none (%s): install the "
                                 "NVIDIA Container Toolkit on this node and restart dockerd"
                                 % (p["probe_image"], with_req.get("error") or "nvidia-smi lists no GPU"), **result)
        if without["visible"]:
            module.fail_json(msg="a container of %s that does not ask for the GPU sees it: the NVIDIA runtime is the "
                                 "default runtime; remove default-runtime from /etc/docker/daemon.json"
                                 % p["probe_image"], **result)
    if p["torch_arch_list"]:
        result["covered_by"] = [gpu.covers(g["compute_cap"], p["torch_arch_list"]) for g in gpus]
        problems = gpu.arch_verdict(gpus, p["torch_arch_list"])
        if problems:
            module.fail_json(msg="; ".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
