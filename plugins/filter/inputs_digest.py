# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The digest of a run's inputs and of the collection that runs them, for the no-op check of a re-run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: inputs_digest
short_description: One digest of a run's inputs and of this collection's code, roles, playbooks and recipes
version_added: 0.4.0
description:
  - Returns the SHA-256 of the input (serialised as canonical JSON) together with the content of this
    collection's C(plugins), C(roles), C(playbooks) and C(recipes) folders. A new release of the collection,
    or an edited recipe or patch, changes the digest as surely as a changed variable does.
  - Secrets in the input go in only through the hash; the digest reveals nothing of them.
positional: _input
options:
  _input:
    description: Every input of the run (variables, plan, recipe).
    type: raw
    required: true
"""

EXAMPLES = r"""
sparkfleet_inputs_digest: >-
  {{ {'plan': validate_plan, 'recipe': validate_recipe_resolved} | sparkfleet.vllm.inputs_digest }}
"""

RETURN = r"""
_value:
  description: A hex SHA-256 digest.
  type: str
"""

import hashlib
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ("plugins", "roles", "playbooks", "recipes")


def code_digest(root=ROOT):
    """Pure over the file system: the collection's runtime files, by relative path and content."""
    h = hashlib.sha256()
    for folder in FOLDERS:
        for base, dirs, files in os.walk(os.path.join(root, folder)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if not f.endswith((".pyc", ".pyo"))):
                full = os.path.join(base, name)
                h.update(os.path.relpath(full, root).encode() + b"\0")
                with open(full, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def inputs_digest(data, root=ROOT):
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode() + b"\0" + code_digest(root).encode()).hexdigest()


class FilterModule:
    def filters(self):
        return {"inputs_digest": inputs_digest}
