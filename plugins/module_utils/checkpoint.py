# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Checkpoint integrity in the Hugging Face cache layout: framing, index, blob hashes, a manifest.

This runs on the nodes under their system Python, where the safetensors package is usually absent, so
the safetensors framing (8-byte little-endian header length, a JSON header, data offsets) is read here
with the standard library. Framing catches truncation without hashing; the blob name (sha256 for LFS
files, git's blob sha1 for small files) catches bit flips.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct

MANIFEST = ".sparkfleet-verified.json"
MAX_HEADER = 100 * 1024 * 1024


# The options that name a snapshot (documented once, in the sparkfleet.vllm.snapshot fragment).
SNAPSHOT_ARGS = dict(
    hub_dir=dict(type="path", required=True),
    repo_id=dict(type="str", required=True),
    revision=dict(type="str", required=True),
)


def repo_dir(hub_dir, repo_id):
    org, _unused, name = repo_id.partition("/")
    if not org or not name:
        raise ValueError("repo_id must look like ORG/NAME, got %r" % (repo_id,))
    return os.path.join(hub_dir, "models--%s--%s" % (org, name))


def snapshot_dir(hub_dir, repo_id, revision):
    return os.path.join(repo_dir(hub_dir, repo_id), "snapshots", revision)


def read_header(path):
    """Return (header_dict, data_start). Raises ValueError describing a framing fault."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError("shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER:
            raise ValueError("header length %d is implausible" % n)
        raw = fh.read(n)
    if len(raw) < n:
        raise ValueError("truncated inside the JSON header")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError("JSON header does not parse: %s" % exc) from exc
    return header, 8 + n


def check_framing(path):
    """The data offsets of a safetensors file must tile the data section exactly. Returns tensor count."""
    header, start = read_header(path)
    end = 0
    tensors = 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, stop = meta["data_offsets"]
        if begin > stop:
            raise ValueError("tensor %s has inverted data offsets" % name)
        end = max(end, stop)
        tensors += 1
    size = os.path.getsize(path)
    if start + end != size:
        raise ValueError("data section should end at byte %d but the file has %d bytes (%s)"
                         % (start + end, size, "truncated" if size < start + end else "trailing bytes"))
    return tensors


def file_digest(path, kind):
    h = hashlib.sha256() if kind == "sha256" else hashlib.sha1()  # noqa: S324 (git's object name)
    if kind == "git-sha1":
        h.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(1 << 22)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def blob_kind(blob_name):
    if len(blob_name) == 64:
        return "sha256"
    if len(blob_name) == 40:
        return "git-sha1"
    return None


def _load_manifest(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def verify_snapshot(hub_dir, repo_id, revision, hash_blobs=True, use_manifest=True):
    """Check one snapshot: every file the index names is present (no dangling link), framed, and hashed.

    Returns {"ok", "problems", "files", "total_bytes", "digest", "hashed", "reused"}. ``digest`` is a
    sha256 over the sorted ``file:blob`` list, equal on every node that holds the same snapshot.
    """
    rdir = repo_dir(hub_dir, repo_id)
    sdir = snapshot_dir(hub_dir, repo_id, revision)
    problems, files = [], {}
    if not os.path.isdir(sdir):
        return {"ok": False, "problems": ["snapshot directory %s is missing" % sdir], "files": {},
                "total_bytes": 0, "digest": None, "hashed": 0, "reused": 0}
    index_path = os.path.join(sdir, "model.safetensors.index.json")
    wanted = ["config.json"]
    if os.path.exists(index_path):
        try:
            with open(index_path) as fh:
                index = json.load(fh)
            wanted += ["model.safetensors.index.json"] + sorted(set(index["weight_map"].values()))
        except (OSError, ValueError, KeyError) as exc:
            problems.append("model.safetensors.index.json does not parse: %s" % exc)
    elif os.path.lexists(os.path.join(sdir, "model.safetensors")):
        wanted.append("model.safetensors")
    else:
        problems.append("neither model.safetensors.index.json nor model.safetensors is in %s" % sdir)
    manifest_path = os.path.join(rdir, MANIFEST)
    manifest = _load_manifest(manifest_path) if use_manifest else {}
    new_manifest, hashed, reused, total = {}, 0, 0, 0
    for name in wanted:
        link = os.path.join(sdir, name)
        if not os.path.lexists(link):
            problems.append("%s: missing from the snapshot" % name)
            continue
        target = os.path.realpath(link)
        if not os.path.exists(target):
            problems.append("%s: dangling link to %s" % (name, os.readlink(link)))
            continue
        blob = os.path.basename(target) if os.path.islink(link) else None
        st = os.stat(target)
        total += st.st_size
        files[name] = blob or ""
        if name.endswith(".safetensors"):
            try:
                check_framing(target)
            except (ValueError, KeyError, TypeError) as exc:
                problems.append("%s: safetensors framing: %s" % (name, exc))
                continue
        kind = blob_kind(blob or "")
        if not hash_blobs or kind is None:
            continue
        stamp = [st.st_size, int(st.st_mtime)]
        cached = manifest.get(blob)
        if cached and cached.get("stamp") == stamp and cached.get("digest") == blob:
            reused += 1
            new_manifest[blob] = cached
            continue
        actual = file_digest(target, kind)
        hashed += 1
        if actual != blob:
            problems.append("%s: content %s %s does not match its blob name %s" % (name, kind, actual, blob))
            continue
        new_manifest[blob] = {"stamp": stamp, "digest": actual}
    ok = not problems
    if ok and hash_blobs and use_manifest and new_manifest != manifest:
        tmp = manifest_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(new_manifest, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, manifest_path)
    listing = "".join("%s:%s\n" % kv for kv in sorted(files.items()))
    return {"ok": ok, "problems": problems, "files": files, "total_bytes": total,
            "digest": hashlib.sha256(listing.encode()).hexdigest() if ok else None,
            "hashed": hashed, "reused": reused}
