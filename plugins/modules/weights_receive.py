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
    directory beside the cache. A hop that moves no byte for O(stall_timeout) fails, naming both ends.
  - The unpacking refuses, before writing it, any member a snapshot never holds (an absolute name, C(..),
    a device, FIFO or hard link, a blob not named by its hash, a link whose target is not exactly
    C(../)...C(blobs/<hash>), a path through a link, a name twice); a stream with a frame that fails its
    HMAC is refused whole. Either way staging is removed and nothing is published.
  - Each blob is hashed as its bytes arrive and must match its name (the content hash the seed's snapshot
    links to); it then moves into the repo's blobs at once (an atomic rename), with its hash recorded in
    the manifest beside the blobs. An interrupted transfer thus keeps the blobs it completed, and the
    next one skips those; a partial blob stays in staging, which is removed when the step ends. A blob
    already verified on this node is not written again.
  - The snapshot's links are then checked where they will resolve (every file, the index against the
    shards, framing, the quantized weights' scales) and published in one atomic exchange with the
    previous snapshot directory, so a reader sees the old snapshot or the new one, never a mix. Blobs of
    other revisions are never touched.
  - A full disk fails the step naming this node, the bytes the snapshot needs and the bytes free; staging
    is removed and the previous snapshot stays as it was.
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
  blobs:
    description:
      - The blob names of the seed's snapshot. Only these, already verified here, count against the bytes the
        free-disk check asks for (blobs of other revisions do not).
    type: list
    elements: str
    default: []
  node:
    description: This node's name in messages (the inventory name); its hostname when empty.
    type: str
    default: ""
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
  description: Blobs received, verified and moved into place by this run.
  returned: success
  type: int
skipped:
  description: Blobs already verified on this node before the stream came (not written again).
  returned: success
  type: int
digest:
  description: The published snapshot's digest.
  returned: success
  type: str
