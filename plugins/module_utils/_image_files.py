# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Read files out of an image without running it: ``docker create`` (never started), the archive API, remove.

This is how the collection judges a vLLM image (its version, its patch targets, the flags and backends its
release accepts) before any container of it starts on any node. The Docker SDK has no "read a file from an
image" call, so the create/get_archive/remove dance is written here once.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker

# Where vLLM images put their Python packages (the official images use the system interpreter's
# dist-packages, venv-based images a site-packages). Python minor versions are tried in turn.
SITE_DIRS = tuple(
    "%s/lib/python3.%d/%s" % (prefix, minor, kind)
    for prefix in ("/usr/local", "/opt/venv", "/usr", "/opt/conda", "/venv")
    for minor in range(14, 7, -1)
    for kind in ("dist-packages", "site-packages")
) + ("/usr/lib/python3/dist-packages",)


class Created:
    """A created, never started, container of ``image``; removed on exit."""

    def __init__(self, cli, image):
        self.cli, self.image, self.container = cli, image, None

    def __enter__(self):
        try:
            self.container = self.cli.containers.create(self.image, command=["true"], entrypoint=[],
                                                        network_mode="none", labels={"sparkfleet.role": "probe"})
        except _docker.APIError as exc:
            raise _docker.DockerFailure("reading files of image %s: %s" % (self.image, exc)) from exc
        return self

    def __exit__(self, *exc):
        try:
            self.container.remove(force=True)
        except _docker.APIError:
            pass

    def exists(self, path):
        try:
            _unused, stat = self.container.get_archive(path)
            return stat
        except _docker.NotFound:
            return None

    def read_tree(self, path, keep=None):
        """{path relative to ``path``: text} of the regular files under ``path`` (or ``path`` itself)."""
        try:
            stream, _unused = self.container.get_archive(path)
        except _docker.NotFound:
            return {}
        buf = io.BytesIO(b"".join(stream))
        out = {}
        with tarfile.open(fileobj=buf) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                rel = member.name.split("/", 1)[1] if "/" in member.name else ""
                if keep is not None and not keep(rel):
                    continue
                out[rel] = tar.extractfile(member).read().decode("utf-8", errors="replace")
        return out

    def read_paths(self, base, paths):
        """{path relative to ``base``: text} for each of ``paths`` (files, or directories ending in "/", whose
        .py files are read); one archive request each, so large neighbours (compiled extensions) never travel."""
        out = {}
        for rel in paths:
            if rel.endswith("/"):
                files = self.read_tree(posixpath.join(base, rel.rstrip("/")), keep=lambda r: r.endswith(".py"))
                out.update({posixpath.join(rel.rstrip("/"), r): t for r, t in files.items()})
            else:
                text = self.read_tree(posixpath.join(base, rel)).get("")
                if text is not None:
                    out[rel] = text
        return out

    def find_package(self, name):
        """The image's directory of Python package ``name`` (None when no known site directory has it)."""
        for site in SITE_DIRS:
            path = posixpath.join(site, name)
            if self.exists(posixpath.join(path, "__init__.py")):
                return path
        return None


def write_tree(files, root):
    """Write {relative path: text} under ``root`` (a scratch copy the patch engine can judge)."""
    for rel, text in files.items():
        target = os.path.join(root, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as fh:
            fh.write(text)
