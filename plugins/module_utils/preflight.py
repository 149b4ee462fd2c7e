# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Judge the read-only preflight facts of every node at once (pure, stdlib only).

A gathering module collects one facts dict per node; ``judge(facts, expect)`` compares them all with what the
deploy needs and returns every defect in one run, ``render(defects)`` turns them into one message. A fact that
is missing (or None) is itself a defect, "not gathered": nothing passes by being absent.

Per-node facts (every key may be missing)::

    "gpu_with_request":    {"visible": bool, "count": int, "error": str|None}   nvidia-smi in a container with --gpus
    "gpu_without_request": {"visible": bool}                                   the same without --gpus
    "gpus":            [{"name", "compute_cap": "12.1", "memory_mib": int|None, "driver"}]   host nvidia-smi
    "memory":          {"available_bytes": int, "total_bytes": int}
    "disk":            {"path": str, "free_bytes": int}
    "net":             {"ip": str, "interface": str|None, "mtu": int|None}
    "listeners":       [{"port": int, "pid": int|None, "process": str, "container": str|None}]
    "containers":      [{"name", "image", "status", "labels": {...}, "gpu": bool}]
    "time":            {"before": float, "node": float, "after": float}     controller, node, controller epochs
    "docker_version":  "20.10.24+dfsg1"
    "driver_version":  "580.95.05"
    "image_ids":       {"ref": "sha256:..."}

``expect`` keys: see ``DEFAULTS`` (node_ips, interface, compute_cap, arch_list, gpus_per_node, memory_need_bytes,
disk_need_bytes, ports, port_ranges, managed_containers, max_clock_skew_s, min_docker, min_driver,
known_bad_images).

Leftover containers, one rule: a container that is not in ``managed_containers`` and either holds the GPU or
carries a ``sparkfleet.*`` label is a leftover (fix: ``docker rm -f NAME`` on that node).
"""

from __future__ import annotations

import math
import re
from collections import Counter

from ansible_collections.sparkfleet.vllm.plugins.module_utils.gpu import covers

GIB = 1024 ** 3

# Field reports (seeds/000): public images that start and serve on GB10 but generate garbage.
KNOWN_BAD_IMAGES = [
    {"id": "sha256:4c5e61c590207edb771c294014193c719ca9eee330c0b51756f4b6a25951360d",
     "ref": "nvcr.io/nvidia/vllm:26.03-py3",
     "reason": "serves, but output is corrupted ('foss foss foss ...') on GB10 with Kimi-K2.5"},
    {"id": "sha256:d78917343e4159618d8fd766d800809246a68b56cf132464b0eeec91a23bc5ca",
     "ref": "vllm/vllm-openai:nightly",
     "reason": "binds Marlin despite --moe-backend triton for compressed-tensors WNA16 MoE; degenerate output "
               "on GB10"},
]

DEFAULTS = {
    "node_ips": {},
    "interface": None,
    "compute_cap": "12.1",
    "arch_list": None,
    "gpus_per_node": 1,
    "memory_need_bytes": 0,
    "disk_need_bytes": {},
    "ports": [],
    "port_ranges": [],
    "managed_containers": ["sparkfleet-ray", "sparkfleet-vllm"],
    "max_clock_skew_s": 2.0,
    "min_docker": "19.03",  # the first release with --gpus
    "min_driver": "580.0",
    "known_bad_images": [],
}

FACT_KEYS = ("gpu_with_request", "gpu_without_request", "gpus", "memory", "disk", "net", "listeners",
             "containers", "time", "docker_version", "driver_version", "image_ids")


def _defect(node, check, found, expected, fix):
    return {"node": str(node), "check": str(check), "found": str(found), "expected": str(expected), "fix": str(fix)}


def _not_gathered(node, key):
    return _defect(node, key, "not gathered", "the '%s' fact" % key,
                   "re-run the preflight on %s and check why the gathering step did not report '%s'" % (node, key))


def _gib_down(n):
    return "%.1f GiB" % (math.floor(n * 10.0 / GIB) / 10.0)


def _gib_up(n):
    return "%.1f GiB" % (math.ceil(n * 10.0 / GIB) / 10.0)


def version_tuple(text):
    """Leading numeric version: "20.10.24+dfsg1" -> (20, 10, 24); "Docker version 24.0.7, build" -> (24, 0, 7).

    None when the text holds no number.
    """
    m = re.search(r"\d+(?:\.\d+)*", str(text or ""))
    if not m:
        return None
    return tuple(int(x) for x in m.group(0).split("."))


def version_at_least(found, minimum):
    """Numeric comparison, missing components count as 0 ("19.03" == "19.3.0"). None when unparseable."""
    a, b = version_tuple(found), version_tuple(minimum)
    if a is None or b is None:
        return None
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def skew(time_fact):
    """(skew, uncertainty) in seconds: skew = node - midpoint of the controller's bracket, uncertainty = half of it."""
    before, node, after = float(time_fact["before"]), float(time_fact["node"]), float(time_fact["after"])
    return node - (before + after) / 2.0, (after - before) / 2.0


