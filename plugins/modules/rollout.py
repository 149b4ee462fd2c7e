#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rollout
short_description: Keep a replica's running containers aside during a redeploy, and restore or discard them
version_added: 0.4.0
description:
  - What C(playbooks/redeploy.yml) runs on each node of the replica it redeploys. The previous containers
    hold the previous image, recipe (flags, env) and weights revision exactly as they ran, so a rollback is
    starting them again; nothing has to be rebuilt or re-sent.
  - O(state=kept) stops each of O(containers) that exists and renames it C(<name>-previous), so the deploy
    can start the new one under the usual name. A C(-previous) left by an interrupted redeploy is the last
    proven deployment, so it stays, and the container under the usual name (never proven) is removed instead.
  - O(state=restored) removes the new container and starts the C(-previous) one again under the usual name;
    a container without a C(-previous) stays as it is.
  - O(state=discarded) removes the C(-previous) containers once the new ones have passed.
  - Docker keeps an image that a container, stopped or not, still uses, so the previous image stays on the
    node until its container is discarded.
options:
  containers:
    description: Container names, in the order to act on them (restore starts them in this order).
    type: list
    elements: str
    required: true
  state:
    description: What to do with the previous containers.
    type: str
    choices: [kept, restored, discarded]
    required: true
  stop_timeout:
    description: Seconds a container gets to stop before it is killed.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    details: Predicts the renames, starts and removals and does none of them.
  diff_mode:
    support: full
    details: Each container's state before and after.
  idempotent:
    support: full
    details: A second run with the same state finds nothing left to do.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Keep the serving containers aside
  sparkfleet.vllm.rollout:
    containers: [sparkfleet-vllm, sparkfleet-ray]
    state: kept
"""

RETURN = r"""
actions:
  description: What was (or in check mode would be) done, one line per container.
  returned: always
  type: list
  elements: str
  sample: ["sparkfleet-vllm: stopped, renamed sparkfleet-vllm-previous"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker

SUFFIX = "-previous"


def _describe(container):
    return "absent" if container is None else "%s (%s)" % (container.status, container.image.id[:19])


def plan(state, name, current, previous):
    """Pure: the steps for one container, given whether it (``current``) and its previous exist."""
    if state == "kept":
        if current is None:
            return []
        # A previous one still aside is the last proven deployment (an interrupted redeploy left it); the
        # current one was never proven, so it goes and the previous one stays the rollback.
        return ["remove current"] if previous else ["stop current", "rename current"]
    if state == "restored":
        if previous is None:
            return []
        return (["remove current"] if current else []) + ["rename previous", "start previous"]
    return ["remove previous"] if previous else []


def predict(state, name, current, previous):
    """What check mode reports as the state after: the same lines _describe() writes."""
    now, prev = _describe(current), _describe(previous)
    if state == "kept" and current is not None:
        return {name: "absent", name + SUFFIX: prev if previous else "exited (%s)" % current.image.id[:19]}
    if state == "restored" and previous is not None:
        return {name: "running (%s)" % previous.image.id[:19], name + SUFFIX: "absent"}
    if state == "discarded":
        return {name: now, name + SUFFIX: "absent"}
    return {name: now, name + SUFFIX: prev}


def apply(cli, name, steps, current, previous, stop_timeout):
    try:
        for step in steps:
            if step == "remove previous":
                previous.remove(force=True)
            elif step == "remove current":
                current.remove(force=True)
            elif step == "stop current":
                current.stop(timeout=stop_timeout)
            elif step == "rename current":
                current.rename(name + SUFFIX)
            elif step == "rename previous":
                previous.rename(name)
            elif step == "start previous":
                previous.start()
    except (_docker.APIError, _docker.DockerException) as exc:
        raise _docker.DockerFailure("%s (%s): %s" % (name, step, exc)) from exc


def main():
    module = AnsibleModule(
        argument_spec=dict(
            containers=dict(type="list", elements="str", required=True),
            state=dict(type="str", choices=["kept", "restored", "discarded"], required=True),
            stop_timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    _docker.require(module)
    p = module.params
    actions, before, after = [], {}, {}
    try:
        cli = _docker.connect()
        for name in p["containers"]:
            current, previous = _docker.current(cli, name), _docker.current(cli, name + SUFFIX)
            steps = plan(p["state"], name, current, previous)
            before[name], before[name + SUFFIX] = _describe(current), _describe(previous)
            if steps:
                actions.append("%s: %s" % (name, ", ".join(steps)))
                if not module.check_mode:
                    apply(cli, name, steps, current, previous, p["stop_timeout"])
            if module.check_mode:
                after.update(predict(p["state"], name, current, previous))
                continue
            after[name] = _describe(_docker.current(cli, name))
            after[name + SUFFIX] = _describe(_docker.current(cli, name + SUFFIX))
    except _docker.DockerFailure as exc:
        module.fail_json(msg="rollout %s: %s" % (p["state"], exc), actions=actions)
    result = dict(changed=bool(actions), actions=actions)
    if module._diff:
        result["diff"] = {"before": before, "after": after}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
