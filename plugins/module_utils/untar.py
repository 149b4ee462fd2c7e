# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The chain's tar stream of a Hugging Face cache repo: packed on the seed (pack_repo), extracted on each
receiver member by member (extract_repo), refusing what a snapshot never holds.

Python's ``tarfile`` extraction filters (3.12, and backports) refuse absolute names, ``..`` and links that
leave the destination, but a link may still point anywhere inside it, and nodes may run a Python without
them. A snapshot is stricter: one top directory (``models--owner--name``), blobs named by their hash, and
links that point straight at one of them. Everything else (absolute names, ``..``, devices, FIFOs, hard
links, links elsewhere or through other links, regular files among the snapshot's links, a path through a
link, a name twice) is refused before anything is written under its name, and the caller publishes
nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile

CHUNK = 1 << 20


class UnsafeMember(ValueError):
    pass


def _parts(name):
    parts = name.rstrip("/").split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise UnsafeMember("%r is absolute or holds '.', '..' or an empty part" % name)
    return parts


# A blob's name is its content hash: git's sha1 (40 hex) for small files, sha256 (64 hex) for LFS files.
BLOB_NAME = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def check_member(member, top, links, seen):
    """Raise UnsafeMember unless ``member`` may be extracted; ``links`` and ``seen`` are the link and all
    names extracted so far.

    The only shapes allowed are those of a Hugging Face cache repo: the directories ``top``,
    ``top/blobs``, ``top/snapshots`` and any below ``top/snapshots/<rev>``; regular files directly in
    ``top/blobs`` named by their hash; and links below ``top/snapshots/<rev>`` whose target is exactly
    ``../`` up to ``top`` and then ``blobs/<hash>``. Nothing in a link's target is resolved: it is compared
    as text against that one form, so no chain of links can lead elsewhere.
    """
    name = member.name.rstrip("/")
    parts = _parts(member.name)
    if parts[0] != top:
        raise UnsafeMember("%r is outside %s/" % (member.name, top))
    if name in seen:
        raise UnsafeMember("%r appears twice in the stream" % member.name)
    for i in range(1, len(parts)):
        if "/".join(parts[:i]) in links:
            raise UnsafeMember("%r goes through the link %s" % (member.name, "/".join(parts[:i])))
    area = parts[1] if len(parts) > 1 else None
    if member.isdir():
        if len(parts) == 1 or (area == "blobs" and len(parts) == 2) or area == "snapshots":
            return
        raise UnsafeMember("%r is a directory where a snapshot has none" % member.name)
    if member.isreg():
        if area == "blobs" and len(parts) == 3 and BLOB_NAME.fullmatch(parts[2]):
            return
        raise UnsafeMember("%r is a file outside %s/blobs/, or a blob not named by its hash" % (member.name, top))
    if member.issym():
        want = r"(\.\./){%d}blobs/%s" % (len(parts) - 2, BLOB_NAME.pattern)
        if area == "snapshots" and len(parts) >= 4 and re.fullmatch(want, member.linkname):
            return
        raise UnsafeMember("%r links to %r; a snapshot's links point at %s/blobs/<hash> and nowhere else"
                           % (member.name, member.linkname, top))
    raise UnsafeMember("%r is a %s; a snapshot holds only files, directories and links into its blobs"
                       % (member.name, "hard link" if member.islnk() else "device or FIFO"))


class BadBlob(ValueError):
    pass


def _hasher(blob, size):
    """The hash a blob is named by: sha256 for a 64-hex name, git's blob sha1 for a 40-hex one."""
    if len(blob) == 64:
        return hashlib.sha256()
    h = hashlib.sha1()  # noqa: S324 - git's object name, not a security boundary (the HMAC frames are)
    h.update(b"blob %d\0" % size)
    return h


def extract_repo(stream, dest, top, wanted=None, done=None):
    """Extract the tar ``stream`` (a file object, read once, in order) into ``dest``. Returns the number of
    members written.

    Each blob is hashed as its bytes are written and must match its name, or BadBlob is raised. A blob
    for which ``wanted(name)`` is false (already verified on this node) is read past, not written;
    ``done(name, path, size)`` is called as each written blob checks out, so the caller can publish it
    before the rest of the stream arrives.
    """
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
            blob = name.rsplit("/", 1)[1]
            if wanted is not None and not wanted(blob):
                continue  # tarfile reads past the member's bytes
            src = tar.extractfile(member)
            h = _hasher(blob, member.size)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with os.fdopen(fd, "wb") as out:
                while True:
                    chunk = src.read(CHUNK)
                    if not chunk:
                        break
                    h.update(chunk)
                    out.write(chunk)
            if h.hexdigest() != blob:
                os.unlink(path)
                raise BadBlob("blob %s arrived with content %s: the seed's copy does not match its name"
                              % (blob, h.hexdigest()))
            if done is not None:
                done(blob, path, member.size)
    return len(seen)


def _members(rdir, sdir, revision, files, skip):
    """The stream's members in order: (TarInfo, the file its bytes come from, or None)."""
    top = os.path.basename(rdir)
    snap = "%s/snapshots/%s" % (top, revision)
    sources = {}
    for name, blob in sorted(files.items()):
        path = os.path.join(sdir, name)
        sources.setdefault(blob, path if not os.path.islink(path) else os.path.join(rdir, "blobs", blob))
    dirs = [top, top + "/blobs", top + "/snapshots", snap]
    for name in sorted(files):
        parts = name.split("/")[:-1]
        dirs += ["%s/%s" % (snap, "/".join(parts[:i])) for i in range(1, len(parts) + 1)]
    out = []
    for d in dict.fromkeys(dirs):
        info = tarfile.TarInfo(d)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        out.append((info, None))
    for blob, path in sorted(sources.items()):
        if blob not in skip:
            info = tarfile.TarInfo("%s/blobs/%s" % (top, blob))
            info.size, info.mode = os.path.getsize(path), 0o644
            out.append((info, path))
    for name, blob in sorted(files.items()):
        info = tarfile.TarInfo("%s/%s" % (snap, name))
        info.type = tarfile.SYMTYPE
        info.linkname = "../" * (len(name.split("/")) + 1) + "blobs/" + blob
        out.append((info, None))
    return out


def packed_size(rdir, sdir, revision, files, skip=()):
    """The exact length of the stream pack_repo writes (headers, padded contents, end and record padding),
    so a sender's progress can show a true share."""
    size = 0
    for info, path in _members(rdir, sdir, revision, files, skip):
        size += len(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        if path is not None:
            size += -(-info.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    size += 2 * tarfile.BLOCKSIZE
    return -(-size // tarfile.RECORDSIZE) * tarfile.RECORDSIZE


def pack_repo(out, rdir, sdir, revision, files, skip=()):
    """Write the snapshot ``files`` ({name: blob}, from checkpoint.verify_snapshot on the seed) of
    ``sdir`` as the tar stream extract_repo reads: the directories, each blob not in ``skip`` once, then a
    link per file into the blobs. A regular file of a copied snapshot ships as the blob its sha256 names,
    so every receiver gets the cache layout. Returns (blobs written, bytes of their contents).

    Written with tarfile rather than ``tar -c`` because the stream is assembled, not archived: blobs come
    from two places and links are made for files that are not links on the seed.
    """
    sent = size = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for info, path in _members(rdir, sdir, revision, files, skip):
            if path is None:
                tar.addfile(info)
                continue
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
            sent, size = sent + 1, size + info.size
    return sent, size