def _owner(listener):
    bits = [str(listener.get("process") or "unknown process"),
            "pid %s" % listener["pid"] if listener.get("pid") is not None else "pid unknown"]
    if listener.get("container"):
        bits.append("container %s" % listener["container"])
    return ", ".join(bits)


def port_conflicts(listeners, expect):
    """Listeners on a port the deploy needs (expect["ports"], expect["port_ranges"]) that no managed container holds.

    A listener whose container is unknown counts as foreign. Returns a list of
    {"port", "what", "pid", "process", "container"} sorted by port, one per (port, owner).
    """
    managed = set(expect.get("managed_containers", DEFAULTS["managed_containers"]) or [])
    wanted = {}
    for p in expect.get("ports") or []:
        wanted.setdefault(int(p["port"]), "%s" % p.get("what", "port %s" % p["port"]))
    ranges = [(int(r["from"]), int(r["to"]), r.get("what", "port range")) for r in expect.get("port_ranges") or []]
    out, seen = [], set()
    for lis in listeners or []:
        port = int(lis["port"])
        what = wanted.get(port)
        if what is None:
            for lo, hi, rwhat in ranges:
                if lo <= port <= hi:
                    what = "%s %d-%d" % (rwhat, lo, hi)
                    break
        if what is None or (lis.get("container") and lis["container"] in managed):
            continue
        key = (port, lis.get("pid"), lis.get("process"), lis.get("container"))
        if key in seen:  # the same socket on IPv4 and IPv6
            continue
        seen.add(key)
        out.append({"port": port, "what": what, "pid": lis.get("pid"), "process": lis.get("process") or "",
                    "container": lis.get("container")})
    out.sort(key=lambda c: (c["port"], str(c["pid"]), c["process"], c["container"] or ""))
    return out


