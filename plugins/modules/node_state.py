#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_state
short_description: Read what the collection runs on this node, for status.yml and diagnostics
version_added: 0.3.0
description:
  - Reads the state of the named containers (running or not, exit code, when they started and stopped).
  - On the Ray head, with O(ray_table), reads Ray's node table (alive and dead nodes, GPUs) through the Ray
    container, within O(timeout) seconds; a head that does not answer is reported, not waited on.
  - With O(server_container), reads the server's log (the errors it logged, the stage it reached, which node
    each Ray rank ran on) and, with O(health_host), asks its C(/health).
  - Changes nothing; M(sparkfleet.vllm.cluster_status) judges what every node reported.
options:
  containers:
    description: Names of the containers to read.
    type: list
    elements: str
    default: [sparkfleet-ray, sparkfleet-vllm]
  ray_table:
    description: Read Ray's node table through O(ray_container) (on the head).
    type: bool
    default: false
  ray_container:
    description: The Ray container.
    type: str
    default: sparkfleet-ray
  server_container:
    description: The vllm serve container whose log is read; empty for none.
    type: str
    default: ""
  health_host:
    description: Ask the server's C(/health) at this address, on the port its C(vllm serve) command line names
      (C(--port), else vLLM's 8000); empty to skip the probe.
    type: str
    default: ""
  only_if_head:
    description:
      - Read Ray's table (O(ray_table)), the server (O(server_container)) and its health (O(health_host)) only
        when this node's Ray container is a Ray head. With replicas every replica's head is one, and the
        playbook need not know which nodes they are.
    type: bool
    default: false
  timeout:
    description: Seconds for the Ray table and for the health probe each.
    type: int
    default: 20
  reach_port:
    description: "With O(ray_table): the port (Ray's node manager) on which the head asks each node Ray lists
      alive whether it answers over the fabric at all, 5 s each, all at once; C(0) asks none."
    type: int
    default: 6700
  balancer_container:
    description: The balancer's container on this node, whose servers (each replica's state in HAProxy, and
      its admin state) are read through HAProxy's runtime API; empty for none.
    type: str
    default: ""
  log_lines:
    description: How many of the server log's last lines to read.
    type: int
    default: 3000
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the head
  sparkfleet.vllm.node_state:
    ray_table: true
    server_container: sparkfleet-vllm
    health_host: 10.0.0.1
  register: head_state
"""

RETURN = r"""
state:
  description: What this node runs.
  returned: always
  type: dict
  contains:
    containers:
      description: "{name: {exists, running, status, exit_code, oom_killed, error, started_at, finished_at, image}}"
      type: dict
    ray:
      description: Ray's node table summed up (alive, dead, gpus, alive_ips, dead_ips), or C({error}); only with
        O(ray_table).
      type: dict
    server:
      description: From the server's log, its C(errors), C(stage) and C(rank_ips); only with O(server_container).
      type: dict
    health:
      description: C({ok, status, url}) or C({ok, error, url}); only with O(health_host) and a server container.
      type: dict
    balancer:
      description: With O(balancer_container), C({servers}) (each with C(svname), C(status), C(check_status) and
        C(admin_state)) or C({error}).
      type: dict
    ray_role:
      description: "What this node's Ray container was started as: C({role: head}), C({role: worker, head_ip}),
        or C({role: null}) without one."
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import (
    _docker,
    _http,
    _ray,
    fabric,
    haproxy,
    ray_state,
    vllm_logs,
)


def _container(cli, name):
    container = _docker.current(cli, name)
    if container is None:
        return {"exists": False, "running": False}
    container.reload()
    st = container.attrs.get("State") or {}
    finished = st.get("FinishedAt") or ""
    return {"exists": True, "running": container.status == "running", "status": container.status,
            "exit_code": st.get("ExitCode"), "oom_killed": bool(st.get("OOMKilled")), "error": st.get("Error") or "",
            "started_at": st.get("StartedAt"), "finished_at": "" if finished.startswith("0001-") else finished,
            "image": container.attrs.get("Image")}


