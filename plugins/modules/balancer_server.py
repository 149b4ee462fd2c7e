#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: balancer_server
short_description: Set the balancer's replicas ready, draining or in maintenance, and read their state
version_added: 0.3.0
description:
  - Talks to the runtime API of the HAProxy balancer that M(sparkfleet.vllm.balancer) runs on this node
    (C(docker exec) and C(socat) on its admin socket). Nothing is restarted or reloaded.
  - V(drain) sends a server no new requests while the requests it holds finish; V(maint) takes it out of
    the backend (the requests it holds still finish); V(ready) gives it traffic again once its health check
    passes. A rolling change of a replica is drain, wait until it holds no request (O(wait_drained)), change
    it, ready, wait until it is UP (O(wait_up)).
  - Reads the servers' admin states first; only a server whose state differs is set. With O(states={}) it
    only reads.
  - The states live in the running HAProxy; M(sparkfleet.vllm.balancer) keeps them over a reload and drops
    them when it recreates the container.
options:
  name:
    description: Name of the balancer container.
    type: str
    default: sparkfleet-balancer
  backend:
    description: The HAProxy backend of the replicas (the one M(sparkfleet.vllm.balancer) configures).
    type: str
    default: replicas
  states:
    description:
      - The admin state each server must have, by server name; V(ready), V(drain) or V(maint). A name the
        backend does not have fails the task, naming the servers it has.
    type: dict
    default: {}
  wait_drained:
    description:
      - Seconds to wait, after setting them, until every server of O(states) in V(drain) or V(maint) holds no
        session. On timeout the task fails naming each server and its open sessions. V(0) does not wait.
    type: int
    default: 0
  wait_up:
    description:
      - Seconds to wait, after setting them, until every server of O(states) in V(ready) is UP (its health
        check passed). On timeout the task fails naming each server, its state and its last check. V(0) does
        not wait.
    type: int
    default: 0
  keep_serving:
    description:
      - Before taking any server out (V(drain) or V(maint)), require another server of the backend that is UP
        and V(ready); without one, fail before changing anything, naming each server's state, because the
        endpoint would answer nothing. A rolling redeploy sets it.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reads the servers' states and predicts which would change; sets and waits for nothing.
  diff_mode:
    support: full
    details: The admin state of each server named in O(states), before and after.
  idempotent:
    support: full
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take replica-1 out of the rotation once its requests are done
  sparkfleet.vllm.balancer_server:
    states:
      replica-1: drain
    wait_drained: 1800

- name: Put replica-1 back and wait until its health check passes
  sparkfleet.vllm.balancer_server:
    states:
      replica-1: ready
    wait_up: 300

- name: Read the servers' state
  sparkfleet.vllm.balancer_server:
  register: balancer
"""

RETURN = r"""
servers:
  description:
    - The backend's servers as HAProxy's C(show stat) reports them, after any change and wait, with their
      admin state (V(ready), V(drain), V(maint)). C(scur) is the number of sessions a server holds.
  returned: always
  type: list
  elements: dict
  sample:
    - svname: replica-1
      pxname: replicas
      addr: 172.29.0.20:8000
      status: DRAIN
      check_status: L7OK
      admin_state: drain
      scur: 0
changes:
  description: The servers whose admin state was set (in check mode, would be), with the state they had.
  returned: always
  type: dict
  sample: {"replica-1": {"before": "ready", "after": "drain"}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, haproxy, waiter


def runtime(container):
    """``ask(command) -> reply`` on the runtime API of the balancer in ``container`` (docker exec + socat)."""
    return lambda command: _docker.exec_text(container, haproxy.runtime_argv(command),
                                             what="%s on the runtime API" % command)


def observe(container, backend):
    try:
        return haproxy.observe(runtime(container), backend)
    except ValueError as exc:
        raise _docker.DockerFailure("reading backend %s in %s: %s" % (backend, container.name, exc)) from None


def wait(module, container, backend, names, timeout, predicate, what, changes):
    try:
        waiter.wait_for(what, lambda: observe(container, backend), lambda rows: predicate(rows, names), timeout, 1)
    except waiter.WaitTimeout as exc:
        module.fail_json(msg="balancer_server: %s after %d s: %s" % (what, timeout, exc.last), changed=bool(changes),
                         changes=changes, servers=observe(container, backend))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", default="sparkfleet-balancer"),
            backend=dict(type="str", default=haproxy.BACKEND),
            states=dict(type="dict", default={}),
            wait_drained=dict(type="int", default=0),
            wait_up=dict(type="int", default=0),
            keep_serving=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    states = p["states"]
    try:
        haproxy.server_commands(p["backend"], states)
    except ValueError as exc:
        module.fail_json(msg="balancer_server: %s" % exc)
    try:
        cli = _docker.connect()
        container = _docker.current(cli, p["name"])
        if not _docker.container_state(container)["running"]:
            module.fail_json(msg="balancer_server: the balancer container %s is not running on this node (%s); "
                                 "run sparkfleet.vllm.balancer first"
                                 % (p["name"], container.status if container else "no such container"))
        servers = observe(container, p["backend"])
        admin = {s["svname"]: s["admin_state"] for s in servers}
        unknown = sorted(set(states) - set(admin))
        if unknown:
            module.fail_json(msg="balancer_server: backend %s of %s has no server %s; it has: %s"
                                 % (p["backend"], p["name"], ", ".join(unknown), ", ".join(sorted(admin)) or "none"),
                             servers=servers)
        leaving = {n for n, s in states.items() if s in ("drain", "maint")}
        if p["keep_serving"] and leaving:
            ok, why = haproxy.serving_without(servers, leaving)
            if not ok:
                module.fail_json(msg="balancer_server: %s not taken out of %s: %s, so the endpoint would answer "
                                     "nothing; bring another replica back first (deploy.yml heals one that is "
                                     "down and puts every replica back in the balancer)"
                                     % (", ".join(sorted(leaving)), p["backend"], why), servers=servers)
        changes = {n: {"before": admin[n], "after": s} for n, s in sorted(states.items()) if admin[n] != s}
        result = {"changed": bool(changes), "changes": changes}
        if changes:
            result["diff"] = {"before": {n: admin[n] for n in sorted(states)}, "after": dict(sorted(states.items())),
                              "before_header": "%s backend %s" % (p["name"], p["backend"]),
                              "after_header": "%s backend %s" % (p["name"], p["backend"])}
        if module.check_mode:
            module.exit_json(servers=servers, **result)
        ask = runtime(container)
        for command in haproxy.server_commands(p["backend"], {n: c["after"] for n, c in changes.items()}):
            error = haproxy.reply_error(ask(command))
            if error:
                module.fail_json(msg="balancer_server: %s: %s" % (command, error), **result)
        draining = sorted(n for n, s in states.items() if s in ("drain", "maint"))
        if p["wait_drained"] and draining:
            wait(module, container, p["backend"], draining, p["wait_drained"], haproxy.open_sessions,
                 "sessions still open on the drained servers", changes)
        ready = sorted(n for n, s in states.items() if s == "ready")
        if p["wait_up"] and ready:
            wait(module, container, p["backend"], ready, p["wait_up"], haproxy.not_up, "not every server is UP",
                 changes)
        servers = observe(container, p["backend"]) if changes or draining or ready else servers
    except _docker.DockerFailure as exc:
        module.fail_json(msg="balancer_server: %s" % exc)
    module.exit_json(servers=servers, **result)


if __name__ == "__main__":
    main()
