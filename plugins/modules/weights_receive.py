#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_receive
short_description: Receive a checkpoint snapshot from the transfer chain, verify it and publish it
version_added: 0.2.0
description:
  - Run with C(async) on every node that needs the snapshot. It checks free disk first, then listens for
    the stream that M(sparkfleet.vllm.weights_send) starts, refuses a sender that does not prove the run's
    O(chain_key), forwards each chunk to the next node as it arrives, and unpacks it into a staging
    directory beside the cache.
  - The unpacking refuses, before writing it, any member a snapshot never holds (an absolute name, C(..),
    a device, FIFO or hard link, a link that does not resolve into the repo's C(blobs/), a path through a
    link, a name twice); a stream whose integrity trailer fails is refused whole. Either way staging is
    removed and nothing is published.
  - It then verifies every staged blob against its name and only then moves blobs and snapshot links into
    place (atomic renames). Blobs of other revisions already on the node are never touched.
  - The hashes verified in staging are recorded in the manifest beside the blobs, so the snapshot is hashed
    once on each node.
  - Its phases (bytes received, bytes verified) are kept in O(progress_file) for
    M(sparkfleet.vllm.job_progress).
options:
  session:
    description: Transfer session name (the seed's snapshot digest); a stream of another session is refused.
    type: str
    required: true
  total_bytes:
    description: Size of the snapshot, for the free-disk check.
    type: int
    default: 0
  port:
    default: 29401
attributes:
  diff_mode:
    support: full
    details: The snapshot's file-to-blob manifest on this node before and after (the play reads it through
      C(async_status)); in check mode nothing is received, so nothing is compared.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.snapshot
  - sparkfleet.vllm.chain
  - sparkfleet.vllm.chain.receive
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Receive the snapshot, verify it, publish it and forward it to the next node
  sparkfleet.vllm.weights_receive:
    hub_dir: /root/.cache/huggingface/hub
    repo_id: festr2/MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8
    revision: "{{ recipe.revision }}"
    session: "{{ seed.digest }}"
    total_bytes: "{{ seed.total_bytes }}"
    bind_address: "{{ sparkfleet_node_ip }}"
    forward_host: 10.0.0.3
    progress_file: /var/tmp/sparkfleet/weights-receive.json
  async: 3600
  poll: 0
"""

RETURN = r"""
transfer:
  description: Bytes received, frames verified (each by its HMAC), seconds, and whether it was forwarded.
  returned: success
  type: dict
published:
  description: Blobs moved into place by this run.
  returned: success
  type: int
digest:
  description: The published snapshot's digest.
  returned: success
  type: str
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.checkpoint import (
    SNAPSHOT_ARGS,
    repo_dir,
    save_manifest,
    snapshot_dir,
    verify_snapshot,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.progress import Progress
from ansible_collections.sparkfleet.vllm.plugins.module_utils.stream_chain import (
    ChainError,
    receive,
    receive_argument_spec,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.untar import extract_repo

STAGING = ".sparkfleet-incoming"


def publish(stage_repo, final_repo, revision):
    """Move verified blobs, then the snapshot's links, into place. Returns blobs moved.

    Every staged blob has just been verified against its name, so it replaces whatever is there under that
    name (a blob name is its content hash: a good copy is identical, a bad one gets repaired). Blobs of
    other revisions are not in the stream and stay as they are.
    """
    moved = 0
    os.makedirs(os.path.join(final_repo, "blobs"), exist_ok=True)
    for blob in sorted(os.listdir(os.path.join(stage_repo, "blobs"))):
        os.replace(os.path.join(stage_repo, "blobs", blob), os.path.join(final_repo, "blobs", blob))
        moved += 1
    src_snap = os.path.join(stage_repo, "snapshots", revision)
    dst_snap = os.path.join(final_repo, "snapshots", revision)
    os.makedirs(dst_snap, exist_ok=True)
    for name in sorted(os.listdir(src_snap)):
        tmp = os.path.join(dst_snap, ".%s.tmp" % name)
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(os.readlink(os.path.join(src_snap, name)), tmp)
        os.replace(tmp, os.path.join(dst_snap, name))
    return moved


def main():
    module = AnsibleModule(
        argument_spec=dict(receive_argument_spec(29401), **SNAPSHOT_ARGS, session=dict(type="str", required=True),
                           total_bytes=dict(type="int", default=0)),
        supports_check_mode=True,
    )
    p = module.params
    hub, repo, rev = p["hub_dir"], p["repo_id"], p["revision"]
    if module.check_mode:
        module.exit_json(changed=True)
    progress = Progress(p["progress_file"], p["session"], total=p["total_bytes"] or None,
                        phase="waiting for the stream on port %d" % p["port"])

    def fail(msg, **extra):
        progress.fail(msg)
        module.fail_json(msg=msg, **extra)

    try:
        rdir = repo_dir(hub, repo)
        os.makedirs(hub, exist_ok=True)
        # The listing the diff shows: no hashing here, the listener must bind before the sender gives up.
        before = verify_snapshot(hub, repo, rev, hash_blobs=False, use_manifest=False).get("files") or {}
        free = shutil.disk_usage(hub).free
        if p["total_bytes"] and free < p["total_bytes"] * 1.05:
            fail("not enough disk for %s in %s: %d bytes free, %d needed; free space there or point "
                 "sparkfleet_hf_cache_dir elsewhere" % (repo, hub, free, p["total_bytes"]))
        stage = os.path.join(hub, STAGING, p["session"][:16])
        shutil.rmtree(stage, ignore_errors=True)
        os.makedirs(stage)
        forward = (p["forward_host"], p["port"]) if p["forward_host"] else None
        top = os.path.basename(rdir)
        try:
            result = receive(p["port"], p["session"], p["chain_key"],
                             lambda stream: "%d members" % extract_repo(stream, stage, top), forward=forward,
                             bind=p["bind_address"], accept_timeout=p["timeout"], progress=progress)
        except ChainError:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        if not result["sink_ok"]:
            shutil.rmtree(stage, ignore_errors=True)
            fail("the weights stream was refused, nothing was published: %s" % result["sink_output"],
                 transfer=result)
        progress.update(0, phase="verified")
        staged = verify_snapshot(stage, repo, rev, use_manifest=False,
                                 progress=lambda done, total: progress.update(done, total=total))
        if not staged["ok"]:
            shutil.rmtree(stage, ignore_errors=True)
            fail("the received snapshot is not intact (nothing was published): %s" % "; ".join(staged["problems"]),
                 transfer=result)
        moved = publish(os.path.join(stage, os.path.basename(rdir)), rdir, rev)
        shutil.rmtree(stage, ignore_errors=True)
        # A rename keeps size and mtime, so the entries verified in staging hold for the published blobs.
        save_manifest(rdir, staged["verified"])
        final = verify_snapshot(hub, repo, rev)
        if not final["ok"]:
            fail("after publishing, %s is not intact: %s"
                 % (snapshot_dir(hub, repo, rev), "; ".join(final["problems"])))
        if result["forward_error"]:
            fail("stored here, but forwarding to %s failed: %s" % (p["forward_host"], result["forward_error"]))
    except (ChainError, OSError, ValueError) as exc:
        fail("weights_receive: %s" % exc)
    out = dict(transfer=result, published=moved, digest=final["digest"])
    progress.finish(out)
    module.exit_json(changed=True, diff={"before": {"files": before}, "after": {"files": final["files"]},
                                         "before_header": "%s@%s (file -> blob)" % (repo, rev),
                                         "after_header": "%s@%s (file -> blob)" % (repo, rev)}, **out)


if __name__ == "__main__":
    main()
