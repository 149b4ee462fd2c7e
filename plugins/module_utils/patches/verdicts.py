# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Every patch's verdict for a vLLM source tree (the report of `make patch-verdicts`), writing nothing.

    make patch-verdicts VLLM_SRC=/path/to/tree
    PYTHONPATH=collections .venv/bin/python tests/tools/patch_verdicts.py /path/to/tree [--patches a,b]

The tree is either a ``vllm`` package directory (the one holding ``_version.py``) or a directory that
contains ``vllm/`` (an unpacked sdist or wheel, a site-packages directory). The output is one JSON object:
``{"vllm_dir", "vllm_version", "patches": [{"id", "target", "verdict", "detail", "vllm_version"}, ...]}``,
where ``target`` is the candidate path the patch judged and ``verdict`` is one of applied (the patch would
rewrite the file), already applied, fixed upstream (skipped), anchor not found. Standard library only.
"""

from __future__ import annotations

import os

from . import CATALOGUE, run, select, vllm_version


def vllm_dir_of(path):
    """The vllm package directory for ``path`` (itself, or its ``vllm/`` child), else None."""
    for candidate in (path, os.path.join(path, "vllm")):
        if os.path.isfile(os.path.join(candidate, "_version.py")) or (
                os.path.isfile(os.path.join(candidate, "__init__.py")) and
                os.path.basename(os.path.normpath(candidate)) == "vllm"):
            return os.path.abspath(candidate)
    return None


def verdicts(path, ids=None):
    """The report for the tree at ``path`` (see the module docstring); raises ValueError for a bad path."""
    vllm_dir = vllm_dir_of(path)
    if vllm_dir is None:
        raise ValueError("%s is neither a vllm package directory nor a directory containing vllm/" % path)
    report = run(vllm_dir, select(list(ids or CATALOGUE)), required=(), write=False)
    return {"vllm_dir": vllm_dir, "vllm_version": vllm_version(vllm_dir), "patches": report}
