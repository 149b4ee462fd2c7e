# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""A pipelined peer-to-peer chain for large artifacts (images, weights), authenticated at every hop.

The source streams to the first node; every node hands each chunk to its local sink (``docker load``, a
checked tar extraction into staging) *and* forwards it to the next node as it arrives.
The whole transfer then takes about S/B plus a small per-hop delay, independent of the number of nodes,
where a fan-out from the head takes (N-1)·S/B because the head's link carries every copy.

No library does this (rsync and scp are point-to-point; torrent clients need trackers or a DHT and a
seeding phase), so the relay is written here, over plain TCP:

1. The receiver sends a fresh challenge. The sender answers with the session, its own nonce and an
   HMAC-SHA256 of both under the run's chain key; the receiver answers with its own HMAC. Each end has then
   proven that it holds the key, which the controller generates for one run and hands to the modules as a
   no_log option. A peer without it is refused before a byte of payload is read.
2. The payload travels in frames of at most 1 MiB, each with its own HMAC over the challenge, its
   sequence number and its bytes; an empty frame with an HMAC over the byte count ends the stream. A frame
   is checked before it reaches the local sink or the next node, so ``docker load`` and the tar extraction
   read only authenticated bytes, and a forwarder signs every frame anew for its own next hop.
3. A frame that fails, or a stream that ends without its last frame, aborts the local sink (``docker
   load`` is killed before it sees the end of its input; the extraction stops and staging is removed) and
   the next node's stream, so a corrupted or injected stream fails at every node below; the caller loads
   or publishes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import queue
import socket
import struct
import subprocess
import threading
import time

MAGIC = b"SPARKFLEET-CHAIN 2"
CHUNK = 1 << 20
SINK_QUEUE_CHUNKS = 64  # up to 64 MiB in flight between the network and the local sink
KEY_MIN_LENGTH = 32
# A hop where no byte moves for this long fails, naming both ends (every node below it then aborts too): a
# frame is 1 MiB, which even a congested 200 Gb/s fabric moves in well under a second, while the slowest
# sink here (a receiver's disk) is given the whole bounded queue in front of it.
STALL_SECONDS = 60
HANDSHAKE_SECONDS = 10  # the whole handshake, from the connection: a slow or silent peer is dropped after it
_FRAME = struct.Struct(">I")
_SEQ = struct.Struct(">Q")
_TAG = 32
_HEX = frozenset("0123456789abcdef")
_ABORT = object()


class ChainError(Exception):
    pass


class _Refused(ChainError):
    """The other end answered the handshake, and the answer is final (no retry)."""


def chain_order(source, targets):
    """Pure: who forwards to whom. Returns {node: next_node_or_None} and the first hop."""
    order = [t for t in targets if t != source]
    nxt = {node: (order[i + 1] if i + 1 < len(order) else None) for i, node in enumerate(order)}
    return (order[0] if order else None), nxt


def check_key(key):
    if not key or len(key) < KEY_MIN_LENGTH:
        raise ChainError("the chain key is missing or shorter than %d characters" % KEY_MIN_LENGTH)


def _mac(key, *parts):
    """An HMAC-SHA256 over the parts, NUL-separated (the parts are hex or session names: no NUL inside)."""
    return hmac.new(key.encode(), b"\0".join(p if isinstance(p, bytes) else p.encode() for p in parts),
                    hashlib.sha256)


def _connect(host, port, timeout, clock=time):
    deadline = clock.monotonic() + timeout
    last = None
    while clock.monotonic() < deadline:
        try:
            return socket.create_connection((host, port), timeout=10)
        except OSError as exc:
            last = exc
            clock.sleep(0.5)
    raise ChainError("could not connect to %s:%s within %ss: %s" % (host, port, int(timeout), last))


def _read_line(conn, who, deadline):
    """One handshake line as words, read before ``deadline`` (a time.monotonic() value) however slowly the
    peer sends it. Anything but printable ASCII ends the handshake."""
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise ChainError("%s did not complete the handshake within %ss" % (who, HANDSHAKE_SECONDS))
        conn.settimeout(left)
        try:
            byte = conn.recv(1)
        except socket.timeout:
            raise ChainError("%s did not complete the handshake within %ss" % (who, HANDSHAKE_SECONDS)) from None
        if not byte:
            raise ChainError("%s closed the connection during the handshake" % who)
        buf += byte
        if len(buf) > 512:
            raise ChainError("%s sent a handshake line over 512 bytes" % who)
    line = buf[:-1]
    if any(b < 0x20 or b > 0x7e for b in line):
        raise ChainError("%s sent a handshake line that is not printable ASCII" % who)
    return line.decode("ascii").split(" ")


