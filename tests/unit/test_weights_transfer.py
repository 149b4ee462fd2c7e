"""weights_receive through its entry point, fed by a real chain sender on loopback: a good snapshot is
published; an injected stream, from a peer without the run's key or from one with it that carries a link
out of the snapshot, publishes nothing and leaves no staging behind."""

import io
import os
import socket
import tarfile
import threading
import time

import make_checkpoint
import pytest
from module_runner import run

from ansible_collections.sparkfleet.vllm.plugins.module_utils import checkpoint, stream_chain
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


def receive_with(dest, info, digest, source_argv, key, timeout=20):
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
                                    "chain_key": KEY, "timeout": timeout})
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
