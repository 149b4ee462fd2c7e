"""The authenticated, pipelined chain over real sockets on loopback: receivers, senders, impostors, a
corrupting man in the middle."""

import hashlib
import os
import socket
import threading
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import stream_chain

KEY = "k" * 40
OTHER = "o" * 40


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listen(port, results, key=KEY, session="s", sink=None, forward=None, timeout=30, stall=stream_chain.STALL_SECONDS):
    """A receiver in a thread; its result or its error lands in ``results``."""
    def run():
        try:
            results["ok"] = stream_chain.receive(port, session, key, sink or (lambda f: f.read()), forward=forward,
                                                 bind="127.0.0.1", accept_timeout=timeout, connect_timeout=5,
                                                 stall_seconds=stall)
        except stream_chain.ChainError as exc:
            results["error"] = str(exc)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def file_sink(path):
    def consume(stream):
        with open(path, "wb") as fh:
            fh.write(stream.read())
        return "written"
    return consume


def test_chain_order():
    assert stream_chain.chain_order("h", ["h", "a", "b", "c"]) == ("a", {"a": "b", "b": "c", "c": None})
    assert stream_chain.chain_order("h", ["h"]) == (None, {})


def test_three_hop_chain_delivers_identical_bytes(tmp_path):
    payload = os.urandom(3 * 1024 * 1024 + 17)
    src = tmp_path / "src.bin"
    src.write_bytes(payload)
    ports = [free_port() for _unused in range(3)]
    results = [{} for _unused in range(3)]
    threads = [listen(ports[i], results[i], sink=file_sink(str(tmp_path / f"out{i}.bin")),
                      forward=("127.0.0.1", ports[i + 1]) if i + 1 < 3 else None) for i in range(3)]
    sent = stream_chain.send(["cat", str(src)], "127.0.0.1", ports[0], "s", KEY, connect_timeout=30)
    for t in threads:
        t.join(30)
    want = hashlib.sha256(payload).hexdigest()
    assert sent["sha256"] == want and sent["bytes"] == len(payload)
    for i in range(3):
        assert results[i]["ok"]["bytes"] == len(payload) and results[i]["ok"]["sink_ok"], results[i]
        assert results[i]["ok"]["frames_verified"] == 5  # four data frames and the end
        assert (tmp_path / f"out{i}.bin").read_bytes() == payload
    assert [r["ok"]["forwarded"] for r in results] == [True, True, False]


def test_a_sender_without_the_key_is_refused_before_any_payload():
    port, res, seen = free_port(), {}, []
    t = listen(port, res, sink=lambda f: seen.append(f.read()), timeout=3)
    with pytest.raises(stream_chain.ChainError, match="refused the stream: the sender did not prove"):
        stream_chain.send(["printf", "evil"], "127.0.0.1", port, "s", OTHER, connect_timeout=30)
    t.join(30)
    assert "did not prove this run's chain key" in res["error"] and "ok" not in res and not seen
    assert res["error"].startswith("no authenticated stream arrived on 127.0.0.1:%d within 3s; refused: " % port)


def test_an_injected_connection_does_not_cost_the_run_its_transfer(tmp_path):
    port, res = free_port(), {}
    t = listen(port, res, sink=file_sink(str(tmp_path / "out")))
    with pytest.raises(stream_chain.ChainError):
        stream_chain.send(["printf", "evil"], "127.0.0.1", port, "s", OTHER, connect_timeout=30)
    stream_chain.send(["printf", "good"], "127.0.0.1", port, "s", KEY, connect_timeout=30)
    t.join(30)
    assert res["ok"]["bytes"] == 4 and (tmp_path / "out").read_bytes() == b"good"


