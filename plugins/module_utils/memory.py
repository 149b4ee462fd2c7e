# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""How much memory a node can still give: /proc/meminfo, bounded by the cgroup limits above the caller.

A DGX Spark's GB10 shares its 121 GiB with the CPU (nvidia-smi reports no memory figure), so the page
cache, Ray, the engine and the weights all draw on MemAvailable. Where the node runs inside a cgroup with a
limit (a container, a systemd slice), what is left under that limit counts too. Parsers are pure; the
reader only opens files.
"""

from __future__ import annotations

import os

UNLIMITED = 1 << 60


def parse_meminfo(text):
    """{"MemTotal": bytes, "MemAvailable": bytes, ...} from /proc/meminfo."""
    out = {}
    for line in text.splitlines():
        key, _unused, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


def parse_cgroup_paths(text):
    """{"v2": path} or {"v1": path} (of the memory controller) from /proc/self/cgroup."""
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths.setdefault("v2", parts[2])
        elif "memory" in parts[1].split(","):
            paths["v1"] = parts[2]
    return paths


def cgroup_headroom(limit, usage, inactive_file=0):
    """Bytes still available under one cgroup limit; reclaimable file cache counts as available."""
    if limit is None or limit >= UNLIMITED:
        return None
    return max(0, limit - max(0, usage - inactive_file))


def available(meminfo, headrooms):
    """The smallest of MemAvailable and every finite cgroup headroom."""
    values = [meminfo.get("MemAvailable", meminfo.get("MemFree", 0))]
    values += [h for h in headrooms if h is not None]
    return min(values)


def _read(path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _int(text):
    if text is None or text == "max":
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def _stat(text, key):
    for line in (text or "").splitlines():
        k, _unused, v = line.partition(" ")
        if k == key:
            return _int(v)
    return 0


def read(proc="/proc", cgroup_root="/sys/fs/cgroup"):
    """{"available_bytes", "total_bytes"} for the calling process, walking its cgroup up to the root."""
    meminfo = parse_meminfo(_read(os.path.join(proc, "meminfo")) or "")
    paths = parse_cgroup_paths(_read(os.path.join(proc, "self", "cgroup")) or "")
    headrooms, limits = [], []
    for version, path in paths.items():
        base = cgroup_root if version == "v2" else os.path.join(cgroup_root, "memory")
        rel = path.strip("/")
        while True:
            d = os.path.join(base, rel) if rel else base
            if version == "v2":
                limit = _int(_read(os.path.join(d, "memory.max")))
                usage = _int(_read(os.path.join(d, "memory.current")))
                inactive = _stat(_read(os.path.join(d, "memory.stat")), "inactive_file")
            else:
                limit, usage = _int(_read(os.path.join(d, "memory.limit_in_bytes"))), _int(
                    _read(os.path.join(d, "memory.usage_in_bytes")))
                inactive = _stat(_read(os.path.join(d, "memory.stat")), "total_inactive_file")
            if limit is not None and usage is not None:
                headrooms.append(cgroup_headroom(limit, usage, inactive))
                if limit < UNLIMITED:
                    limits.append(limit)
            if not rel:
                break
            rel = os.path.dirname(rel)
    total = min([meminfo.get("MemTotal", 0)] + limits)
    return {"available_bytes": available(meminfo, headrooms), "total_bytes": total}


class Watchdog:
    """Pure over its inputs: how long free memory has stayed below the floor, and when to give up."""

    def __init__(self, floor_bytes, grace_s):
        self.floor, self.grace, self.low_since = floor_bytes, grace_s, None

    def observe(self, available_bytes, now):
        """None while fine; a message once memory has stayed low for the whole grace period."""
        if not self.floor or available_bytes >= self.floor:
            self.low_since = None
            return None
        if self.low_since is None:
            self.low_since = now
        if now - self.low_since >= self.grace:
            return ("%.1f GiB free on the head for %ds (floor %.1f GiB)"
                    % (available_bytes / 2**30, int(now - self.low_since), self.floor / 2**30))
        return None


def process_usage(pid, proc="/proc", cgroup_root="/sys/fs/cgroup"):
    """Bytes charged to the memory cgroup of process ``pid`` (a container's), less reclaimable file cache."""
    paths = parse_cgroup_paths(_read(os.path.join(proc, str(pid), "cgroup")) or "")
    if "v2" in paths:
        d = os.path.join(cgroup_root, paths["v2"].strip("/"))
        usage = _int(_read(os.path.join(d, "memory.current")))
        inactive = _stat(_read(os.path.join(d, "memory.stat")), "inactive_file")
    elif "v1" in paths:
        d = os.path.join(cgroup_root, "memory", paths["v1"].strip("/"))
        usage = _int(_read(os.path.join(d, "memory.usage_in_bytes")))
        inactive = _stat(_read(os.path.join(d, "memory.stat")), "total_inactive_file")
    else:
        return 0
    return max(0, (usage or 0) - (inactive or 0))
