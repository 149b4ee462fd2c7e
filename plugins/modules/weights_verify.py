#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_verify
short_description: Prove that a node holds a complete, uncorrupted checkpoint snapshot
version_added: 0.1.0
description:
  - Checks a snapshot in the Hugging Face cache layout on the node it runs on. Every file the index names
    must be present and resolve (no dangling C(snapshots/) link), every safetensors shard must be framed
    correctly (catches truncation), and every blob's content must hash to its name (sha256 for LFS files,
    git's blob sha1 for small ones; catches bit flips).
  - Hashes are remembered in a manifest beside the blobs, keyed by size and mtime, so a second run on
    unchanged files hashes nothing.
  - Fails naming the node, the file and the fault.
options:
  hash_blobs:
    description: Hash blob contents; without it only presence and framing are checked.
    type: bool
    default: true
  expected_digest:
    description: The snapshot digest this node must match (the seed node's).
    type: str
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.snapshot
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Verify the weights on every node
  sparkfleet.vllm.weights_verify:
    hub_dir: /root/.cache/huggingface/hub
    repo_id: festr2/MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8
    revision: "{{ recipe.revision }}"
"""

RETURN = r"""
digest:
  description: sha256 over the sorted file:blob list; equal on every node with the same snapshot.
  returned: success
  type: str
total_bytes:
  description: Bytes of the snapshot's files.
  returned: always
  type: int
files:
  description: File name to blob name.
  returned: always
  type: dict
hashed:
  description: Blobs hashed in this run (the rest came from the manifest).
  returned: always
  type: int
snapshot_path:
  description: The snapshot directory.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.checkpoint import (
    SNAPSHOT_ARGS,
    snapshot_dir,
    verify_snapshot,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            SNAPSHOT_ARGS,
            hash_blobs=dict(type="bool", default=True),
            expected_digest=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        report = verify_snapshot(p["hub_dir"], p["repo_id"], p["revision"], hash_blobs=p["hash_blobs"],
                                 use_manifest=not module.check_mode)
    except ValueError as exc:
        module.fail_json(msg="weights_verify: %s" % exc)
    report["snapshot_path"] = snapshot_dir(p["hub_dir"], p["repo_id"], p["revision"])
    if not report["ok"]:
        module.fail_json(msg="%s@%s is not intact on this node: %s" % (p["repo_id"], p["revision"][:12],
                                                                       "; ".join(report["problems"])), **report)
    if p["expected_digest"] and report["digest"] != p["expected_digest"]:
        module.fail_json(msg="snapshot digest %s differs from the seed node's %s (different file set)"
                             % (report["digest"], p["expected_digest"]), **report)
    module.exit_json(changed=False, **report)


if __name__ == "__main__":
    main()
