# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Pure readings of Ray's own node table (``ray.nodes()``, the GCS view) for the readiness gate."""

from __future__ import annotations


def summarize(nodes):
    """Count alive nodes and their GPUs; list the addresses of each kind."""
    alive = [n for n in nodes if n.get("Alive")]
    dead = [n for n in nodes if not n.get("Alive")]
    gpus = sum(float((n.get("Resources") or {}).get("GPU", 0)) for n in alive)
    return {
        "alive": len(alive),
        "dead": len(dead),
        "gpus": int(gpus),
        "alive_ips": sorted(n.get("NodeManagerAddress", "?") for n in alive),
        "dead_ips": sorted(n.get("NodeManagerAddress", "?") for n in dead),
    }


def gate(summary, want_nodes, want_gpus, expected_ips=None):
    """The readiness gate: alive nodes == N **and** GPUs == N. Returns (ready, description)."""
    desc = "%d/%d nodes alive, %d/%d GPUs" % (summary["alive"], want_nodes, summary["gpus"], want_gpus)
    missing = sorted(set(expected_ips or ()) - set(summary["alive_ips"]))
    if missing:
        desc += "; not joined: %s" % ", ".join(missing)
    extra = sorted(set(summary["alive_ips"]) - set(expected_ips or summary["alive_ips"]))
    if extra:
        desc += "; unexpected nodes: %s" % ", ".join(extra)
    ready = summary["alive"] == want_nodes and summary["gpus"] == want_gpus and not missing and not extra
    return ready, desc
