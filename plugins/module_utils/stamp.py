# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""What a verified deploy leaves on each node, so that a re-run with nothing new can tell so in one probe.

A deploy that ends verified writes a stamp on every node: the digest of every input of the run (computed
once on the controller) and what the node held then: the ID of each image, the ID and start time of each
container, and a digest of each weights tree's entries (tree_digest).
A re-run whose inputs have the same digest, on a node whose images, containers and trees are all still the
ones stamped, has nothing to change there. Anything else (a file written since, a container restarted or
gone, an image retagged, a stamp missing or unreadable) sends the run down the full path, which checks and
repairs everything.
"""

from __future__ import annotations

import hashlib
import json
import os

from ansible_collections.sparkfleet.vllm.plugins.module_utils import checkpoint

VERSION = 1


def tree_digest(path):
    """Pure over the file system: a digest of every entry under ``path`` (links not followed), or None when
    ``path`` is absent. Each entry counts with its type, link target and what the weights role's manifest
    trusts a hash by (checkpoint.file_stamp: size, mtime, ctime, inode): a write, even with its times put
    back, or a copy in place of the file changes the digest. Hashing the bytes is the full path's job."""
    if not os.path.lexists(path):
        return None
    entries = []
    for root, dirs, files in os.walk(path, followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            full = os.path.join(root, name)
            st = os.lstat(full)
            link = os.readlink(full) if os.path.islink(full) else ""
            entries.append([os.path.relpath(full, path), st.st_mode, link] + checkpoint.file_stamp(st))
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def make(inputs_digest, images, containers, trees):
    """Pure: the stamp's content from what was observed."""
    return {"version": VERSION, "inputs": inputs_digest, "images": dict(sorted(images.items())),
            "containers": dict(sorted(containers.items())), "trees": dict(sorted(trees.items()))}


def differences(stamp, inputs_digest, images, containers, trees):
    """Pure: each way the node differs from its stamp, in words (empty: unchanged). ``images``, ``containers``
    and ``trees`` are what the node holds now, for the names the stamp lists."""
    if not isinstance(stamp, dict) or stamp.get("version") != VERSION:
        return ["no stamp of a verified deploy"]
    out = []
    if stamp.get("inputs") != inputs_digest:
        out.append("the run's inputs differ from the verified deploy's")
    for ref, image_id in (stamp.get("images") or {}).items():
        if images.get(ref) != image_id:
            out.append("image %s is %s, not %s" % (ref, images.get(ref) or "absent", image_id))
    for name, was in (stamp.get("containers") or {}).items():
        now = containers.get(name)
        if not now:
            out.append("container %s is gone" % name)
        elif not now.get("running"):
            out.append("container %s is not running (or paused)" % name)
        elif now.get("id") != was.get("id") or now.get("started_at") != was.get("started_at"):
            out.append("container %s was replaced or restarted" % name)
    for path, digest in (stamp.get("trees") or {}).items():
        if trees.get(path) != digest:
            out.append("%s changed" % path if trees.get(path) else "%s is gone" % path)
    return out
