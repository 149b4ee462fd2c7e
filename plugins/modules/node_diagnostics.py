#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_diagnostics
short_description: Collect what support needs from this node, with every secret redacted
version_added: 0.3.0
description:
  - "Collects, as named text files: the tail of each named container's log; each container's state, image,
    command and environment (C(containers.json)); C(ray status) through the Ray container; C(nvidia-smi); the
    tail of the kernel log; memory (C(/proc/meminfo)) and disk (C(df)); the IDs of the node's images."
  - "Every secret is redacted before anything leaves the node: the value of each environment variable whose
    name says it holds one (KEY, TOKEN, SECRET, PASSW, CREDENTIAL), and the contents of O(secret_files) (the
    API key and the Ray token the collection keeps on the node) wherever they appear."
  - A command that fails or is missing is recorded in its file, not a failure of the task.
  - M(sparkfleet.vllm.diagnostics_bundle) packs what every node returned into one tarball on the controller.
options:
  containers:
    description: The containers whose state and log are collected.
    type: list
    elements: str
    default: [sparkfleet-ray, sparkfleet-vllm]
  ray_container:
    description: The Ray container, where C(ray status) runs.
    type: str
    default: sparkfleet-ray
  log_lines:
    description: How many of each log's last lines to keep.
    type: int
    default: 2000
  kernel_lines:
    description: How many of the kernel log's last lines to keep.
    type: int
    default: 200
  secret_files:
    description: Files whose contents are secrets, redacted wherever they appear.
    type: list
    elements: path
    default: [/etc/sparkfleet/api-key, /etc/sparkfleet/ray-token]
  paths:
    description: Paths whose file systems C(df) reports.
    type: list
    elements: path
    default: [/, /root/.cache/huggingface, /var/lib/docker]
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.attributes.read_only
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Collect this node's diagnostics
  sparkfleet.vllm.node_diagnostics:
  register: diagnostics
"""

RETURN = r"""
files:
  description: "{file name: text}, every secret redacted."
  returned: always
  type: dict
  sample: {"logs/sparkfleet-ray.log": "...", "ray-status.txt": "...", "memory.txt": "MemTotal: ..."}
redacted:
  description: How many secret values were found and replaced.
  returned: always
  type: int
"""

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, redact


def _run(argv, timeout=30):
    """A command's output, or why there is none (a missing tool is a fact of the node, not an error)."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "%s: %s\n" % (" ".join(argv), exc)
    return res.stdout + (("\n[stderr]\n" + res.stderr) if res.stderr.strip() else "") + (
        "" if res.returncode == 0 else "\n[exit %d]\n" % res.returncode)


def _env(items):
    out = []
    for item in items or ():
        name, _eq, value = str(item).partition("=")
        out.append("%s=%s" % (name, redact.REDACTED if _docker.SECRET_NAME.search(name) else value))
    return out


def _container(cli, name, lines):
    container = _docker.current(cli, name)
    if container is None:
        return {"exists": False}, "(no container %s)\n" % name
    container.reload()
    attrs, config = container.attrs, container.attrs.get("Config") or {}
    state = {"exists": True, "status": container.status, "state": attrs.get("State"), "image": attrs.get("Image"),
             "image_ref": config.get("Image"), "command": list(config.get("Cmd") or []),
             "env": _env(config.get("Env"))}
    try:
        log = _docker.logs(container, tail=lines)
    except _docker.DockerFailure as exc:
        log = "(no log: %s)\n" % exc
    return state, log


def collect(cli, p):
    files = {}
    states = {}
    for name in p["containers"]:
        states[name], files["logs/%s.log" % name] = _container(cli, name, p["log_lines"])
    files["containers.json"] = json.dumps(states, indent=2, sort_keys=True, default=str)
    ray = _docker.current(cli, p["ray_container"])
    if ray is not None and ray.status == "running":
        res = ray.exec_run(["timeout", "30", "ray", "status"], demux=False)
        files["ray-status.txt"] = (res.output or b"").decode(errors="replace") + "\n[exit %s]\n" % res.exit_code
    else:
        files["ray-status.txt"] = "(the Ray container %s is not running)\n" % p["ray_container"]
    files["nvidia-smi.txt"] = _run(["nvidia-smi"])
    kernel = _run(["dmesg", "--ctime"])
    files["kernel.txt"] = "\n".join(kernel.splitlines()[-p["kernel_lines"]:]) + "\n"
    try:
        with open("/proc/meminfo") as fh:
            files["memory.txt"] = fh.read()
    except OSError as exc:
        files["memory.txt"] = "/proc/meminfo: %s\n" % exc
    files["disk.txt"] = _run(["df", "-P"] + [path for path in p["paths"] if os.path.exists(path)])
    images = []
    for image in cli.images.list():
        images.append("%s %s" % (image.id, " ".join(image.tags) or "<untagged>"))
    files["images.txt"] = "\n".join(sorted(images)) + "\n"
    return files


def main():
    module = AnsibleModule(
        argument_spec=dict(
            containers=dict(type="list", elements="str", default=["sparkfleet-ray", "sparkfleet-vllm"]),
            ray_container=dict(type="str", default="sparkfleet-ray"),
            log_lines=dict(type="int", default=2000),
            kernel_lines=dict(type="int", default=200),
            # Paths of files that hold secrets, not secrets themselves.
            secret_files=dict(type="list", elements="path", no_log=False,
                              default=["/etc/sparkfleet/api-key", "/etc/sparkfleet/ray-token"]),
            paths=dict(type="list", elements="path", default=["/", "/root/.cache/huggingface", "/var/lib/docker"]),
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    secrets = []
    for path in p["secret_files"]:
        try:
            with open(path) as fh:
                value = fh.read().strip()
        except OSError:
            continue
        secrets.append(value)
    try:
        files = collect(_docker.connect(timeout=120), p)
    except _docker.DockerFailure as exc:
        module.fail_json(msg="node_diagnostics: %s" % exc)
    files, count = redact.texts(files, secrets)
    module.exit_json(changed=False, files=files, redacted=count)


if __name__ == "__main__":
    main()
