# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The patched vLLM+Ray image: its build context and its content-addressed tag (pure functions)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile

TEMPLATE_VERSION = "1"

DOCKERFILE = """\
FROM {base}
ARG RAY_VERSION
# Keep the base's Ray when it is the pinned version; install the pinned one otherwise.
RUN if python3 -c "import ray, sys; sys.exit(ray.__version__ != '${{RAY_VERSION}}')" 2>/dev/null; \\
    then echo "ray ${{RAY_VERSION}} already in the base"; \\
    else python3 -m pip install --no-cache-dir "ray==${{RAY_VERSION}}"; fi
{pip}
COPY image_facts.py /etc/sparkfleet/image_facts.py
RUN python3 /etc/sparkfleet/image_facts.py > /etc/sparkfleet/versions.json && cat /etc/sparkfleet/versions.json
LABEL org.sparkfleet.base-id="{base_id}" org.sparkfleet.ray-version="{ray}"
"""

# Runs inside the image at build time. torch.cuda.get_arch_list() is empty without a GPU (and a build has
# none), so the compiled arch flags are read from torch._C directly; get_arch_list() is built from them.
IMAGE_FACTS = """\
import json
from importlib import metadata

facts = {}
for dist in ("vllm", "ray", "torch"):
    try:
        facts[dist] = metadata.version(dist)
    except metadata.PackageNotFoundError:
        facts[dist] = None
try:
    import torch
    facts["torch_arch_list"] = torch._C._cuda_getArchFlags().split()
except Exception:
    facts["torch_arch_list"] = None
print(json.dumps(facts, sort_keys=True))
"""

_PIP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")


def validate_pip(packages):
    bad = [p for p in packages if not _PIP_NAME.match(p)]
    if bad:
        raise ValueError("pip_packages must be pinned as name==version; fix %s" % ", ".join(bad))


def render(base, base_id, ray_version, pip_packages):
    validate_pip(pip_packages)
    pip = ("RUN python3 -m pip install --no-cache-dir %s" % " ".join(pip_packages)) if pip_packages else ""
    return DOCKERFILE.format(base=base, base_id=base_id, ray=ray_version, pip=pip)


def tag_for(prefix, base_id, ray_version, dockerfile, build_args):
    """Content address: the base image's ID, the Ray version, and every byte of the build context."""
    h = hashlib.sha256()
    for part in (TEMPLATE_VERSION, base_id, ray_version, dockerfile, IMAGE_FACTS,
                 json.dumps(build_args or {}, sort_keys=True)):
        h.update(part.encode())
        h.update(b"\0")
    return "%s:%s" % (prefix, h.hexdigest()[:20])


def context_tar(dockerfile):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in (("Dockerfile", dockerfile), ("image_facts.py", IMAGE_FACTS)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf
