# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""make patch-verdicts: every patch's verdict for a vLLM source tree, as JSON on stdout, writing nothing.

    PYTHONPATH=collections .venv/bin/python tests/tools/patch_verdicts.py /path/to/tree [--patches a,b]

The command line around ``plugins/module_utils/patches/verdicts.py`` (whose docstring describes the report);
it lives outside the collection's plugins because it prints and sets an exit status, which module code
never does. Exit status: 0 with the report, 1 when a patch cannot judge the tree, 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import json
import sys

from ansible_collections.sparkfleet.vllm.plugins.module_utils.patches import CATALOGUE, PatchError
from ansible_collections.sparkfleet.vllm.plugins.module_utils.patches.verdicts import verdicts


def main(argv=None):
    parser = argparse.ArgumentParser(prog="patch-verdicts", description=__doc__.split("\n\n", maxsplit=1)[0])
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
