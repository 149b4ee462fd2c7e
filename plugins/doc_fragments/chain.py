# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations


class ModuleDocFragment:
    """The options of a transfer down the node-to-node chain (module_utils/stream_chain), shared by every
    module that moves an artifact through it; each module sets its own port default."""

    DOCUMENTATION = r"""
options:
  action:
    description:
      - What this node does. C(check) says whether the node needs a copy; C(receive) (run with C(async))
        listens, hands the stream to the local sink and forwards it to O(forward_host); C(send) streams the
        artifact from the node that holds it to O(target_host).
    type: str
    choices: [check, receive, send]
    required: true
  port:
    description: TCP port of the chain.
    type: int
  bind_address:
    description: Address a receiver listens on (the node's fabric IP).
    type: str
    default: 0.0.0.0
  forward_host:
    description: The next node of the chain, for a receiver; empty for the last one.
    type: str
    default: ""
  target_host:
    description: The first node of the chain, for the sender.
    type: str
    default: ""
  timeout:
    description: Seconds to wait for a connection.
    type: int
    default: 900
  progress_file:
    description:
      - For C(send) run with C(async), a file on this node where the transfer's bytes, total and state are
        kept while it runs, for M(sparkfleet.vllm.chain_progress) to report.
    type: path
"""
