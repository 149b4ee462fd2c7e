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
