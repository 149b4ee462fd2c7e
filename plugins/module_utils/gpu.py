# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""GPU facts from nvidia-smi, and whether an image's compiled CUDA arch list can run on a GPU (pure)."""

from __future__ import annotations

import csv
import io
import re

QUERY = ["nvidia-smi", "--query-gpu=compute_cap,name,memory.total,driver_version", "--format=csv"]


def parse_query(text):
    """Parse ``nvidia-smi --query-gpu=compute_cap,name,memory.total,driver_version --format=csv``.

    The header carries the units (``memory.total [MiB]``); values may carry them too. Returns a list of
    {"compute_cap": "12.1", "name": ..., "memory_mib": int, "driver": ...}.
    """
    rows = list(csv.reader(io.StringIO(text.strip())))
    if not rows:
        return []
    header = [h.strip().split(" ")[0] for h in rows[0]]
    if "compute_cap" not in header:
        raise ValueError("nvidia-smi output has no compute_cap column: %r" % text[:200])
    gpus = []
    for row in rows[1:]:
        if not row:
            continue
        rec = dict(zip(header, (c.strip() for c in row)))
        mem = re.match(r"(\d+)", rec.get("memory.total", ""))
        gpus.append({"compute_cap": rec["compute_cap"], "name": rec.get("name", ""),
                     "memory_mib": int(mem.group(1)) if mem else None, "driver": rec.get("driver_version", "")})
    return gpus


def covers(compute_cap, arch_list):
    """Which entries of torch's arch list give native code for ``compute_cap`` ("12.1").

    sm_XY cubins run on X.Z for Z >= Y; sm_XYf (family) likewise; sm_XYa only on X.Y exactly. PTX
    (compute_XY) is JIT-compiled at first launch and is not counted as coverage.
    """
    major, minor = (int(x) for x in str(compute_cap).split("."))
    hits = []
    for arch in arch_list or []:
        m = re.fullmatch(r"sm_(\d+?)(\d)([af]?)", arch)
        if not m:
            continue
        a_major, a_minor, suffix = int(m.group(1)), int(m.group(2)), m.group(3)
        if a_major != major:
            continue
        if (suffix == "a" and a_minor == minor) or (suffix != "a" and a_minor <= minor):
            hits.append(arch)
    return hits


def arch_verdict(gpus, arch_list):
    """Problems (empty when every GPU has native code in the image)."""
    if arch_list is None:
        return []  # no torch in the image: nothing to compare
    problems = []
    for gpu in gpus:
        if not covers(gpu["compute_cap"], arch_list):
            problems.append("%s (compute capability %s) has no native code in the image's torch arch list %s; "
                            "GB10 needs sm_120 or sm_121" % (gpu["name"], gpu["compute_cap"], arch_list))
    return problems
