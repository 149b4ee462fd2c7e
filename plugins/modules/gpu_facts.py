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
    each GPU's compute capability, name, memory and driver.
  - With O(torch_arch_list), fails when a GPU has no native code in the list (a GB10, compute capability
    12.1, needs C(sm_120) or C(sm_121); PTX alone does not count).
options:
  torch_arch_list:
    description: The image's C(torch.cuda.get_arch_list()); null or empty skips the comparison.
    type: list
    elements: str
  required:
    description: Fail when the node has no NVIDIA GPU (no nvidia-smi, or no GPU listed).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
author:
  - sparkfleet maintainers
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
  sample: [{compute_cap: "12.1", name: NVIDIA GB10, memory_mib: 124546, driver: "580.95.05"}]
covered_by:
  description: Arch-list entries giving native code for each GPU's compute capability.
  returned: when torch_arch_list is given
  type: list
  elements: list
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import gpu


def main():
    module = AnsibleModule(
        argument_spec=dict(
            torch_arch_list=dict(type="list", elements="str"),
            required=dict(type="bool", default=True),
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
    if not gpus and p["required"]:
        module.fail_json(msg="no NVIDIA GPU found on this node (%s); install the NVIDIA driver, or set "
                             "sparkfleet_gpu_required: false for a node without GPUs"
                             % ("nvidia-smi lists none" if exe else "nvidia-smi is not installed"))
    result = {"changed": False, "gpus": gpus}
    if p["torch_arch_list"]:
        result["covered_by"] = [gpu.covers(g["compute_cap"], p["torch_arch_list"]) for g in gpus]
        problems = gpu.arch_verdict(gpus, p["torch_arch_list"])
        if problems:
            module.fail_json(msg="; ".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