def _check_gpu(node, nf, exp, out):
    want = int(exp["gpus_per_node"])
    g = nf.get("gpu_with_request")
    if g is not None and g.get("deferred") and g.get("toolkit") is False:
        out.append(_defect(node, "gpu_with_request", "no NVIDIA Container Toolkit (no nvidia-container-runtime-hook)",
                           "the NVIDIA Container Toolkit, so that --gpus gives containers the GPU",
                           "install the NVIDIA Container Toolkit (nvidia-ctk runtime configure --runtime=docker) "
                           "and restart dockerd on %s" % node))
    if g is not None and not g.get("deferred"):
        # "deferred": the node holds no image to probe with yet; the image stage probes it on arrival.
        if not g.get("visible"):
            err = g.get("error")
            out.append(_defect(node, "gpu_with_request",
                               "no GPU in a container started with --gpus" + (" (%s)" % err if err else ""),
                               "%d GPU(s) visible with --gpus" % want,
                               "install the NVIDIA Container Toolkit (nvidia-ctk runtime configure --runtime=docker) "
                               "and restart dockerd on %s" % node))
        elif g.get("count") is not None and int(g["count"]) != want:
            out.append(_defect(node, "gpu_with_request", "%d GPU(s) visible with --gpus" % int(g["count"]),
                               "%d GPU(s) visible with --gpus" % want,
                               "check NVIDIA_VISIBLE_DEVICES and the NVIDIA Container Toolkit config on %s" % node))
    g = nf.get("gpu_without_request")
    if g is not None and g.get("visible"):
        out.append(_defect(node, "gpu_without_request", "a GPU is visible in a container started without --gpus",
                           "no GPU unless the container asks for one",
                           "remove \"default-runtime\": \"nvidia\" from /etc/docker/daemon.json and restart dockerd on "
                           "%s (with it, any image that sets NVIDIA_VISIBLE_DEVICES=all gets the GPU), or set "
                           "NVIDIA_VISIBLE_DEVICES=void in the image" % node))
    gpus = nf.get("gpus")
    if gpus is not None:
        if len(gpus) != want:
            out.append(_defect(node, "gpus", "host nvidia-smi lists %d GPU(s)" % len(gpus), "%d GPU(s)" % want,
                               "check the NVIDIA driver on %s (nvidia-smi), or set sparkfleet_gpus_per_node to %d"
                               % (node, len(gpus)) if gpus else
                               "check the NVIDIA driver on %s: nvidia-smi must list the GPU" % node))
        for gpu in gpus:
            if str(gpu.get("compute_cap")) != str(exp["compute_cap"]):
                out.append(_defect(node, "compute_cap", "%s with compute capability %s"
                                   % (gpu.get("name") or "GPU", gpu.get("compute_cap")),
                                   "compute capability %s" % exp["compute_cap"],
                                   "remove %s from the inventory or deploy an image built for compute capability %s"
                                   % (node, gpu.get("compute_cap"))))
    arch = exp.get("arch_list")
    if arch is not None:
        caps = sorted({str(x.get("compute_cap")) for x in gpus or [] if x.get("compute_cap")}) \
            or [str(exp["compute_cap"])]
        for cap in caps:
            if not covers(cap, arch):
                out.append(_defect(node, "arch_list", "torch arch list %s has no native code for %s" % (arch, cap),
                                   "an arch list with native code for %s (sm_120 or sm_121 on GB10)" % cap,
                                   "use an image whose torch was built with TORCH_CUDA_ARCH_LIST including 12.0 or "
                                   "12.1 (PTX alone is not enough)"))


def _check_resources(node, nf, exp, out):
    mem = nf.get("memory")
    need = int(exp.get("memory_need_bytes") or 0)
    if mem is not None and need:
        if mem.get("available_bytes") is None:
            out.append(_not_gathered(node, "memory"))
        elif int(mem["available_bytes"]) + int(mem.get("managed_bytes") or 0) < need:
            total = mem.get("total_bytes")
            if total is not None and int(total) < need:
                fix = ("%s has only %s in all; lower the memory need (gpu_memory_utilization, max_model_len) or "
                       "spread the model over more nodes" % (node, _gib_down(int(total))))
            else:
                fix = ("free %s of memory on %s: stop the processes and containers using it"
                       % (_gib_up(need - int(mem["available_bytes"])), node))
            out.append(_defect(node, "memory", "%s available%s" % (
                _gib_down(int(mem["available_bytes"])), " (+ %s held by %s)" % (
                    _gib_down(int(mem["managed_bytes"])), "/".join(exp["managed_containers"]))
                if mem.get("managed_bytes") else ""),
                ">= %s available" % _gib_up(need), fix))
    disk = nf.get("disk")
    need = int((exp.get("disk_need_bytes") or {}).get(node, 0) or 0)
    if disk is not None and need:
        if disk.get("free_bytes") is None:
            out.append(_not_gathered(node, "disk"))
        elif int(disk["free_bytes"]) < need:
            path = disk.get("path") or "the model cache"
            out.append(_defect(node, "disk", "%s free on %s" % (_gib_down(int(disk["free_bytes"])), path),
                               ">= %s free on %s" % (_gib_up(need), path),
                               "free %s on %s" % (_gib_up(need - int(disk["free_bytes"])), path)))