def test_a_receiver_without_the_key_gets_nothing():
    """An impostor listening on the port accepts anything; the sender checks its answer and sends nothing."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port, got = server.getsockname()[1], []

    def impostor():
        conn, _unused = server.accept()
        conn.sendall(b"SPARKFLEET-CHAIN 2 " + b"ab" * 32 + b"\n")
        conn.recv(1000)
        conn.sendall(b"OK " + b"0" * 64 + b"\n")
        while True:
            data = conn.recv(65536)
            if not data:
                break
            got.append(data)
        conn.close()

    t = threading.Thread(target=impostor)
    t.start()
    with pytest.raises(stream_chain.ChainError, match="did not prove this run's chain key; nothing was sent"):
        stream_chain.send(["printf", "secret"], "127.0.0.1", port, "s", KEY, connect_timeout=30)
    t.join(30)
    server.close()
    assert b"secret" not in b"".join(got)


def test_a_raw_injected_stream_is_refused():
    port, res = free_port(), {}
    t = listen(port, res, timeout=3)
    with stream_chain._connect("127.0.0.1", port, 30) as sock:
        sock.recv(200)
        sock.sendall(b"SPARKFLEET-CHAIN 1 s\nPAYLOAD" * 3)
    t.join(30)
    assert "not a sparkfleet chain sender" in res["error"]


def test_a_sender_of_another_session_is_refused():
    port, res = free_port(), {}
    t = listen(port, res, session="want", timeout=3)
    with pytest.raises(stream_chain.ChainError, match="refused the stream: wrong session"):
        stream_chain.send(["printf", "x"], "127.0.0.1", port, "other", KEY, connect_timeout=30)
    t.join(30)
    assert res["error"].endswith("refused: stream is for session other, expected want")


def flipping_proxy(listen_port, target_port, flip_at):
    """A man in the middle that relays both ways and flips one byte at offset ``flip_at`` downstream."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen_port))
    server.listen(1)

    def pump(src, dst, flip):
        offset = 0
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            if flip is not None and offset <= flip < offset + len(data):
                data = bytearray(data)
                data[flip - offset] ^= 0x01
                data = bytes(data)
            offset += len(data)
            try:
                dst.sendall(data)
            except OSError:
                break
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def run():
        client, _unused = server.accept()
        server.close()
        upstream = socket.create_connection(("127.0.0.1", target_port))
        back = threading.Thread(target=pump, args=(upstream, client, None))
        back.start()
        pump(client, upstream, flip_at)
        back.join()
        client.close()
        upstream.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_corrupted_stream_fails_at_every_node_and_no_sink_sees_its_end(tmp_path):
    """A man in the middle flips one bit: the first node refuses that frame, its `docker load` (here a
    command that writes a marker after the end of its input) is killed before the end, and the node below,
    cut off before the last frame, does the same. No sink gets a byte past the flip."""
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(4 * 1024 * 1024))
    p0, p1, proxy = free_port(), free_port(), free_port()
    r0, r1 = {}, {}

    def loader(i):
        return stream_chain.process_sink(["sh", "-c", f"cat > {tmp_path}/got{i}; touch {tmp_path}/loaded{i}"])

    t1 = listen(p1, r1, sink=loader(1))
    t0 = listen(p0, r0, sink=loader(0), forward=("127.0.0.1", p1))
    flip = 2 * 1024 * 1024 + 1000
    mitm = flipping_proxy(proxy, p0, flip_at=flip)
    try:  # the sender may or may not see the first node hang up, depending on the socket buffers
        stream_chain.send(["cat", str(src)], "127.0.0.1", proxy, "s", KEY, connect_timeout=30)
    except stream_chain.ChainError:
        pass
    for t in (mitm, t0, t1):
        t.join(30)
    assert "failed its integrity check" in r0["error"] and "nothing was loaded or published" in r0["error"]
    assert "ended before its last frame" in r1["error"]
    for i in (0, 1):
        assert not (tmp_path / f"loaded{i}").exists()
        got = (tmp_path / f"got{i}").read_bytes() if (tmp_path / f"got{i}").exists() else b""
        assert len(got) < flip and src.read_bytes().startswith(got)


