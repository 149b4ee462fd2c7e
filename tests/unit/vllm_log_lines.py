"""vLLM startup log lines rendered from the releases' own logger format strings.

The format strings come from tests/unit/fixtures/vllm/log_formats.json (every logger call of vLLM
0.17.0-0.34.0, read from the PyPI sdists by tests/tools/vllm_fixtures.py); the watched source files from
index.json and files/. A line is a format with its placeholders filled (``fill``), wrapped in the prefix the
release writes (``wrap``): <=0.30 `LEVEL MM-DD HH:MM:SS [file:N] msg` behind decorate_logs'
`(Proc pid=N) `, >=0.31 the same prefix written by the log format itself, Ray's `(RayWorkerProc pid=N,
ip=A) ` in front of a worker's line, and the colours vLLM adds on a terminal.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"
CATALOGUE = json.loads((FIXTURES / "log_formats.json").read_text())
INDEX = json.loads((FIXTURES / "index.json").read_text())
RELEASES = list(INDEX)

# %-placeholders of the logging module (%(name)s included) and the f-string fields the extractor wrote as {...}.
PLACEHOLDER = re.compile(r"%%|%(?:\([^)]*\))?[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[diouxXeEfFgGcrsa]|\{\.\.\.\}")
LEVELS = {"debug": "DEBUG", "info": "INFO", "warning": "WARNING", "error": "ERROR", "critical": "CRITICAL",
          "exception": "ERROR"}


def vt(version):
    return tuple(int(x) for x in version.split("."))


def between(first, last):
    """The catalogued releases from first to last, both included."""
    return [r for r in RELEASES if vt(first) <= vt(r) <= vt(last)]


def source(version, rel):
    """The text of a watched source file of a release, or None when the release lacks it."""
    blob = INDEX[version].get(rel)
    return gzip.decompress((FIXTURES / "files" / blob).read_bytes()).decode() if blob else None


def placeholders(fmt):
    return [m.group(0) for m in PLACEHOLDER.finditer(fmt) if m.group(0) != "%%"]


def neutral(fmt):
    """Values that carry no fact: "x" for text, 1 for numbers."""
    return [1 if p[-1] in "diouxXeEfFgGc" else "x" for p in placeholders(fmt)]


def fill(fmt, values):
    """The message a format gives with these values, one per placeholder in order of appearance."""
    values = list(values)
    if len(values) != len(placeholders(fmt)):
        raise ValueError("%r has %d placeholders, %d values given" % (fmt, len(placeholders(fmt)), len(values)))
    it = iter(values)

    def one(m):
        spec = m.group(0)
        if spec == "%%":
            return "%"
        value = next(it)
        if spec == "{...}":
            return str(value)
        return re.sub(r"^%\([^)]*\)", "%", spec) % (value,)
    return PLACEHOLDER.sub(one, fmt)


def entries(rel=None, fmt=None, level=None):
    """Catalogue entries, filtered by file, exact format and level."""
    return [e for e in CATALOGUE if (rel is None or e["file"] == rel) and (fmt is None or e["format"] == fmt)
            and (level is None or e["level"] == level)]


def fill_config(template, values):
    """Fill VllmConfig.__str__ (a log_formats.json "__str__" entry): each {...} after `name=` takes
    values[name], the others a realistic value with the commas and brackets real configs print."""
    parts = template.split("{...}")
    out = [parts[0]]
    for part_before, part in zip(parts, parts[1:]):
        name = re.search(r"(\w+)=$", part_before)
        key = name.group(1) if name else ""
        out.append(str(values.get(key, DEFAULT_CONFIG.get(key, "x"))))
        out.append(part)
    return "".join(out)


DEFAULT_CONFIG = {
    "model": "'/root/.cache/huggingface/hub/models--org--m/snapshots/0123'",
    "speculative_config": "SpeculativeConfig(method='mtp', model='x', num_spec_tokens=1)",
    "quantization_config": "{'quant_algo': 'MIXED_PRECISION', 'kv_cache_quant_algo': 'FP8', 'x': 'a, b'}",
    "compilation_config": '{"mode": 0, "cudagraph_mode": "NONE", "pass_config": {"kv_cache_dtype": "auto"}}',
    "tensor_parallel_size": 8,
}


def engine_line(version, **values):
    """vLLM's `Initializing a V1 LLM engine (v%s) with config: %s` of this release, with its own
    VllmConfig.__str__ filled from values (kv_cache_dtype="fp8", quantization="modelopt_mixed", ...)."""
    (head,) = [e for e in entries("v1/engine/core.py", level="info")
               if e["format"].startswith("Initializing a V1 LLM engine") and version in e["releases"]]
    (conf,) = [e for e in entries("config/vllm.py", level="__str__") if version in e["releases"]]
    return fill(head["format"], (version, fill_config(conf["format"], values)))


def wrap(version, level, rel, body, who="engine", colour=False, relpath=False):
    """One log line as the release prints it: who is "engine" (the EngineCore process), "ray" (a Ray
    worker, Ray's own prefix in front) or "bare" (no process prefix: <=0.30 outside decorate_logs)."""
    lvl = LEVELS[level.split("_")[0]]
    where = rel if relpath else rel.rsplit("/", 1)[-1]
    stamp = "05-16 10:00:05"
    if colour:
        head = "\x1b[32m%s\x1b[0m \x1b[90m%s\x1b[0m \x1b[90m[%s:123]\x1b[0m " % (lvl, stamp, where)
    else:
        head = "%s %s [%s:123] " % (lvl, stamp, where)
    proc = "(EngineCore_DP0 pid=9) " if who == "engine" else "(RayWorkerProc pid=11) "
    if colour:
        proc = "\x1b[0;36m%s\x1b[0;0m " % proc.strip()
    if who == "bare":
        return head + body
    line = proc + head + body  # decorate_logs (<=0.30) and the >=0.31 format put it in the same place
    if who == "ray":
        line = "(RayWorkerProc pid=11, ip=192.168.0.12) " + (line if vt(version) >= (0, 31, 0) else head + body)
    return line


def variants(version, level, rel, body):
    """The prefix forms a checker must tolerate for one message of one release."""
    forms = [wrap(version, level, rel, body), wrap(version, level, rel, body, who="ray"),
             wrap(version, level, rel, body, colour=True, relpath=True)]
    if vt(version) < (0, 31, 0):
        forms.append(wrap(version, level, rel, body, who="bare"))
    return forms
