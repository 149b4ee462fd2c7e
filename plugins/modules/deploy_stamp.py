#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deploy_stamp
short_description: Stamp a node after a verified deploy, or tell in one probe whether a re-run would change it
version_added: 0.4.0
description:
  - With O(state=present) (the last step of a deploy that ended verified), writes a stamp on the node at
    O(path) holding O(inputs_digest) and what the node holds now, the ID of each image in O(images), the ID and
    start time of each container in O(containers), and a digest of the entries of each tree in O(trees).
  - With O(state=check) (the first step of a re-run), compares the node with its stamp and returns
    RV(unchanged) and, when not, RV(differences) in words. It fails only when the node cannot be read.
  - With O(members) (on a replica's head), each member node must answer the head over the fabric on
    O(reach_port), Ray's node manager. A node cut off keeps its containers running, and Ray lists it alive
    for minutes.
  - The check also returns RV(held), the stages of the last verified deploy the node still holds for the
    same inputs (its images, its weights trees), with the O(facts) those stages found; a run whose every node
    holds one skips that stage even when a container must be started again (a lost worker).
  - When the node is as stamped, the check goes on to the endpoints this node serves. With
    O(balancer_container), every server of the balancer must be ready and UP in HAProxy. Every URL of
    O(probe_urls), and O(balancer_url), must then answer C(/health), list O(served_model_name) and answer
    every probe coherently.
    So a re-run that changes nothing proves the endpoint again in this one step.
  - A tree's digest covers each entry's name, type, size, modification time and link target, not its bytes;
    the full path of a deploy (the weights role) is what reads the bytes.
options:
  state:
    description: Write the stamp (C(present)) or compare the node with it (C(check)).
    type: str
    choices: [present, check]
    default: check
  path:
    description: The stamp's file on the node.
    type: path
    default: /var/lib/sparkfleet/deploy-stamp.json
  inputs_digest:
    description: The digest of every input of this run, computed once on the controller.
    type: str
    required: true
  images:
    description: With O(state=present), the image references whose IDs the stamp records.
    type: list
    elements: str
    default: []
  containers:
    description: With O(state=present), the containers whose ID and start time the stamp records.
    type: list
    elements: str
    default: []
  trees:
    description: With O(state=present), the directories (a model's Hugging Face cache folder) whose entries the
      stamp records.
    type: list
    elements: path
    default: []
  facts:
    description:
      - With O(state=present), what this run's stages found that a run skipping them needs (the built image's
        tag, ID and versions, the planned env, the seed's verified snapshot), returned by the next check in
        RV(stamp).
      - The stamp is readable by every user of the node, so no secret may be passed here. A C(release_env) that
        names a variable as a secret does (C(KEY), C(TOKEN), C(SECRET), C(PASSW), C(CREDENTIAL)) is left out
        of the stamp, so a run never holds the stages that found it.
    type: dict
    default: {}
  probe_urls:
    description: With O(state=check), base URLs of the endpoints this node serves (its replica's API, the
      balancer's), each proven as M(sparkfleet.vllm.vllm_check) proves one.
    type: list
    elements: str
    default: []
  members:
    description: With O(state=check), the addresses of the other nodes of this head's replica.
    type: list
    elements: str
    default: []
  reach_port:
    description: The port on which each of O(members) must answer (Ray's node manager).
    type: int
    default: 6700
  balancer_url:
    description: With O(state=check), the balancer's base URL on this node, proven as O(probe_urls) are; empty
      for none.
    type: str
    default: ""
  served_model_name:
    description: The model name each of O(probe_urls) must list and answer as.
    type: str
    default: ""
  api_key:
    description: Bearer key for C(/v1).
    type: str
  probes:
    default: []
  balancer_container:
    description: With O(state=check), the balancer's container on this node, whose every server must be ready
      (not drained or in maintenance) and UP in HAProxy; empty for none.
    type: str
    default: ""
  balancer_backend:
    description: The balancer's backend of replicas.
    type: str
    default: replicas
  find_containers:
    description: With O(state=check), container names to look for; RV(found_containers) lists those that exist.
      A deploy skips removing what no node holds (a stale server, the containers an interrupted redeploy kept
      aside, a balancer the plan moved).
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds for each HTTP request and for the Docker engine.
    type: int
    default: 10
extends_documentation_fragment:
  - sparkfleet.vllm.probes
  - sparkfleet.vllm.attributes
attributes:
  check_mode:
    support: full
    details: With O(state=present) it predicts whether the stamp would change and writes nothing.
  diff_mode:
    support: full
    details: The stamp before and after.
  idempotent:
    support: full
    details: A node that holds the same images, containers and trees gets the same stamp.
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Would a re-run change this node?
  sparkfleet.vllm.deploy_stamp:
    inputs_digest: "{{ hostvars['localhost'].sparkfleet_inputs_digest }}"
  register: probe

- name: Stamp the node after the deploy was verified
  sparkfleet.vllm.deploy_stamp:
    state: present
    inputs_digest: "{{ hostvars['localhost'].sparkfleet_inputs_digest }}"
    images: [sparkfleet/vllm:0.34.0-3f2a]
    containers: [sparkfleet-ray, sparkfleet-vllm]
    trees: [/root/.cache/huggingface/hub/models--XiaomiMiMo--MiMo-V2.5-Pro]
"""

RETURN = r"""
unchanged:
  description: With O(state=check), whether the node is exactly as its stamp says and the inputs are the same.
  returned: always
  type: bool
differences:
  description: With O(state=check), each way the node differs, in words (empty when RV(unchanged)).
  returned: always
  type: list
  elements: str
held:
  description: With O(state=check), whether the node still holds the C(images) and the weights C(trees) of its
    last verified deploy for the same inputs (both false without a stamp or with other inputs).
  returned: always
  type: dict
  sample: {"images": true, "trees": true}
stamp:
  description: The stamp as written (or as it would be, in check mode) with O(state=present); the node's stamp
    as read with O(state=check) (empty when there is none).
  returned: always
  type: dict
found_containers:
  description: With O(state=check), the names of O(find_containers) that exist on the node, running or not;
    null when the Docker engine could not say.
  returned: always
  type: list
  elements: str
  sample: [sparkfleet-vllm]
endpoints:
  description: With O(state=check), each URL of O(probe_urls) (and O(balancer_url)) that was proven, with
    C(answers) as M(sparkfleet.vllm.vllm_check) returns them, C(problems) (empty when coherent) and
    C(balancer) (whether it is O(balancer_url)).
  returned: always
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, endpoint, fabric, haproxy, stamp


def _read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _images(cli, refs):
    out = {}
    for ref in refs:
        try:
            out[ref] = cli.images.get(ref).id
        except _docker.ImageNotFound:
            out[ref] = None
        except _docker.DockerException as exc:
            raise _docker.DockerFailure("reading image %s: %s" % (ref, exc)) from exc
    return out


def _containers(cli, names):
    out = {}
    for name in names:
        container = _docker.current(cli, name)
        if container is not None:
            state = container.attrs.get("State") or {}
            out[name] = {"id": container.id, "running": bool(state.get("Running")) and not state.get("Paused"),
                         "started_at": state.get("StartedAt")}
    return out


def _balancer(cli, name, backend):
    """Each server of the balancer that is not ready and UP, in words (a redeploy that stopped after draining
    one leaves it so)."""
    container = _docker.current(cli, name)
    if container is None:
        return ["balancer %s is gone" % name]
    try:
        rows = haproxy.read(container, backend)
    except (ValueError, _docker.DockerFailure) as exc:
        return ["balancer %s cannot be read: %s" % (name, str(exc)[-300:])]
    out = ["balancer: %s, %s" % (haproxy.describe(r), r.get("admin_state")) for r in rows
           if not haproxy.is_up(r) or r.get("admin_state") != "ready"]
    return out or ([] if rows else ["balancer %s has no server in backend %s" % (name, backend)])


def _public(facts):
    """``facts`` less a release env that holds a secret-named variable (the stamp is world-readable)."""
    env = facts.get("release_env")
    if isinstance(env, dict) and any(_docker.SECRET_NAME.search(str(name)) for name in env):
        return {k: v for k, v in facts.items() if k != "release_env"}
    return facts


def _write(path, content):
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(content, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "check"], default="check"),
            path=dict(type="path", default="/var/lib/sparkfleet/deploy-stamp.json"),
            inputs_digest=dict(type="str", required=True),
            images=dict(type="list", elements="str", default=[]),
            containers=dict(type="list", elements="str", default=[]),
            trees=dict(type="list", elements="path", default=[]),
            facts=dict(type="dict", default={}),
            probe_urls=dict(type="list", elements="str", default=[]),
            balancer_url=dict(type="str", default=""),
            members=dict(type="list", elements="str", default=[]),
            reach_port=dict(type="int", default=6700),
            served_model_name=dict(type="str", default=""),
            api_key=dict(type="str", no_log=True),
            probes=dict(type="list", elements="dict", default=[], options=endpoint.PROBE_OPTIONS),
            balancer_container=dict(type="str", default=""),
            balancer_backend=dict(type="str", default="replicas"),
            find_containers=dict(type="list", elements="str", default=[]),
            timeout=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    old = _read(p["path"])
    try:
        cli = _docker.connect(timeout=p["timeout"] + 10)
        if p["state"] == "check":
            listed = old if isinstance(old, dict) else {}
            now = (_images(cli, listed.get("images") or {}), _containers(cli, listed.get("containers") or {}),
                   {t: stamp.tree_digest(t) for t in listed.get("trees") or {}})
            diffs = stamp.differences(old, p["inputs_digest"], *now)
            held = stamp.held(old, p["inputs_digest"], *now)
            if not diffs and p["members"]:
                diffs = ["%s gives this head no answer on port %d over the fabric (%s)" % (ip, p["reach_port"], why)
                         for ip, why in sorted(fabric.silent(p["members"], p["reach_port"]).items())]
            if not diffs and p["balancer_container"]:
                diffs = _balancer(cli, p["balancer_container"], p["balancer_backend"])
            proven = {}
            urls = p["probe_urls"] + ([p["balancer_url"]] if p["balancer_url"] else [])
            for url in urls if not diffs else []:
                problems, answers, _models = endpoint.prove(url, p["served_model_name"], p["probes"], p["api_key"],
                                                            p["timeout"])
                proven[url] = {"answers": answers, "problems": problems, "balancer": url == p["balancer_url"]}
                diffs += ["endpoint %s is not proven coherent: %s" % (url, " | ".join(problems))] if problems else []
            try:
                found = [name for name in p["find_containers"] if _docker.current(cli, name) is not None]
            except _docker.DockerException:
                found = None  # unknown: the deploy then removes what it would remove anywhere
            module.exit_json(changed=False, unchanged=not diffs, differences=diffs, held=held, stamp=listed,
                             endpoints=proven, found_containers=found)
        new = stamp.make(p["inputs_digest"], _images(cli, p["images"]), _containers(cli, p["containers"]),
                         {t: stamp.tree_digest(t) for t in p["trees"]}, _public(p["facts"]))
    except _docker.DockerFailure as exc:
        module.fail_json(msg="deploy_stamp: %s" % exc)
    changed = new != old
    if changed and not module.check_mode:
        try:
            _write(p["path"], new)
        except OSError as exc:
            module.fail_json(msg="deploy_stamp: writing %s: %s" % (p["path"], exc))
    result = {"changed": changed, "unchanged": True, "differences": [], "held": {"images": False, "trees": False},
              "stamp": new, "endpoints": {}, "found_containers": []}
    if module._diff:
        result["diff"] = {"before": json.dumps(old, indent=1, sort_keys=True) + "\n" if old else "",
                          "after": json.dumps(new, indent=1, sort_keys=True) + "\n",
                          "before_header": p["path"], "after_header": p["path"]}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
