#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_send
short_description: Stream a verified checkpoint snapshot from the seed node down the transfer chain
version_added: 0.2.0
description:
  - Checks that this node's snapshot is intact and is the one the session names, then streams its blobs
    and links (a tar stream, links kept as links) to the first node of the chain, where
    M(sparkfleet.vllm.weights_receive) listens.
  - Run it with C(async) and report it with M(sparkfleet.vllm.job_progress) on O(progress_file).
options:
  session:
    description: Transfer session name, the seed's snapshot digest; the receivers refuse another.
    type: str
    required: true
  port:
    default: 29401
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.snapshot
  - sparkfleet.vllm.chain
  - sparkfleet.vllm.chain.send
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Stream the snapshot from the seed to the first node of the chain
  sparkfleet.vllm.weights_send:
    hub_dir: /root/.cache/huggingface/hub
    repo_id: festr2/MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8
    revision: "{{ recipe.revision }}"
    session: "{{ seed.digest }}"
    target_host: 10.0.0.2
    progress_file: /var/tmp/sparkfleet/weights-send.json
  async: 3600
  poll: 0
"""

RETURN = r"""
transfer:
  description: Bytes sent, the stream's sha256 and seconds taken.
  returned: success
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.checkpoint import (
    SNAPSHOT_ARGS,
    repo_dir,
    verify_snapshot,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.progress import Progress
from ansible_collections.sparkfleet.vllm.plugins.module_utils.stream_chain import (
    ChainError,
    send,
    send_argument_spec,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(send_argument_spec(29401), **SNAPSHOT_ARGS, session=dict(type="str", required=True)),
        supports_check_mode=True,
    )
    p = module.params
    hub, repo, rev = p["hub_dir"], p["repo_id"], p["revision"]
    if module.check_mode:
        module.exit_json(changed=True)
    progress = Progress(p["progress_file"], p["session"], phase="verified")
    try:
        report = verify_snapshot(hub, repo, rev, progress=lambda done, total: progress.update(done, total=total))
        if not report["ok"] or report["digest"] != p["session"]:
            msg = "the seed's snapshot is not the verified one: %s" % (
                "; ".join(report["problems"]) or "digest %s, session %s" % (report["digest"], p["session"]))
            progress.fail(msg)
            module.fail_json(msg=msg)
        base = os.path.basename(repo_dir(hub, repo))
        paths = ["%s/blobs/%s" % (base, b) for b in sorted(set(report["files"].values())) if b]
        paths.append("%s/snapshots/%s" % (base, rev))
        progress.update(0, phase="connecting to %s" % p["target_host"], total=report["total_bytes"])
        result = send(["tar", "-C", hub, "-cf", "-"] + paths, p["target_host"], p["port"], p["session"],
                      p["chain_key"], p["timeout"], progress=progress)
    except (ChainError, OSError, ValueError) as exc:
        progress.fail(str(exc))
        module.fail_json(msg="weights_send: %s" % exc)
    module.exit_json(changed=True, transfer=result)


if __name__ == "__main__":
    main()
