#!/usr/bin/env python3
"""Extract the vLLM source material the unit tests judge, from every release's sdist on PyPI.

Writes, under tests/unit/fixtures/vllm/:
  files/<sha256[:16]>.py.gz   each distinct content of a watched source file, once (gzip)
  index.json                  {release: {path inside the vllm package: blob name}} for every watched file
                              that the release has
  log_formats.json            every logger call in the release's vllm/**/*.py whose format string is a
                              literal (or an f-string, its fields shown as "{...}") and names a fact the
                              verify step reads (backends, kernels, quantization, KV cache), deduplicated
                              across releases: [{"file", "level", "format", "releases": [...]}]

Run it on a networked machine after a new vLLM release, then commit the result:
    .venv/bin/python tests/tools/vllm_fixtures.py            # every release in RELEASES
    .venv/bin/python tests/tools/vllm_fixtures.py 0.35.0     # add one

The sdists come from PyPI's simple index (JSON form), are checked against the index's sha256 and cached in
~/.cache/sparkfleet/sdists. Standard library only.
"""

from __future__ import annotations

import ast
import fnmatch
import gzip
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import urllib.request
from pathlib import Path

RELEASES = [
    "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0",
    "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0",
    "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0",
]

# Files (paths inside the vllm package, fnmatch patterns) that patch detectors and the stand-in read.
WATCHED = [
    "_version.py",
    "model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe.py",
    "model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py",
    "model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/*.py",
    "model_executor/layers/quantization/modelopt.py",
    "model_executor/layers/quantization/utils/marlin_utils_fp4.py",
    "model_executor/models/mimo_v2.py",
    "model_executor/models/mimo_v2_flash.py",
    "model_executor/layers/fused_moe/oracle/*.py",
]

# Logger calls worth keeping: the facts a startup log can prove about the chosen kernels.
LOG_FACT = re.compile(r"backend|kernel|GEMM|MoE|Marlin|WNA16|MXFP8|Mxfp8|NVFP4|NvFp4|FP8|KV cache|kv cache|"
                      r"kv_cache|quantiz|attention|Detected ModelOpt|Using ", re.I)
LOG_METHODS = {"debug", "info", "warning", "error", "critical", "exception", "info_once", "warning_once",
               "debug_once", "error_once"}

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "unit" / "fixtures" / "vllm"
CACHE = Path(os.environ.get("SPARKFLEET_CACHE", Path.home() / ".cache" / "sparkfleet")) / "sdists"
INDEX_URL = "https://pypi.org/simple/vllm/"


def sdist(version: str, files: list[dict]) -> Path:
    name = f"vllm-{version}.tar.gz"
    entry = next((f for f in files if f["filename"] == name), None)
    if entry is None:
        raise SystemExit(f"vLLM {version}: no sdist {name} on PyPI")
    path = CACHE / name
    if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != entry["hashes"]["sha256"]:
        CACHE.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(entry["url"], timeout=300) as resp:  # noqa: S310 (a fixed https URL)
            data = resp.read()
        if hashlib.sha256(data).hexdigest() != entry["hashes"]["sha256"]:
            raise SystemExit(f"{name}: sha256 differs from PyPI's index")
        path.write_bytes(data)
    return path


def render(node: ast.AST) -> str | None:
    """A logger format as text: a literal, an f-string with its fields as {...}, or literals joined by +."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{...}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = render(node.left), render(node.right)
        return None if left is None or right is None else left + right
    return None


def logger_calls(src: str):
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            continue
        if node.func.attr not in LOG_METHODS:
            continue
        owner = node.func.value
        if not (isinstance(owner, ast.Name) and "log" in owner.id.lower()):
            continue
        fmt = render(node.args[0])
        if fmt and LOG_FACT.search(fmt):
            yield node.func.attr, fmt


def main(argv: list[str]) -> int:
    req = urllib.request.Request(INDEX_URL, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 (a fixed https URL)
        files = json.load(resp)["files"]
    releases = argv or RELEASES
    (OUT / "files").mkdir(parents=True, exist_ok=True)
    index = json.loads((OUT / "index.json").read_text()) if (OUT / "index.json").exists() else {}
    formats_path = OUT / "log_formats.json"
    catalogue = {}
    if formats_path.exists():
        for e in json.loads(formats_path.read_text()):
            catalogue[(e["file"], e["level"], e["format"])] = set(e["releases"])
    for version in releases:
        path = sdist(version, files)
        prefix = f"vllm-{version}/vllm/"
        index[version] = {}
        for releases_of in catalogue.values():
            releases_of.discard(version)
        with tarfile.open(path) as tar:
            for member in tar:
                if not (member.isfile() and member.name.startswith(prefix) and member.name.endswith(".py")):
                    continue
                rel = member.name[len(prefix):]
                src = tar.extractfile(member).read()
                if any(fnmatch.fnmatchcase(rel, pat) for pat in WATCHED):
                    blob = hashlib.sha256(src).hexdigest()[:16] + ".py.gz"
                    if not (OUT / "files" / blob).exists():
                        buf = io.BytesIO()
                        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
                            gz.write(src)
                        (OUT / "files" / blob).write_bytes(buf.getvalue())
                    index[version][rel] = blob
                for level, fmt in logger_calls(src.decode("utf-8", "replace")):
                    catalogue.setdefault((rel, level, fmt), set()).add(version)
        print(f"{version}: {len(index[version])} watched files", flush=True)
    order = {v: i for i, v in enumerate(sorted(index, key=lambda v: tuple(int(x) for x in v.split("."))))}
    (OUT / "index.json").write_text(json.dumps({v: index[v] for v in sorted(index, key=order.get)}, indent=1,
                                               sort_keys=False) + "\n")
    entries = [{"file": f, "level": lvl, "format": fmt, "releases": sorted(rs, key=order.get)}
               for (f, lvl, fmt), rs in sorted(catalogue.items()) if rs]
    formats_path.write_text(json.dumps(entries, indent=0, ensure_ascii=False) + "\n")
    used = {b for files_ in index.values() for b in files_.values()}
    for stale in (OUT / "files").iterdir():
        if stale.name not in used:
            stale.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
