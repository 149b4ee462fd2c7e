"""fabric.reach on real sockets: an answer (accepted or refused) is reachable, silence is not."""

import socket

from ansible_collections.sparkfleet.vllm.plugins.module_utils import fabric


def test_a_listening_port_answers():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        assert fabric.reach("127.0.0.1", srv.getsockname()[1], timeout=2) == (True, "accepted")


def test_a_closed_port_still_answers_with_a_refusal():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: the kernel refuses connections to it
        assert fabric.reach("127.0.0.1", port, timeout=2) == (True, "refused")


def test_a_listener_that_never_accepts_past_its_backlog_is_silent():
    """A full accept queue drops SYNs, as a dropping firewall does: the connection gets no answer at all."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(0)
        port = srv.getsockname()[1]
        held = []
        try:
            for _attempt in range(16):  # fill the queue until a connection is left unanswered
                try:
                    held.append(socket.create_connection(("127.0.0.1", port), timeout=0.3))
                except OSError:
                    break
            assert fabric.reach("127.0.0.1", port, timeout=0.3) == (False, "no answer in 0.3 s")
        finally:
            for sock in held:
                sock.close()
