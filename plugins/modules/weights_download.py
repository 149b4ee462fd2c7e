#!/usr/bin/python
# Copyright: sparkfleet maintainers. MIT License (see LICENSE).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_download
short_description: Download a pinned checkpoint snapshot from the Hugging Face Hub into this node's cache
version_added: 0.3.0
description:
  - Lists the repo's files at the pinned commit through the Hub's tree API, compares them with this node's
    cache, and downloads what is missing with C(huggingface_hub.snapshot_download) into the cache layout
    the weights chain ships (blobs named by their hash, a snapshot of links).
  - huggingface_hub resumes a file cut mid-way within a run (Range requests) and keeps every file it
    completed, so a run stopped by a network cut is resumed by the next one from the first file it lacks.
  - The download itself needs C(huggingface_hub==2.0.0) in the interpreter that runs the module (the
    weights role installs it into a virtual environment on the downloading node); O(plan_only) and check
    mode only list, with the standard library.
  - Its byte progress is kept in O(progress_file) for M(sparkfleet.vllm.job_progress).
  - The token is never logged, placed in argv or an environment, or shown in a message.
options:
  endpoint:
    description: The Hub's URL (C(HF_ENDPOINT) of huggingface_hub); a mirror or a test Hub may stand in.
    type: str
    default: https://huggingface.co
  token:
    description: A Hugging Face token with read access, for private or gated repos; empty for none.
    type: str
    default: ""
  plan_only:
    description: List the Hub's files and what this node lacks, and download nothing.
    type: bool
    default: false
  max_workers:
    description: Files downloaded at once.
    type: int
    default: 8
  progress_file:
    description: Where the download's bytes are kept while it runs in the background (with C(async)).
    type: path
  session:
    description: The name the progress file is kept under (for M(sparkfleet.vllm.job_progress)).
    type: str
    default: download
attributes:
  check_mode:
    support: full
    details: Lists the Hub's files and predicts C(changed) when this node lacks any; downloads nothing.
  diff_mode:
    support: none
    details: The weights role's verification that follows lists the snapshot.
  idempotent:
    support: full
    details: A cache that holds every file of the commit downloads nothing and reports no change.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.snapshot
author:
  - sparkfleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Download the pinned snapshot on the head
  sparkfleet.vllm.weights_download:
    hub_dir: /root/.cache/huggingface/hub
    repo_id: festr2/MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8
    revision: "{{ recipe.revision }}"
    token: "{{ sparkfleet_hf_token }}"
    progress_file: /var/tmp/sparkfleet/weights-download.json
  vars:
    ansible_python_interpreter: /opt/sparkfleet/hub-venv/bin/python
  async: 7200
  poll: 0
"""

RETURN = r"""
files:
  description: Files of the repo at the commit.
  returned: success
  type: int
total_bytes:
  description: Their bytes.
  returned: success
  type: int
missing_bytes:
  description: Bytes of the files this node's cache lacked when the module started.
  returned: success
  type: int
missing:
  description: The files this node's cache lacked.
  returned: success
  type: list
  elements: str
"""

import os
import shutil
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.checkpoint import SNAPSHOT_ARGS, snapshot_dir
from ansible_collections.sparkfleet.vllm.plugins.module_utils.hub_download import (
    DownloadError,
    download,
    hub_listing,
)
from ansible_collections.sparkfleet.vllm.plugins.module_utils.progress import Progress


def lacking(sdir, files):
    """The files of ``files`` ({path: size}) not in the snapshot ``sdir`` with their size."""
    out = []
    for path, size in sorted(files.items()):
        local = os.path.join(sdir, path)
        if not os.path.isfile(local) or os.path.getsize(local) != size:
            out.append(path)
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(SNAPSHOT_ARGS, endpoint=dict(type="str", default="https://huggingface.co"),
                           token=dict(type="str", default="", no_log=True), plan_only=dict(type="bool", default=False),
                           max_workers=dict(type="int", default=8), progress_file=dict(type="path"),
                           session=dict(type="str", default="download")),
        supports_check_mode=True,
    )
    p = module.params
    hub, repo, rev = p["hub_dir"], p["repo_id"], p["revision"]
    node = socket.gethostname()
    progress = Progress(p["progress_file"], p["session"], phase="listing %s@%s" % (repo, rev[:12]))
    try:
        files = hub_listing(p["endpoint"], repo, rev, p["token"])
        missing = lacking(snapshot_dir(hub, repo, rev), files)
        need = sum(files[f] for f in missing)
        out = dict(files=len(files), total_bytes=sum(files.values()), missing_bytes=need, missing=missing)
        if p["plan_only"] or module.check_mode or not missing:
            progress.finish(out)
            module.exit_json(changed=bool(missing) and module.check_mode, **out)
        os.makedirs(hub, exist_ok=True)
        free = shutil.disk_usage(hub).free
        if free < need * 1.05:
            raise DownloadError("not enough disk on %s for %s in %s: %d bytes needed, %d bytes free; free space "
                                "there or point sparkfleet_hf_cache_dir elsewhere" % (node, repo, hub, need, free))
        progress.update(0, phase="downloaded", total=need)
        download(hub, repo, rev, endpoint=p["endpoint"], token=p["token"], max_workers=p["max_workers"],
                 report=lambda done, total: progress.update(done, phase="downloaded", total=total or need))
        left = lacking(snapshot_dir(hub, repo, rev), files)
        if left:
            raise DownloadError("the download of %s@%s ended without %s" % (repo, rev, ", ".join(left)))
    except DownloadError as exc:
        msg = "%s: %s" % (node, exc)
        progress.fail(msg)
        module.fail_json(msg=msg)
    progress.finish(out)
    module.exit_json(changed=True, **out)


if __name__ == "__main__":
    main()
