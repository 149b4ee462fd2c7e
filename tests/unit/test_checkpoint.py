"""Checkpoint verification against real safetensors files in the Hugging Face cache layout."""

import json
import os
import shutil

import make_checkpoint
import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import checkpoint


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    hub = tmp_path_factory.mktemp("pristine") / "hub"
    info = make_checkpoint.write_checkpoint(hub, "kimi", {"layers": 2, "experts": 2, "shards": 2})
    return hub, info


@pytest.fixture
def hub(pristine, tmp_path):
    src, info = pristine
    dst = tmp_path / "hub"
    shutil.copytree(src, dst, symlinks=True)
    return dst, info


def shard_blob(hub, info, n=1):
    name = sorted(f for f in info["files"] if f.endswith(".safetensors"))[n - 1]
    return name, checkpoint.repo_dir(str(hub), info["repo_id"]) + "/blobs/" + info["files"][name]


def test_intact_snapshot_verifies_and_digest_is_stable(hub):
    hub, info = hub
    first = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert first["ok"], first["problems"]
    assert first["hashed"] == len(info["files"]) and first["reused"] == 0
    second = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert second["digest"] == first["digest"]
    assert second["hashed"] == 0 and second["reused"] == len(info["files"])  # the manifest remembered


def test_truncated_shard_fails_on_framing(hub):
    hub, info = hub
    name, blob = shard_blob(hub, info)
    with open(blob, "r+b") as fh:
        fh.truncate(os.path.getsize(blob) - 100)
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"], hash_blobs=False)
    assert not report["ok"]
    assert any(name in p and "truncated" in p for p in report["problems"]), report["problems"]


def test_bit_flip_fails_on_hash_even_after_a_good_run(hub):
    hub, info = hub
    assert checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])["ok"]
    name, blob = shard_blob(hub, info, 2)
    with open(blob, "r+b") as fh:
        fh.seek(os.path.getsize(blob) - 10)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(blob, (0, 0))  # a different mtime invalidates the remembered hash
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert not report["ok"]
    assert any(name in p and "does not match its blob name" in p for p in report["problems"])


def test_a_bit_flip_that_keeps_size_and_mtime_is_found(hub):
    """Issue 10's case: a byte of a blob flipped and its times put back; the remembered hash is not reused
    (the ctime moved), so the check hashes it again and finds it."""
    hub, info = hub
    assert checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])["ok"]
    name, blob = shard_blob(hub, info, 2)
    st = os.stat(blob)
    with open(blob, "r+b") as fh:
        fh.seek(st.st_size - 10)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0x01]))
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.path.getsize(blob) == st.st_size and os.stat(blob).st_mtime_ns == st.st_mtime_ns
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert any(name in p and "does not match its blob name" in p for p in report["problems"]), report["problems"]


def test_dangling_link_is_named(hub):
    """The peer-tool failure: links copied without their blobs."""
    hub, info = hub
    name, blob = shard_blob(hub, info)
    os.unlink(blob)
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert any(p.startswith(name + ": dangling link") for p in report["problems"])


def test_shard_missing_from_snapshot(hub):
    hub, info = hub
    name, _unused = shard_blob(hub, info)
    os.unlink(os.path.join(checkpoint.snapshot_dir(str(hub), info["repo_id"], info["revision"]), name))
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert report["problems"] == [name + ": missing from the snapshot"]


def snap(hub, info):
    return checkpoint.snapshot_dir(str(hub), info["repo_id"], info["revision"])


def test_every_file_of_the_snapshot_is_checked_not_only_the_weights(hub):
    """The tokenizer, chat template and remote code are part of the snapshot: a dangling one is named, and
    the digest covers them."""
    hub, info = hub
    assert {"tokenizer.json", "tokenizer_config.json", "modeling_kimi_k25.py"} <= set(info["files"])
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert set(report["files"]) == set(info["files"])
    blob = os.path.realpath(os.path.join(snap(hub, info), "tokenizer.json"))
    os.unlink(blob)
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert [p for p in report["problems"] if p.startswith("tokenizer.json: dangling link")], report["problems"]


@pytest.mark.parametrize("where", ["outside the repo", "a regular file"])
def test_a_file_that_is_not_a_link_into_the_blobs_is_refused(hub, tmp_path, where):
    hub, info = hub
    link = os.path.join(snap(hub, info), "tokenizer.json")
    os.unlink(link)
    if where == "outside the repo":
        (tmp_path / "elsewhere.json").write_text("{}")
        os.symlink(str(tmp_path / "elsewhere.json"), link)
    else:
        with open(link, "w") as fh:
            fh.write("{}")
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert [p for p in report["problems"] if p.startswith("tokenizer.json: ") and "not a link into" in p], \
        report["problems"]


