# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The patched vLLM+Ray image: its build context and its content-addressed tag (pure functions)."""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import pkgutil
import re
import tarfile

from ansible_collections.sparkfleet.vllm.plugins.module_utils.validation import PEP440

TEMPLATE_VERSION = "3"

DOCKERFILE = """\
FROM {base}
ARG RAY_VERSION
# Keep the base's Ray when it is the pinned version; install the pinned one otherwise. The version reaches
# Python as data (the build argument is in the environment), never pasted into its code.
RUN if python3 -c "import os, ray, sys; sys.exit(ray.__version__ != os.environ['RAY_VERSION'])" 2>/dev/null; \\
    then echo "ray ${{RAY_VERSION}} already in the base"; \\
    else python3 -m pip install --no-cache-dir "ray==${{RAY_VERSION}}"; fi
{pip}
COPY sparkfleet_patches /etc/sparkfleet/sparkfleet_patches
COPY apply_patches.py image_facts.py /etc/sparkfleet/
{patch}
RUN python3 /etc/sparkfleet/image_facts.py > /etc/sparkfleet/versions.json && cat /etc/sparkfleet/versions.json
LABEL org.sparkfleet.base-id="{base_id}" org.sparkfleet.ray-version="${{RAY_VERSION}}"
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
try:
    with open("/etc/sparkfleet/patches.log") as fh:
        lines = [x for x in fh.read().splitlines() if x.startswith("SPARKFLEET-PATCH-REPORT ")]
    facts["patches"] = json.loads(lines[-1].split(" ", 1)[1]) if lines else []
except OSError:
    facts["patches"] = []
print(json.dumps(facts, sort_keys=True))
"""

_PIP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")


def validate_pip(packages):
    bad = [p for p in packages if not _PIP_NAME.fullmatch(p)]
    if bad:
        raise ValueError("pip_packages must be pinned as name==version; fix %s" % ", ".join(bad))


def render(base, base_id, ray_version, pip_packages, patch_ids=(), required=()):
    # Values that reach the Dockerfile's text are refused unless they are plain data of their kind (the
    # validate role refuses them earlier, naming the inventory setting).
    if not isinstance(ray_version, str) or not PEP440.fullmatch(ray_version):
        raise ValueError("ray_version %r is not a PEP 440 release; write it as X.Y.Z" % (ray_version,))
    if not re.fullmatch(r"[^\s\0\"]+", str(base)) or not re.fullmatch(r"sha256:[0-9a-f]{64}|[^\s\0\"]+", str(base_id)):
        raise ValueError("base image %r (%r) is not an image reference" % (base, base_id))
    validate_pip(pip_packages)
    pip = ("RUN python3 -m pip install --no-cache-dir %s" % " ".join(pip_packages)) if pip_packages else ""
    patch = PATCH_LINE.format(ids=",".join(patch_ids), required=",".join(required)) if patch_ids else ""
    return DOCKERFILE.format(base=base, base_id=base_id, pip=pip, patch=patch)


def tag_for(prefix, base_id, ray_version, dockerfile, build_args, extra_files=None):
    """Content address: the base image's ID, the Ray version, and every byte of the build context."""
    h = hashlib.sha256()
    extra = "".join("%s\0%s\0" % kv for kv in sorted((extra_files or {}).items()))
    for part in (TEMPLATE_VERSION, base_id, ray_version, dockerfile, IMAGE_FACTS, extra,
                 json.dumps(build_args or {}, sort_keys=True)):
        h.update(part.encode())
        h.update(b"\0")
    return "%s:%s" % (prefix, h.hexdigest()[:20])


def context_tar(dockerfile, extra_files=None):
    buf = io.BytesIO()
    files = dict(extra_files or {}, Dockerfile=dockerfile)
    files["image_facts.py"] = IMAGE_FACTS
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


# Runs inside a container of the base image (dry run, before any build) and inside the build (for real).
# It finds the installed vllm package without importing it (importing vLLM needs a GPU stack).
APPLY_PATCHES = """\
import importlib.util
import json
import sys

sys.path.insert(0, sys.argv[1])
import sparkfleet_patches as patches

write = sys.argv[2] == "apply"
ids = [x for x in sys.argv[3].split(",") if x]
required = [x for x in sys.argv[4].split(",") if x]
spec = importlib.util.find_spec("vllm")
if spec is None or not spec.submodule_search_locations:
    print("SPARKFLEET-PATCH-ERROR the image has no vllm package")
    sys.exit(3)
vllm_dir = list(spec.submodule_search_locations)[0]
try:
    report = patches.run(vllm_dir, patches.select(ids), required=required, write=write)
except (patches.PatchError, ValueError) as exc:
    print("SPARKFLEET-PATCH-ERROR %s" % exc)
    sys.exit(3)
print("SPARKFLEET-PATCH-REPORT %s" % json.dumps(report))
"""

PATCH_LINE = ("RUN python3 /etc/sparkfleet/apply_patches.py /etc/sparkfleet apply \"{ids}\" \"{required}\" "
              "> /etc/sparkfleet/patches.log; rc=$?; cat /etc/sparkfleet/patches.log; exit $rc\n")


def patch_sources(package):
    """{relative path: source} of the patch package, read through its loader (works from AnsiballZ zips)."""
    files = {"sparkfleet_patches/__init__.py": inspect.getsource(package)}
    for info in pkgutil.iter_modules(package.__path__):
        module = __import__("%s.%s" % (package.__name__, info.name), fromlist=["_"])
        files["sparkfleet_patches/%s.py" % info.name] = inspect.getsource(module)
    files["apply_patches.py"] = APPLY_PATCHES
    return files


def parse_patch_output(text):
    """(report or None, error or None) from the runner's output."""
    report, error = None, None
    for line in text.splitlines():
        if line.startswith("SPARKFLEET-PATCH-REPORT "):
            report = json.loads(line.split(" ", 1)[1])
        elif "SPARKFLEET-PATCH-ERROR " in line:
            error = line.split("SPARKFLEET-PATCH-ERROR ", 1)[1].strip()
    return report, error