def _check_net(node, nf, exp, out):
    net = nf.get("net")
    if net is None:
        return
    want_ip = (exp.get("node_ips") or {}).get(node)
    ip = net.get("ip") or want_ip
    iface_want = exp.get("interface")
    if want_ip and net.get("ip") and str(net["ip"]) != str(want_ip):
        out.append(_defect(node, "fabric_ip", "probed ip %s" % net["ip"], "the inventory's ip %s" % want_ip,
                           "re-run the preflight; the gathering step looked for the wrong address on %s" % node))
    if not net.get("interface"):
        out.append(_defect(node, "fabric_ip", "no interface holds %s" % ip,
                           "%s on %s" % (ip, iface_want or "a local interface"),
                           "assign %s to %s on %s, or set sparkfleet_node_ip to the address it has"
                           % (ip, iface_want or "the fabric (ConnectX) interface", node)))
    elif iface_want and net["interface"] != iface_want:
        out.append(_defect(node, "fabric_interface", "%s on %s" % (ip, net["interface"]),
                           "%s on %s" % (ip, iface_want),
                           "move %s to %s on %s, or name %s as the fabric interface"
                           % (ip, iface_want, node, net["interface"])))


def _check_mtu(facts, exp, out):
    mtus = {}
    for node, nf in facts.items():
        net = (nf or {}).get("net")
        if net is None or not net.get("interface"):
            continue  # reported as not gathered / no interface
        if net.get("mtu") is None:
            out.append(_defect(node, "mtu", "MTU of %s not gathered" % net["interface"],
                               "the MTU of the fabric interface", "re-run the preflight on %s" % node))
            continue
        mtus[node] = int(net["mtu"])
    if len(set(mtus.values())) < 2:
        return
    counts = Counter(mtus.values())
    common = max(counts, key=lambda m: (counts[m], m))  # most common; a tie goes to the larger MTU
    for node in sorted(mtus):
        if mtus[node] != common:
            iface = facts[node]["net"]["interface"]
            others = sorted(n for n in mtus if mtus[n] == common)
            out.append(_defect(node, "mtu", "MTU %d on %s" % (mtus[node], iface),
                               "MTU %d like %s" % (common, ", ".join(others)),
                               "set MTU %d on %s like the other nodes (ip link set dev %s mtu %d, and persist it in "
                               "netplan)" % (common, iface, iface, common)))


def _check_ports_and_containers(node, nf, exp, out):
    listeners = nf.get("listeners")
    extra = (exp.get("node_ports") or {}).get(node) or []
    if extra:  # ports only this node needs (the API port on the head)
        exp = dict(exp, ports=list(exp.get("ports") or []) + list(extra))
    if listeners is not None:
        managed = "/".join(exp["managed_containers"]) or "the managed containers"
        for c in port_conflicts(listeners, exp):
            if c["container"]:
                fix = "remove the container holding port %d: docker rm -f %s on %s" % (c["port"], c["container"], node)
            elif c["pid"] is not None:
                fix = "stop the process holding port %d (%s, pid %s) on %s" % (c["port"], c["process"] or "unknown",
                                                                               c["pid"], node)
            else:
                fix = ("stop the process holding port %d (%s) on %s; find its pid with ss -ltnp 'sport = :%d'"
                       % (c["port"], c["process"] or "unknown", node, c["port"]))
            out.append(_defect(node, "port", "port %d (%s) held by %s" % (c["port"], c["what"], _owner(c)),
                               "port %d free or held by %s" % (c["port"], managed), fix))
    containers = nf.get("containers")
    if containers is not None:
        managed = set(exp["managed_containers"])
        for c in sorted(containers, key=lambda c: str(c.get("name"))):
            name = c.get("name")
            if name in managed:
                continue
            labels = sorted(k for k in (c.get("labels") or {}) if str(k).startswith("sparkfleet."))
            if not c.get("gpu") and not labels:
                continue
            why = []
            if c.get("gpu"):
                why.append("holds the GPU")
            if labels:
                why.append("carries %s" % ", ".join("%s=%s" % (k, c["labels"][k]) for k in labels))
            out.append(_defect(node, "container", "leftover container %s (%s, %s) %s"
                               % (name, c.get("image") or "image unknown", c.get("status") or "status unknown",
                                  " and ".join(why)),
                               "only %s hold the GPU or carry sparkfleet.* labels"
                               % "/".join(exp["managed_containers"]),
                               "docker rm -f %s on %s" % (name, node)))


