# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The vLLM startup log lines a checker can rely on (0.10-0.34), and pure readers over them.

Only message bodies are matched: the prefix changed in 0.31 and Ray workers add their own.
"""

from __future__ import annotations

import re

PATTERNS = {
    "version": re.compile(r"vLLM server version (\S+), serving model (\S+)"),
    "weights_loaded": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "model_loaded": re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds"),
    "kv_cache_memory": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "kv_cache_tokens": re.compile(r"(?:\w+(?: \+ host)? )?KV cache size: ([\d,]+) tokens"),
    "engine_ready": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
    "app_started": re.compile(r"Application startup complete\."),
    "pg_waiting": re.compile(r"Waiting for creating a placement group of specs for (\d+) seconds"),
    "worker_died": re.compile(r"RayWorkerProc rank=(\d+) died unexpectedly"),
    "engine_failed": re.compile(r"Engine core initialization failed|EngineCore failed to start(.*)"),
    "mxfp8_gemm": re.compile(r"Using (\w+) for MXFP8 GEMM"),
    "nvfp4_moe": re.compile(r"Using '?(\w+)'? NvFp4 MoE backend"),
    "wna16_marlin_method": re.compile(r"Using CompressedTensorsWNA16MarlinMoEMethod"),
    "wna16_marlin_old": re.compile(r"Using Marlin backend for WNA16 MoE"),
    "wna16_backend": re.compile(r"Using '?(\w+)'? WNA16 MoE backend"),
    "wna16_triton_experts": re.compile(r"Using TritonWNA16Experts"),
}

PHASES = ("weights_loaded", "model_loaded", "engine_ready", "app_started")


def parse(text):
    """Read a startup log into facts: version, phases with their figures, kernels chosen, errors."""
    facts = {"phases": [], "errors": [], "moe_backend": None, "mxfp8_gemm": None}
    for line in text.splitlines():
        for key, rx in PATTERNS.items():
            m = rx.search(line)
            if not m:
                continue
            if key == "version":
                facts["vllm_version"], facts["model"] = m.group(1), m.group(2)
            elif key in ("weights_loaded", "engine_ready"):
                facts[key + "_s"] = float(m.group(1))
            elif key == "model_loaded":
                facts["model_gib"], facts["model_loaded_s"] = float(m.group(1)), float(m.group(2))
            elif key == "kv_cache_memory":
                facts["kv_cache_gib"] = float(m.group(1))
            elif key == "kv_cache_tokens":
                facts["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
            elif key == "pg_waiting":
                facts["pg_waiting_s"] = int(m.group(1))
            elif key == "worker_died":
                facts["errors"].append("Ray worker rank %s died" % m.group(1))
            elif key == "engine_failed":
                facts["errors"].append(line.split("] ", 1)[-1].strip())
            elif key == "mxfp8_gemm":
                facts["mxfp8_gemm"] = m.group(1)
            elif key == "nvfp4_moe":
                facts["moe_backend"] = m.group(1).lower()
            elif key in ("wna16_marlin_method", "wna16_marlin_old"):
                facts["moe_backend"] = facts["moe_backend"] or "marlin"
            elif key == "wna16_backend":
                facts["moe_backend"] = m.group(1).lower()
            elif key == "wna16_triton_experts":
                facts["moe_backend"] = "triton"
            if key in PHASES and key not in facts["phases"]:
                facts["phases"].append(key)
    return facts


def backend_verdict(requested, facts, expect_mxfp8=False):
    """Compare the requested MoE backend with the one the logs show. Returns a list of problems."""
    problems = []
    resolved = facts.get("moe_backend")
    if requested and requested != "auto":
        if resolved is None:
            problems.append("requested --moe-backend %s, but no MoE backend line was logged" % requested)
        elif resolved != requested.lower():
            problems.append("requested --moe-backend %s, but vLLM resolved %s" % (requested, resolved.upper()))
    if expect_mxfp8 and not facts.get("mxfp8_gemm"):
        problems.append("no 'Using ... for MXFP8 GEMM' line: MXFP8 attention fell back to UnquantizedLinearMethod")
    return problems
