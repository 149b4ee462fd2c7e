#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: diagnostics_bundle
short_description: Pack every node's diagnostics and the run's report into one tarball on the controller
version_added: 0.3.0
description:
  - Takes what M(sparkfleet.vllm.node_diagnostics) returned on every node (or why a node returned nothing)
    and writes C(sparkfleet-diagnostics-<UTC time>.tar.gz) under O(dest), one directory per node, with the
    run's report when O(report) names one and a C(README.txt) listing what each node gave.
  - Before anything is written, every value of O(secrets) is redacted once more from every file (the nodes
    redact what they know; the controller also knows the Hugging Face token).
  - Runs on the controller.
options:
  nodes:
    description: "{node name: what Ansible registered for the node's M(sparkfleet.vllm.node_diagnostics) task}."
    type: dict
    required: true
  dest:
    description: Directory for the tarball (created 0700 when missing).
    type: path
    default: sparkfleet-diagnostics
  report:
    description: The run's JSON report (from the C(sparkfleet.vllm.report) callback) to include; empty for none.
    type: path
  secrets:
    description: Secret values (API key, Ray token, Hugging Face token) to redact wherever they appear.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: Predicts the tarball and writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Each run writes a new tarball named by its time.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: One tarball on the controller
  sparkfleet.vllm.diagnostics_bundle:
    nodes: "{{ dict(groups['spark_cluster'] | zip(groups['spark_cluster'] | map('extract', hostvars, 'diag'))) }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
path:
  description: The tarball's path.
  returned: always
  type: str
members:
  description: The files in it.
  returned: always
  type: list
  elements: str
missing:
  description: "{node: why} for each node that gave nothing."
  returned: always
  type: dict
"""

import datetime
import io
import os
import tarfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import redact


def build(nodes, report_text, secrets, stamp):
    """Pure: {member name: bytes} of the bundle, every secret redacted, and {node: why} for nodes without files."""
    root = "sparkfleet-diagnostics-%s" % stamp
    members, missing, summary = {}, {}, []
    for node in sorted(nodes):
        result = nodes[node] or {}
        files = result.get("files") if not (result.get("failed") or result.get("unreachable")) else None
        if not files:
            missing[node] = result.get("msg") or "no diagnostics returned"
            summary.append("%s: nothing collected (%s)" % (node, missing[node]))
            continue
        summary.append("%s: %s" % (node, ", ".join(sorted(files))))
        for name, text in files.items():
            clean = os.path.normpath(name)
            if clean.startswith(("/", "..")):
                continue  # a node names only files under its own directory
            members["%s/%s/%s" % (root, node, clean)] = text
    if report_text is not None:
        members["%s/report.json" % root] = report_text
    members["%s/README.txt" % root] = "sparkfleet.vllm diagnostics, %s UTC\n\n%s\n" % (stamp, "\n".join(summary))
    clean, _count = redact.texts(members, secrets)
    return {name: text.encode("utf-8", errors="replace") for name, text in clean.items()}, missing


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="dict", required=True),
            dest=dict(type="path", default="sparkfleet-diagnostics"),
            report=dict(type="path"),
            secrets=dict(type="list", elements="str", default=[], no_log=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    secrets = redact.usable(p["secrets"])
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    report_text = None
    if p["report"]:
        try:
            with open(p["report"]) as fh:
                report_text = fh.read()
        except OSError as exc:
            report_text = "(the run's report %s could not be read: %s)\n" % (p["report"], exc)
    members, missing = build(p["nodes"], report_text, secrets, stamp)
    path = os.path.abspath(os.path.join(p["dest"], "sparkfleet-diagnostics-%s.tar.gz" % stamp))
    if module.check_mode:
        module.exit_json(changed=True, path=path, members=sorted(members), missing=missing)
    os.makedirs(p["dest"], mode=0o700, exist_ok=True)
    tmp = path + ".part"
    with tarfile.open(tmp, "w:gz") as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(members[name]), 0o600, int(datetime.datetime.now().timestamp())
            tar.addfile(info, io.BytesIO(members[name]))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    module.exit_json(changed=True, path=path, members=sorted(members), missing=missing)


if __name__ == "__main__":
    main()
