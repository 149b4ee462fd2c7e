"""The pipelined chain over real sockets on loopback: three receivers, one sender."""

import hashlib
import os
import socket
import threading

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import stream_chain


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_chain_order():
    assert stream_chain.chain_order("h", ["h", "a", "b", "c"]) == ("a", {"a": "b", "b": "c", "c": None})
    assert stream_chain.chain_order("h", ["h"]) == (None, {})


def test_three_hop_chain_delivers_identical_bytes(tmp_path):
    payload = os.urandom(3 * 1024 * 1024 + 17)
    src = tmp_path / "src.bin"
    src.write_bytes(payload)
    ports = [free_port() for _unused in range(3)]
    results = {}

    def hop(i):
        out = tmp_path / f"out{i}.bin"
        forward = ("127.0.0.1", ports[i + 1]) if i + 1 < len(ports) else None
        results[i] = stream_chain.receive(ports[i], "sess1", ["sh", "-c", f"cat > {out}"], forward=forward,
                                          bind="127.0.0.1", accept_timeout=30, connect_timeout=30)

    threads = [threading.Thread(target=hop, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    sent = stream_chain.send(["cat", str(src)], "127.0.0.1", ports[0], "sess1", connect_timeout=30)
    for t in threads:
        t.join(30)
    want = hashlib.sha256(payload).hexdigest()
    assert sent["sha256"] == want and sent["bytes"] == len(payload)
    for i in range(3):
        assert results[i]["sha256"] == want and results[i]["sink_rc"] == 0
        assert (tmp_path / f"out{i}.bin").read_bytes() == payload
    assert results[0]["forwarded"] and results[1]["forwarded"] and not results[2]["forwarded"]


def test_wrong_session_is_refused(tmp_path):
    port = free_port()
    errors = []

    def hop():
        try:
            stream_chain.receive(port, "want", ["cat"], bind="127.0.0.1", accept_timeout=30)
        except stream_chain.ChainError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=hop)
    t.start()
    stream_chain.send(["printf", "x"], "127.0.0.1", port, "other", connect_timeout=30)
    t.join(30)
    assert errors == ["stream is for session other, expected want"]


def test_failing_source_is_reported(tmp_path):
    port = free_port()
    t = threading.Thread(target=lambda: stream_chain.receive(port, "s", ["cat"], bind="127.0.0.1",
                                                             accept_timeout=30))
    t.start()
    with pytest.raises(stream_chain.ChainError, match="exited 2"):
        stream_chain.send(["sh", "-c", "echo boom >&2; exit 2"], "127.0.0.1", port, "s", connect_timeout=30)
    t.join(30)


def test_unreachable_next_hop_is_reported_not_fatal_locally(tmp_path):
    port, dead = free_port(), free_port()
    out = tmp_path / "o"
    res = {}
    t = threading.Thread(target=lambda: res.update(stream_chain.receive(
        port, "s", ["sh", "-c", f"cat > {out}"], forward=("127.0.0.1", dead), bind="127.0.0.1",
        accept_timeout=30, connect_timeout=1)))
    t.start()
    stream_chain.send(["printf", "hello"], "127.0.0.1", port, "s", connect_timeout=30)
    t.join(30)
    assert out.read_bytes() == b"hello"
    assert not res["forwarded"] and "could not connect" in res["forward_error"]
