# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Extract a received Hugging Face cache repo from a tar stream, member by member, refusing what a snapshot
never holds.

Python's ``tarfile`` extraction filters (3.12, and backports) refuse absolute names, ``..`` and links that
leave the destination, but a link may still point anywhere inside it, and nodes may run a Python without
them. A snapshot is stricter: one top directory (``models--owner--name``), regular files and directories,
and links that resolve into that repo's ``blobs/``. Everything else (absolute names, ``..``, devices, FIFOs,
hard links, links elsewhere, a path through a link, a name twice) is refused before anything is written
under its name, and the caller publishes nothing.
"""

from __future__ import annotations

import os
import posixpath
import tarfile

CHUNK = 1 << 20


class UnsafeMember(ValueError):
    pass


def _parts(name):
    parts = name.rstrip("/").split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise UnsafeMember("%r is absolute or holds '.', '..' or an empty part" % name)
    return parts


def check_member(member, top, links, seen):
    """Raise UnsafeMember unless ``member`` may be extracted; ``links`` and ``seen`` are the link and all
    names extracted so far."""
    name = member.name.rstrip("/")
    parts = _parts(member.name)
    if parts[0] != top:
        raise UnsafeMember("%r is outside %s/" % (member.name, top))
    if name in seen:
        raise UnsafeMember("%r appears twice in the stream" % member.name)
    for i in range(1, len(parts)):
        if "/".join(parts[:i]) in links:
            raise UnsafeMember("%r goes through the link %s" % (member.name, "/".join(parts[:i])))
    if member.issym():
        target = member.linkname
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
        if target.startswith("/") or not resolved.startswith(top + "/blobs/") or "/" in resolved[len(top) + 7:]:
            raise UnsafeMember("%r links to %r, outside %s/blobs/" % (member.name, target, top))
    elif not (member.isdir() or member.isreg()):
        raise UnsafeMember("%r is a %s; a snapshot holds only files, directories and links into its blobs"
                           % (member.name, "hard link" if member.islnk() else "device or FIFO"))


def extract_repo(stream, dest, top):
    """Extract the tar ``stream`` (a file object, read once, in order) into ``dest``. Returns the number of
    members written."""
    links, seen = set(), set()
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            check_member(member, top, links, seen)
            name = member.name.rstrip("/")
            seen.add(name)
            path = os.path.join(dest, *name.split("/"))
            if member.isdir():
                os.makedirs(path, mode=0o755, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            if member.issym():
                links.add(name)
                os.symlink(member.linkname, path)
                continue
            src = tar.extractfile(member)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with os.fdopen(fd, "wb") as out:
                while True:
                    chunk = src.read(CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
    return len(seen)
