"""weights_receive through its entry point, fed by a real chain sender on loopback: a good snapshot is
published; an injected stream, from a peer without the run's key or from one with it that carries a link
out of the snapshot, publishes nothing and leaves no staging behind."""

import io
import os
import shutil
import socket
import tarfile
import threading
import time

import make_checkpoint
import pytest
from module_runner import run

from ansible_collections.sparkfleet.vllm.plugins.module_utils import checkpoint, stream_chain, untar
from ansible_collections.sparkfleet.vllm.plugins.modules import weights_receive

KEY = "chain-key-" + "x" * 30


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    hub = tmp_path_factory.mktemp("seed") / "hub"
    info = make_checkpoint.write_checkpoint(hub, "kimi", {"layers": 2, "experts": 2, "shards": 2})
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"])
    assert report["ok"]
    return hub, info, report["digest"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def receive_with(dest, info, digest, source_argv, key, timeout=20, **options):
    port = free_port()
    sent = {}

    def sender():
        time.sleep(0.3)
        try:
            sent["ok"] = stream_chain.send(source_argv, "127.0.0.1", port, digest, key, connect_timeout=20)
        except stream_chain.ChainError as exc:
            sent["error"] = str(exc)

    thread = threading.Thread(target=sender)
    thread.start()
    rc, res = run(weights_receive, {"hub_dir": str(dest), "repo_id": info["repo_id"], "revision": info["revision"],
                                    "session": digest, "port": port, "bind_address": "127.0.0.1",
                                    "chain_key": KEY, "timeout": timeout, **options})
    thread.join(30)
    return rc, res, sent


def snapshot_listing(hub, info):
    sdir = checkpoint.snapshot_dir(str(hub), info["repo_id"], info["revision"])
    if not os.path.isdir(sdir):
        return {}
    return {n: os.readlink(os.path.join(sdir, n)) if os.path.islink(os.path.join(sdir, n)) else "file"
            for n in sorted(os.listdir(sdir))}


def tar_argv(hub, info):
    base = os.path.basename(checkpoint.repo_dir(str(hub), info["repo_id"]))
    return ["tar", "-C", str(hub), "-cf", "-", "%s/blobs" % base, "%s/snapshots/%s" % (base, info["revision"])]


def test_a_good_stream_is_published_and_a_hostile_one_is_not(seed, tmp_path):
    hub, info, digest = seed
    dest = tmp_path / "node-hub"
    rc, res, sent = receive_with(dest, info, digest, tar_argv(hub, info), KEY)
    assert rc == 0, res
    assert res["digest"] == digest and sent["ok"]["bytes"] == res["transfer"]["bytes"]
    assert KEY not in repr(res)
    good = snapshot_listing(dest, info)
    assert good and all(t.startswith("../../blobs/") for t in good.values())

    # A sender with the key (a compromised node) streams a snapshot whose tokenizer points at /etc/hostname.
    base = os.path.basename(checkpoint.repo_dir(str(hub), info["repo_id"]))
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w") as tar:
        link = tarfile.TarInfo("%s/snapshots/%s/tokenizer.json" % (base, info["revision"]))
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/hostname"
        tar.addfile(link)
    (tmp_path / "evil.tar").write_bytes(evil.getvalue())
    rc, res, sent = receive_with(dest, info, digest, ["cat", str(tmp_path / "evil.tar")], KEY)
    assert rc == 1 and "refused, nothing was published" in res["msg"] and "/etc/hostname" in res["msg"]
    assert snapshot_listing(dest, info) == good
    assert not os.listdir(dest / weights_receive.STAGING)

    # A peer without the key: refused in the handshake, before a byte of payload.
    rc, res, sent = receive_with(dest, info, digest, tar_argv(hub, info), "not-the-run-key-" + "y" * 20,
                                 timeout=3)
    assert rc == 1 and "did not prove this run's chain key" in res["msg"]
    assert "refused the stream" in sent["error"]
    assert snapshot_listing(dest, info) == good
    assert not os.listdir(dest / weights_receive.STAGING)


def test_a_blob_whose_bytes_do_not_match_its_name_fails_and_publishes_no_snapshot(seed, tmp_path):
    """A key holder's stream carries the snapshot and one more blob, named like another revision's good
    blob but holding garbage: the stream is refused at that blob, the other revision's blob is left as it
    was, and no snapshot is published."""
    hub, info, digest = seed
    dest = tmp_path / "node-hub"
    base = os.path.basename(checkpoint.repo_dir(str(hub), info["repo_id"]))
    other = "c" * 64
    (dest / base / "blobs").mkdir(parents=True)
    (dest / base / "blobs" / other).write_bytes(b"another revision's good blob")
    stream = tmp_path / "stream.tar"
    with tarfile.open(stream, mode="w") as tar:
        tar.add(str(hub / base / "blobs"), arcname=base + "/blobs")
        extra = tarfile.TarInfo("%s/blobs/%s" % (base, other))
        extra.size = 7
        tar.addfile(extra, io.BytesIO(b"garbage"))
        tar.add(str(hub / base / "snapshots" / info["revision"]), arcname="%s/snapshots/%s" % (base, info["revision"]))
    rc, res, _sent = receive_with(dest, info, digest, ["cat", str(stream)], KEY)
    assert rc == 1 and "blob %s arrived with content" % other in res["msg"], res
    assert (dest / base / "blobs" / other).read_bytes() == b"another revision's good blob"
    assert snapshot_listing(dest, info) == {}
    assert not os.listdir(dest / weights_receive.STAGING)


def producer(hub, info, skip=()):
    report = checkpoint.verify_snapshot(str(hub), info["repo_id"], info["revision"], allow_files=True)
    assert report["ok"], report["problems"]
    rdir = checkpoint.repo_dir(str(hub), info["repo_id"])
    sdir = checkpoint.snapshot_dir(str(hub), info["repo_id"], info["revision"])
    return report, lambda out: untar.pack_repo(out, rdir, sdir, info["revision"], report["files"], set(skip))


def test_an_interrupted_transfer_keeps_its_verified_blobs_and_the_next_sends_only_the_rest(seed, tmp_path):
    hub, info, digest = seed
    dest = tmp_path / "node-hub"
    report, _produce = producer(hub, info)
    blobs = sorted(set(report["files"].values()))
    # The first transfer dies after two blobs: they are in place and recorded, no snapshot is published.
    first = {b: report["files"] for b in blobs[:2]}
    rdir = checkpoint.repo_dir(str(hub), info["repo_id"])

    def dies(out):
        with tarfile.open(fileobj=out, mode="w|") as tar:
            for blob in first:
                tar.add(os.path.join(rdir, "blobs", blob), arcname="%s/blobs/%s" % (os.path.basename(rdir), blob))
        raise OSError("the seed's node lost power")

    rc, res, sent = receive_with(dest, info, digest, dies, KEY)
    assert rc == 1 and snapshot_listing(dest, info) == {}
    assert not os.listdir(dest / weights_receive.STAGING)
    have = sorted(checkpoint.valid_entries(checkpoint.repo_dir(str(dest), info["repo_id"])))
    assert have == blobs[:2]
    # The next one sends only the rest; the snapshot is published whole and intact.
    _report, produce = producer(hub, info, skip=have)
    rc, res, sent = receive_with(dest, info, digest, produce, KEY)
    assert rc == 0, res
    assert res["published"] == len(blobs) - 2 and res["skipped"] == 2 and res["digest"] == digest
    sizes = {b: os.path.getsize(os.path.join(rdir, "blobs", b)) for b in blobs}
    assert sent["ok"]["bytes"] < sum(sizes.values()) - sum(sizes[b] for b in have) + 64 * 1024


def test_a_seed_of_regular_files_reaches_a_node_as_links_into_blobs(seed, tmp_path):
    hub, info, digest = seed
    copied = tmp_path / "copied-hub"
    shutil.copytree(hub, copied, symlinks=True)
    rdir = checkpoint.repo_dir(str(copied), info["repo_id"])
    sdir = checkpoint.snapshot_dir(str(copied), info["repo_id"], info["revision"])
    for name in info["files"]:
        data = open(os.path.join(sdir, name), "rb").read()
        os.unlink(os.path.join(sdir, name))
        with open(os.path.join(sdir, name), "wb") as fh:
            fh.write(data)
    shutil.rmtree(os.path.join(rdir, "blobs"))
    os.unlink(os.path.join(rdir, checkpoint.MANIFEST))
    report, produce = producer(copied, info)
    dest = tmp_path / "node-hub"
    rc, res, _sent = receive_with(dest, info, report["digest"], produce, KEY)
    assert rc == 0, res
    assert res["digest"] == report["digest"] != digest  # named by sha256 throughout, unlike the Hub's git sha1s
    listing = snapshot_listing(dest, info)
    assert set(listing) >= {"config.json", "tokenizer.json"} and all(
        t.startswith("../../blobs/") and len(t) == len("../../blobs/") + 64 for t in listing.values())


def test_a_full_disk_names_the_node_and_the_bytes_and_keeps_the_old_snapshot(seed, tmp_path, monkeypatch):
    hub, info, digest = seed
    dest = tmp_path / "node-hub"
    _report, produce = producer(hub, info)
    rc, res, _sent = receive_with(dest, info, digest, produce, KEY)
    assert rc == 0
    good = snapshot_listing(dest, info)
    # The copy gets damaged (a shard's blob is lost), and the repair runs out of disk mid-stream.
    target = os.path.realpath(os.path.join(checkpoint.snapshot_dir(str(dest), info["repo_id"], info["revision"]),
                                           sorted(n for n in info["files"] if n.endswith(".safetensors"))[0]))
    os.unlink(target)
    real_open = os.open

    def full(path, flags, *args, **kw):
        if weights_receive.STAGING in str(path) and "/blobs/" in str(path) and flags & os.O_CREAT:
            raise OSError(28, "No space left on device")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(untar.os, "open", full)
    rc, res, _sent = receive_with(dest, info, digest, produce, KEY, node="spark-07")
    assert rc == 1
    assert "the disk under %s on spark-07 is full: the snapshot needs" % dest in res["msg"] and "free" in res["msg"]
    assert snapshot_listing(dest, info) == good
    assert not os.listdir(dest / weights_receive.STAGING)
    assert not [n for n in os.listdir(os.path.dirname(checkpoint.snapshot_dir(str(dest), info["repo_id"], "x")))
                if n.startswith(".")]


def test_too_little_disk_is_refused_before_the_stream(seed, tmp_path, monkeypatch):
    _hub, info, digest = seed
    dest = tmp_path / "node-hub"
    monkeypatch.setattr(weights_receive.shutil, "disk_usage",
                        lambda _p: shutil._ntuple_diskusage(10**6, 10**6 - 10, 10))
    rc, res = run(weights_receive, {"hub_dir": str(dest), "repo_id": info["repo_id"], "revision": info["revision"],
                                    "session": digest, "port": free_port(), "bind_address": "127.0.0.1",
                                    "chain_key": KEY, "timeout": 2, "total_bytes": 5 * 10**6, "node": "spark-03"})
    assert rc == 1 and res["msg"].startswith("not enough disk on spark-03 for %s" % info["repo_id"])
    assert "5250000 bytes needed, 10 bytes free" in res["msg"]


def test_the_new_snapshot_replaces_the_old_in_one_exchange(tmp_path):
    old, new = tmp_path / "snap", tmp_path / ".snap.incoming"
    old.mkdir()
    (old / "a").write_text("old")
    new.mkdir()
    (new / "a").write_text("new")
    (new / "b").write_text("new")
    aside = weights_receive.swap_in(str(new), str(old))
    assert sorted(os.listdir(old)) == ["a", "b"] and (old / "a").read_text() == "new"
    assert aside == str(new) and (new / "a").read_text() == "old"  # the exchange: the old one is where the new was