def _is_hex(text, length):
    return len(text) == length and set(text) <= _HEX


class _Tags:
    """The HMACs of one hop's frames. Each covers the frame's kind (data or end), its sequence number and
    its length, then a data frame's bytes or the end frame's byte count of the whole stream."""

    def __init__(self, key, session, challenge):
        self.base, self.seq = _mac(key, "frame", session, challenge, b""), 0

    def _tag(self, kind, size, body):
        tag = self.base.copy()
        tag.update(kind + _SEQ.pack(self.seq) + _SEQ.pack(size))
        tag.update(body)
        self.seq += 1
        return tag.digest()

    def frame(self, chunk):
        return self._tag(b"D", len(chunk), chunk)

    def end(self, total):
        return self._tag(b"E", 0, _SEQ.pack(total))


def _recv_exact(conn, size, who):
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        part = conn.recv_into(view[got:], size - got)
        if not part:
            raise ChainError("the stream from %s ended before its last frame" % who)
        got += part
    return buf


def _prove(conn, session, key, who):
    """The receiver's side of the handshake. Returns the challenge the payload's HMAC is bound to."""
    deadline = time.monotonic() + HANDSHAKE_SECONDS
    challenge = os.urandom(32).hex()
    conn.settimeout(HANDSHAKE_SECONDS)
    conn.sendall(MAGIC + b" " + challenge.encode() + b"\n")
    words = _read_line(conn, who, deadline)
    if len(words) != 5 or " ".join(words[:2]).encode() != MAGIC or not _is_hex(words[3], 64) \
            or not _is_hex(words[4], 64):
        raise ChainError("refused a connection from %s: it is not a sparkfleet chain sender" % who)
    got, nonce, proof = words[2], words[3], words[4]
    if not hmac.compare_digest(_mac(key, "send", got, challenge, nonce).hexdigest(), proof):
        conn.sendall(b"NO the sender did not prove the run's chain key\n")
        raise ChainError("refused a stream from %s: it did not prove this run's chain key (an injected "
                         "stream, or a sender of another run)" % who)
    if got != session:
        conn.sendall(b"NO wrong session\n")
        raise ChainError("stream is for session %s, expected %s" % (got, session))
    conn.sendall(b"OK " + _mac(key, "receive", session, challenge, nonce).hexdigest().encode() + b"\n")
    return challenge


def _introduce(sock, session, key, who, deadline):
    """The sender's side of the handshake. Returns the receiver's challenge."""
    words = _read_line(sock, who, deadline)
    if len(words) != 3 or " ".join(words[:2]).encode() != MAGIC or not _is_hex(words[2], 64):
        raise ChainError("%s is not a sparkfleet chain receiver" % who)
    challenge, nonce = words[2], os.urandom(32).hex()
    proof = _mac(key, "send", session, challenge, nonce).hexdigest()
    sock.sendall(MAGIC + (" %s %s %s\n" % (session, nonce, proof)).encode())
    answer = _read_line(sock, who, deadline)
    if answer[0] == "NO":
        raise _Refused("%s refused the stream: %s" % (who, " ".join(answer[1:])))
    if answer[0] != "OK" or len(answer) != 2 or not _is_hex(answer[1], 64) or not hmac.compare_digest(
            _mac(key, "receive", session, challenge, nonce).hexdigest(), answer[1]):
        raise _Refused("%s did not prove this run's chain key; nothing was sent to it" % who)
    return challenge