def _check_time(node, nf, exp, out):
    t = nf.get("time")
    if t is None:
        return
    if any(t.get(k) is None for k in ("before", "node", "after")):
        out.append(_not_gathered(node, "time"))
        return
    s, unc = skew(t)
    limit = float(exp["max_clock_skew_s"])
    if abs(s) - unc > limit:
        out.append(_defect(node, "clock", "clock %+.2f s off the controller (+/- %.2f s)" % (s, unc),
                           "within +/- %.1f s" % limit,
                           "sync the clock (chrony/NTP) on %s: chronyc makestep, and keep chrony enabled" % node))


def _check_versions(node, nf, exp, out):
    for key, what, minimum, fix in (
        ("docker_version", "Docker", exp["min_docker"],
         "upgrade Docker on %s to %s or newer (the first release with --gpus)"),
        ("driver_version", "NVIDIA driver", exp["min_driver"],
         "install NVIDIA driver %s or newer on %s (DGX OS update)"),
    ):
        found = nf.get(key)
        if found is None:
            continue
        ok = version_at_least(found, minimum)
        if ok is None:
            out.append(_defect(node, key, "unparseable %s version %r" % (what, found), ">= %s" % minimum,
                               "check what %s reports on %s" % (what, node)))
        elif not ok:
            args = (node, minimum) if key == "docker_version" else (minimum, node)
            out.append(_defect(node, key, "%s %s" % (what, found), ">= %s" % minimum, fix % args))


def _norm_id(image_id):
    image_id = str(image_id or "").strip().lower()
    return image_id if image_id.startswith("sha256:") else "sha256:" + image_id


def _check_images(node, nf, exp, out):
    ids = nf.get("image_ids")
    if ids is None:
        return
    bad = {_norm_id(b["id"]): b for b in exp.get("known_bad_images") or []}
    for ref in sorted(ids):
        b = bad.get(_norm_id(ids[ref]))
        if b is None:
            continue
        out.append(_defect(node, "image", "%s is %s, known bad: %s" % (ref, _norm_id(ids[ref]), b.get("reason", "")),
                           "an image not on the known-bad list",
                           "do not deploy %s: remove it on %s (docker rmi %s) and use or build another image"
                           % (ref, node, ref)))


def judge(facts, expect):
    """Every defect of every node, as {"node", "check", "found", "expected", "fix"}, sorted by node then check."""
    exp = dict(DEFAULTS)
    exp.update({k: v for k, v in (expect or {}).items() if v is not None or k in ("interface", "arch_list")})
    facts = dict(facts or {})
    out = []
    for node in sorted(set(exp["node_ips"]) - set(facts)):
        out.append(_defect(node, "facts", "no facts from this node", "one facts dict per node",
                           "check that %s is reachable (ssh, become) and re-run the preflight" % node))
    for node in sorted(facts):
        nf = facts[node]
        if not isinstance(nf, dict):
            out.append(_defect(node, "facts", "no facts from this node", "one facts dict per node",
                               "check that %s is reachable (ssh, become) and re-run the preflight" % node))
            continue
        out.extend(_not_gathered(node, key) for key in FACT_KEYS if nf.get(key) is None)
        _check_gpu(node, nf, exp, out)
        _check_resources(node, nf, exp, out)
        _check_net(node, nf, exp, out)
        _check_ports_and_containers(node, nf, exp, out)
        _check_time(node, nf, exp, out)
        _check_versions(node, nf, exp, out)
        _check_images(node, nf, exp, out)
    _check_mtu({n: f for n, f in facts.items() if isinstance(f, dict)}, exp, out)
    out.sort(key=lambda d: (d["node"], d["check"]))  # stable: within a check, the order found
    return out


def render(defects):
    """One message: a count line, then "NODE: CHECK: found FOUND; expected EXPECTED; fix: FIX" per defect."""
    nodes = {d["node"] for d in defects}
    lines = ["preflight found %d defect(s) on %d node(s)" % (len(defects), len(nodes))]
    lines.extend("%s: %s: found %s; expected %s; fix: %s" % (d["node"], d["check"], d["found"], d["expected"], d["fix"])
                 for d in defects)
    return "\n".join(lines)
