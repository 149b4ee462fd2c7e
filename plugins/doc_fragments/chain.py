# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations


class ModuleDocFragment:
    """The options of a transfer down the node-to-node chain (module_utils/stream_chain), shared by every
    module that moves an artifact through it: DOCUMENTATION for both ends, SEND and RECEIVE for each end
    (stream_chain.send_argument_spec and receive_argument_spec). Each module sets its own port default."""

    DOCUMENTATION = r"""
options:
  port:
    description: TCP port of the chain.
    type: int
  chain_key:
    description:
      - The run's chain key, 32 characters or more, the same for every node of one transfer. Each hop
        proves it holds the key (HMAC-SHA256 over a fresh challenge, both ways) before a byte of payload
        moves, and every frame of at most 1 MiB carries its own HMAC (its kind, number, length and bytes),
        checked before anything reads it; an end frame's HMAC covers the byte count. A peer without the
        key, or a corrupted or injected stream, is refused and nothing is loaded or published.
      - The roles generate a new one for every run; it is never logged.
    type: str
    required: true
  timeout:
    description: Seconds to wait for the other end to connect.
    type: int
    default: 900
  stall_timeout:
    description:
      - Seconds a hop may move no byte, either way, once the stream flows. The hop then fails with a message
        naming both ends, its sockets are closed, and every node below it aborts what it received.
    type: int
    default: 60
  progress_file:
    description:
      - A file on this node where the step's phase, bytes, total and state are kept while it runs in the
        background (with C(async)), for M(sparkfleet.vllm.job_progress) to report. It ends as done, with the
        result, or as failed, with the reason.
    type: path
"""

    SEND = r"""
options:
  target_host:
    description: The first node of the chain.
    type: str
    required: true
attributes:
  check_mode:
    support: full
    details: Predicts C(changed=true) and sends nothing.
  diff_mode:
    support: none
    details: Nothing changes on this node; the receivers show what changes on theirs.
  idempotent:
    support: none
    details: Every run sends; the play runs it only when a node needs a copy.
"""

    RECEIVE = r"""
options:
  bind_address:
    description: Address this node listens on (its fabric IP).
    type: str
    default: 0.0.0.0
  forward_host:
    description: The next node of the chain; empty on the last one.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: Predicts C(changed=true) and receives nothing.
  idempotent:
    support: none
    details: Every run receives; the play runs it only on nodes that need a copy.
"""