def test_a_source_that_fails_midway_leaves_the_stream_unverified():
    port, res = free_port(), {}
    t = listen(port, res)
    with pytest.raises(stream_chain.ChainError, match="exited 2"):
        stream_chain.send(["sh", "-c", "head -c 3000000 /dev/zero; echo boom >&2; exit 2"], "127.0.0.1", port,
                          "s", KEY, connect_timeout=30)
    t.join(30)
    assert "ended before its last frame" in res["error"]


def test_an_oversized_frame_is_refused():
    port, res = free_port(), {}
    t = listen(port, res)
    out = stream_chain._Outgoing("127.0.0.1", port, "s", KEY, 30)
    out.sock.sendall(stream_chain._FRAME.pack(stream_chain.CHUNK + 1) + b"x" * 100)
    out.close()
    t.join(30)
    assert "sent a frame of" in res["error"]


def test_a_short_key_is_refused_at_both_ends():
    with pytest.raises(stream_chain.ChainError, match="shorter than 32"):
        stream_chain.receive(free_port(), "s", "short", lambda f: f.read(), bind="127.0.0.1", accept_timeout=1)
    with pytest.raises(stream_chain.ChainError, match="shorter than 32"):
        stream_chain.send(["true"], "127.0.0.1", free_port(), "s", "", connect_timeout=1)


def test_unreachable_next_hop_is_reported_not_fatal_locally(tmp_path):
    port, dead = free_port(), free_port()
    out = tmp_path / "o"
    res = {}
    t = listen(port, res, sink=file_sink(str(out)), forward=("127.0.0.1", dead))
    stream_chain.send(["printf", "hello"], "127.0.0.1", port, "s", KEY, connect_timeout=30)
    t.join(30)
    assert out.read_bytes() == b"hello"
    assert not res["ok"]["forwarded"] and "could not connect" in res["ok"]["forward_error"]


def test_a_failing_sink_is_reported_and_the_stream_still_forwarded(tmp_path):
    port, nxt = free_port(), free_port()
    r0, r1 = {}, {}
    t1 = listen(nxt, r1)

    def bad(f):
        f.read(10)
        raise ValueError("refused member 'x'")

    t0 = listen(port, r0, sink=bad, forward=("127.0.0.1", nxt))
    stream_chain.send(["head", "-c", "5000000", "/dev/zero"], "127.0.0.1", port, "s", KEY, connect_timeout=30)
    t0.join(30)
    t1.join(30)
    assert not r0["ok"]["sink_ok"] and "refused member 'x'" in r0["ok"]["sink_output"]
    assert r1["ok"]["bytes"] == 5000000


@pytest.mark.parametrize("hostile", ["non-ascii proof", "silent", "slow", "garbage"])
def test_a_hostile_peer_first_is_refused_and_the_real_sender_still_gets_through(tmp_path, monkeypatch, hostile):
    """Whatever a peer without the key sends first, however slowly, the receiver refuses it within the
    handshake's time and then takes the real stream."""
    monkeypatch.setattr(stream_chain, "HANDSHAKE_SECONDS", 1)
    port, res = free_port(), {}
    t = listen(port, res, sink=file_sink(str(tmp_path / "out")))
    bad = stream_chain._connect("127.0.0.1", port, 30)
    bad.recv(200)
    if hostile == "non-ascii proof":
        bad.sendall(b"SPARKFLEET-CHAIN 2 s " + b"a" * 64 + b" \xff\xff\n")
    elif hostile == "slow":
        for _unused in range(3):
            bad.sendall(b"S")
            time.sleep(0.5)
    elif hostile == "garbage":
        bad.sendall(os.urandom(300) + b"\n")
    stream_chain.send(["printf", "good"], "127.0.0.1", port, "s", KEY, connect_timeout=30)
    bad.close()
    t.join(30)
    assert res["ok"]["bytes"] == 4 and (tmp_path / "out").read_bytes() == b"good", res


def test_data_and_end_frames_never_share_a_tag():
    tags, other = stream_chain._Tags(KEY, "s", "c"), stream_chain._Tags(KEY, "s", "c")
    assert tags.frame(b"end" + stream_chain._SEQ.pack(3)) != other.end(3)


