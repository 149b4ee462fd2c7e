"""Extract the vLLM source material the unit tests judge, from every release's sdist on PyPI.

Writes, under tests/unit/fixtures/vllm/:
  files/<sha256[:16]>.py.gz   each distinct content of a watched source file, once (gzip)
  index.json                  {release: {path inside the vllm package: blob name}} for every watched file
                              that the release has
  log_formats.json            every logger call in the release's vllm/**/*.py whose format string is a
                              literal (or an f-string, its fields shown as "{...}") and names a fact the
                              verify step reads (backends, kernels, quantization, KV cache), deduplicated
                              across releases: [{"file", "level", "format", "releases": [...]}]. Also
                              recorded, under the logger call's file: formats a helper function returns
                              (`logger.info_once(_make_log_backend(b))`, `oracle.make_log_backend(...)`:
                              every string return of that function, looked up in the same module first, then
                              in the one module of the release that defines it) and formats passed in by
                              keyword (`make_moe_kernel(..., experts_log="Using %s")` feeding
                              `logger.info_once(experts_log, ...)`) or by a local variable of the calling
                              function (`message = "..."; logger.info(message, ...)`). One entry with level
                              "__str__" holds `VllmConfig.__str__` (config/vllm.py), the text that fills the
                              second %s of "Initializing a V1 LLM engine (v%s) with config: %s".

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
                      r"kv_cache|quantiz|attention|Detected ModelOpt|Using |Initializing a V1 LLM engine|"
                      # the boot's phases and failures, which the verify step times and reports
                      r"server version|Loading weights took|Model loading took|init engine|placement group|"
                      r"died unexpectedly|failed to start", re.I)
# Objects whose str() a fact-bearing logger call prints: (file, class) -> recorded as level "__str__".
LOG_STR_CLASSES = {("config/vllm.py", "VllmConfig")}
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


def _own_nodes(fn: ast.AST):
    """The nodes of a function body, not descending into nested functions or classes."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


class LogScan:
    """The logger calls of one release: literal formats, formats a helper function builds, formats passed in
    by keyword, and the str() of LOG_STR_CLASSES. Feed every module with add(), then read results()."""

    def __init__(self) -> None:
        self.found: set[tuple[str, str, str]] = set()
        self.returns: dict[tuple[str, str], set[str]] = {}  # (module, function) -> formats it returns
        self.keywords: dict[str, set[str]] = {}  # keyword name -> string literals passed by it
        self.by_call: list[tuple[str, str, str]] = []  # (module, level, helper function name)
        self.by_param: list[tuple[str, str, str]] = []  # (module, level, parameter name)

    def add(self, rel: str, src: str) -> None:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            return
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                rets = {render(n.value) for n in _own_nodes(node) if isinstance(n, ast.Return) and n.value}
                rets.discard(None)
                if rets:
                    self.returns.setdefault((rel, node.name), set()).update(rets)
                params = {a.arg for a in node.args.args + node.args.kwonlyargs}
                local = {}  # message = "vLLM server version %s, ..." ; logger.info(message, ...)
                for inner in _own_nodes(node):
                    if isinstance(inner, ast.Assign) and len(inner.targets) == 1 and \
                            isinstance(inner.targets[0], ast.Name) and render(inner.value) is not None:
                        local.setdefault(inner.targets[0].id, set()).add(render(inner.value))
                for inner in _own_nodes(node):
                    level, arg = self._logger_call(inner)
                    if isinstance(arg, ast.Name) and arg.id in local:
                        self.found.update((rel, level, fmt) for fmt in local[arg.id])
                    elif isinstance(arg, ast.Name) and arg.id in params:
                        self.by_param.append((rel, level, arg.id))
            elif isinstance(node, ast.ClassDef) and (rel, node.name) in LOG_STR_CLASSES:
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name == "__str__":
                        for ret in (n for n in _own_nodes(fn) if isinstance(n, ast.Return) and n.value):
                            text = render(ret.value)
                            if text:
                                self.found.add((rel, "__str__", text))
            elif isinstance(node, ast.keyword) and node.arg:
                text = render(node.value)
                if text is not None:
                    self.keywords.setdefault(node.arg, set()).add(text)
            level, arg = self._logger_call(node)
            if level is None:
                continue
            fmt = render(arg)
            if fmt is not None:
                self.found.add((rel, level, fmt))
            elif isinstance(arg, ast.Call):
                name = getattr(arg.func, "id", None) or getattr(arg.func, "attr", None)
                if name:
                    self.by_call.append((rel, level, name))

    @staticmethod
    def _logger_call(node: ast.AST):
        """(level, format argument) of a `<...log...>.<level>(fmt, ...)` call, else (None, None)."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            return None, None
        owner = node.func.value
        if node.func.attr not in LOG_METHODS or not (isinstance(owner, ast.Name) and
                                                     ("log" in owner.id.lower() or owner.id == "lgr")):
            return None, None
        return node.func.attr, node.args[0]

    def results(self):
        found = set(self.found)
        for rel, level, name in self.by_call:
            fmts = self.returns.get((rel, name))
            if fmts is None:
                defining = [key for key in self.returns if key[1] == name]
                fmts = self.returns[defining[0]] if len(defining) == 1 else set()
            found.update((rel, level, fmt) for fmt in fmts)
        for rel, level, param in self.by_param:
            found.update((rel, level, fmt) for fmt in self.keywords.get(param, ()))
        return sorted(entry for entry in found if entry[1] == "__str__" or LOG_FACT.search(entry[2]))


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
        scan = LogScan()
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
                scan.add(rel, src.decode("utf-8", "replace"))
        for entry in scan.results():
            catalogue.setdefault(entry, set()).add(version)
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
