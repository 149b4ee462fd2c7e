#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_boot
short_description: Follow the boot of a vllm serve container, one short poll at a time
version_added: 0.1.0
description:
  - Reads the serve container's startup log from where the previous poll stopped and returns where the boot
    stands (RV(stage)), one of engine starting, Ray placement, weights loading (k of n shards), profiling and
    graph capture, serving.
  - Returns as soon as the stage changes, or after O(poll_seconds). Run it with C(until) so that a long boot
    reports its progress instead of blocking the play in silence; the C(sparkfleet.vllm.report) callback
    prints each poll's RV(progress).
  - Fails at once, with the stage reached and the last log lines, when the container exits, when vLLM logs
    an engine failure or a dead Ray worker, when the boot outlasts O(startup_timeout) (counted from the
    container's start), or when the head's memory watchdog fires. In the last two cases the container is
    stopped (not in check mode), so that the next deploy starts a fresh boot.
  - Between polls it keeps the log reader's state and the log position in a file under O(state_dir), keyed
    by the container's ID, so no poll reads the log again from its start.
options:
  container_name:
    description: Name of the serve container.
    type: str
    default: sparkfleet-vllm
  host:
    description: The node's address, for messages.
    type: str
    default: this node
  startup_timeout:
    description: Seconds the boot may take, from the container's start.
    type: int
    default: 7200
  placement_timeout:
    description:
      - Seconds vLLM may log that it waits for its Ray placement group (one GPU bundle per rank). The Ray gate
        has just found every node and GPU registered, so a wait this long means the head's Ray cannot use a
        node it lists (its raylet does not answer the head) or something else holds the GPUs. The boot is
        stopped and the poll fails naming it, instead of waiting for O(startup_timeout). C(0) turns it off.
    type: int
    default: 300
  poll_seconds:
    description: Longest time one poll waits for the stage to change before it returns.
    type: int
    default: 20
  min_free_memory_mib:
    description:
      - Head memory watchdog. At every read the head's free memory (MemAvailable, bounded by any cgroup
        limit) is compared with this floor; when it stays below for O(memory_grace) seconds, the serve
        container is stopped and the poll fails naming the figures, before the head thrashes (a starved
        Spark head stretches a 30 min boot to 2 h). C(0) turns the watchdog off.
    type: int
    default: 2048
  memory_grace:
    description: Seconds free memory may stay below O(min_free_memory_mib) before the watchdog stops the boot.
    type: int
    default: 15
  state_dir:
    description: Directory on the node where the follower keeps its position between polls.
    type: path
    default: /var/tmp/sparkfleet
attributes:
  check_mode:
    support: full
    details: Reads only in check mode; the follower's position is not saved and a starving or overdue boot is
      reported but not stopped.
  diff_mode:
    support: N/A
    details: Changes nothing.
  idempotent:
    support: full
    details: Changes the container only to stop a starving or overdue boot, which it reports as a failure.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Follow the boot until vLLM serves
  sparkfleet.vllm.vllm_boot:
    container_name: sparkfleet-vllm
    startup_timeout: 7200
  register: boot
  until: boot is failed or boot.done
  retries: 400
  delay: 1