def test_a_python_producer_is_a_source_and_its_failure_sends_no_end(tmp_path):
    port, res = free_port(), {}
    t = listen(port, res)
    sent = stream_chain.send(lambda out: out.write(b"x" * (2 * 1024 * 1024 + 5)), "127.0.0.1", port, "s", KEY,
                             connect_timeout=30)
    t.join(30)
    assert sent["bytes"] == res["ok"]["bytes"] == 2 * 1024 * 1024 + 5

    def broken(out):
        out.write(b"y" * 1024 * 1024)
        raise OSError(28, "No space left on device")

    port, res = free_port(), {}
    t = listen(port, res)
    with pytest.raises(stream_chain.ChainError, match="No space left on device"):
        stream_chain.send(broken, "127.0.0.1", port, "s", KEY, connect_timeout=30)
    t.join(30)
    assert "ok" not in res and "ended before its last frame" in res["error"]


def test_a_stalled_upstream_fails_the_hop_in_bounded_time_naming_both_ends():
    port, res = free_port(), {}
    t = listen(port, res, stall=1)
    release = threading.Event()

    def stalls(out):
        out.write(b"z" * (1024 * 1024))
        out.flush()
        release.wait(20)  # the seed's disk hangs

    start = time.monotonic()
    failed = {}

    def send():
        try:
            stream_chain.send(stalls, "127.0.0.1", port, "s", KEY, 30)
        except stream_chain.ChainError as exc:
            failed["error"] = str(exc)

    sender = threading.Thread(target=send)
    sender.start()
    t.join(20)
    release.set()
    sender.join(20)
    assert time.monotonic() - start < 10  # (the sender learns of it from the receiver's own report)
    assert res["error"].startswith("the hop 127.0.0.1:") and "-> 127.0.0.1:%d stalled" % port in res["error"]
    with socket.socket() as s:  # the listener let go of its port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_a_receiver_that_stops_reading_fails_the_sender_in_bounded_time_naming_both_ends():
    port = free_port()
    server = socket.socket()
    server.bind(("127.0.0.1", port))
    server.listen(1)
    frozen = {}

    def frozen_receiver():  # proves the key, then reads nothing more (a node paused with SIGSTOP)
        conn, _peer = server.accept()
        frozen["conn"] = conn
        stream_chain._prove(conn, "s", KEY, "sender")

    t = threading.Thread(target=frozen_receiver)
    t.start()
    start = time.monotonic()
    with pytest.raises(stream_chain.ChainError) as err:
        stream_chain.send(lambda out: out.write(b"q" * (256 * 1024 * 1024)), "127.0.0.1", port, "s", KEY, 30,
                          stall_seconds=1)
    assert time.monotonic() - start < 20
    assert "-> 127.0.0.1:%d stalled: the receiver took nothing for 1s" % port in str(err.value)
    t.join(5)
    frozen["conn"].close()
    server.close()


def test_a_dead_next_node_is_this_nodes_forward_error_not_a_stall_upstream():
    """The next node never listens: this node gives up on it within half the stall timeout, keeps reading
    its upstream, stores the stream and reports the forward error; the upstream hop does not stall."""
    port, res = free_port(), {}
    dead = free_port()

    def run():
        try:
            res["ok"] = stream_chain.receive(port, "s", KEY, lambda f: len(f.read()), forward=("127.0.0.1", dead),
                                             bind="127.0.0.1", accept_timeout=30, connect_timeout=60,
                                             stall_seconds=4)
        except stream_chain.ChainError as exc:
            res["error"] = str(exc)

    t = threading.Thread(target=run)
    t.start()
    sent = stream_chain.send(lambda out: out.write(b"d" * (64 * 1024 * 1024)), "127.0.0.1", port, "s", KEY, 30,
                             stall_seconds=4)
    t.join(60)
    assert sent["bytes"] == 64 * 1024 * 1024, sent
    assert res["ok"]["sink_output"] == str(64 * 1024 * 1024) and res["ok"]["forward_error"], res