class _Outgoing:
    """One authenticated hop out: frames and the running HMAC of what went through it."""

    def __init__(self, host, port, session, key, timeout, stall=STALL_SECONDS):
        self.who = "%s:%s" % (host, port)
        self.stall = stall
        deadline = time.monotonic() + timeout
        # A receiver busy refusing another peer's handshake (it serves one at a time, each for at most
        # HANDSHAKE_SECONDS) may leave this one unanswered: try again until ``timeout``. A refusal is final.
        while True:
            self.sock = _connect(host, int(port), max(1.0, deadline - time.monotonic()))
            try:
                challenge = _introduce(self.sock, session, key, self.who,
                                       time.monotonic() + 3 * HANDSHAKE_SECONDS)
                self.sock.settimeout(stall)  # a send that cannot move a byte for this long is a stalled hop
                self.me = "%s:%s" % self.sock.getsockname()[:2]
                break
            except _Refused:
                self.sock.close()
                raise
            except (OSError, ChainError):
                self.sock.close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)
        self.tags, self.total = _Tags(key, session, challenge), 0

    def _put(self, data):
        # Not sendall: its timeout bounds the whole call, so a 1 MiB frame on a slow link would count as a
        # stall. Each send() here waits at most ``stall`` for room, so only a hop that takes nothing fails.
        view = memoryview(data)
        while view:
            view = view[self.sock.send(view):]

    def send(self, chunk):
        try:
            self._put(_FRAME.pack(len(chunk)) + chunk + self.tags.frame(chunk))
        except socket.timeout:
            raise ChainError("the hop %s -> %s stalled: the receiver took nothing for %ss after %d bytes"
                             % (self.me, self.who, self.stall, self.total)) from None
        self.total += len(chunk)

    def finish(self):
        """The last frame: the receiver may end its sink's input."""
        self.sock.sendall(_FRAME.pack(0) + self.tags.end(self.total))

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the receiver already closed (it refused the stream or failed); it reports why
        self.sock.close()


class _QueueReader(io.RawIOBase):
    """The sink's side of the bounded queue, as a file (None in the queue is the end)."""

    def __init__(self, pending):
        super().__init__()
        self.pending, self.buf, self.ended = pending, b"", False

    def readable(self):
        return True

    def readinto(self, out):
        while not self.buf and not self.ended:
            chunk = self.pending.get()
            if chunk is _ABORT:
                self.ended = True
                raise ChainError("the stream was aborted before its end")
            if chunk is None:
                self.ended = True
            else:
                self.buf = chunk
        size = min(len(out), len(self.buf))
        out[:size] = self.buf[:size]
        self.buf = self.buf[size:]
        return size

    def drain(self):
        while not self.ended:
            if self.pending.get() in (None, _ABORT):
                self.ended = True


def process_sink(argv):
    """A sink that feeds the stream to ``argv``'s stdin; an aborted stream kills it before it sees the end of
    its input. Fails with the command's output when it exits non-zero."""
    def consume(stream):
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            while True:
                chunk = stream.read(CHUNK)
                if not chunk:
                    break
                proc.stdin.write(chunk)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.stdin.close()
        output = proc.stdout.read().decode(errors="replace")
        if proc.wait() != 0:
            raise ChainError("%s exited %d: %s" % (" ".join(argv), proc.returncode, output.strip()[-2000:]))
        return output.strip()
    return consume


def receive(port, session, key, sink, forward=None, bind="0.0.0.0", accept_timeout=900,  # noqa: S104
            connect_timeout=300, progress=None, stall_seconds=STALL_SECONDS):
    """Accept one authenticated stream for ``session``, hand it to ``sink`` (a function that reads a file
    object, run in its own thread) and forward it to ``forward`` (host, port), counting the bytes into
    ``progress`` (a progress.Progress, phase "received").

    A peer that does not prove the key is refused and the wait goes on, until ``accept_timeout``. Once the
    stream flows, ``stall_seconds`` without a byte, either way, fails the hop, naming both ends. Raises
    ChainError when no authenticated stream came, or when the stream fails its integrity check; the caller
    then loads and publishes nothing. Returns {"bytes", "frames_verified", "sink_ok", "sink_output",
    "forwarded", "forward_error", "seconds"}; every frame's HMAC replaces a digest of the whole.
    """
    check_key(key)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((bind, port))
    server.listen(4)
    deadline = time.monotonic() + accept_timeout
    refused = []
    try:
        # A peer that fails the handshake is refused and the listener waits on: an injected connection
        # does not cost the run its transfer.
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise socket.timeout
                server.settimeout(left)
                conn, peer = server.accept()
            except socket.timeout:
                raise ChainError("no authenticated stream arrived on %s:%s within %ss%s" % (
                    bind, port, accept_timeout, "; refused: " + "; ".join(refused[-3:]) if refused else "")) from None
            who = "%s:%s" % peer[:2]
            try:
                challenge = _prove(conn, session, key, who)
                break
            except Exception as exc:  # noqa: BLE001 - whatever a peer sends, it is refused, never fatal here
                refused.append(str(exc) if isinstance(exc, ChainError) else "%s: %s" % (who, exc))
                if progress is not None:
                    progress.update(0, note="refused %s" % refused[-1])
                conn.close()
    finally:
        server.close()
    try:
        conn.settimeout(stall_seconds)
        return _relay(conn, who, "%s:%s" % (bind, port), session, key, challenge, sink, forward,
                      connect_timeout, progress, stall_seconds)
    finally:
        conn.close()


