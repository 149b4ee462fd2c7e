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
  - Hashes are remembered in a manifest beside the blobs, with each file's size, mtime, ctime and inode, so a
    second run on unchanged files hashes nothing; O(rehash_before) trusts none recorded before it.
  - Quantized weights must carry the scales their format needs (compressed-tensors INT4, MXFP8, NVFP4, FP8).
  - One call hashes for at most O(poll_seconds) and returns RV(done); run it with C(until) on RV(done).
  - Fails naming the node, the file and the fault. M(sparkfleet.vllm.weights_info) reports the same findings
    without failing.
options: {}
attributes:
  check_mode:
    support: full
    details: Reads the manifest but records nothing, so the whole snapshot is hashed in one call.
  diff_mode:
    support: N/A
    details: Checks only; the manifest it keeps is a cache of hashes.
  idempotent:
    support: full
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.snapshot
  - sparkfleet.vllm.snapshot.verify
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Verify the weights on every node
  sparkfleet.vllm.weights_verify:
    hub_dir: /root/.cache/huggingface/hub
    repo_id: festr2/MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8
    revision: "{{ recipe.revision }}"
  register: verified
  until: verified is failed or verified.done
  retries: 1000
  delay: 0
"""

RETURN = r"""
done:
  description: Whether every file was checked; false when O(poll_seconds) ran out with files left to hash.
  returned: success
  type: bool
progress:
  description: One line for the play's output.
  returned: success
  type: str
  sample: "org/model@4f3c1e0a9b2d: 12 of 40 files verified by content, 3.10 of 9.00 GiB; hashing the rest"
pending:
  description: Files left to hash by the next call.
  returned: success
  type: list
  elements: str
digest:
  description: sha256 over the sorted file:blob list; equal on every node with the same snapshot.
  returned: success (null while RV(done) is false)
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
    VERIFY_ARGS,
    verify_polled,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(SNAPSHOT_ARGS, **VERIFY_ARGS),
        supports_check_mode=True,
    )
    p = module.params
    try:
        report = verify_polled(p, module.check_mode)
    except ValueError as exc:
        module.fail_json(msg="weights_verify: %s" % exc)
    if report["problems"]:
        module.fail_json(msg="%s@%s is not intact on this node: %s" % (p["repo_id"], p["revision"][:12],
                                                                       "; ".join(report["problems"])), **report)
    if report["differs"]:
        module.fail_json(msg="snapshot digest %s differs from the seed node's %s (different file set)"
                             % (report["digest"], p["expected_digest"]), **report)
    module.exit_json(changed=False, **report)


if __name__ == "__main__":
    main()
