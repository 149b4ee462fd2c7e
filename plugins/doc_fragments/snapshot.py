# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations


class ModuleDocFragment:
    """The options that name a checkpoint snapshot in a node's Hugging Face hub cache."""

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
