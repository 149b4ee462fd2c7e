#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_purge
short_description: Remove the collection's images and a model's weights from this node
version_added: 0.3.0
description:
  - "What C(playbooks/teardown.yml) runs only when asked (C(sparkfleet_teardown_images),
    C(sparkfleet_teardown_weights)): a teardown otherwise leaves both, because sending them again costs
    minutes to hours on a real cluster."
  - Removes every image whose repository is one of O(image_repositories) (the patched images the collection
    built), and the Hugging Face cache directory of each model in O(weights) (every revision of it).
  - An image that a container still uses is not forced out; the task fails naming the image and the container.
options:
  image_repositories:
    description: Repositories whose images are removed, every tag; empty to keep all images.
    type: list
    elements: str
    default: []
  weights:
    description: Hugging Face repository IDs (C(org/name)) whose cached weights are removed; empty to keep them.
    type: list
    elements: str
    default: []
  hf_cache_dir:
    description: The node's Hugging Face hub cache.
    type: path
    default: /root/.cache/huggingface/hub
attributes:
  check_mode:
    support: full
    details: Lists what would go and removes nothing.
  diff_mode:
    support: full
    details: The images and directories before and after.
  idempotent:
    support: full
    details: A second run finds nothing to remove.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.docker
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Remove the built images and the model's weights
  sparkfleet.vllm.node_purge:
    image_repositories: [sparkfleet/vllm]
    weights: [XiaomiMiMo/MiMo-V2.5-Pro]
"""

RETURN = r"""
images:
  description: The removed images (ID and tags).
  returned: always
  type: list
  elements: str
weights:
  description: The removed cache directories.
  returned: always
  type: list
  elements: str
"""

import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def cache_dir(hf_cache_dir, repo_id):
    """The hub cache's directory of a model (huggingface_hub's layout: models--org--name)."""
    if not REPO_ID.match(repo_id) or ".." in repo_id:
        raise ValueError("weights: %r is not a Hugging Face repository ID (org/name)" % repo_id)
    return os.path.join(hf_cache_dir, "models--" + repo_id.replace("/", "--"))


def doomed_images(images, repositories):
    """[(image, [its tags])] of the images with a tag in one of the repositories."""
    out = []
    for image in images:
        tags = [t for t in image.tags if t.rsplit(":", 1)[0] in repositories]
        if tags:
            out.append((image, tags))
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image_repositories=dict(type="list", elements="str", default=[]),
            weights=dict(type="list", elements="str", default=[]),
            hf_cache_dir=dict(type="path", default="/root/.cache/huggingface/hub"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        dirs = [cache_dir(p["hf_cache_dir"], repo) for repo in p["weights"]]
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    dirs = [d for d in dirs if os.path.isdir(d)]
    images = []
    if p["image_repositories"]:
        _docker.require(module)
        try:
            cli = _docker.connect(timeout=300)
            images = doomed_images(cli.images.list(), set(p["image_repositories"]))
        except _docker.DockerFailure as exc:
            module.fail_json(msg="node_purge: %s" % exc)
    names = ["%s %s" % (image.short_id, " ".join(tags)) for image, tags in images]
    result = dict(changed=bool(images or dirs), images=names, weights=dirs)
    if module._diff:
        result["diff"] = dict(before="\n".join(names + dirs) + "\n", after="")
    if module.check_mode or not result["changed"]:
        module.exit_json(**result)
    for image, tags in images:
        users = [c.name for c in cli.containers.list(all=True, filters={"ancestor": image.id})]
        if users:
            module.fail_json(msg="node_purge: image %s is used by container %s; run the teardown first"
                             % (" ".join(tags), ", ".join(users)), **result)
        try:
            _docker.remove_image(cli, image.id, " ".join(tags))
        except _docker.DockerFailure as exc:
            module.fail_json(msg="node_purge: %s" % exc, **result)
    for path in dirs:
        shutil.rmtree(path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
