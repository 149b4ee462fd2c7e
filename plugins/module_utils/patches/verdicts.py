# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Print every patch's verdict for a vLLM source tree as JSON, writing nothing.

    make patch-verdicts VLLM_SRC=/path/to/tree
    PYTHONPATH=collections .venv/bin/python -m \\
        ansible_collections.sparkfleet.vllm.plugins.module_utils.patches.verdicts /path/to/tree [--patches a,b]

The tree is either a ``vllm`` package directory (the one holding ``_version.py``) or a directory that
contains ``vllm/`` (an unpacked sdist or wheel, a site-packages directory). The output is one JSON object:
``{"vllm_dir", "vllm_version", "patches": [{"id", "target", "verdict", "detail", "vllm_version"}, ...]}``,
where ``target`` is the candidate path the patch judged and ``verdict`` is one of applied (the patch would
rewrite the file), already applied, fixed upstream (skipped), anchor not found. Exit status: 0 with the
report, 1 when a patch cannot judge the tree (a target that does not parse, a marker without its code),
2 on a bad argument. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import CATALOGUE, PatchError, run, select, vllm_version


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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="patch-verdicts", description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", help="a vllm package directory, or a directory that contains vllm/")
    parser.add_argument("--patches", default="", help="comma-separated patch ids (default: all of %s)"
                        % ", ".join(CATALOGUE))
    args = parser.parse_args(argv)
    ids = [x for x in args.patches.split(",") if x]
    try:
        out = verdicts(args.tree, ids)
    except ValueError as exc:
        parser.error(str(exc))
    except PatchError as exc:
        print(json.dumps({"error": str(exc)}, indent=1))
        return 1
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
