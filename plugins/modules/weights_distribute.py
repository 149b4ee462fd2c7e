#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_distribute
short_description: Copy a verified checkpoint snapshot to the nodes through a pipelined chain
version_added: 0.1.0
description:
  - C(action=check) verifies the local snapshot and says whether this node needs a copy.
  - C(action=receive) (run with C(async)) checks free disk first, then listens for the stream, forwards
    each chunk to the next node, unpacks it into a staging directory beside the cache, verifies every blob
    against its name, and only then moves blobs and snapshot links into place (atomic renames). Blobs of
    other revisions already on the node are never touched.
  - C(action=send) streams the snapshot's blobs and links (a tar stream, links kept as links) from the seed node.
options:
  session:
    description: Transfer session name (the seed's snapshot digest).
    type: str
    default: ""
  total_bytes:
    description: Size of the snapshot, for the free-disk check of a receiver.
    type: int
    default: 0
  port:
    default: 29401
attributes:
  check_mode:
    support: full
    details: C(check) runs read-only; C(receive) and C(send) predict C(changed=true) and move nothing.
  diff_mode:
    support: partial
    details: C(receive) shows the snapshot's file-to-blob manifest on this node before and after, in a run
      with C(--diff) (the role reads it through C(async_status)); in check mode nothing is received, so
      nothing is compared.
  idempotent:
    support: full
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.chain
  - sparkfleet.vllm.snapshot
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Which nodes need the weights
  sparkfleet.vllm.weights_distribute:
    action: check
    hub_dir: /root/.cache/huggingface/hub
    repo_id: festr2/MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8
    revision: "{{ recipe.revision }}"
  register: need
"""

RETURN = r"""
needed:
  description: Whether this node lacks an intact copy (C(check)).
  returned: action is check
  type: bool
problems:
  description: What the local check found wrong (C(check)).
  returned: action is check
  type: list
  elements: str
transfer:
  description: Bytes moved, stream sha256, seconds.
  returned: action is receive or send
  type: dict
published:
  description: Blobs moved into place by this run.
  returned: action is receive
  type: int
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.checkpoint import (
    SNAPSHOT_ARGS,
    repo_dir,
    snapshot_dir,
    verify_snapshot,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.stream_chain import (
    ChainError,
    Progress,
    argument_spec,
    receive,
    send,
)

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
        argument_spec=dict(
            argument_spec(29401),
            **SNAPSHOT_ARGS,
            session=dict(type="str", default=""),
            total_bytes=dict(type="int", default=0),
        ),
        required_if=[("action", "send", ["target_host", "session"]), ("action", "receive", ["session"])],
        supports_check_mode=True,
    )
    p = module.params
    hub, repo, rev = p["hub_dir"], p["repo_id"], p["revision"]
    rdir = repo_dir(hub, repo)
    if p["action"] == "check":
        report = verify_snapshot(hub, repo, rev, use_manifest=not module.check_mode)
        module.exit_json(changed=False, needed=not report["ok"], problems=report["problems"],
                         digest=report["digest"])
    if module.check_mode:
        module.exit_json(changed=True)
    try:
        if p["action"] == "send":
            progress = Progress(p["progress_file"], p["session"])
            report = verify_snapshot(hub, repo, rev)
            if not report["ok"] or report["digest"] != p["session"]:
                msg = "the seed's snapshot is not the verified one: %s" % "; ".join(report["problems"])
                progress.fail(msg)
                module.fail_json(msg=msg)
            base = os.path.basename(rdir)
            paths = ["%s/blobs/%s" % (base, b) for b in sorted(set(report["files"].values())) if b]
            paths.append("%s/snapshots/%s" % (base, rev))
            progress.total = report["total_bytes"]
            try:
                result = send(["tar", "-C", hub, "-cf", "-"] + paths, p["target_host"], p["port"], p["session"],
                              p["timeout"], progress=progress)
            except (ChainError, OSError) as exc:
                progress.fail(str(exc))
                raise
            progress.finish(result)
            module.exit_json(changed=True, transfer=result)
        os.makedirs(hub, exist_ok=True)
        # The listing the diff shows: no hashing here, the listener must bind before the sender gives up.
        before = verify_snapshot(hub, repo, rev, hash_blobs=False, use_manifest=False).get("files") or {}
        free = shutil.disk_usage(hub).free
        if p["total_bytes"] and free < p["total_bytes"] * 1.05:
            module.fail_json(msg="not enough disk for %s in %s: %d bytes free, %d needed; free space there or point "
                                 "sparkfleet_hf_cache_dir elsewhere" % (repo, hub, free, p["total_bytes"]))
        stage = os.path.join(hub, STAGING, p["session"][:16])
        shutil.rmtree(stage, ignore_errors=True)
        os.makedirs(stage)
        forward = (p["forward_host"], p["port"]) if p["forward_host"] else None
        result = receive(p["port"], p["session"], ["tar", "-C", stage, "-xf", "-"], forward=forward,
                         bind=p["bind_address"], accept_timeout=p["timeout"])
        if result["sink_rc"] != 0:
            module.fail_json(msg="unpacking the weights stream failed: %s" % result["sink_output"], transfer=result)
        stage_hub = stage
        staged = verify_snapshot(stage_hub, repo, rev, use_manifest=False)
        if not staged["ok"]:
            module.fail_json(msg="the received snapshot is not intact (nothing was published): %s"
                                 % "; ".join(staged["problems"]), transfer=result)
        moved = publish(os.path.join(stage, os.path.basename(rdir)), rdir, rev)
        shutil.rmtree(stage, ignore_errors=True)
        final = verify_snapshot(hub, repo, rev)
        if not final["ok"]:
            module.fail_json(msg="after publishing, %s is not intact: %s" % (snapshot_dir(hub, repo, rev),
                                                                             "; ".join(final["problems"])))
        if result["forward_error"]:
            module.fail_json(msg="stored here, but forwarding to %s failed: %s" % (p["forward_host"],
                                                                                   result["forward_error"]))
    except (ChainError, OSError) as exc:
        module.fail_json(msg="weights_distribute %s: %s" % (p["action"], exc))
    module.exit_json(changed=True, transfer=result, published=moved, digest=final["digest"],
                     diff={"before": {"files": before}, "after": {"files": final.get("files") or {}},
                           "before_header": "%s@%s (file -> blob)" % (repo, rev),
                           "after_header": "%s@%s (file -> blob)" % (repo, rev)})


if __name__ == "__main__":
    main()
