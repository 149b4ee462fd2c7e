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
import time

MANIFEST = ".sparkfleet-verified.json"
MAX_HEADER = 100 * 1024 * 1024


# The options that name a snapshot (documented once, in the sparkfleet.vllm.snapshot fragment).
SNAPSHOT_ARGS = dict(
    hub_dir=dict(type="path", required=True),
    repo_id=dict(type="str", required=True),
    revision=dict(type="str", required=True),
)

# The options of a check in bounded polls (documented once, in the sparkfleet.vllm.snapshot.verify fragment).
VERIFY_ARGS = dict(
    hash_blobs=dict(type="bool", default=True),
    poll_seconds=dict(type="int", default=20),
    expected_digest=dict(type="str"),
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


def file_digest(path, kind, on_chunk=None):
    h = hashlib.sha256() if kind == "sha256" else hashlib.sha1()  # noqa: S324 (git's object name)
    if kind == "git-sha1":
        h.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(1 << 22)
            if not chunk:
                break
            h.update(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
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


def save_manifest(rdir, entries):
    """Write the blob -> {stamp, digest} entries of verified blobs beside the blobs (atomically)."""
    path = os.path.join(rdir, MANIFEST)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(entries, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def verify_snapshot(hub_dir, repo_id, revision, hash_blobs=True, use_manifest=True, save=None, deadline=None,
                    progress=None, clock=time):
    """Check one snapshot: every file the index names is present (no dangling link), framed, and hashed.

    ``use_manifest`` reuses the hashes of blobs whose size and mtime have not changed since they were
    verified; ``save`` (default: ``use_manifest``) records the blobs verified now. ``deadline`` (a
    ``clock.monotonic()`` value) stops hashing once passed, after one file at least; the files left are
    listed in ``pending`` and a later call, reading the saved manifest, goes on from there. ``progress``
    is called with (bytes hashed, bytes to hash) as hashing proceeds.

    Returns {"ok", "problems", "pending", "files", "total_bytes", "digest", "hashed", "reused", "verified"}.
    ``digest`` is a sha256 over the sorted ``file:blob`` list, equal on every node that holds the same
    snapshot; ``verified`` holds the manifest entries of every blob known good after this call.
    """
    save = use_manifest if save is None else save
    rdir = repo_dir(hub_dir, repo_id)
    sdir = snapshot_dir(hub_dir, repo_id, revision)
    problems, files = [], {}
    if not os.path.isdir(sdir):
        return {"ok": False, "problems": ["snapshot directory %s is missing" % sdir], "pending": [], "files": {},
                "total_bytes": 0, "digest": None, "hashed": 0, "reused": 0, "verified": {}}
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
    manifest = _load_manifest(os.path.join(rdir, MANIFEST)) if use_manifest else {}
    verified, todo, reused, total = {}, [], 0, 0
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
            verified[blob] = cached
            continue
        todo.append((name, target, blob, kind, stamp))
    to_hash = sum(stamp[0] for _n, _t, _b, _k, stamp in todo)
    done, hashed, pending = [0], 0, []

    def counted(n):
        done[0] += n
        if progress is not None:
            progress(done[0], to_hash)

    for name, target, blob, kind, stamp in todo:
        if hashed and deadline is not None and clock.monotonic() >= deadline:
            pending.append(name)
            continue
        actual = file_digest(target, kind, counted)
        hashed += 1
        if actual != blob:
            problems.append("%s: content %s %s does not match its blob name %s" % (name, kind, actual, blob))
            continue
        verified[blob] = {"stamp": stamp, "digest": actual}
    ok = not problems and not pending
    if save and hash_blobs and verified != manifest:
        save_manifest(rdir, verified)
    listing = "".join("%s:%s\n" % kv for kv in sorted(files.items()))
    return {"ok": ok, "problems": problems, "pending": pending, "files": files, "total_bytes": total,
            "digest": hashlib.sha256(listing.encode()).hexdigest() if ok else None,
            "hashed": hashed, "reused": reused, "verified": verified}


def verify_polled(params, check_mode, clock=time):
    """One call of a snapshot check in bounded polls (SNAPSHOT_ARGS and VERIFY_ARGS in ``params``): the
    report of verify_snapshot, with ``done``, a ``progress`` line and ``differs`` (a finished, intact copy
    whose digest is not ``expected_digest``). Raises ValueError on a bad repo_id."""
    p = params
    bounded = p["poll_seconds"] > 0 and not check_mode
    report = verify_snapshot(p["hub_dir"], p["repo_id"], p["revision"], hash_blobs=p["hash_blobs"],
                             save=not check_mode, deadline=clock.monotonic() + p["poll_seconds"] if bounded else None,
                             clock=clock)
    report["done"] = not report["pending"] or bool(report["problems"])
    report["differs"] = bool(report["ok"] and p.get("expected_digest") and report["digest"] != p["expected_digest"])
    sizes = {b: e["stamp"][0] for b, e in report["verified"].items()}
    known = sum(sizes.get(blob, 0) for blob in set(report["files"].values()))
    report["progress"] = "%s@%s: %d of %d files %s, %.2f of %.2f GiB%s" % (
        p["repo_id"], p["revision"][:12], len(report["files"]) - len(report["pending"]), len(report["files"]),
        "verified by content" if p["hash_blobs"] else "present and framed", known / 2**30,
        report["total_bytes"] / 2**30, "" if report["done"] else "; hashing the rest")
    report["snapshot_path"] = snapshot_dir(p["hub_dir"], p["repo_id"], p["revision"])
    del report["verified"]
    return report
