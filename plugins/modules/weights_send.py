#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_send
short_description: Stream a verified checkpoint snapshot from the seed node down the transfer chain
version_added: 0.2.0
description:
  - Checks that this node's snapshot is intact and is the one the session names, then streams it to the
    first node of the chain, where M(sparkfleet.vllm.weights_receive) listens. The stream holds every
    file of the snapshot (weights, index, config, tokenizer, chat template, remote code), each blob once,
    then a link per file.
  - A snapshot of regular files (copied rather than downloaded) is a valid seed; each file ships as the
    blob its sha256 names, so every receiver gets the Hugging Face cache layout.
  - Blobs in O(skip_blobs), those every receiver has already verified (an earlier, interrupted transfer),
    are not sent again.
  - Run it with C(async) and report it with M(sparkfleet.vllm.job_progress) on O(progress_file).
options:
  session:
    description: Transfer session name, the seed's snapshot digest; the receivers refuse another.
    type: str
    required: true
  skip_blobs:
    description: Blob names that every node of the chain already holds, verified; they are not sent.
    type: list
    elements: str
    default: []
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
blobs_sent:
  description: Blobs streamed, and the bytes of their contents.
  returned: success
  type: dict
  sample: {count: 3, bytes: 250000000, skipped: 2, skipped_bytes: 180000000}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.checkpoint import (
    SNAPSHOT_ARGS,
    repo_dir,
    snapshot_dir,
    verify_snapshot,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.progress import Progress
from ansible_collections.sparkfleet.vllm.plugins.module_utils.stream_chain import (
    ChainError,
    send,
    send_argument_spec,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.untar import pack_repo, packed_size


def main():
    module = AnsibleModule(
        argument_spec=dict(send_argument_spec(29401), **SNAPSHOT_ARGS, session=dict(type="str", required=True),
                           skip_blobs=dict(type="list", elements="str", default=[])),
        supports_check_mode=True,
    )
    p = module.params
    hub, repo, rev = p["hub_dir"], p["repo_id"], p["revision"]
    if module.check_mode:
        module.exit_json(changed=True)
    progress = Progress(p["progress_file"], p["session"], phase="verified")
    try:
        report = verify_snapshot(hub, repo, rev, allow_files=True,
                                 progress=lambda done, total: progress.update(done, total=total))
        if not report["ok"] or report["digest"] != p["session"]:
            msg = "the seed's snapshot is not the verified one: %s" % (
                "; ".join(report["problems"]) or "digest %s, session %s" % (report["digest"], p["session"]))
            progress.fail(msg)
            module.fail_json(msg=msg)
        rdir, sdir = repo_dir(hub, repo), snapshot_dir(hub, repo, rev)
        skip = set(p["skip_blobs"]) & set(report["files"].values())
        sizes = {blob: os.path.getsize(os.path.join(sdir, name)) for name, blob in report["files"].items()}
        to_send = packed_size(rdir, sdir, rev, report["files"], skip)
        packed = {}

        def produce(out):
            packed["count"], packed["bytes"] = pack_repo(out, rdir, sdir, rev, report["files"], skip)

        progress.update(0, phase="connecting to %s" % p["target_host"], total=to_send)
        result = send(produce, p["target_host"], p["port"], p["session"], p["chain_key"], p["timeout"],
                      progress=progress, stall_seconds=p["stall_timeout"])
        blobs = dict(packed, skipped=len(skip), skipped_bytes=sum(sizes[b] for b in skip))
    except (ChainError, OSError, ValueError) as exc:
        progress.fail(str(exc))
        module.fail_json(msg="weights_send: %s" % exc)
    module.exit_json(changed=True, transfer=result, blobs_sent=blobs)


if __name__ == "__main__":
    main()
