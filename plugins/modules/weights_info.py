#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_info
short_description: Say whether this node holds an intact copy of a checkpoint snapshot
version_added: 0.2.0
description:
  - Runs the checks of M(sparkfleet.vllm.weights_verify) on this node (index, framing, every blob against
    its hash, reusing the hashes of unchanged blobs) and reports what it found without failing, so that a
    play can send the snapshot to the nodes that need it.
  - One call hashes for at most O(poll_seconds) and returns RV(done); run it with C(until) on RV(done).
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
- name: Which nodes need the weights
  sparkfleet.vllm.weights_info:
    hub_dir: /root/.cache/huggingface/hub
    repo_id: festr2/MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8
    revision: "{{ recipe.revision }}"
  register: weights
  until: weights.done
  retries: 1000
  delay: 0
"""

RETURN = r"""
needed:
  description: Whether this node lacks an intact copy; true also while files are left to hash, so read it once
    RV(done) is true.
  returned: success
  type: bool
problems:
  description: What the check found wrong.
  returned: success
  type: list
  elements: str
done:
  description: Whether every file was checked; false when O(poll_seconds) ran out with files left to hash.
  returned: success
  type: bool
progress:
  description: One line for the play's output.
  returned: success
  type: str
digest:
  description: sha256 over the sorted file:blob list (null unless the copy is intact).
  returned: success
  type: str
have:
  description:
    - Blobs of the repo this node holds verified (their recorded hash still matches the file), whether or
      not a snapshot links them yet; an interrupted transfer leaves those it completed. The seed skips
      the blobs every receiver has.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.checkpoint import (
    SNAPSHOT_ARGS,
    VERIFY_ARGS,
    repo_dir,
    valid_entries,
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
        have = sorted(valid_entries(repo_dir(p["hub_dir"], p["repo_id"])))
    except ValueError as exc:
        module.fail_json(msg="weights_info: %s" % exc)
    module.exit_json(changed=False, needed=not report["ok"] or report["differs"], problems=report["problems"],
                     done=report["done"], progress=report["progress"], digest=report["digest"], have=have)


if __name__ == "__main__":
    main()
