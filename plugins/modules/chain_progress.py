#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: chain_progress
short_description: Report the progress of a chain transfer that runs in the background on this node
version_added: 0.1.0
description:
  - Reads the progress file that a sender of the transfer chain (M(sparkfleet.vllm.image_sync) or
    M(sparkfleet.vllm.weights_distribute) with C(action=send), run with C(async)) keeps, and returns the
    bytes sent, the total, the rate and a RV(progress) line.
  - One call waits at most O(poll_seconds), returning early when the transfer ends. Run it with C(until) so
    that a long transfer reports its bytes and rate as it goes; the C(sparkfleet.vllm.report) callback
    prints each poll's line.
  - Fails with the sender's own message when the transfer failed, when no byte moved for O(stall_seconds),
    or when no progress file of this O(session) appeared within O(stall_seconds).
options:
  progress_file:
    description: The sender's progress file (its O(sparkfleet.vllm.image_sync#module:progress_file)).
    type: path
    required: true
  session:
    description: The transfer's session name; a file left by an earlier transfer is not read as this one's.
    type: str
    required: true
  what:
    description: What moves, for the progress line.
    type: str
    default: transfer
  poll_seconds:
    description: Longest wait of one call.
    type: int
    default: 20
  stall_seconds:
    description: Seconds without a byte moved (or without a progress file) before the transfer counts as stalled.
    type: int
    default: 300
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Report the image transfer while it runs
  sparkfleet.vllm.chain_progress:
    progress_file: /var/tmp/sparkfleet/image-send.json
    session: "{{ image.image_id }}"
    what: image
  register: sent
  until: sent is failed or sent.done
  retries: 200
  delay: 1
"""

RETURN = r"""
done:
  description: Whether the transfer ended.
  returned: success
  type: bool
bytes:
  description: Bytes sent so far.
  returned: success
  type: int
total:
  description: Bytes the whole transfer holds, when known.
  returned: success
  type: int
mib_per_s:
  description: Average rate so far, MiB/s.
  returned: success
  type: float
progress:
  description: One line for the play's output.
  returned: success
  type: str
  sample: "image: 3.20 of 12.00 GiB sent, 27%, 410.2 MiB/s (8 s)"
what:
  description: The O(what) given, for reports.
  returned: success
  type: str
transfer:
  description: The sender's result (bytes, sha256, seconds) once the transfer is done.
  returned: when done
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.stream_chain import read_progress
from ansible_collections.sparkfleet.vllm.plugins.module_utils.waiter import WaitAborted, WaitTimeout, wait_for


def describe(what, doc):
    """Pure: the progress line of one progress document."""
    if doc is None:
        return "%s: waiting for the sender to start" % what
    gib, secs = doc["bytes"] / 2**30, doc["seconds"]
    rate = doc["bytes"] / 2**20 / secs if secs else 0.0
    size = "%.2f of %.2f GiB sent, %d%%" % (gib, doc["total"] / 2**30, 100 * doc["bytes"] // doc["total"]) \
        if doc.get("total") else "%.2f GiB sent" % gib
    return "%s: %s, %.1f MiB/s (%d s)" % (what, size, rate, secs)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            progress_file=dict(type="path", required=True),
            session=dict(type="str", required=True),
            what=dict(type="str", default="transfer"),
            poll_seconds=dict(type="int", default=20),
            stall_seconds=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    p = module.params
    began = time.time()

    def probe():
        return read_progress(p["progress_file"], p["session"])

    def predicate(doc):
        now = time.time()
        if doc is None:
            if now - began > p["stall_seconds"]:
                raise WaitAborted("no progress file %s for session %s after %d s: the sender never started"
                                  % (p["progress_file"], p["session"], p["stall_seconds"]))
            return False, describe(p["what"], doc)
        if doc["state"] == "failed":
            raise WaitAborted(doc.get("error") or "the sender failed")
        if doc["state"] != "done" and now - doc["updated"] > p["stall_seconds"]:
            raise WaitAborted("no byte moved for %d s after %.2f GiB; the sender is gone or the chain is stuck"
                              % (now - doc["updated"], doc["bytes"] / 2**30))
        return doc["state"] == "done", describe(p["what"], doc)

    try:
        doc, line, _unused = wait_for("%s transfer" % p["what"], probe, predicate, p["poll_seconds"], 1)
    except WaitTimeout:
        doc = probe()
        line = describe(p["what"], doc)
    except WaitAborted as exc:
        module.fail_json(msg="%s transfer failed: %s" % (p["what"], exc))
    doc = doc or {}
    done = doc.get("state") == "done"
    secs = doc.get("seconds") or 0
    out = dict(changed=False, done=done, what=p["what"], bytes=doc.get("bytes", 0), total=doc.get("total"),
               progress=line,
               mib_per_s=round(doc.get("bytes", 0) / 2**20 / secs, 1) if secs else 0.0)
    if done:
        out["transfer"] = doc.get("result")
    module.exit_json(**out)


if __name__ == "__main__":
    main()