def _relay(conn, who, me, session, key, challenge, sink, forward, connect_timeout, progress, stall):
    start = time.monotonic()
    if progress is not None:
        progress.update(0, phase="received")  # the rate counts from the stream's arrival
    down, forward_error = None, None
    if forward:
        try:
            # Nothing is read from upstream while this connects: bounded well inside the upstream's stall
            # timeout, so a dead next node is this node's forward error, not the upstream hop's stall.
            down = _Outgoing(forward[0], forward[1], session, key, min(connect_timeout, max(1, stall // 2)), stall)
        except (OSError, ChainError) as exc:
            forward_error = str(exc)
    # The local sink reads from a bounded queue in its own thread, so a slow sink here does not hold back
    # the nodes further down the chain (until the queue is full).
    pending = queue.Queue(maxsize=SINK_QUEUE_CHUNKS)
    reader = _QueueReader(pending)
    outcome = {}

    def run_sink():
        try:
            outcome["output"] = sink(io.BufferedReader(reader, CHUNK))
        except Exception as exc:  # noqa: BLE001 - any failure of the sink is reported, never raised here
            outcome["error"] = "%s: %s" % (type(exc).__name__, exc)
        reader.drain()  # so the network side never blocks on a sink that stopped reading

    thread = threading.Thread(target=run_sink, daemon=True)
    thread.start()
    total = 0
    tags = _Tags(key, session, challenge)
    verified = False
    try:
        while True:
            size = _FRAME.unpack(_recv_exact(conn, _FRAME.size, who))[0]
            if size > CHUNK:
                raise ChainError("the stream from %s sent a frame of %d bytes (at most %d)" % (who, size, CHUNK))
            chunk = _recv_exact(conn, size, who) if size else b""
            want = tags.frame(chunk) if size else tags.end(total)
            if not hmac.compare_digest(_recv_exact(conn, _TAG, who), want):
                raise ChainError("the stream from %s failed its integrity check after %d bytes (corrupted or "
                                 "injected on the way): nothing was loaded or published" % (who, total))
            if not size:
                verified = True
                break
            if down is not None:
                try:
                    down.send(chunk)
                except (OSError, ChainError) as exc:
                    forward_error = ("forwarding broke after %d bytes: %s" % (total, exc)
                                     if isinstance(exc, OSError) else str(exc))
                    down.close()
                    down = None
            pending.put(chunk)
            total += len(chunk)
            if progress is not None:
                progress.update(total, phase="received")
        if down is not None:
            try:
                down.finish()
            except OSError as exc:
                forward_error = "the next node hung up before the last frame: %s" % exc
    except socket.timeout:
        raise ChainError("the hop %s -> %s stalled: nothing arrived for %ss after %d bytes"
                         % (who, me, stall, total)) from None
    except OSError as exc:
        raise ChainError("the stream from %s broke after %d bytes: %s" % (who, total, exc)) from exc
    finally:
        if down is not None:
            down.close()  # without its last frame when this stream failed: the next node aborts too
        pending.put(None if verified else _ABORT)
        thread.join()
    return {"bytes": total, "frames_verified": tags.seq, "sink_ok": "error" not in outcome,
            "sink_output": str(outcome.get("error") or outcome.get("output") or "")[-4000:],
            "forwarded": bool(forward) and forward_error is None, "forward_error": forward_error,
            "seconds": round(time.monotonic() - start, 3)}


class _ProducerSource:
    """A Python producer as a source: ``produce(fileobj)`` writes the stream in a thread, into a pipe, and
    this reads the other end the way send reads a process's stdout (``stdout``, ``wait``, ``kill``)."""

    def __init__(self, produce):
        rfd, wfd = os.pipe()
        self.stdout = os.fdopen(rfd, "rb")
        self.error = None

        def run():
            try:
                with os.fdopen(wfd, "wb") as out:
                    produce(out)
            except BrokenPipeError:
                self.error = "the stream was closed while it was being written"
            except Exception as exc:  # noqa: BLE001 - reported as the source's failure, never raised here
                self.error = "%s: %s" % (type(exc).__name__, exc)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def wait(self):
        self.thread.join()
        return 1 if self.error else 0

    def errors(self):
        return self.error or ""

    def kill(self):
        self.stdout.close()


def send(source, host, port, session, key, connect_timeout=300, progress=None, stall_seconds=STALL_SECONDS):
    """Stream ``source`` to the first node of the chain: an argv whose stdout is the stream, or a function
    that writes the stream into the file object it is given.

    ``progress`` (a progress.Progress) counts the bytes sent and ends as done, with the result, or failed,
    with the reason.
    """
    try:
        check_key(key)
        result = _send(source, host, port, session, key, connect_timeout, progress, stall_seconds)
    except (ChainError, OSError) as exc:
        if progress is not None:
            progress.fail(str(exc))
        raise
    if progress is not None:
        progress.finish(result)
    return result


def _send(source, host, port, session, key, connect_timeout, progress, stall):
    out = _Outgoing(host, port, session, key, connect_timeout, stall)
    if progress is not None:
        progress.update(0, phase="sent")  # the rate counts from the connection
    start = time.monotonic()
    if callable(source):
        src, what = _ProducerSource(source), "the snapshot's stream"
    else:
        src, what = subprocess.Popen(source, stdout=subprocess.PIPE, stderr=subprocess.PIPE), " ".join(source)
    digest, total = hashlib.sha256(), 0
    try:
        while True:
            chunk = src.stdout.read(CHUNK)
            if not chunk:
                break
            out.send(chunk)
            digest.update(chunk)
            total += len(chunk)
            if progress is not None:
                progress.update(total, phase="sent")
        if callable(source):
            rc, err = src.wait(), src.errors()
        else:  # stderr first: a process blocked on a full stderr pipe would never exit
            err = src.stderr.read().decode(errors="replace")
            rc = src.wait()
        if rc != 0:  # no last frame: the receivers abort what they got
            raise ChainError("%s exited %d: %s" % (what, rc, err.strip()[-2000:]))
        out.finish()
    except (OSError, ChainError) as exc:
        src.kill()
        if isinstance(exc, ChainError):
            raise
        raise ChainError("%s closed the stream after %d bytes: %s" % (out.who, total, exc)) from exc
    finally:
        out.close()
        if callable(source):
            src.kill()  # closes the read end: a producer still writing gets a broken pipe and ends
            src.wait()
    return {"bytes": total, "sha256": digest.hexdigest(), "seconds": round(time.monotonic() - start, 3)}


def send_argument_spec(port):
    """The options of a chain's sender (documented once, in the sparkfleet.vllm.chain and .chain.send fragments)."""
    return dict(
        port=dict(type="int", default=port),
        target_host=dict(type="str", required=True),
        chain_key=dict(type="str", required=True, no_log=True),
        timeout=dict(type="int", default=900),
        stall_timeout=dict(type="int", default=STALL_SECONDS),
        progress_file=dict(type="path"),
    )


def receive_argument_spec(port):
    """The options of a chain's receiver (documented in the sparkfleet.vllm.chain and .chain.receive fragments)."""
    return dict(
        port=dict(type="int", default=port),
        bind_address=dict(type="str", default="0.0.0.0"),  # noqa: S104
        forward_host=dict(type="str", default=""),
        chain_key=dict(type="str", required=True, no_log=True),
        timeout=dict(type="int", default=900),
        stall_timeout=dict(type="int", default=STALL_SECONDS),
        progress_file=dict(type="path"),
    )
