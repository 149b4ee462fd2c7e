#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: balancer
short_description: Run the HAProxy load balancer in front of the vLLM replicas on this node
version_added: 0.3.0
description:
  - Runs HAProxy in HTTP mode in a container on the host network. It listens on O(port) and spreads requests
    over the replicas (least connections first); each replica is a Ray cluster of its own whose head serves
    the OpenAI API. Requests, their headers (C(Authorization) with the API key) included, pass through as
    clients sent them.
  - A replica takes traffic while C(GET) O(health_path) answers 200; two failed checks 2 s apart take it out,
    two passed checks bring it back. A request is retried on another replica only when it never reached one
    or one closed the connection without answering, never on a timeout, so a completion is never generated
    twice.
  - The image is built on this node from O(base_image) with the distribution's C(haproxy) and C(socat)
    packages, so no HAProxy image is pulled from a registry. Its tag is a digest of the base image's ID and
    the Dockerfile; an image with that tag is reused.
  - The configuration is written to C(<config_dir>/haproxy.cfg) atomically, after C(haproxy -c) accepted it
    in a throwaway container of the image; a configuration that HAProxy refuses fails the task and leaves
    the live file and the running balancer as they were.
  - A new image recreates the container. A new configuration alone reloads it (C(SIGUSR2) to the HAProxy
    master); new workers take new connections while the old ones finish theirs, so no request is dropped.
    The admin states set with M(sparkfleet.vllm.balancer_server) (drain, maint) are set again after a
    reload, on the servers that the new configuration still has. A recreated container starts with every
    server ready.
