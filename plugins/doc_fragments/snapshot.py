# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations


class ModuleDocFragment:
    """The options that name a checkpoint snapshot in a node's Hugging Face hub cache (DOCUMENTATION,
    checkpoint.SNAPSHOT_ARGS), and those of a check in bounded polls (VERIFY, checkpoint.VERIFY_ARGS)."""

    DOCUMENTATION = r"""
options:
  hub_dir:
    description: The node's Hugging Face hub cache directory.
    type: path
    required: true
  repo_id:
    description: Model repository, C(ORG/NAME).
    type: str
    required: true
  revision:
    description: Snapshot revision (commit hash).
    type: str
    required: true
"""

    VERIFY = r"""
options:
  hash_blobs:
    description:
      - Hash blob contents; without it only presence and framing are checked.
      - A blob hashed earlier is taken on trust while its size, mtime, ctime and inode are those it was
        hashed with (the quick mode); a flipped bit whose times were restored still moves the ctime.
    type: bool
    default: true
  rehash_before:
    description:
      - The deep mode. Hashes recorded before this time (seconds since the epoch, usually when the check
        began) are not trusted and every such blob is hashed again; 0 trusts every recorded hash that
        still matches its file.
    type: float
    default: 0
  poll_seconds:
    description:
      - Longest time one call spends hashing (it finishes the file it is on). Blobs verified so far are
        recorded in the manifest beside the blobs, so the next call goes on from there; run the module with
        C(until) on RV(done) so that a first check of a large snapshot reports its progress as it goes.
      - V(0), and check mode (which records nothing), hash the whole snapshot in one call.
    type: int
    default: 20
  expected_digest:
    description: The snapshot digest this node must match (the seed node's); another file set differs.
    type: str
"""
