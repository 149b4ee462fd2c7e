#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job_progress
short_description: Report the progress of a long step that runs in the background on this node
version_added: 0.2.0
description:
  - Reads the progress file that a module run with C(async) keeps on this node (the senders and receivers
    of the transfer chain, M(sparkfleet.vllm.image_send), M(sparkfleet.vllm.image_receive),
    M(sparkfleet.vllm.weights_send) and M(sparkfleet.vllm.weights_receive), and the image build,
    M(sparkfleet.vllm.vllm_image)), and returns its phase, amount, rate and a RV(progress) line.
  - One call waits at most O(poll_seconds), returning early when the step ends. Run it with C(until) so
    that a long step reports as it goes; the C(sparkfleet.vllm.report) callback prints each poll's line.
  - Fails with the step's own message when it failed; when its process ended without a result (killed, or
    an error it did not report; C(async_status) then holds the error); when the amount of a phase that
    counts bytes or build steps did not grow for O(stall_seconds) (waiting for a peer is bounded by the
    step's own timeout instead); or when no progress file of this run appeared within O(start_seconds) of
    O(started_at).
  - Ansible's C(async_status) then collects the step's result.
options:
  progress_file:
    description: The step's progress file (its C(progress_file) option).
    type: path
    required: true
  session:
    description: The step's session name; a file left by an earlier step is not read as this one's.
    type: str
    required: true
  what:
    description: What the step does, for the progress line.
    type: str
    default: transfer
  started_at:
    description:
      - When the step was launched, in seconds since the epoch on the controller (the play sets it once,
        before the C(async) task). A progress file started well before it is an earlier run's and is not
        read; without it, only the O(session) tells runs apart.
    type: float
  start_seconds:
    description: Seconds after O(started_at) (or after this call began) by which the step must have written its
      progress file.
    type: int
    default: 60
  poll_seconds:
    description: Longest wait of one call.
    type: int
    default: 20
  stall_seconds:
    description: Seconds without progress, in a phase that counts, before the step counts as stalled.
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
  sparkfleet.vllm.job_progress:
    progress_file: /var/tmp/sparkfleet/image-send.json
    session: "{{ image.image_id }}"
    what: image
    started_at: "{{ launched }}"
  register: sent
  until: sent is failed or sent.done
  retries: 200
  delay: 1
"""

RETURN = r"""
done:
  description: Whether the step ended.
  returned: success
  type: bool
phase:
  description: The step's current phase (for a transfer V(sent), V(received) or V(verified)).
  returned: success
  type: str
amount:
  description: Bytes (or build steps) of the current phase done so far.
  returned: success
  type: int
total:
  description: Bytes (or steps) the phase holds, when known.
  returned: success
  type: int
mib_per_s:
  description: Average rate of the current phase so far, MiB/s (0 for a step counted in steps).
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
result:
  description: The step's own result once it is done (for a transfer, RV(transfer) holds the bytes, sha256
    and seconds).
  returned: when done
  type: dict
transfer:
  description: A transfer's bytes, sha256 and seconds once it is done.
  returned: when done and the step is a transfer
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.progress import (
    COUNTING,
    describe,
    process_gone,
    read_progress,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.waiter import WaitAborted, WaitTimeout, wait_for


def main():
    module = AnsibleModule(
        argument_spec=dict(
            progress_file=dict(type="path", required=True),
            session=dict(type="str", required=True),
            what=dict(type="str", default="transfer"),
            started_at=dict(type="float"),
            start_seconds=dict(type="int", default=60),
            poll_seconds=dict(type="int", default=20),
            stall_seconds=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    p = module.params
    began = p["started_at"] or time.time()

    def probe():
        return read_progress(p["progress_file"], p["session"], since=p["started_at"])

    def predicate(doc):
        now = time.time()
        if doc is None:
            if now - began > p["start_seconds"]:
                raise WaitAborted("no progress file %s for session %s %d s after the step was launched: it never "
                                  "started (async_status holds why)" % (p["progress_file"], p["session"], now - began))
            return False, describe(p["what"], doc)
        if doc["state"] == "failed":
            raise WaitAborted(doc.get("error") or "it failed without a message")
        if process_gone(doc):
            raise WaitAborted("its process (pid %s) ended without a result (killed, or an unreported error; "
                              "async_status holds it); last seen: %s" % (doc["pid"], describe(p["what"], doc)))
        counting = doc.get("unit") == "steps" or doc.get("phase") in COUNTING
        moved = doc.get("moved", doc.get("updated", now))
        if doc["state"] != "done" and counting and now - moved > p["stall_seconds"]:
            raise WaitAborted("no progress for %d s; last seen: %s" % (now - moved, describe(p["what"], doc)))
        return doc["state"] == "done", describe(p["what"], doc, now)

    try:
        doc, line, _unused = wait_for("%s progress" % p["what"], probe, predicate, p["poll_seconds"], 1)
    except WaitTimeout:
        doc = probe()
        line = describe(p["what"], doc, time.time())
    except WaitAborted as exc:
        module.fail_json(msg="%s failed: %s" % (p["what"], exc))
    doc = doc or {}
    done = doc.get("state") == "done"
    span = doc.get("updated", 0) - doc.get("phase_started", doc.get("updated", 0))
    bytes_done = doc.get("done", 0) if doc.get("unit", "bytes") == "bytes" else 0
    out = dict(changed=False, done=done, what=p["what"], phase=doc.get("phase"), amount=doc.get("done", 0),
               total=doc.get("total"), progress=line,
               mib_per_s=round(bytes_done / 2**20 / span, 1) if span > 0 else 0.0)
    if done:
        out["result"] = doc.get("result") or {}
        if "transfer" in out["result"] or "sha256" in out["result"]:
            out["transfer"] = out["result"].get("transfer", out["result"])
    module.exit_json(**out)


if __name__ == "__main__":
    main()
