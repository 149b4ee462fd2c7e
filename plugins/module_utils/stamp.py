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


def make(inputs_digest, images, containers, trees, facts=None):
    """Pure: the stamp's content from what was observed, with ``facts``: what the run's held stages found
    (the built image's identity, the planned env, the seed's verified snapshot), for a run that skips them."""
    return {"version": VERSION, "inputs": inputs_digest, "images": dict(sorted(images.items())),
            "containers": dict(sorted(containers.items())), "trees": dict(sorted(trees.items())),
            "facts": facts or {}}


def _findings(stamp, inputs_digest, images, containers, trees):
    """Pure: each way the node differs from its stamp, as (part, words); part is one of inputs, images,
    containers, trees, or stamp (none readable)."""
    if not isinstance(stamp, dict) or stamp.get("version") != VERSION:
        return [("stamp", "no stamp of a verified deploy")]
    out = []
    if stamp.get("inputs") != inputs_digest:
        out.append(("inputs", "the run's inputs differ from the verified deploy's"))
    for ref, image_id in (stamp.get("images") or {}).items():
        if images.get(ref) != image_id:
            out.append(("images", "image %s is %s, not %s" % (ref, images.get(ref) or "absent", image_id)))
    for name, was in (stamp.get("containers") or {}).items():
        now = containers.get(name)
        if not now:
            out.append(("containers", "container %s is gone" % name))
        elif not now.get("running"):
            out.append(("containers", "container %s is not running (or paused)" % name))
        elif now.get("id") != was.get("id") or now.get("started_at") != was.get("started_at"):
            out.append(("containers", "container %s was replaced or restarted" % name))
    for path, digest in (stamp.get("trees") or {}).items():
        if trees.get(path) != digest:
            out.append(("trees", "%s changed" % path if trees.get(path) else "%s is gone" % path))
    return out


def differences(stamp, inputs_digest, images, containers, trees):
    """Pure: each way the node differs from its stamp, in words (empty: unchanged). ``images``, ``containers``
    and ``trees`` are what the node holds now, for the names the stamp lists."""
    return [words for _part, words in _findings(stamp, inputs_digest, images, containers, trees)]


def held(stamp, inputs_digest, images, containers, trees):
    """Pure: which stages of the last verified deploy the node still holds for this run's inputs: its images
    (``images``: every image stamped has the same ID) and its weights trees (``trees``). Both need a stamp
    with the same inputs; a container that stopped or restarted (a lost worker) holds neither back, since
    the stages that start containers run anyway."""
    parts = {part for part, _words in _findings(stamp, inputs_digest, images, containers, trees)}
    whole = not parts & {"stamp", "inputs"}
    # A stage is held only where the stamp recorded something for it: an image or tree absent when stamped
    # and absent now is no verified stage.
    return {part: whole and part not in parts and bool(stamp.get(part)) and all((stamp.get(part) or {}).values())
            for part in ("images", "trees")}
