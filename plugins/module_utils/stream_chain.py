# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""A pipelined peer-to-peer chain for large artifacts (images, weights).

The source streams to the first node; every node hands each chunk to its local sink (``docker load``,
``tar -x``) *and* forwards it to the next node as it arrives. The whole transfer then takes about
S/B plus a small per-hop delay, independent of the number of nodes, where a fan-out from the head takes
(N-1)·S/B because the head's link carries every copy.

No library does this (rsync and scp are point-to-point; torrent clients need trackers or a DHT and a
seeding phase), so the relay is written here: plain TCP, one header line naming the session, then raw
bytes, with a sha256 computed on the fly at every hop so the ends can be compared.
"""

from __future__ import annotations

import hashlib
import queue
import socket
import subprocess
import threading
import time

MAGIC = b"SPARKFLEET-CHAIN 1 "
CHUNK = 1 << 20
SINK_QUEUE_CHUNKS = 64  # up to 64 MiB in flight between the network and the local sink


class ChainError(Exception):
    pass


def chain_order(source, targets):
    """Pure: who forwards to whom. Returns {node: next_node_or_None} and the first hop."""
    order = [t for t in targets if t != source]
    nxt = {node: (order[i + 1] if i + 1 < len(order) else None) for i, node in enumerate(order)}
    return (order[0] if order else None), nxt


def _connect(host, port, timeout, clock=time):
    deadline = clock.monotonic() + timeout
    last = None
    while clock.monotonic() < deadline:
        try:
            sock = socket.create_connection((host, port), timeout=10)
            sock.settimeout(None)
            return sock
        except OSError as exc:
            last = exc
            clock.sleep(0.5)
    raise ChainError("could not connect to %s:%s within %ss: %s" % (host, port, int(timeout), last))


def _read_header(conn):
    buf = b""
    while not buf.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte:
            raise ChainError("upstream closed before sending the session header")
        buf += byte
        if len(buf) > 512:
            raise ChainError("session header too long")
    if not buf.startswith(MAGIC):
        raise ChainError("unexpected stream header %r" % buf[:40])
    return buf[len(MAGIC):].strip().decode()


def receive(port, session, sink_argv, forward=None, bind="0.0.0.0", accept_timeout=900,  # noqa: S104
            connect_timeout=300, progress=None):
    """Accept one stream for ``session``, feed it to ``sink_argv`` and forward it to ``forward`` (host, port),
    counting the bytes into ``progress`` (a progress.Progress, phase "received").

    Returns {"bytes", "sha256", "sink_rc", "sink_output", "forwarded", "forward_error", "seconds"}.
    """
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((bind, port))
    server.listen(1)
    server.settimeout(accept_timeout)
    try:
        conn, _unused = server.accept()
    except socket.timeout:
        raise ChainError("no stream arrived on %s:%s within %ss" % (bind, port, accept_timeout)) from None
    finally:
        server.close()
    start = time.monotonic()
    if progress is not None:
        progress.update(0, phase="received")  # the rate counts from the stream's arrival
    conn.settimeout(None)
    got = _read_header(conn)
    if got != session:
        conn.close()
        raise ChainError("stream is for session %s, expected %s" % (got, session))
    down, forward_error = None, None
    if forward:
        try:
            down = _connect(forward[0], int(forward[1]), connect_timeout)
            down.sendall(MAGIC + session.encode() + b"\n")
        except (OSError, ChainError) as exc:
            down, forward_error = None, str(exc)
    sink = subprocess.Popen(sink_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # The local sink is fed from a bounded queue by its own thread, so a slow `docker load` here does not
    # hold back the nodes further down the chain (until the queue is full).
    pending = queue.Queue(maxsize=SINK_QUEUE_CHUNKS)
    sink_error = []

    def feed_sink():
        while True:
            chunk = pending.get()
            if chunk is None:
                break
            if sink_error:
                continue  # drain, so the reader never blocks on a dead sink
            try:
                sink.stdin.write(chunk)
            except OSError as exc:
                sink_error.append(str(exc))
        try:
            sink.stdin.close()
        except OSError:
            pass

    feeder = threading.Thread(target=feed_sink, daemon=True)
    feeder.start()
    digest, total = hashlib.sha256(), 0
    try:
        while True:
            chunk = conn.recv(CHUNK)
            if not chunk:
                break
            if down is not None:
                try:
                    down.sendall(chunk)
                except OSError as exc:
                    forward_error, down = "forwarding broke after %d bytes: %s" % (total, exc), None
            pending.put(chunk)
            digest.update(chunk)
            total += len(chunk)
            if progress is not None:
                progress.update(total, phase="received")
    finally:
        conn.close()
        if down is not None:
            down.shutdown(socket.SHUT_WR)
            down.close()
        pending.put(None)
        feeder.join()
    output = sink.stdout.read().decode(errors="replace")
    rc = sink.wait()
    if sink_error and rc == 0:
        rc, output = 1, output + "\nwriting to the sink failed: %s" % sink_error[0]
    return {"bytes": total, "sha256": digest.hexdigest(), "sink_rc": rc, "sink_output": output[-4000:],
            "forwarded": bool(forward) and forward_error is None, "forward_error": forward_error,
            "seconds": round(time.monotonic() - start, 3)}


def send(source_argv, host, port, session, connect_timeout=300, progress=None):
    """Run ``source_argv`` and stream its stdout to the first node of the chain.

    ``progress`` (a progress.Progress) counts the bytes sent and ends as done, with the result, or failed,
    with the reason.
    """
    try:
        result = _send(source_argv, host, port, session, connect_timeout, progress)
    except (ChainError, OSError) as exc:
        if progress is not None:
            progress.fail(str(exc))
        raise
    if progress is not None:
        progress.finish(result)
    return result


def _send(source_argv, host, port, session, connect_timeout, progress):
    sock = _connect(host, int(port), connect_timeout)
    if progress is not None:
        progress.update(0, phase="sent")  # the rate counts from the connection
    start = time.monotonic()
    src = subprocess.Popen(source_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    digest, total = hashlib.sha256(), 0
    try:
        sock.sendall(MAGIC + session.encode() + b"\n")
        while True:
            chunk = src.stdout.read(CHUNK)
            if not chunk:
                break
            sock.sendall(chunk)
            digest.update(chunk)
            total += len(chunk)
            if progress is not None:
                progress.update(total, phase="sent")
    except OSError as exc:
        src.kill()
        raise ChainError("%s:%s closed the stream after %d bytes: %s" % (host, port, total, exc)) from exc
    finally:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the receiver already closed (it refused the stream or failed); it reports why
        sock.close()
    err = src.stderr.read().decode(errors="replace")
    rc = src.wait()
    if rc != 0:
        raise ChainError("%s exited %d: %s" % (" ".join(source_argv), rc, err.strip()[-2000:]))
    return {"bytes": total, "sha256": digest.hexdigest(), "seconds": round(time.monotonic() - start, 3)}


def send_argument_spec(port):
    """The options of a chain's sender (documented once, in the sparkfleet.vllm.chain and .chain.send fragments)."""
    return dict(
        port=dict(type="int", default=port),
        target_host=dict(type="str", required=True),
        timeout=dict(type="int", default=900),
        progress_file=dict(type="path"),
    )


def receive_argument_spec(port):
    """The options of a chain's receiver (documented in the sparkfleet.vllm.chain and .chain.receive fragments)."""
    return dict(
        port=dict(type="int", default=port),
        bind_address=dict(type="str", default="0.0.0.0"),  # noqa: S104
        forward_host=dict(type="str", default=""),
        timeout=dict(type="int", default=900),
        progress_file=dict(type="path"),
    )