"""

RETURN = r"""
done:
  description: Whether vLLM serves (uvicorn's C(Application startup complete.) was logged).
  returned: always
  type: bool
stage:
  description: Where the boot stands.
  returned: when the container exists
  type: str
  sample: weights loading, 3 of 8 shards
progress:
  description: One line for the play's output, the stage and the seconds since the container started.
  returned: success
  type: str
  sample: "vllm serve on 192.168.0.10: weights loading, 3 of 8 shards (412 s)"
elapsed_s:
  description: Seconds since the container started.
  returned: success
  type: float
boot:
  description:
    - Facts read from the startup log so far (phases reached, load seconds, KV cache, kernels chosen);
      C(boot_s) once vLLM serves, the seconds from the container's start to the line that says so.
  returned: when the container exists
  type: dict
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, memory, vllm_logs
from ansible_collections.sparkfleet.vllm.plugins.module_utils.waiter import WaitAborted, WaitTimeout, wait_for


class Follower:
    """One poll: the saved position and reader state, advanced by reading only the new log lines."""

    def __init__(self, container, saved, watchdog, started):
        same = saved.get("id") == container.id
        self.container, self.watchdog, self.started = container, watchdog, started
        self.reader = vllm_logs.LogReader(saved.get("reader") if same else None)
        self.cursor = saved.get("cursor") if same else None
        self.watchdog.low_since = saved.get("low_since") if same else None
        self.served_at = saved.get("served_at") if same else None

    def saved(self):
        return {"id": self.container.id, "reader": self.reader.state(), "cursor": self.cursor,
                "low_since": self.watchdog.low_since, "served_at": self.served_at}

    def probe(self):
        self.container.reload()
        entries, self.cursor = _docker.logs_after(self.container, self.cursor)
        for ns, text in entries:
            self.reader.feed(text)
            if self.served_at is None and "app_started" in self.reader.raw["phases"]:
                self.served_at = ns / 1e9  # when vLLM logged it serves, by Docker's own clock
        facts = self.reader.facts()
        return {"status": self.container.status, "facts": facts, "free": memory.read()["available_bytes"],
                "now": time.time()}


def poll(follower, first_stage, poll_seconds, deadline_s, interval=2, check_mode=False, placement_s=0):
    """Read until the stage changes, vLLM serves, or ``poll_seconds`` pass; raise WaitAborted on a failure.

    A boot that starves the head or outlasts ``deadline_s`` is stopped (never in check mode), so that the
    next deploy starts a fresh one instead of finding the stuck container and failing on it again.
    """

    def stop():
        if not check_mode:
            follower.container.stop(timeout=10)
        return "the boot was stopped" if not check_mode else "check mode: the boot was left running"

    def predicate(obs):
        facts = obs["facts"]
        if facts["errors"]:
            raise WaitAborted("vLLM reported: %s" % "; ".join(facts["errors"]))
        if obs["status"] != "running":
            raise WaitAborted("the serve container is %s" % obs["status"])
        if "app_started" in facts["phases"]:
            return True, facts["stage"]
        low = follower.watchdog.observe(obs["free"], obs["now"])
        if low:
            raise WaitAborted(
                "memory watchdog: %s while %s; %s before the head thrashes. Free memory on the head (stop other "
                "processes, drop caches), or lower --gpu-memory-utilization / --max-model-len in the recipe"
                % (low, facts["stage"], stop()))
        waited = facts.get("pg_waiting_s") or 0
        if placement_s and waited >= placement_s and "load_started" not in facts["phases"]:
            raise WaitAborted(
                "vLLM has waited %d s for its Ray placement group (placement_timeout %d s) although the gate found "
                "every node and GPU of the replica registered: the head's Ray cannot use a node it lists (its "
                "raylet does not answer the head) or something else holds the GPUs. Run `ray status` in the "
                "head's Ray container (Pending Demands), then run the deploy again; if it recurs, restart the "
                "replica's Ray (teardown.yml, then the deploy); %s" % (waited, placement_s, stop()))
        if obs["now"] - follower.started > deadline_s:
            raise WaitAborted("not serving %d s after the container started (startup_timeout); the boot stands "
                              "at: %s; %s" % (deadline_s, facts["stage"], stop()))
        return facts["stage"] != first_stage, facts["stage"]

    try:
        obs, _unused, _unused = wait_for("vllm serve", follower.probe, predicate, poll_seconds, interval)
        return obs["facts"]
    except WaitTimeout:
        return follower.reader.facts()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container_name=dict(type="str", default="sparkfleet-vllm"),
            host=dict(type="str", default="this node"),
            startup_timeout=dict(type="int", default=7200),
            placement_timeout=dict(type="int", default=300),
            poll_seconds=dict(type="int", default=20),
            min_free_memory_mib=dict(type="int", default=2048),
            memory_grace=dict(type="int", default=15),
            state_dir=dict(type="path", default="/var/tmp/sparkfleet"),  # noqa: S108
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    path = os.path.join(p["state_dir"], "%s.boot.json" % p["container_name"])
    try:
        container = _docker.current(_docker.connect(), p["container_name"])
        if container is None:
            module.fail_json(msg="vllm serve on %s: no container %s to follow; run vllm_server first"
                                 % (p["host"], p["container_name"]), done=False)
        try:
            with open(path) as fh:
                saved = json.load(fh)
        except (OSError, ValueError):
            saved = {}
        watchdog = memory.Watchdog(p["min_free_memory_mib"] * 2**20, p["memory_grace"])
        follower = Follower(container, saved, watchdog, _docker.started_at(container))
        first = follower.reader.facts()["stage"] if saved.get("id") == container.id else None
        try:
            facts = poll(follower, first, p["poll_seconds"], p["startup_timeout"], check_mode=module.check_mode,
                         placement_s=p["placement_timeout"])
        except WaitAborted as exc:
            facts = follower.reader.facts()
            module.fail_json(msg="vllm serve on %s failed to boot: %s\n--- last log lines ---\n%s"
                                 % (p["host"], exc, _docker.logs(container, tail=40)),
                             done=False, stage=facts["stage"], boot=facts)
        elapsed = round(time.time() - follower.started, 1)
        done = "app_started" in facts["phases"]
        state = follower.saved()
        if done and follower.served_at:  # from the container's start to the line that says it serves
            facts["boot_s"] = round(follower.served_at - follower.started, 1)
        if not module.check_mode:
            os.makedirs(p["state_dir"], exist_ok=True)
            tmp = path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(state, fh)
            os.replace(tmp, path)
    except _docker.DockerFailure as exc:
        module.fail_json(msg="vllm_boot: %s" % exc, done=False)
    module.exit_json(changed=False, done=done, stage=facts["stage"], elapsed_s=elapsed, boot=facts,
                     progress="vllm serve on %s: %s (%d s)" % (p["host"], facts["stage"], elapsed))


if __name__ == "__main__":
    main()