def _port(attrs):
    """The port the server's command line gives vllm serve (--port N or --port=N), else vLLM's default."""
    argv = list((attrs.get("Config") or {}).get("Cmd") or [])
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--port="):
            return int(arg.split("=", 1)[1])
    return 8000


def ray_role(attrs):
    """Pure: from a Ray container's command line, a head or a worker and the head it joins."""
    argv = list((attrs.get("Config") or {}).get("Cmd") or [])
    if "--head" in argv:
        return {"role": "head"}
    for i, arg in enumerate(argv):
        address = argv[i + 1] if arg == "--address" and i + 1 < len(argv) else (
            arg.split("=", 1)[1] if arg.startswith("--address=") else None)
        if address:
            return {"role": "worker", "head_ip": address.rsplit(":", 1)[0]}
    return {"role": None}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            containers=dict(type="list", elements="str", default=["sparkfleet-ray", "sparkfleet-vllm"]),
            ray_table=dict(type="bool", default=False),
            ray_container=dict(type="str", default="sparkfleet-ray"),
            server_container=dict(type="str", default=""),
            health_host=dict(type="str", default=""),
            timeout=dict(type="int", default=20),
            reach_port=dict(type="int", default=6700),
            log_lines=dict(type="int", default=3000),
            only_if_head=dict(type="bool", default=False),
            balancer_container=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    state = {}
    health_url = None
    try:
        cli = _docker.connect(timeout=p["timeout"] + 10)
        state["containers"] = {name: _container(cli, name) for name in p["containers"]}
        own_ray = _docker.current(cli, p["ray_container"])
        state["ray_role"] = ray_role(own_ray.attrs) if own_ray is not None else {"role": None}
        as_head = not p["only_if_head"] or state["ray_role"]["role"] == "head"
        if p["ray_table"] and as_head:
            ray = _docker.current(cli, p["ray_container"])
            if ray is None or ray.status != "running":
                state["ray"] = {"error": "the Ray container %s is not running" % p["ray_container"]}
            else:
                try:
                    state["ray"] = ray_state.summarize(_ray.nodes(ray, timeout=p["timeout"]))
                    # Ray lists a silent node alive for minutes; the head asks each one over the fabric.
                    state["ray"]["silent"] = fabric.silent(state["ray"]["alive_ips"], p["reach_port"])
                except _docker.DockerFailure as exc:
                    state["ray"] = {"error": str(exc)[-600:]}
        if p["server_container"] and as_head:
            server = _docker.current(cli, p["server_container"])
            if server is not None:
                facts = vllm_logs.parse(_docker.logs(server, tail=p["log_lines"]))
                state["server"] = {"errors": facts["errors"], "stage": facts["stage"], "rank_ips": facts["rank_ips"]}
                if p["health_host"]:
                    health_url = "http://%s:%d/health" % (p["health_host"], _port(server.attrs))
        if p["balancer_container"]:
            balancer = _docker.current(cli, p["balancer_container"])
            try:
                state["balancer"] = ({"servers": haproxy.read(balancer)} if balancer is not None and
                                     balancer.status == "running" else
                                     {"error": "the balancer container %s is not running" % p["balancer_container"]})
            except (ValueError, _docker.DockerFailure) as exc:
                state["balancer"] = {"error": str(exc)[-600:]}
    except _docker.DockerFailure as exc:
        module.fail_json(msg="node_state: %s" % exc, state=state)
    if health_url:
        try:
            status, _body = _http.request(health_url, timeout=p["timeout"])
            state["health"] = {"ok": status == 200, "status": status, "url": health_url}
        except Exception as exc:  # noqa: BLE001 (any failure to answer is the finding itself)
            state["health"] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc), "url": health_url}
    module.exit_json(changed=False, state=state)


if __name__ == "__main__":
    main()