options:
  name:
    description: Name of the balancer container.
    type: str
    default: sparkfleet-balancer
  base_image:
    description:
      - The image the balancer image is built from, a Debian or Ubuntu one with C(apt-get). It is pulled
        when it is not on this node (the build then installs packages from the distribution's mirrors).
    type: str
    default: debian:bookworm-slim
  port:
    description: Port the balancer listens on, on every address of this node. Required when O(state=present).
    type: int
  servers:
    description:
      - The replicas, in the order of the configuration. Required when O(state=present).
    type: list
    elements: dict
    suboptions:
      name:
        description: The server's name in HAProxy (letters, digits, C(_), C(.), C(-)), unique.
        type: str
        required: true
      address:
        description: "The replica's OpenAI API, C(host:port) (for example C(172.29.0.10:8000))."
        type: str
        required: true
  health_path:
    description: Path of the health check; a replica is UP while it answers 200.
    type: str
    default: /health
  config_dir:
    description:
      - Directory on this node that holds C(haproxy.cfg); mounted read-only into the container.
    type: path
    default: /etc/sparkfleet/balancer
  wait_timeout:
    description:
      - Seconds to wait until every server is UP (its last health check passed). On timeout the task fails
        naming each server that is not UP, its state and its last check. Servers that were set to drain or
        maint on purpose are not waited for.
      - V(0) does not wait; RV(servers) is then one look at the servers.
    type: int
    default: 0
  state:
    description: C(present) runs the balancer; C(absent) removes its container (the image and the configuration stay).
    type: str
    choices: [present, absent]
    default: present
attributes:
  check_mode:
    support: full
    details:
      - Predicts whether the image would be built, the configuration written, and the container created,
        recreated or reloaded; builds, writes, starts and waits for nothing.
  diff_mode:
    support: full
    details:
      - The old and the new C(haproxy.cfg), and when the container is (re)created its image and command.
  idempotent:
    support: full
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Balance the OpenAI API over two replicas
  sparkfleet.vllm.balancer:
    port: 8080
    servers:
      - name: replica-0
        address: 172.29.0.10:8000
      - name: replica-1
        address: 172.29.0.20:8000
    wait_timeout: 60

- name: Remove the balancer
  sparkfleet.vllm.balancer:
    state: absent
"""

RETURN = r"""
image:
  description: The balancer image's tag (C(unknown) in check mode when the base image is not on this node).
  returned: state is present
  type: str
  sample: sparkfleet-balancer:3f2a9c0d41b7e865
config_path:
  description: Path of the live configuration on this node.
  returned: state is present
  type: str
  sample: /etc/sparkfleet/balancer/haproxy.cfg
container_id:
  description: ID of the balancer container; empty in check mode when it would be (re)created.
  returned: state is present
  type: str
built:
  description: Whether the image was built (in check mode, whether it would be).
  returned: state is present
  type: bool
reloaded:
  description: Whether the running HAProxy was reloaded with a new configuration (in check mode, would be).
  returned: state is present
  type: bool
servers:
  description:
    - The servers as HAProxy's C(show stat) reports them (after the wait, with O(wait_timeout)), with their
      admin state. Empty in check mode when the container would be (re)created.
  returned: state is present
  type: list
  elements: dict
  sample:
    - svname: replica-0
      pxname: replicas
      addr: 172.29.0.10:8000
      status: UP
      check_status: L7OK
      admin_state: ready
      scur: 3
"""

import io
import json
import os
import re
import tarfile
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, haproxy, waiter

CONFIG_LABEL = "sparkfleet.balancer.config"
IMAGE_LABEL = "sparkfleet.balancer.image"
# Which configuration the running container loaded last: a container's labels cannot change after it is
# created, so a reload is recorded here, beside the configuration.
LOADED = ".loaded.json"
STEP = re.compile(r"^Step (\d+/\d+) : (.*)")
RELOAD_TIMEOUT = 30
ANSWER_TIMEOUT = 15


def runtime(container):
    """``ask(command) -> reply`` on the runtime API of the balancer in ``container`` (docker exec + socat)."""
    return lambda command: _docker.exec_text(container, haproxy.runtime_argv(command),
                                             what="%s on the runtime API" % command)


def observe(container):
    try:
        return haproxy.observe(runtime(container))
    except ValueError as exc:
        raise _docker.DockerFailure(str(exc)) from None


def build_context(text):
    buf = io.BytesIO()
    data = text.encode()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def build(cli, tag, text):
    log, error, step = [], None, "the start of the build"
    try:
        for chunk in cli.api.build(fileobj=build_context(text), custom_context=True, tag=tag, rm=True, forcerm=True,
                                   pull=False, network_mode="host", decode=True):
            if "stream" in chunk:
                log.append(chunk["stream"])
                found = STEP.match(chunk["stream"].strip())
                if found:
                    step = "step %s (%s)" % (found.group(1), found.group(2)[:160])
            if "error" in chunk:
                error = chunk["error"]
    except _docker.DockerException as exc:
        error = str(exc)
    if error:
        raise _docker.DockerFailure("building the balancer image %s on this node failed at %s: %s\n"
                                    "--- last lines of the build ---\n%s"
                                    % (tag, step, error.strip(), "".join(log)[-2000:]))


def base_image_id(cli, ref, check_mode):
    found = _docker.image_id(cli, ref)
    if found or check_mode:
        return found
    try:
        cli.images.pull(ref)
    except _docker.DockerException as exc:
        raise _docker.DockerFailure("pulling the base image %s on this node: %s (where the node reaches no "
                                    "registry, load it there with docker load)" % (ref, exc)) from exc
    return _docker.image_id(cli, ref)


def read_text(path):
    try:
        with open(path) as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def write_temp(directory, prefix, text):
    """A new file in ``directory`` (mode 0644) holding ``text``, flushed to disk; its path."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=".new")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def publish(tmp, path):
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def check_config(cli, image, config_dir, filename):
    """(exit status, output) of ``haproxy -c`` on ``filename`` of ``config_dir``, in a throwaway container."""
    try:
        box = cli.containers.run(image, command=["haproxy", "-c", "-f", "%s/%s" % (haproxy.MOUNT, filename)],
                                 detach=True, network_mode="host",
                                 volumes={config_dir: {"bind": haproxy.MOUNT, "mode": "ro"}},
                                 labels={_docker.ROLE_LABEL: "balancer-config-check"})
    except _docker.DockerException as exc:
        raise _docker.DockerFailure("starting the configuration check (haproxy -c) from %s: %s" % (image, exc)) from exc
    try:
        status = box.wait(timeout=120).get("StatusCode")
        out = box.logs(stdout=True, stderr=True).decode(errors="replace")
    except _docker.DockerException as exc:
        raise _docker.DockerFailure("running the configuration check (haproxy -c): %s" % exc) from exc
    finally:
        try:
            box.remove(force=True)
        except _docker.DockerException:
            pass
    return status, out


def loaded_config(config_dir, container):
    """Digest of the configuration the running container loaded last."""
    try:
        with open(os.path.join(config_dir, LOADED)) as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        record = {}
    if isinstance(record, dict) and record.get("container_id") == container.id:
        return record.get("config_digest")
    return container.labels.get(CONFIG_LABEL)


def record_loaded(config_dir, container_id, digest):
    record = json.dumps({"container_id": container_id, "config_digest": digest}, sort_keys=True) + "\n"
    publish(write_temp(config_dir, LOADED + ".", record), os.path.join(config_dir, LOADED))


def worker_pid(container):
    for line in runtime(container)("show info").splitlines():
        if line.startswith("Pid:"):
            return line.split(":", 1)[1].strip()
    raise _docker.DockerFailure("show info in %s printed no Pid" % container.name)


def reload(container, names):
    """SIGUSR2 to the HAProxy master, and wait until a new worker answers; the drain and maint states
    that the old worker had are set again on the servers that remain."""
    kept = {s["svname"]: s["admin_state"] for s in observe(container)
            if s["svname"] in names and s["admin_state"] in ("drain", "maint")}
    before = worker_pid(container)
    try:
        container.kill(signal="SIGUSR2")
    except _docker.DockerException as exc:
        raise _docker.DockerFailure("sending SIGUSR2 to %s: %s" % (container.name, exc)) from exc
    try:
        waiter.wait_for("reload of HAProxy in %s" % container.name, lambda: worker_pid(container),
                        lambda pid: (pid != before, "worker %s (before the reload: %s)" % (pid, before)),
                        RELOAD_TIMEOUT, 0.5)
    except waiter.WaitTimeout as exc:
        raise _docker.DockerFailure("%s; the old configuration stays in effect. Last log lines:\n%s"
                                    % (exc, _docker.logs(container, tail=20))) from None
    ask = runtime(container)
    for command in haproxy.server_commands(haproxy.BACKEND, kept):
        error = haproxy.reply_error(ask(command))
        if error:
            raise _docker.DockerFailure("%s after the reload: %s" % (command, error))


def answer(container, names, timeout):
    """The servers once the runtime API answers, and with ``timeout`` once every server in ``names`` that is
    not drained or in maintenance on purpose is UP."""
    if timeout:
        what, wait_s = "balancer servers UP", timeout

        def predicate(servers):
            admin = {s["svname"]: s["admin_state"] for s in servers}
            return haproxy.not_up(servers, [n for n in names if admin.get(n) not in ("drain", "maint")])
    else:
        what, wait_s = "balancer runtime API of %s" % container.name, ANSWER_TIMEOUT

        def predicate(servers):
            return True, "answers"
    try:
        servers, _last, _elapsed = waiter.wait_for(what, lambda: observe(container), predicate, wait_s, 1)
    except waiter.WaitTimeout as exc:
        if timeout:
            raise _docker.DockerFailure("not every server is UP after %d s: %s" % (timeout, exc.last)) from None
        container.reload()
        raise _docker.DockerFailure("the balancer in %s (%s) does not answer on its runtime API after %d s (%s). "
                                    "Last log lines:\n%s" % (container.name, container.status, wait_s, exc.last,
                                                             _docker.logs(container, tail=20))) from None
    return servers


def container_spec(p, tag, image_id):
    return {"image": tag, "command": ["haproxy", "-W", "-db", "-f", "%s/%s" % (haproxy.MOUNT, haproxy.CONFIG_NAME)],
            "network_mode": "host", "restart_policy": {"Name": "unless-stopped"},
            "volumes": {p["config_dir"]: {"bind": haproxy.MOUNT, "mode": "ro"}},
            "labels": {IMAGE_LABEL: image_id or "unknown"}}


def present(module, cli):
    p = module.params
    try:
        text = haproxy.render(p["port"], p["servers"], p["health_path"])
        dockerfile = haproxy.dockerfile(p["base_image"])
    except ValueError as exc:
        module.fail_json(msg="balancer: %s" % exc)
    digest = haproxy.config_digest(text)
    names = [s["name"] for s in p["servers"]]
    path = os.path.join(p["config_dir"], haproxy.CONFIG_NAME)

    base_id = base_image_id(cli, p["base_image"], module.check_mode)
    tag = haproxy.image_tag(base_id, dockerfile) if base_id else "unknown"
    image_id = _docker.image_id(cli, tag) if base_id else None
    built = image_id is None
    if built and not module.check_mode:
        build(cli, tag, dockerfile)
        image_id = _docker.image_id(cli, tag)
        if image_id is None:
            raise _docker.DockerFailure("the build of %s ended, but the image is not on this node" % tag)

    old_text = read_text(path)
    spec = container_spec(p, tag, image_id)
    spec_digest = _docker.spec_digest(spec)
    existing = _docker.current(cli, p["name"])
    state = _docker.container_state(existing)
    recreate = built or _docker.needs_change(state, spec_digest) or existing.attrs.get("Image") != image_id
    reloaded = not recreate and loaded_config(p["config_dir"], existing) != digest
    changed = built or recreate or reloaded or old_text != text
    diff = [{"before": old_text or "", "after": text, "before_header": path, "after_header": path}]
    if recreate:
        container_diff = _docker.container_diff(cli, existing, spec)
        container_diff.update(before_header="container %s" % p["name"], after_header="container %s" % p["name"])
        diff.append(container_diff)
    result = {"image": tag, "config_path": path, "built": built, "reloaded": reloaded}
    if changed:
        result["diff"] = diff

    if module.check_mode:
        servers = []
        if not recreate:
            try:
                servers = observe(existing)
            except _docker.DockerFailure as exc:
                module.warn("balancer: could not read the servers of %s: %s" % (p["name"], exc))
        module.exit_json(changed=changed, container_id="" if recreate else existing.id, servers=servers, **result)

    if changed:
        os.makedirs(p["config_dir"], mode=0o755, exist_ok=True)
        tmp = write_temp(p["config_dir"], "." + haproxy.CONFIG_NAME + ".", text)
        try:
            status, out = check_config(cli, tag, p["config_dir"], os.path.basename(tmp))
            if status != 0:
                module.fail_json(msg="balancer: haproxy -c refused the new configuration (exit %s); the live %s and "
                                     "the running balancer are unchanged:\n%s" % (status, path, out.strip()[-3000:]),
                                 diff=diff)
            if old_text != text:
                publish(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    if recreate:
        labelled = dict(spec, labels=dict(spec["labels"], **{CONFIG_LABEL: digest}))
        container = _docker.replace(cli, p["name"], labelled, "balancer", digest=spec_digest)
        record_loaded(p["config_dir"], container.id, digest)
    else:
        container = existing
        if reloaded:
            reload(container, names)
            record_loaded(p["config_dir"], container.id, digest)
    servers = answer(container, names, p["wait_timeout"])
    module.exit_json(changed=changed, container_id=container.id, servers=servers, **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", default="sparkfleet-balancer"),
            base_image=dict(type="str", default="debian:bookworm-slim"),
            port=dict(type="int"),
            servers=dict(type="list", elements="dict", options=dict(
                name=dict(type="str", required=True),
                address=dict(type="str", required=True),
            )),
            health_path=dict(type="str", default="/health"),
            config_dir=dict(type="path", default="/etc/sparkfleet/balancer"),
            wait_timeout=dict(type="int", default=0),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        required_if=[("state", "present", ["port", "servers"])],
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    try:
        cli = _docker.connect()
        if p["state"] == "absent":
            exists = _docker.current(cli, p["name"]) is not None
            if exists and not module.check_mode:
                _docker.remove(cli, p["name"])
            module.exit_json(changed=exists)
        present(module, cli)
    except _docker.DockerFailure as exc:
        module.fail_json(msg="balancer: %s" % exc)


if __name__ == "__main__":
    main()