def rewrite_index(hub, info, edit):
    link = os.path.join(snap(hub, info), "model.safetensors.index.json")
    index = json.loads(open(link).read())
    edit(index)
    os.unlink(link)
    with open(link, "w") as fh:  # (a regular file too, but the index's own problems are the point)
        json.dump(index, fh)
    return checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])["problems"]


def test_the_index_must_name_exactly_the_shards_and_their_bytes(hub):
    hub, info = hub
    first = sorted(n for n in info["files"] if n.endswith(".safetensors"))[0]
    problems = rewrite_index(hub, info, lambda ix: ix["weight_map"].update(
        {k: "model-00002-of-00002.safetensors" for k, v in ix["weight_map"].items() if v == first}))
    assert any(p.startswith(first + ": in the snapshot but not in model.safetensors.index.json") for p in problems)


def test_the_index_total_size_must_be_the_tensor_bytes(hub):
    hub, info = hub
    problems = rewrite_index(hub, info, lambda ix: ix["metadata"].update(total_size=ix["metadata"]["total_size"] + 1))
    assert any("metadata.total_size is %d, the shards' tensors hold %d bytes"
               % (info["total_size"] + 1, info["total_size"]) in p for p in problems), problems


def test_a_tensor_span_that_does_not_hold_its_shape_is_refused(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    path = tmp_path / "x.safetensors"
    save_file({"w": np.zeros((4, 4), dtype=np.float32)}, str(path))
    header, start = checkpoint.read_header(str(path))
    header["w"]["shape"] = [4, 3]  # the span still holds 4x4 floats
    raw = json.dumps(header).encode()
    data = path.read_bytes()[start:]
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)
    with pytest.raises(ValueError, match=r"tensor w: shape \[4, 3\] in F32 needs 48 bytes, its span holds 64"):
        checkpoint.check_framing(str(path))


def test_missing_snapshot_and_bad_repo_id(hub):
    hub, info = hub
    assert "missing" in checkpoint.verify_snapshot(str(hub), info["repo_id"], "0" * 40)["problems"][0]
    with pytest.raises(ValueError, match="ORG/NAME"):
        checkpoint.repo_dir(str(hub), "no-slash")


def test_framing_reader_matches_the_safetensors_library(hub):
    from safetensors import safe_open

    hub, info = hub
    _unused, blob = shard_blob(hub, info)
    header, _unused = checkpoint.read_header(blob)
    with safe_open(blob, framework="numpy") as f:
        assert sorted(k for k in header if k != "__metadata__") == sorted(f.keys())
    assert checkpoint.check_framing(blob) == len(list(header)) - 1


