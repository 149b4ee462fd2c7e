#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ray_node
short_description: Run this node's Ray head or Ray worker container, and wait until it has joined
version_added: 0.1.0
description:
  - Starts C(ray start --block) in a container on the host network, bound to the node's fabric IP, with the
    cluster's tuned environment. The head gets no dashboard.
  - Waits until Ray's own node table shows this node alive. A worker that does not show up in time is
    restarted, up to C(retries) times (many workers joining at once on a loaded head time out during
    startup; the playbook also limits how many join at once).
  - A worker first opens one TCP connection to the head's GCS port; when the head gives no answer at all in
    5 s (a cut link, a dropping firewall), it fails at once naming both ends, instead of retrying its join.
  - A container whose declared spec is unchanged, that runs, and whose node is alive is left alone
    (C(changed=false)). A worker's spec includes the head container's ID, so a new head restarts the workers.
options:
  role:
    description: Head or worker.
    type: str
    choices: [head, worker]
    required: true
  image:
    description: The vLLM+Ray image (by tag). Required when O(state=present).
    type: str
  node_ip:
    description: This node's fabric IP. Required when O(state=present).
    type: str
  head_ip:
    description: The head's fabric IP (workers).
    type: str
  port:
    description: GCS port of the head.
    type: int
    default: 6379
  cluster_id:
    description: Identity of the head this worker joins (the head container's ID).
    type: str
    default: ""
  gpus:
    description:
      - GPUs Ray must register for this node. Ray counts them itself, through NVML, in a container that asks
        Docker for the GPU (C(--gpus all)); a node that registers fewer fails at once, naming the node.
    type: int
    default: 1
  num_cpus:
    description: CPUs to advertise.
    type: int
  object_store_memory:
    description: Object store bytes.
    type: int
  env:
    description: Environment of the container (the planned Ray/vLLM timeouts).
    type: dict
    default: {}
  volumes:
    description: Bind mounts, C(host:container[:mode]).
    type: list
    elements: str
    default: []
  shm_size:
    description: Size of /dev/shm.
    type: str
    default: 2g
  container_name:
    description: Name of the Ray container.
    type: str
    default: sparkfleet-ray
  ray_tmp_volume:
    description:
      - Named volume for /tmp/ray, shared with the vllm serve container on the head. It is a tmpfs
        (C(exec), O(ray_tmp_size)), as the seed recipe runs Ray with C(--tmpfs /tmp/ray:exec,size=4g). Ray's
        sockets and spilled objects stay off the disk, and the vllm serve container on the head can share it.
    type: str
    default: sparkfleet-ray-tmp
  ray_tmp_size:
    description: Size of the /tmp/ray tmpfs.
    type: str
    default: 4g
  join_timeout:
    description: Seconds to wait for this node to appear alive, per attempt.
    type: int
    default: 180
  retries:
    description: Attempts before giving up.
    type: int
    default: 3
  poll_seconds:
    description:
      - Longest wait of one call. A call that returns before the node is alive says RV(done=false) and leaves
        the container starting; the next call with the same O(run_id) waits on it (or starts the next
        attempt once O(join_timeout) has passed). Run it with C(until) on RV(done) so that a slow join
        reports as it goes.
      - V(0) waits in one call until the node is alive or every attempt failed.
    type: int
    default: 0
  run_id:
    description:
      - Names this join, in a label on the container. A container started under the same O(run_id) is this
        join's own attempt, waited on; any other running container that is not alive in the table is
        restarted. Required with O(poll_seconds); empty picks a new name for a call with O(poll_seconds=0).
    type: str
    default: ""
  token:
    description:
      - The cluster's Ray token (Ray's token auth). The module writes it to O(token_path) on this node (mode
        C(0600); a missing directory is made with mode C(0700)), which the container mounts and Ray reads
        (C(RAY_AUTH_TOKEN_PATH) in O(env)); it is never put in argv or in the container's environment.
      - The file's content is not part of what is declared. To restart Ray when the token changes, put its
        digest in O(env) (the validate role's Ray env holds C(SPARKFLEET_RAY_TOKEN_SHA256)).
    type: str
  token_path:
    description: Where O(token) is written on this node. Required with O(token).
    type: path
  state:
    description: C(present) runs the node; C(absent) removes its container.
    type: str
    choices: [present, absent]
    default: present
attributes:
  check_mode:
    support: full
    details: Predicts whether the container would be (re)started (RV(restarts)) or O(token_path) rewritten;
      writes, starts and waits for nothing.
  diff_mode:
    support: full
    details:
      - The Ray container's image, command line and environment, as running and as declared; a variable named
        like a secret (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL) shows only as set or changed.
  idempotent:
    support: full
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Start the Ray head
  sparkfleet.vllm.ray_node:
    role: head
    image: "{{ image_tag }}"
    node_ip: "{{ sparkfleet_node_ip }}"
    env: "{{ tuning.env }}"
"""

RETURN = r"""
done:
  description: Whether the node is alive in the cluster's table; false when O(poll_seconds) ran out first, and in
    check mode when the container would be (re)started.
  returned: state is present
  type: bool
progress:
  description: One line for the play's output.
  returned: state is present
  type: str
  sample: "Ray worker 10.0.0.3: not in the table yet, attempt 1 of 3, 12 of 180 s; cluster has 3 alive nodes"
container_id:
  description: ID of the Ray container.
  returned: state is present and not in check mode
  type: str
restarts:
  description: Whether this join (re)starts the container (in check mode, whether it would); a rewrite of
    O(token_path) alone changes the node but restarts nothing.
  returned: state is present
  type: bool
attempts:
  description: Container starts this join needed (0 when nothing changed).
  returned: state is present
  type: int
"""

import json
import time
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, _ray, fabric, secret_file


def tmp_volume_opts(size):
    return {"type": "tmpfs", "device": "tmpfs", "o": "size=%s,exec" % size}


def container_spec(p):
    argv = _ray.start_argv(p["role"], p["node_ip"], p["port"], p["head_ip"], None, p["num_cpus"],
                           p["object_store_memory"])
    volumes = _docker.binds(p["volumes"], {p["ray_tmp_volume"]: {"bind": "/tmp/ray", "mode": "rw"}})  # noqa: S108
    env = dict(p["env"], VLLM_HOST_IP=p["node_ip"], RAY_NODE_IP_ADDRESS=p["node_ip"])
    # pid_mode host: a Ray driver finds its local raylet by looking for the raylet process, so the vllm
    # serve container on the head must see the Ray container's processes.
    spec = {"image": p["image"], "command": argv, "environment": env, "network_mode": "host",
            "ipc_mode": "host", "pid_mode": "host", "shm_size": p["shm_size"], "volumes": volumes,
            "device_requests": _docker.gpu_request(),
            "labels": {"sparkfleet.cluster": p["cluster_id"] or "head",
                       "sparkfleet.ray-tmp": json.dumps(tmp_volume_opts(p["ray_tmp_size"]), sort_keys=True)}}
    return spec


RUN_LABEL = "sparkfleet.run"
ATTEMPT_LABEL = "sparkfleet.attempt"
# What ran before this join, as its diff shows it (secrets already shown only as set), so the poll that
# ends a join of several polls still shows what it replaced.
BEFORE_LABEL = "sparkfleet.diff-before"


def observe(container, ip):
    """One look at this node: (alive, GPUs it registered, a description)."""
    container.reload()
    if container.status != "running":
        return False, 0, "container is %s" % container.status
    table = _ray.nodes(container)
    alive = _ray.node_alive(table, ip)
    n = sum(1 for x in table if x.get("Alive"))
    return alive, _ray.node_gpus(table, ip) if alive else 0, "%s %s; cluster has %d alive nodes" % (
        ip, "alive" if alive else "not in the table yet", n)


def start(cli, p, spec, digest, run_id, attempt, diff):
    labels = {RUN_LABEL: run_id, ATTEMPT_LABEL: str(attempt), BEFORE_LABEL: json.dumps(diff["before"], sort_keys=True)}
    labelled = dict(spec, labels=dict(spec["labels"], **labels))
    return _docker.replace(cli, p["container_name"], labelled, "ray-%s" % p["role"], digest=digest)


def join(module, cli, p, spec, digest, run_id, diff):
    """Start or wait on this join's container for at most poll_seconds (all of it when 0)."""
    name, ip = p["container_name"], p["node_ip"]
    began = time.monotonic()
    last = ""
    while True:
        container = _docker.current(cli, name)
        state = _docker.container_state(container)
        ours = state["exists"] and container.labels.get(RUN_LABEL) == run_id and state["spec"] == digest
        attempt = int(container.labels.get(ATTEMPT_LABEL) or 1) if ours else 0
        if ours and container.labels.get(BEFORE_LABEL):
            diff = dict(diff, before=json.loads(container.labels[BEFORE_LABEL]))
        if not ours:
            if module.check_mode:
                module.exit_json(changed=True, restarts=True, done=False, attempts=0, diff=diff,
                                 progress="Ray %s %s: would be (re)started" % (p["role"], ip))
            container, attempt = start(cli, p, spec, digest, run_id, 1, diff), 1
        try:
            alive, gpus, seen = observe(container, ip)
        except _docker.DockerFailure as exc:
            # Ray's own traceback while the raylet starts: its last line says why ("Could not find any
            # running Ray instance"), the rest is noise in a progress line.
            why = [line.strip() for line in str(exc).splitlines() if line.strip()]
            alive, gpus, seen = False, 0, "%s not in the table yet (%s)" % (ip, why[-1][:160] if why else "no answer")
        if alive:
            if gpus != p["gpus"]:
                module.fail_json(
                    msg="Ray %s on %s registered %s GPU(s), expected %d: the Ray container sees no GPU. It "
                        "asks Docker for it (--gpus all); check that the NVIDIA Container Toolkit is installed "
                        "on this node and dockerd was restarted after it (docker info lists the nvidia "
                        "runtime), and that nvidia-smi works on the host"
                        % (p["role"], ip, gpus, p["gpus"]), container_id=container.id)
            return container, attempt, True, seen, diff
        age = time.time() - _docker.started_at(container)
        if age >= p["join_timeout"] or container.status != "running":
            last = "%s\n--- last log lines ---\n%s" % (seen, _docker.logs(container, tail=25))
            if attempt >= p["retries"]:
                module.fail_json(msg="Ray %s on %s did not come up after %d attempts of %d s (head %s:%s): %s"
                                     % (p["role"], ip, p["retries"], p["join_timeout"], p["head_ip"] or ip,
                                        p["port"], last))
            container, attempt = start(cli, p, spec, digest, run_id, attempt + 1, diff), attempt + 1
            age = 0.0
        line = "Ray %s %s, attempt %d of %d, %d of %d s" % (p["role"], seen, attempt, p["retries"], age,
                                                            p["join_timeout"])
        left = p["poll_seconds"] - (time.monotonic() - began) if p["poll_seconds"] else 3
        if left <= 0:
            return container, attempt, False, line, diff
        time.sleep(min(3, left))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            role=dict(type="str", choices=["head", "worker"], required=True),
            image=dict(type="str"),
            node_ip=dict(type="str"),
            head_ip=dict(type="str"),
            port=dict(type="int", default=6379),
            cluster_id=dict(type="str", default=""),
            gpus=dict(type="int", default=1),
            num_cpus=dict(type="int"),
            object_store_memory=dict(type="int"),
            env=dict(type="dict", default={}),
            volumes=dict(type="list", elements="str", default=[]),
            shm_size=dict(type="str", default="2g"),
            container_name=dict(type="str", default="sparkfleet-ray"),
            ray_tmp_volume=dict(type="str", default="sparkfleet-ray-tmp"),
            ray_tmp_size=dict(type="str", default="4g"),
            join_timeout=dict(type="int", default=180),
            retries=dict(type="int", default=3),
            poll_seconds=dict(type="int", default=0),
            run_id=dict(type="str", default=""),
            token=dict(type="str", no_log=True),
            token_path=dict(type="path"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        required_if=[("state", "present", ["image", "node_ip"])],
        required_together=[("token", "token_path")],
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    name = p["container_name"]
    try:
        cli = _docker.connect()
        if p["state"] == "absent":
            exists = _docker.current(cli, name) is not None
            if exists and not module.check_mode:
                _docker.remove(cli, name)
            module.exit_json(changed=exists)
        if _docker.image_id(cli, p["image"]) is None:
            module.fail_json(msg="image %s is not on this node; run the image stage first" % p["image"])
        if p["role"] == "worker" and not p["head_ip"]:
            module.fail_json(msg="head_ip is required for a worker")
        if p["poll_seconds"] and not p["run_id"]:
            module.fail_json(msg="run_id is required with poll_seconds: a later poll finds its own join by it "
                                 "(set it once per run, for example to the time the join began)")
        if p["role"] == "worker":
            # Before anything asks Ray: a worker cut off from the head would retry its join for minutes, and
            # Ray's own query of a running worker would wait on the head's silence.
            answered, why = fabric.reach(p["head_ip"], p["port"])
            if not answered:
                module.fail_json(msg="this node (%s) cannot reach the Ray head %s:%s over the fabric (%s): check "
                                     "this node's firewall and its fabric link, then run the deploy again"
                                     % (p["node_ip"], p["head_ip"], p["port"], why))
        spec = container_spec(p)
        digest = _docker.spec_digest(spec)
        try:
            wrote = secret_file.write(p["token_path"], p["token"], module.check_mode) if p["token"] else False
        except OSError as exc:
            module.fail_json(msg="ray_node: writing the Ray token to %s: %s" % (p["token_path"], exc))
        existing = _docker.current(cli, name)
        state = _docker.container_state(existing)
        run_id = p["run_id"] or uuid.uuid4().hex
        diff = _docker.container_diff(cli, existing, spec)
        if not _docker.needs_change(state, digest) and existing.labels.get(RUN_LABEL) != run_id:
            try:
                if _ray.node_alive(_ray.nodes(existing), p["node_ip"]):
                    module.exit_json(changed=wrote, restarts=False, done=True, container_id=existing.id, attempts=0,
                                     progress="Ray %s %s: alive" % (p["role"], p["node_ip"]))
            except _docker.DockerFailure:
                pass  # running but not answering: restart below
            if not module.check_mode:
                _docker.remove(cli, name)  # current, but not alive and not this join's own: start it anew
        if not module.check_mode:
            _docker.ensure_volume(cli, p["ray_tmp_volume"], tmp_volume_opts(p["ray_tmp_size"]))
        container, attempt, done, line, diff = join(module, cli, p, spec, digest, run_id, diff)
        # Changed: this join (run_id) started the container, in this call or an earlier poll of it.
        module.exit_json(changed=True, restarts=True, done=done, container_id=container.id, attempts=attempt,
                         progress=line, diff=diff)
    except _docker.DockerFailure as exc:
        module.fail_json(msg="ray_node: %s" % exc)


if __name__ == "__main__":
    main()
