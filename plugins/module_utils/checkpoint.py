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
    rehash_before=dict(type="float", default=0),
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


# Bytes per element of the safetensors dtypes (F8 and F4 formats included; F4 packs two per byte).
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4, "I16": 16,
              "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64}


def check_framing(path, counts=None):
    """The data offsets of a safetensors file must tile the data section exactly, and each tensor's span
    must hold its shape in its dtype. Returns the tensor count; ``counts`` (a dict), if given, receives
    ``data_bytes``, the bytes of every tensor (what an index's ``metadata.total_size`` adds up)."""
    header, start = read_header(path)
    end = 0
    tensors = 0
    data = 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, stop = meta["data_offsets"]
        if begin > stop:
            raise ValueError("tensor %s has inverted data offsets" % name)
        bits = DTYPE_BITS.get(meta.get("dtype"))
        if bits is None:
            raise ValueError("tensor %s has the unknown dtype %r" % (name, meta.get("dtype")))
        elements = 1
        for dim in meta.get("shape", []):
            elements *= int(dim)
        if (elements * bits + 7) // 8 != stop - begin:
            raise ValueError("tensor %s: shape %s in %s needs %d bytes, its span holds %d"
                             % (name, meta.get("shape"), meta["dtype"], (elements * bits + 7) // 8, stop - begin))
        end = max(end, stop)
        data += stop - begin
        tensors += 1
    if counts is not None:
        counts["data_bytes"] = data
    size = os.path.getsize(path)
    if start + end != size:
        raise ValueError("data section should end at byte %d but the file has %d bytes (%s)"
                         % (start + end, size, "truncated" if size < start + end else "trailing bytes"))
    return tensors


# Scales of the quantized weight formats the recipes serve. compressed-tensors pack-quantized INT4 (Kimi-K2.5):
# ``X.weight_packed`` (I32, eight nibbles each) needs ``X.weight_scale`` and ``X.weight_shape`` ([rows, cols]).
# 8- and 4-bit weights (MXFP8 attention, NVFP4 experts, FP8) need ``X.weight_scale`` or ``X.weight_scale_inv``
# with one row of scales per weight row (or one scale per tensor).
_SCALE_DTYPES = {"BF16", "F16", "F32"}
_NARROW = {"U8", "I8", "F8_E4M3", "F8_E5M2", "F4"}


def _read_ints(path, start, meta):
    begin, stop = meta["data_offsets"]
    with open(path, "rb") as fh:
        fh.seek(start + begin)
        raw = fh.read(stop - begin)
    fmt = {"I32": "<%di", "I64": "<%dq"}[meta["dtype"]]
    return list(struct.unpack(fmt % ((stop - begin) // (4 if meta["dtype"] == "I32" else 8)), raw))


def check_quantized(sdir, shards):
    """Every quantized weight in ``shards`` (files of the snapshot ``sdir``) has the scale tensors its format
    needs, with dtypes and shapes that agree. Returns the problems found (a weight without its scale would
    load as garbage, or not at all, many minutes into a boot)."""
    tensors = {}
    for shard in shards:
        path = os.path.join(sdir, shard)
        header, start = read_header(path)
        for name, meta in header.items():
            if name != "__metadata__":
                tensors[name] = (shard, path, start, meta)
    problems = []
    for name, (shard, _path, _start, meta) in sorted(tensors.items()):
        shape = [int(d) for d in meta.get("shape", [])]
        if name.endswith(".weight_packed"):
            base = name[:-len(".weight_packed")]
            scale, dims = tensors.get(base + ".weight_scale"), tensors.get(base + ".weight_shape")
            if scale is None or dims is None:
                problems.append("%s: %s has no %s (packed INT4 needs its scale and its shape)"
                                % (shard, name, ".weight_scale" if scale is None else ".weight_shape"))
                continue
            dtypes = (meta["dtype"], scale[3]["dtype"], dims[3]["dtype"])
            if dtypes[0] != "I32" or dtypes[1] not in _SCALE_DTYPES or dtypes[2] not in ("I32", "I64"):
                problems.append("%s: %s is %s with a %s scale and a %s shape (want I32, BF16/F16/F32, I32/I64)"
                                % (shard, name, meta["dtype"], scale[3]["dtype"], dims[3]["dtype"]))
                continue
            try:
                rows_cols = _read_ints(dims[1], dims[2], dims[3])
            except (OSError, struct.error, KeyError) as exc:
                problems.append("%s: %s.weight_shape unreadable: %s" % (dims[0], base, exc))
                continue
            sshape = [int(d) for d in scale[3].get("shape", [])]
            if len(rows_cols) != 2 or len(shape) != 2 or len(sshape) != 2:
                problems.append("%s: %s, its scale and its shape are not 2-D" % (shard, name))
                continue
            rows, cols = rows_cols
            if shape != [rows, (cols + 7) // 8] or sshape[0] != rows or not sshape[1] or cols % sshape[1]:
                problems.append("%s: %s is %s for a [%d, %d] weight with a %s scale; they disagree"
                                % (shard, name, shape, rows, cols, sshape))
        elif name.endswith(".weight") and meta.get("dtype") in _NARROW:
            base = name[:-len(".weight")]
            scale = tensors.get(base + ".weight_scale") or tensors.get(base + ".weight_scale_inv")
            if scale is None:
                problems.append("%s: %s is %s without %s.weight_scale or .weight_scale_inv"
                                % (shard, name, meta["dtype"], base))
                continue
            sshape = [int(d) for d in scale[3].get("shape", [])]
            per_tensor = sshape in ([], [1])
            # 2-D block scales (DeepSeek-style FP8: one scale per 128 x 128 block) are whole blocks, the last ragged
            blocked = len(shape) == len(sshape) == 2 and any(
                sshape == [-(-shape[0] // b), -(-shape[1] // b)] for b in (64, 128, 256))
            if not per_tensor and not blocked and (len(sshape) != len(shape) or sshape[0] != shape[0]
                                                   or not sshape[-1] or shape[-1] % sshape[-1]):
                problems.append("%s: %s is %s but its scale is %s; they disagree" % (shard, name, shape, sshape))
    return problems


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


def file_stamp(st):
    """What says a file is unchanged since it was hashed: its size, mtime, ctime and inode. Restoring the
    mtime after an edit (``touch -d``) sets the ctime, which no user can set back; replacing the file by a
    copy changes the inode."""
    return [st.st_size, int(st.st_mtime), st.st_ctime_ns, st.st_ino]


def restamp(rdir, entries):
    """The manifest entries of blobs just moved into ``rdir``/blobs (a rename keeps the bytes, not the ctime)."""
    return {blob: dict(entry, stamp=file_stamp(os.stat(os.path.join(rdir, "blobs", blob))))
            for blob, entry in entries.items()}


def valid_entries(rdir, manifest=None):
    """The manifest's entries whose blob is still there with the stamp it was hashed with (a stat each, no
    hashing): what a node may skip receiving again."""
    manifest = _load_manifest(os.path.join(rdir, MANIFEST)) if manifest is None else manifest
    out = {}
    for blob, entry in manifest.items():
        if blob_kind(blob) is None or not isinstance(entry, dict) or entry.get("digest") != blob:
            continue
        try:
            st = os.stat(os.path.join(rdir, "blobs", blob))
        except OSError:
            continue
        if entry.get("stamp") == file_stamp(st):
            out[blob] = entry
    return out


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
                    progress=None, clock=time, sdir=None, allow_files=False, trusted_since=0):
    """Check one snapshot: every file in it (config, tokenizer, chat template, remote code, index, shards)
    is a link into the repo's blobs and hashed; the index names exactly the shards there are, each framed
    with its tensors' shapes, and its ``metadata.total_size`` is their bytes.

    ``sdir`` checks a snapshot directory staged elsewhere in the repo (its links resolve the same way).
    ``allow_files`` accepts regular files in the snapshot (a seed whose snapshot was copied rather than
    downloaded): each counts as a blob named by its sha256, which is how weights_send ships it.

    ``trusted_since`` (a ``time.time()`` value) rehashes the blobs whose entries were recorded before it:
    a deep check that still resumes across polls.

    ``use_manifest`` reuses the hashes of blobs whose size, mtime, ctime and inode have not changed since they
    were verified (the quick mode; without it every byte is hashed again, the deep mode); ``save`` (default:
    ``use_manifest``) records the blobs verified now. ``deadline`` (a ``clock.monotonic()`` value) stops hashing
    once passed, after one file at least; the files left are listed in ``pending`` and a later call, reading the
    saved manifest, goes on from there. ``progress`` is called with (bytes hashed, bytes to hash) as hashing
    proceeds.

    Returns {"ok", "problems", "pending", "files", "total_bytes", "digest", "hashed", "reused", "verified"}.
    ``digest`` is a sha256 over the sorted ``file:blob`` list, equal on every node that holds the same
    snapshot; ``verified`` holds the manifest entries of every blob known good after this call.
    """
    save = use_manifest if save is None else save
    rdir = repo_dir(hub_dir, repo_id)
    sdir = sdir or snapshot_dir(hub_dir, repo_id, revision)
    problems, files = [], {}
    if not os.path.isdir(sdir):
        return {"ok": False, "problems": ["snapshot directory %s is missing" % sdir], "pending": [], "files": {},
                "total_bytes": 0, "digest": None, "hashed": 0, "reused": 0, "verified": {}}
    # Every file of the snapshot (the tokenizer, chat template and remote code as much as the weights), and
    # at least the config and the weights.
    present = sorted(os.path.relpath(os.path.join(d, f), sdir) for d, _dirs, fs in os.walk(sdir) for f in fs)
    index_path = os.path.join(sdir, "model.safetensors.index.json")
    required, index = ["config.json"], None
    if os.path.lexists(index_path):
        try:
            with open(index_path) as fh:
                index = json.load(fh)
            shards = sorted(set(index["weight_map"].values()))
            required += ["model.safetensors.index.json"] + shards
            strays = sorted(f for f in present if f.endswith(".safetensors") and f not in shards)
            if strays:
                problems.append("%s: in the snapshot but not in model.safetensors.index.json" % ", ".join(strays))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append("model.safetensors.index.json does not parse: %s" % exc)
    elif os.path.lexists(os.path.join(sdir, "model.safetensors")):
        required.append("model.safetensors")
    else:
        problems.append("neither model.safetensors.index.json nor model.safetensors is in %s" % sdir)
    wanted = required + [f for f in present if f not in required]
    blobs_dir = os.path.join(os.path.realpath(rdir), "blobs") + os.sep
    shard_bytes = 0
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
        regular = allow_files and not os.path.islink(link) and os.path.isfile(link)
        if not regular and (not os.path.islink(link) or not target.startswith(blobs_dir)):
            problems.append("%s: %s, not a link into %s" % (
                name, "a regular file" if not os.path.islink(link) else "resolves to %s" % target, blobs_dir))
            continue
        st = os.stat(target)
        total += st.st_size
        # A regular file is named by its content's sha256 once hashed (its manifest entry is keyed by path).
        key = "file:" + name if regular else os.path.basename(target)
        cached = manifest.get(key)
        stamp = file_stamp(st)
        fresh = bool(cached and cached.get("stamp") == stamp and blob_kind(cached.get("digest") or "")
                     and (regular or cached.get("digest") == key) and cached.get("checked", 0) >= trusted_since)
        blob = (cached["digest"] if fresh else "") if regular else key
        files[name] = blob
        if name.endswith(".safetensors"):
            counts = {}
            try:
                check_framing(target, counts)
            except (ValueError, KeyError, TypeError) as exc:
                problems.append("%s: safetensors framing: %s" % (name, exc))
                continue
            shard_bytes += counts["data_bytes"]
        kind = "sha256" if regular else blob_kind(blob)
        if not hash_blobs or kind is None:
            continue
        if fresh:
            reused += 1
            verified[key] = cached
            continue
        todo.append((name, target, key, kind, stamp))
    declared = ((index or {}).get("metadata") or {}).get("total_size") if isinstance(index, dict) else None
    shards_read = not any(p.split(":", 1)[0].endswith(".safetensors") for p in problems)
    if declared is not None and shards_read and declared != shard_bytes:
        problems.append("model.safetensors.index.json: metadata.total_size is %s, the shards' tensors hold %d bytes"
                        % (declared, shard_bytes))
    to_hash = sum(stamp[0] for _n, _t, _b, _k, stamp in todo)
    done, hashed, pending = [0], 0, []

    def counted(n):
        done[0] += n
        if progress is not None:
            progress(done[0], to_hash)

    failed = set()
    for name, target, key, kind, stamp in todo:
        if hashed and deadline is not None and clock.monotonic() >= deadline:
            pending.append(name)
            continue
        actual = file_digest(target, kind, counted)
        hashed += 1
        if key.startswith("file:"):
            files[name] = actual
        elif actual != key:
            problems.append("%s: content %s %s does not match its blob name %s" % (name, kind, actual, key))
            failed.add(key)
            continue
        verified[key] = {"stamp": stamp, "digest": actual, "checked": round(time.time(), 3)}
    if not problems and not pending:
        problems += check_quantized(sdir, sorted(f for f in files if f.endswith(".safetensors")))
    ok = not problems and not pending
    if save and hash_blobs:
        # Blobs of other revisions, or received ahead of their snapshot, keep their entries while their
        # stamps hold; one that failed its hash now loses its entry.
        kept = {b: e for b, e in valid_entries(rdir, manifest).items() if b not in failed}
        entries = dict(kept, **verified)
        if entries != manifest:
            save_manifest(rdir, entries)
    listing = "".join("%s:%s\n" % kv for kv in sorted(files.items()))
    return {"ok": ok, "problems": problems, "pending": pending, "files": files, "total_bytes": total,
            "digest": hashlib.sha256(listing.encode()).hexdigest() if ok and all(files.values()) else None,
            "hashed": hashed, "reused": reused, "verified": verified}


def verify_polled(params, check_mode, clock=time):
    """One call of a snapshot check in bounded polls (SNAPSHOT_ARGS and VERIFY_ARGS in ``params``): the
    report of verify_snapshot, with ``done``, a ``progress`` line and ``differs`` (a finished, intact copy
    whose digest is not ``expected_digest``). Raises ValueError on a bad repo_id."""
    p = params
    bounded = p["poll_seconds"] > 0 and not check_mode
    # A deep check (rehash_before: when it began) trusts only the hashes its own earlier polls recorded.
    report = verify_snapshot(p["hub_dir"], p["repo_id"], p["revision"], hash_blobs=p["hash_blobs"], allow_files=True,
                             save=not check_mode, trusted_since=p.get("rehash_before") or 0,
                             deadline=clock.monotonic() + p["poll_seconds"] if bounded else None, clock=clock)
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