"""

import ctypes
import errno
import os
import shutil
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.checkpoint import (
    SNAPSHOT_ARGS,
    file_stamp,
    repo_dir,
    save_manifest,
    snapshot_dir,
    valid_entries,
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
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def swap_in(new, final):
    """Put the directory ``new`` at ``final`` in one step; returns where the old ``final`` now is (to be
    removed), or None. Written by hand because Python exposes no renameat2(RENAME_EXCHANGE), the one call
    that swaps two non-empty directories atomically (Linux 3.15+, glibc 2.28+); without it the old
    directory is renamed aside first, leaving a window of a rename where neither is in place."""
    if not os.path.lexists(final):
        os.rename(new, final)
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None and renameat2(_AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(final),
                                           _RENAME_EXCHANGE) == 0:
        return new
    aside = new + ".old"
    os.rename(final, aside)
    os.rename(new, final)
    return aside


def main():
    module = AnsibleModule(
        argument_spec=dict(receive_argument_spec(29401), **SNAPSHOT_ARGS, session=dict(type="str", required=True),
                           total_bytes=dict(type="int", default=0), node=dict(type="str", default=""),
                           blobs=dict(type="list", elements="str", default=[])),
        supports_check_mode=True,
    )
    p = module.params
    hub, repo, rev = p["hub_dir"], p["repo_id"], p["revision"]
    node = p["node"] or socket.gethostname()
    if module.check_mode:
        module.exit_json(changed=True)
    progress = Progress(p["progress_file"], p["session"], total=p["total_bytes"] or None,
                        phase="waiting for the stream on port %d" % p["port"])

    def fail(msg, **extra):
        progress.fail(msg)
        module.fail_json(msg=msg, **extra)

    stage = os.path.join(hub, STAGING, p["session"][:16])
    incoming = None
    try:
        rdir = repo_dir(hub, repo)
        os.makedirs(os.path.join(rdir, "blobs"), exist_ok=True)
        os.makedirs(os.path.join(rdir, "snapshots"), exist_ok=True)
        # The listing the diff shows: no hashing here, the listener must bind before the sender gives up.
        before = verify_snapshot(hub, repo, rev, hash_blobs=False, use_manifest=False,
                                 allow_files=True).get("files") or {}
        have = valid_entries(rdir)
        wanted_blobs = set(p["blobs"])
        held = sum(e["stamp"][0] for b, e in have.items() if b in wanted_blobs)
        free = shutil.disk_usage(hub).free
        need = int(max(0, p["total_bytes"] - held) * 1.05)
        if p["total_bytes"] and free < need:
            fail("not enough disk on %s for %s in %s: %d bytes needed, %d bytes free; free space there or point "
                 "sparkfleet_hf_cache_dir elsewhere" % (node, repo, hub, need, free))
        shutil.rmtree(stage, ignore_errors=True)
        os.makedirs(stage)
        forward = (p["forward_host"], p["port"]) if p["forward_host"] else None
        top = os.path.basename(rdir)
        received = {}

        def publish_blob(blob, path, _size):
            final_blob = os.path.join(rdir, "blobs", blob)
            os.replace(path, final_blob)
            received[blob] = {"stamp": file_stamp(os.stat(final_blob)), "digest": blob}
            save_manifest(rdir, dict(valid_entries(rdir), **received))

        def sink(stream):
            try:
                return "%d members" % extract_repo(stream, stage, top, wanted=lambda blob: blob not in have,
                                                   done=publish_blob)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                raise OSError(exc.errno, "the disk under %s on %s is full: the snapshot needs %d bytes, %d were "
                              "free when the transfer began (%d now); free space there or point "
                              "sparkfleet_hf_cache_dir elsewhere"
                              % (hub, node, need, free, shutil.disk_usage(hub).free)) from exc

        result = receive(p["port"], p["session"], p["chain_key"], sink, forward=forward, bind=p["bind_address"],
                         accept_timeout=p["timeout"], progress=progress, stall_seconds=p["stall_timeout"])
        if not result["sink_ok"]:
            fail("the weights stream was refused, nothing was published: %s" % result["sink_output"],
                 transfer=result)
        progress.update(0, phase="verified")
        # The staged links move beside the snapshot they replace, where they resolve into the repo's blobs.
        incoming = os.path.join(rdir, "snapshots", ".%s.incoming" % rev)
        shutil.rmtree(incoming, ignore_errors=True)
        os.rename(os.path.join(stage, top, "snapshots", rev), incoming)
        staged = verify_snapshot(hub, repo, rev, sdir=incoming,
                                 progress=lambda done, total: progress.update(done, total=total))
        if not staged["ok"] or staged["digest"] != p["session"]:
            why = "; ".join(staged["problems"]) or "its digest is %s, the seed's %s" % (staged["digest"], p["session"])
            fail("the received snapshot is not intact (nothing was published): %s" % why, transfer=result)
        incoming = swap_in(incoming, snapshot_dir(hub, repo, rev))  # the previous snapshot, removed below
        final = verify_snapshot(hub, repo, rev)
        if not final["ok"]:
            fail("after publishing, %s is not intact: %s"
                 % (snapshot_dir(hub, repo, rev), "; ".join(final["problems"])))
        if result["forward_error"]:
            fail("stored here, but forwarding to %s failed: %s" % (p["forward_host"], result["forward_error"]))
    except (ChainError, OSError, ValueError) as exc:
        fail("weights_receive: %s" % exc)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if incoming:
            shutil.rmtree(incoming, ignore_errors=True)
    out = dict(transfer=result, published=len(received), skipped=len(have), digest=final["digest"])
    progress.finish(out)
    module.exit_json(changed=True, diff={"before": {"files": before}, "after": {"files": final["files"]},
                                         "before_header": "%s@%s (file -> blob)" % (repo, rev),
                                         "after_header": "%s@%s (file -> blob)" % (repo, rev)}, **out)


if __name__ == "__main__":
    main()
