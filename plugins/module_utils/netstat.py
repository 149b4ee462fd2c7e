# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Who listens on which TCP port, from /proc: the socket tables, each socket's process, its container.

psutil would do the socket part, but it is not on a Spark by default and modules may only rely on what the
node has; ``ss`` prints no machine-readable form. The tables are simple, so they are read here.
"""

from __future__ import annotations

import os
import re

LISTEN = "0A"
_DOCKER_ID = re.compile(r"(?:docker[-/])([0-9a-f]{64})")


def parse_tcp_table(text):
    """{inode: port} of the LISTEN sockets in /proc/net/tcp or tcp6."""
    out = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != LISTEN:
            continue
        port = int(parts[1].rsplit(":", 1)[1], 16)
        out[parts[9]] = port
    return out


def container_id_of(cgroup_text):
    """The Docker container ID in a process's /proc/PID/cgroup (None for a host process).

    The innermost one: a node that itself runs in a container (nested Docker) shows both IDs in the path.
    """
    ids = _DOCKER_ID.findall(cgroup_text or "")
    return ids[-1] if ids else None


def _read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def listeners(proc="/proc", container_names=None):
    """[{"port", "pid", "process", "container"}] for every listening TCP socket on this node."""
    sockets = {}
    for table in ("tcp", "tcp6"):
        sockets.update(parse_tcp_table(_read(os.path.join(proc, "net", table))))
    owners = {}
    for pid in (d for d in os.listdir(proc) if d.isdigit()):
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in sockets:
                owners.setdefault(target[8:-1], int(pid))
    names = container_names or {}
    out, seen = [], set()
    for inode, port in sorted(sockets.items(), key=lambda kv: kv[1]):
        pid = owners.get(inode)
        cid = container_id_of(_read(os.path.join(proc, str(pid), "cgroup"))) if pid else None
        key = (port, pid)
        if key in seen:
            continue
        seen.add(key)
        out.append({"port": port, "pid": pid, "process": _read(os.path.join(proc, str(pid), "comm")).strip() if pid
                    else "", "container": names.get(cid) if cid else None})
    return out