def test_synthetic_checkpoint_keeps_the_kimi_format(pristine):
    """int32 packed experts (8 nibbles) with bf16 scales [rows, cols/32], as in the seed's shard 30."""
    hub, info = pristine
    _unused, blob = shard_blob(hub, info)
    header, _unused = checkpoint.read_header(blob)
    packed = next(k for k in header if k.endswith("gate_proj.weight_packed"))
    scale = packed.replace("weight_packed", "weight_scale")
    assert header[packed]["dtype"] == "I32" and header[scale]["dtype"] == "BF16"
    rows, packed_cols = header[packed]["shape"]
    assert header[scale]["shape"] == [rows, packed_cols * 8 // 32]
    cfg = json.loads(open(checkpoint.snapshot_dir(str(hub), info["repo_id"], info["revision"]) + "/config.json").read())
    q = cfg["quantization_config"]
    assert q["format"] == "pack-quantized"
    assert q["config_groups"]["group_0"]["weights"] == {"num_bits": 4, "type": "int", "group_size": 32,
                                                        "strategy": "group", "symmetric": True}


class TickClock:
    """A monotonic clock that moves one second per reading: a deadline one second away passes after the
    first file."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        self.now += 1.0
        return self.now


def test_a_first_check_goes_on_poll_after_poll_and_records_what_it_verified(hub):
    from module_runner import run

    from ansible_collections.sparkfleet.vllm.plugins.modules import weights_info, weights_verify

    hub, info = hub
    args = {"hub_dir": str(hub), "repo_id": info["repo_id"], "revision": info["revision"]}
    params = dict(args, hash_blobs=True, poll_seconds=1)
    polls, seen = [], []
    while not polls or not polls[-1]["done"]:
        report = checkpoint.verify_polled(params, check_mode=False, clock=TickClock())
        polls.append(report)
        seen.append(report["progress"])
        assert len(polls) <= len(info["files"])
    hashable = sum(1 for blob in info["files"].values() if checkpoint.blob_kind(blob))
    assert [r["hashed"] for r in polls] == [1] * hashable  # one file per poll, none hashed twice
    assert polls[-1]["ok"] and polls[-1]["digest"] and not polls[0]["done"] and polls[0]["digest"] is None
    assert seen[0].endswith("; hashing the rest") and "files verified by content" in seen[0]
    # The manifest now holds every blob: the modules' next check hashes nothing and is done in one call.
    rc, res = run(weights_verify, dict(args, poll_seconds=1))
    assert rc == 0 and res["done"] and res["hashed"] == 0 and res["digest"] == polls[-1]["digest"]
    rc, res = run(weights_info, dict(args, expected_digest=polls[-1]["digest"]))
    assert rc == 0 and res["done"] and res["needed"] is False
    rc, res = run(weights_info, dict(args, expected_digest="0" * 64))
    assert rc == 0 and res["needed"] is True


def test_check_mode_hashes_everything_in_one_call_and_records_nothing(hub):
    from module_runner import run

    from ansible_collections.sparkfleet.vllm.plugins.modules import weights_info

    hub, info = hub
    args = {"hub_dir": str(hub), "repo_id": info["repo_id"], "revision": info["revision"], "poll_seconds": 1}
    rc, res = run(weights_info, args, check_mode=True)
    assert rc == 0 and res["done"] and res["needed"] is False
    assert not os.path.exists(os.path.join(checkpoint.repo_dir(str(hub), info["repo_id"]), checkpoint.MANIFEST))


def test_a_bad_blob_found_in_a_poll_ends_the_check_at_once(hub):
    from module_runner import run

    from ansible_collections.sparkfleet.vllm.plugins.modules import weights_info, weights_verify

    hub, info = hub
    name, blob = shard_blob(hub, info, 1)
    with open(blob, "r+b") as fh:
        fh.seek(os.path.getsize(blob) - 10)
        fh.write(b"\xff")
    args = {"hub_dir": str(hub), "repo_id": info["repo_id"], "revision": info["revision"], "poll_seconds": 0}
    rc, res = run(weights_verify, args)
    assert rc == 1 and name in res["msg"] and "does not match its blob name" in res["msg"]
    rc, res = run(weights_info, args)
    assert rc == 0 and res["done"] and res["needed"] is True and any(name in p for p in res["problems"])


def regular_file_snapshot(hub, info):
    """Replace every link of the snapshot by a copy of its blob (a snapshot copied with cp -L)."""
    sdir = snap(hub, info)
    for name in info["files"]:
        path = os.path.join(sdir, name)
        data = open(path, "rb").read()
        os.unlink(path)
        with open(path, "wb") as fh:
            fh.write(data)
    shutil.rmtree(checkpoint.repo_dir(str(hub), info["repo_id"]) + "/blobs")


def test_a_seed_of_regular_files_verifies_by_sha256_and_only_where_allowed(hub):
    hub, info = hub
    regular_file_snapshot(hub, info)
    refused = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert not refused["ok"] and any("a regular file, not a link into" in p for p in refused["problems"])
    first = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"], allow_files=True)
    assert first["ok"], first["problems"]
    sdir = snap(hub, info)
    for name, blob in first["files"].items():
        assert blob == checkpoint.file_digest(os.path.join(sdir, name), "sha256")
    again = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"], allow_files=True)
    assert again["digest"] == first["digest"] and again["hashed"] == 0 and again["reused"] == len(info["files"])
    # A bit flipped in a copied file, its times restored, is hashed again (its ctime moved) and changes the digest.
    name = sorted(n for n in info["files"] if n.endswith(".safetensors"))[0]
    path = os.path.join(sdir, name)
    st = os.stat(path)
    with open(path, "r+b") as fh:
        fh.seek(st.st_size - 3)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    flipped = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"], allow_files=True)
    assert flipped["hashed"] == 1 and flipped["digest"] != first["digest"]


def test_the_manifest_keeps_blobs_received_ahead_of_their_snapshot(hub):
    hub, info = hub
    rdir = checkpoint.repo_dir(str(hub), info["repo_id"])
    assert checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])["ok"]
    extra = "ab" * 32
    with open(os.path.join(rdir, "blobs", extra), "wb") as fh:
        fh.write(b"x")
    entries = json.load(open(os.path.join(rdir, checkpoint.MANIFEST)))
    entries[extra] = {"stamp": checkpoint.file_stamp(os.stat(os.path.join(rdir, "blobs", extra))), "digest": extra}
    checkpoint.save_manifest(rdir, entries)
    _name, blob = shard_blob(hub, info)
    os.utime(blob)  # its ctime moves: it is hashed again
    assert checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])["hashed"] == 1
    assert extra in checkpoint.valid_entries(rdir)
    os.utime(os.path.join(rdir, "blobs", extra))
    assert extra not in checkpoint.valid_entries(rdir)  # a stamp that moved is no longer taken on trust


def rewrite_shard(path, edit):
    """Rewrite a safetensors file with ``edit`` applied to its {name: [dtype, shape, bytes]} dict (written
    by hand: numpy has no bfloat16 for the safetensors library to load the scales into)."""
    import struct

    header, start = checkpoint.read_header(path)
    data = open(path, "rb").read()[start:]
    tensors = {n: [m["dtype"], m["shape"], data[m["data_offsets"][0]:m["data_offsets"][1]]]
               for n, m in header.items() if n != "__metadata__"}
    edit(tensors)
    out, blob = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        out[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    head = json.dumps(out).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)) + head + blob)


def shard_with(hub, info, suffix):
    sdir = snap(hub, info)
    index = json.load(open(os.path.join(sdir, "model.safetensors.index.json")))
    name = sorted(t for t in index["weight_map"] if t.endswith(suffix))[0]
    return name, index["weight_map"][name]


def drop_total_size(index):
    index["metadata"].pop("total_size", None)


@pytest.mark.parametrize("edit, expect", [
    ("drop scale", "has no .weight_scale (packed INT4 needs its scale and its shape)"),
    ("drop shape", "has no .weight_shape"),
    ("narrow scale", "they disagree"),
    ("wrong shape value", "they disagree"),
])
def test_a_packed_int4_weight_needs_its_scale_and_shape(hub, edit, expect):
    import numpy as np

    hub, info = hub
    tensor, shard = shard_with(hub, info, ".weight_packed")
    base = tensor[:-len(".weight_packed")]

    def change(t):
        if edit == "drop scale":
            del t[base + ".weight_scale"]
        elif edit == "drop shape":
            del t[base + ".weight_shape"]
        elif edit == "narrow scale":  # three groups per row: they no longer divide the columns
            dtype, (rows, _groups), raw = t[base + ".weight_scale"]
            row = len(raw) // rows
            t[base + ".weight_scale"] = [dtype, [rows, 3], b"".join(raw[r * row:r * row + 6] for r in range(rows))]
        else:
            dtype, shape, raw = t[base + ".weight_shape"]
            rows, cols = np.frombuffer(raw, dtype="<i4")
            t[base + ".weight_shape"] = [dtype, shape, np.array([rows * 2, cols], dtype="<i4").tobytes()]

    path = os.path.join(snap(hub, info), shard)
    target = os.path.realpath(path)
    os.unlink(path)
    shutil.copy(target, path)
    rewrite_shard(path, change)
    rewrite_index(hub, info, drop_total_size)
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"], allow_files=True)
    assert [p for p in report["problems"] if p.startswith(shard + ": " + tensor) and expect in p], report["problems"]


def test_an_mxfp8_weight_needs_its_scale(tmp_path):
    hub = tmp_path / "hub"
    info = make_checkpoint.write_checkpoint(hub, "mimo", {"layers": 1, "experts": 2, "shards": 1})
    assert checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])["ok"]
    tensor, shard = shard_with(hub, info, "qkv_proj.weight_scale_inv")
    path = os.path.join(snap(hub, info), shard)
    target = os.path.realpath(path)
    os.unlink(path)
    shutil.copy(target, path)
    rewrite_shard(path, lambda t: t.pop(tensor))
    rewrite_index(hub, info, drop_total_size)
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"], allow_files=True)
    weight = tensor[:-len("_scale_inv")]
    assert [p for p in report["problems"] if p.startswith("%s: %s is " % (shard, weight)) and " without " in p], \
        report["problems"]


def test_block_scaled_fp8_weights_pass_and_a_wrong_block_count_does_not(tmp_path):
    import struct

    def shard(scale_shape):
        tensors = {"m.weight": ("F8_E4M3", [300, 256]), "m.weight_scale_inv": ("F32", scale_shape)}
        header, offset = {}, 0
        for name, (dtype, shape) in tensors.items():
            n = (shape[0] * shape[1] * checkpoint.DTYPE_BITS[dtype]) // 8
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
            offset += n
        raw = json.dumps(header).encode()
        path = tmp_path / ("s-%d-%d.safetensors" % tuple(scale_shape))
        path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
        return path.name

    assert checkpoint.check_quantized(str(tmp_path), [shard([3, 2])]) == []  # ceil(300/128) x 256/128
    assert checkpoint.check_quantized(str(tmp_path), [shard([2, 2])])  # one block row short
