# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The vLLM startup log lines a checker can rely on, pure readers over them, and verdicts on the kernels.

Only message bodies are matched (``message()``): the line prefix changed in 0.31 and Ray workers add their
own. Accepted around a body, in any combination: ANSI colours; ``(EngineCore_DP0 pid=9) `` from
decorate_logs (<=0.30) or from the log format itself (>=0.31); Ray's ``(RayWorkerProc pid=11,
ip=192.168.0.12) ``; VLLM_LOGGING_PREFIX; and ``LEVEL MM-DD HH:MM:SS [file.py:N] ``.

What a startup log can state, by release. Read from every logger call of vLLM 0.17.0-0.34.0 (the PyPI
sdists, tests/unit/fixtures/vllm/log_formats.json); tests/unit/test_vllm_logs.py renders each format below
for every release that has it, parses it back, and fails when a format leaves a release listed here. Only
INFO and WARNING calls count: a DEBUG line is read when present but never expected.

  fact                 form          releases        vLLM's format  (file under vllm/; what fills it)
  -------------------  ------------  --------------  -------------------------------------------------------------
  attention_backend    attn_auto     0.17.0-0.34.0   Using %s attention backend out of potential backends: %s.
                                                       (platforms/cuda.py; the selector's own choice)
                       attn_chosen   0.17.0-0.34.0   Using %s backend.
                                                       (platforms/cuda.py; --attention-backend given: %s is the
                                                       enum, "AttentionBackendEnum.TRITON_ATTN")
                       attn_model    0.20.0-0.20.2   Using FlashAttentionDiffKVBackend for attention.
                                                       (model_executor/models/mimo_v2_flash.py)
                                     0.21.0-0.23.0   Using FlashAttentionDiffKVBackend for attention.
                                                       (model_executor/models/mimo_v2.py)
                                     0.24.0-0.34.0   Using %s for attention.
                                                       (model_executor/models/mimo_v2.py; "TRITON_ATTN_DIFFKV")
  kv_cache_dtype       kv_engine     0.17.0-0.34.0   Initializing a V1 LLM engine (v%s) with config: %s
                                                       (v1/engine/core.py; the second %s is VllmConfig.__str__)
                                     0.17.0-0.34.0   ..., kv_cache_dtype={...}, ...
                                                       (config/vllm.py, VllmConfig.__str__; the configured value)
                       kv_store      0.17.0-0.19.1   Using fp8 data type to store kv cache. ...
                                                       (config/cache.py; any fp8* cache dtype)
                                     0.20.0-0.34.0   Using %s data type to store kv cache. ...
                                                       (config/cache.py; two wordings; quantized caches only)
                       kv_layer      0.19.0-0.19.1   Layer %s: kv_cache_dtype=%s, sliding_window=%s
                                                       (model_executor/layers/attention/attention.py; DEBUG later)
  quantization         quant_engine  0.17.0-0.34.0   Initializing a V1 LLM engine (v%s) with config: %s
                                                       (v1/engine/core.py)
                                     0.17.0-0.34.0   ..., quantization={...}, ...
                                                       (config/vllm.py, VllmConfig.__str__; "modelopt_mixed",
                                                       "compressed-tensors", "None")
  mxfp8_linear_kernel  mxfp8_backend 0.17.0-0.19.1   Using %s backend for MXFP8 GEMM
                                                       (model_executor/layers/quantization/modelopt.py;
                                                       "flashinfer-cutlass", an Mxfp8LinearBackend value)
                                     0.19.0-0.19.1   Using %s backend for MXFP8 GEMM
                                                       (model_executor/layers/quantization/mxfp8.py)
                       mxfp8_kernel  0.20.0-0.34.0   Using %s for MXFP8 GEMM
                                                       (model_executor/kernels/linear/__init__.py; the class,
                                                       "FlashInferCutlassMxfp8LinearKernel")
  nvfp4_linear_kernel  nvfp4_kernel  0.17.0-0.19.1   Using {backend} for NVFP4 GEMM
                                                       (model_executor/layers/quantization/utils/nvfp4_utils.py;
                                                       "NvFp4LinearBackend.FLASHINFER_CUTLASS")
                                     0.20.0-0.34.0   Using %s for NVFP4 GEMM
                                                       (model_executor/kernels/linear/__init__.py; the class)
  moe_backend          moe_oracle    0.17.0-0.33.0   Using '{backend}' NvFp4 MoE backend out of potential backends: ...
                                                       (model_executor/layers/fused_moe/oracle/nvfp4.py)
                                     0.18.0-0.33.0   Using '%s' MxFp8 MoE backend.  (oracle/mxfp8.py)
                                     0.18.0-0.33.0   Using '%s' MxFp8 MoE backend (user-requested).  (oracle/mxfp8.py)
                                     0.20.0-0.33.0   Using '{backend}' WNA16 MoE backend.  (oracle/int_wna16.py; the
                                                       compressed-tensors WNA16 method uses the oracle from 0.23.0)
                                     0.17.0-0.33.0   Using {backend} Fp8 MoE backend out of potential backends: {...}.
                                                       (oracle/fp8.py)
                                     0.19.0-0.33.0   Using '{backend}' Mxfp4 MoE backend.  (oracle/mxfp4.py)
                                     0.20.0-0.33.0   Using {backend} Int8 MoE backend out of potential backends: ...
                                                       (oracle/int8.py)
                                     0.20.0-0.33.0   Using {backend} Unquantized MoE backend out of potential ...
                                                       (oracle/unquantized.py)
                                     0.22.0-0.34.0   Using %s W4A8 MoE backend.  (oracle/w4a8.py)
                                     0.23.0-0.33.0   Using {backend} W4A8 Int8 MoE backend out of potential ...
                                                       (oracle/w4a8_int8.py)
                                     0.34.0-0.34.0   Using {backend} {oracle} MoE {lora}backend{available}.
                                                       (oracle/base.py: one message for every oracle, unquoted,
                                                       "Using TRITON WNA16 MoE backend.")
                                     0.25.0-0.30.0   Using {experts} Humming MoE backend.
                                                       (quantization/utils/humming_utils.py)
                                     0.31.0-0.34.0   Using {experts} Humming MoE backend.
                                                       (quantization/utils/humming/moe.py)
                       moe_wna16     0.17.0-0.19.1   Using {Marlin|Flashinfer} backend for WNA16 MoE (group_size=32,
                                                       num_bits=4)  (quantization/compressed_tensors/
                                                       compressed_tensors_moe.py)
                                     0.20.0-0.22.1   the same  (.../compressed_tensors_moe/
                                                       compressed_tensors_moe_wna16_marlin.py)
                       moe_experts   0.27.0-0.33.0   Using %s  ("Using TritonWNA16Experts": oracle/int_wna16.py logs
                                                       experts_cls.__name__)
                                     0.34.0-0.34.0   Using %s  (oracle/base.py, experts_log="Using %s" from
                                                       int_wna16.py)
                                     0.20.0-0.34.0   Using Nvfp4QuantizationEmulationTritonExperts MOE backend. ...
                                                       (fused_moe/experts/nvfp4_emulation_moe.py)
                                     0.20.0-0.34.0   Using OCP_MXQuantizationEmulationTritonExperts MOE backend. ...
                                                       (fused_moe/experts/ocp_mx_emulation_moe.py)
                                     0.24.0-0.34.0   Using Mxfp8EmulationTritonExperts MoE backend. ...
                                                       (fused_moe/experts/mxfp8_emulation_moe.py)
                                     0.26.0-0.34.0   Using Int4EmulationTritonExperts MoE backend. ...
                                                       (fused_moe/experts/int4_emulation_moe.py)
                                     0.20.0-0.34.0   Using MarlinExperts for MXFP4 MoE  (compressed-tensors
                                                       compressed_tensors_moe_w4a4_mxfp4.py)
                       moe_method    0.17.0-0.19.1   Using CompressedTensorsWNA16MarlinMoEMethod
                                                       (quantization/compressed_tensors/compressed_tensors_moe.py)
                                     0.17.0-0.19.1   Using CompressedTensorsWNA16MoEMethod  (the same file)
                                     0.20.0-0.26.0   Using CompressedTensorsWNA16MarlinMoEMethod
                                                       (.../compressed_tensors_moe/compressed_tensors_moe.py)
                                     0.20.0-0.34.0   Using CompressedTensorsWNA16MoEMethod  (the same file; the
                                                       Triton path up to 0.22.1, the oracle's caller after)
                                     0.26.0-0.26.0   Using CompressedTensorsWNA16MarlinMoEMethod (emulation backend
                                                       requested)  (the same file)
                                     0.27.0-0.34.0   Using CompressedTensorsWNA16MoEMethod (emulation backend
                                                       requested)  (the same file)

So within 0.17.0-0.34.0 every fact is loggable in every release; which line states it changes (above).
A release outside that range (or a log without a version) is not catalogued: a fact it does not state is
"unverifiable", never "ok". When several forms of one fact appear, the lowest rank wins (the oracle's line
over the experts class over the method's name) and every value of that rank must match.

Normalisation before comparing (``canonical()``):
  * every fact: case and the separators "-", "_", "." are ignored ("MARLIN" = "marlin",
    "flashinfer-cutlass" = "flashinfer_cutlass" = "FLASHINFER_CUTLASS"), and a logged enum's class is dropped
    ("AttentionBackendEnum.TRITON_ATTN" = "TRITON_ATTN", "NvFp4LinearBackend.MARLIN" = "MARLIN");
  * attention_backend: a class name equals its registry name: "Backend" is dropped and "Attention" reads
    "Attn" (FlashAttentionDiffKVBackend = FLASH_ATTN_DIFFKV, TritonAttentionDiffKVBackend = TritonAttnDiffKV
    = TRITON_ATTN_DIFFKV), the rule the registry's entries follow (v1/attention/backends/registry.py);
  * mxfp8_linear_kernel / nvfp4_linear_kernel: "LinearKernel", "Kernel", "Backend" and the format tag
    ("Mxfp8", "MxFp8", "NvFp4") are dropped (flashinfer_cutlass = FlashInferCutlassMxfp8LinearKernel =
    "flashinfer-cutlass"; cutlass = CutlassNvFp4LinearKernel = NvFp4LinearBackend.VLLM_CUTLASS);
  * moe_backend: VLLM_CUTLASS = cutlass (the oracles map --moe-backend cutlass to it); a BATCHED_ variant
    (BATCHED_MARLIN, FLASHINFER_CUTEDSL_BATCHED) = its base backend, vLLM picks it itself for the batched
    activation format; DEEPGEMM = deep_gemm; the format tag of DEEPGEMM_MXFP4-style names is dropped; an
    experts class names its backend (TritonWNA16Experts = triton, MarlinExperts = marlin, any
    *Emulation*Experts = emulation);
  * kv_cache_dtype: fp8 = fp8_e4m3 (vLLM's CacheConfig: "CUDA 11.8+ supports fp8 (=fp8_e4m3)"), bf16 =
    bfloat16, fp16 = half = float16; fp8_e5m2, fp8_inc, fp8_ds_mla stay distinct;
  * quantization: compressed-tensors = compressed_tensors; "none" is what an unquantized engine logs.
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
    "rank_assigned": re.compile(r"^rank (\d+) in world size \d+ is assigned as "),
    "engine_failed": re.compile(r"Engine core initialization failed|EngineCore failed to start(.*)"),
    "ray_placement": re.compile(r"No current placement group found|Using the existing placement group|"
                                r"Waiting for creating a placement group"),
    "load_started": re.compile(r"Starting to load model "),
    "shards": re.compile(r"Loading safetensors checkpoint shards:\s*\d+% Completed \| (\d+)/(\d+)"),
    "graph_capture": re.compile(r"Capturing CUDA graphs|Graph capturing finished"),
}

PHASES = ("weights_loaded", "model_loaded", "engine_ready", "app_started")
# Steps of the boot's progress report (stage()); recorded in "phases" too, in the order they were reached.
PROGRESS = ("ray_placement", "load_started", "graph_capture")

# The releases whose logger calls were read (tests/tools/vllm_fixtures.py RELEASES).
RELEASES = (
    "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0",
    "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0",
    "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0",
)
CATALOGUED = (RELEASES[0], RELEASES[-1])

_ENGINE = re.compile(r"^Initializing a V1 LLM engine \(v(\S+)\) with config: (.*)$")


def _engine_field(name):
    rx = re.compile(r"(?:^|, )%s=([\w.-]+)(?=,|$)" % name)

    def read(m):
        found = rx.search(m.group(2))
        return found.group(1) if found else None
    return read


def experts_backend(name):
    """The backend an experts class stands for: TritonWNA16Experts -> triton, *Emulation*Experts -> emulation."""
    if "Emulation" in name:
        return "emulation"
    return re.sub(r"Batched|WNA16|Experts", "", name).lower() or None


def _first(m):
    return m.group(1)


def _moe_name(m):
    name = m.group(1).strip("'")
    return experts_backend(name) if name.endswith("Experts") else name.lower()


def _wna16_method(m):
    if m.group(2):
        return "emulation"
    return "marlin" if m.group(1) else "triton"


_CT_MOE = "model_executor/layers/quantization/compressed_tensors/"
_ORACLE = "model_executor/layers/fused_moe/oracle/"
_EXPERTS = "model_executor/layers/fused_moe/experts/"
_QUTILS = "model_executor/layers/quantization/utils/"
_STR = "config/vllm.py:VllmConfig.__str__"

# The forms a fact is logged in: (fact, form, rank, regex on the message body, reader of the match,
# documented formats). A documented format is (file in the vllm package, vLLM's format string as
# log_formats.json writes it, first release, last release); a format ending in "..." stands for every
# format that begins so; a file ending in ".__str__" names text inside the str() the engine line prints.
# Only INFO/WARNING formats are documented: they decide which releases can log a fact (loggable()).
FORMS = (
    ("attention_backend", "attn_auto", 0,
     re.compile(r"^Using (\w+) attention backend out of potential backends: "), _first,
     [("platforms/cuda.py", "Using %s attention backend out of potential backends: %s.", "0.17.0", "0.34.0")]),
    ("attention_backend", "attn_chosen", 0,
     re.compile(r"^Using (?:AttentionBackendEnum|_Backend)\.(\w+) backend\.$"), _first,
     [("platforms/cuda.py", "Using %s backend.", "0.17.0", "0.34.0")]),
    ("attention_backend", "attn_model", 0,
     re.compile(r"^Using (\w+) for attention\.$"), _first,
     [("model_executor/models/mimo_v2_flash.py", "Using FlashAttentionDiffKVBackend for attention.",
       "0.20.0", "0.20.2"),
      ("model_executor/models/mimo_v2.py", "Using FlashAttentionDiffKVBackend for attention.", "0.21.0", "0.23.0"),
      ("model_executor/models/mimo_v2.py", "Using %s for attention.", "0.24.0", "0.34.0")]),
    ("kv_cache_dtype", "kv_engine", 0, _ENGINE, _engine_field("kv_cache_dtype"),
     [("v1/engine/core.py", "Initializing a V1 LLM engine (v%s) with config: %s", "0.17.0", "0.34.0"),
      (_STR, ", kv_cache_dtype={...}, ", "0.17.0", "0.34.0")]),
    ("kv_cache_dtype", "kv_store", 1,
     re.compile(r"^Using ([\w.-]+) data type to store kv cache\."), _first,
     [("config/cache.py", "Using fp8 data type to store kv cache. ...", "0.17.0", "0.19.1"),
      ("config/cache.py", "Using %s data type to store kv cache. ...", "0.20.0", "0.34.0")]),
    ("kv_cache_dtype", "kv_layer", 2,
     re.compile(r"^Layer \S+: kv_cache_dtype=([\w.-]+)"), _first,
     [("model_executor/layers/attention/attention.py", "Layer %s: kv_cache_dtype=%s, sliding_window=%s",
       "0.19.0", "0.19.1")]),
    ("quantization", "quant_engine", 0, _ENGINE, _engine_field("quantization"),
     [("v1/engine/core.py", "Initializing a V1 LLM engine (v%s) with config: %s", "0.17.0", "0.34.0"),
      (_STR, ", quantization={...}, ", "0.17.0", "0.34.0")]),
    ("mxfp8_linear_kernel", "mxfp8_backend", 0,
     re.compile(r"^Using ([\w.-]+) backend for MXFP8 GEMM$"), _first,
     [("model_executor/layers/quantization/modelopt.py", "Using %s backend for MXFP8 GEMM", "0.17.0", "0.19.1"),
      ("model_executor/layers/quantization/mxfp8.py", "Using %s backend for MXFP8 GEMM", "0.19.0", "0.19.1")]),
    ("mxfp8_linear_kernel", "mxfp8_kernel", 0,
     re.compile(r"^Using ([\w.-]+) for MXFP8 GEMM$"), _first,
     [("model_executor/kernels/linear/__init__.py", "Using %s for MXFP8 GEMM", "0.20.0", "0.34.0")]),
    ("nvfp4_linear_kernel", "nvfp4_kernel", 0,
     re.compile(r"^Using ([\w.-]+) for NVFP4 GEMM$"), _first,
     [("model_executor/layers/quantization/utils/nvfp4_utils.py", "Using {...} for NVFP4 GEMM", "0.17.0", "0.19.1"),
      ("model_executor/kernels/linear/__init__.py", "Using %s for NVFP4 GEMM", "0.20.0", "0.34.0")]),
    ("moe_backend", "moe_oracle", 0,
     re.compile(r"^Using ('?[\w.-]+'?) [A-Z]\w*(?: Int8)? MoE backend\b"), _moe_name,
     [(_ORACLE + "nvfp4.py", "Using '{...}' NvFp4 MoE backend out of potential backends: {...}.",
       "0.17.0", "0.33.0"),
      (_ORACLE + "mxfp8.py", "Using '%s' MxFp8 MoE backend.", "0.18.0", "0.33.0"),
      (_ORACLE + "mxfp8.py", "Using '%s' MxFp8 MoE backend (user-requested).", "0.18.0", "0.33.0"),
      (_ORACLE + "int_wna16.py", "Using '{...}' WNA16 MoE backend.", "0.20.0", "0.33.0"),
      (_ORACLE + "fp8.py", "Using {...} Fp8 MoE backend out of potential backends: {...}.", "0.17.0", "0.33.0"),
      (_ORACLE + "mxfp4.py", "Using '{...}' Mxfp4 MoE backend.", "0.19.0", "0.33.0"),
      (_ORACLE + "int8.py", "Using {...} Int8 MoE backend out of potential backends: {...}.", "0.20.0", "0.33.0"),
      (_ORACLE + "unquantized.py", "Using {...} Unquantized MoE backend out of potential backends: {...}.",
       "0.20.0", "0.33.0"),
      (_ORACLE + "w4a8.py", "Using %s W4A8 MoE backend.", "0.22.0", "0.34.0"),
      (_ORACLE + "w4a8_int8.py", "Using {...} W4A8 Int8 MoE backend out of potential backends: {...}.",
       "0.23.0", "0.33.0"),
      (_ORACLE + "base.py", "Using {...} {...} MoE {...}backend{...}.", "0.34.0", "0.34.0"),
      (_QUTILS + "humming_utils.py", "Using {...} Humming MoE backend.", "0.25.0", "0.30.0"),
      (_QUTILS + "humming/moe.py", "Using {...} Humming MoE backend.", "0.31.0", "0.34.0")]),
    ("moe_backend", "moe_wna16", 0,
     re.compile(r"^Using (\w+) backend for WNA16 MoE \("), lambda m: m.group(1).lower(),
     [(_CT_MOE + "compressed_tensors_moe.py",
       "Using {...} backend for WNA16 MoE (group_size={...}, num_bits={...})", "0.17.0", "0.19.1"),
      (_CT_MOE + "compressed_tensors_moe/compressed_tensors_moe_wna16_marlin.py",
       "Using {...} backend for WNA16 MoE (group_size={...}, num_bits={...})", "0.20.0", "0.22.1")]),
    ("moe_backend", "moe_experts", 1,
     re.compile(r"^Using (\w+Experts)(?: MoE backend\b| MOE backend\b| for \w+ MoE$|$)"),
     lambda m: experts_backend(m.group(1)),
     [(_ORACLE + "int_wna16.py", "Using %s", "0.27.0", "0.33.0"),  # ("Using %s", experts_cls.__name__)
      (_ORACLE + "base.py", "Using %s", "0.34.0", "0.34.0"),  # experts_log="Using %s" from int_wna16.py
      (_EXPERTS + "nvfp4_emulation_moe.py", "Using Nvfp4QuantizationEmulationTritonExperts MOE backend. ...",
       "0.20.0", "0.34.0"),
      (_EXPERTS + "ocp_mx_emulation_moe.py", "Using OCP_MXQuantizationEmulationTritonExperts MOE backend. ...",
       "0.20.0", "0.34.0"),
      (_EXPERTS + "mxfp8_emulation_moe.py", "Using Mxfp8EmulationTritonExperts MoE backend. ...", "0.24.0", "0.34.0"),
      (_EXPERTS + "int4_emulation_moe.py", "Using Int4EmulationTritonExperts MoE backend. ...", "0.26.0", "0.34.0"),
      (_CT_MOE + "compressed_tensors_moe/compressed_tensors_moe_w4a4_mxfp4.py", "Using MarlinExperts for MXFP4 MoE",
       "0.20.0", "0.34.0")]),
    ("moe_backend", "moe_method", 2,
     re.compile(r"^Using CompressedTensorsWNA16(Marlin)?MoEMethod( \(emulation backend requested\))?$"),
     _wna16_method,
     [(_CT_MOE + "compressed_tensors_moe.py", "Using CompressedTensorsWNA16MarlinMoEMethod", "0.17.0", "0.19.1"),
      (_CT_MOE + "compressed_tensors_moe.py", "Using CompressedTensorsWNA16MoEMethod", "0.17.0", "0.19.1"),
      (_CT_MOE + "compressed_tensors_moe/compressed_tensors_moe.py", "Using CompressedTensorsWNA16MarlinMoEMethod",
       "0.20.0", "0.26.0"),
      (_CT_MOE + "compressed_tensors_moe/compressed_tensors_moe.py", "Using CompressedTensorsWNA16MoEMethod",
       "0.20.0", "0.34.0"),
      (_CT_MOE + "compressed_tensors_moe/compressed_tensors_moe.py",
       "Using CompressedTensorsWNA16MarlinMoEMethod (emulation backend requested)", "0.26.0", "0.26.0"),
      (_CT_MOE + "compressed_tensors_moe/compressed_tensors_moe.py",
       "Using CompressedTensorsWNA16MoEMethod (emulation backend requested)", "0.27.0", "0.34.0")]),
)

FACTS = ("moe_backend", "attention_backend", "kv_cache_dtype", "quantization", "mxfp8_linear_kernel",
         "nvfp4_linear_kernel")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_HEAD = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ")
_PROC = re.compile(r"^(?:\([^()]*\bpid=\d+[^()]*\)\s*)+")
# Ray's prefix on a worker's line names the node it runs on: "(RayWorkerProc pid=123, ip=10.0.0.2)".
_RAY_IP = re.compile(r"^\([^()]*\bpid=\d+, ip=([0-9A-Fa-f.:]+)")


def _release_tuple(version):
    """(major, minor) of a version string, (0, 0) when unknown."""
    m = re.match(r"(\d+)\.(\d+)", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def message(line):
    """The message body of one log line, whatever prefix vLLM, decorate_logs or Ray put before it."""
    line = _ANSI.sub("", line).rstrip("\r\n")
    m = _HEAD.search(line)
    if m:
        return line[m.end():]
    return _PROC.sub("", line)


def parse(text):
    """Read a startup log into facts: version, phases with their figures, kernels chosen, errors.

    Kernel facts (FACTS) hold the winning value as logged (moe_backend lower-cased), None when no line
    states it; "<fact>s" lists every distinct value of the winning rank (e.g. attention_backends).
    """
    return LogReader().feed(text, final=True).facts()


class LogReader:
    """The same reading, fed piece by piece: a boot follower hands it only the lines it has not seen.

    Its whole state is plain data (``state()`` / ``LogReader(state)``), so a follower that polls from
    separate processes keeps it between polls instead of reading the log again from the start.
    """

    def __init__(self, state=None):
        state = state or {}
        self.raw = state.get("raw") or {"phases": [], "errors": [], "moe_backend": None}
        self.raw.setdefault("rank_ips", {})
        self.hits = state.get("hits") or {}
        self.order = state.get("order", 0)
        self.partial = state.get("partial", "")

    def state(self):
        return {"raw": self.raw, "hits": self.hits, "order": self.order, "partial": self.partial}

    def feed(self, text, final=False):
        """Read the complete lines of ``text`` (a trailing partial line waits for the rest, unless final)."""
        lines = (self.partial + text).splitlines(keepends=True)
        self.partial = ""
        if lines and not final and not lines[-1].endswith(("\n", "\r")):
            self.partial = lines.pop()
        for line in lines:
            self._line(line)
        return self

    def _line(self, line):
        facts, order = self.raw, self.order
        self.order += 1
        body = message(line)
        for key, rx in PATTERNS.items():
            m = rx.search(body)
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
                ip = facts["rank_ips"].get(m.group(1))
                facts["errors"].append("Ray worker rank %s died%s" % (m.group(1), " (on %s)" % ip if ip else ""))
            elif key == "rank_assigned":
                ip = _RAY_IP.match(_ANSI.sub("", line))
                if ip:
                    facts["rank_ips"][m.group(1)] = ip.group(1)
            elif key == "engine_failed":
                facts["errors"].append(body.strip())
            elif key == "shards":
                facts["shards_loaded"], facts["shards_total"] = int(m.group(1)), int(m.group(2))
            if key in PHASES + PROGRESS and key not in facts["phases"]:
                facts["phases"].append(key)
        engine = _ENGINE.match(body)
        if engine and "vllm_version" not in facts:
            facts["vllm_version"] = engine.group(1)
        for fact, _form, rank, rx, read, _releases in FORMS:
            m = rx.search(body)
            value = read(m) if m else None
            if value:
                self.hits.setdefault(fact, []).append([rank, order, value])

    def facts(self):
        """The facts of every line read so far (parse()'s result)."""
        facts = dict(self.raw, phases=list(self.raw["phases"]), errors=list(self.raw["errors"]),
                     rank_ips=dict(self.raw["rank_ips"]))
        hits = dict(self.hits)
        # From 0.27 the WNA16 method no longer is the kernel: it asks the oracle, which may bind Marlin. Its
        # name says nothing about the backend there, so it never stands in for the oracle's line.
        if _release_tuple(facts.get("vllm_version")) >= (0, 27):
            hits["moe_backend"] = [h for h in hits.get("moe_backend", ()) if not (h[0] == 2 and h[2] == "triton")]
        for fact in FACTS:
            best = min((h[0] for h in hits.get(fact, ())), default=None)
            values = []
            for rank, _order, value in sorted(hits.get(fact, ()), key=lambda h: h[1]):
                if rank == best and value not in values:
                    values.append(value)
            facts[fact] = values[0] if values else None
            facts[fact + "s"] = values
        if facts["quantization"] == "None":
            facts["quantization"] = "none"
            facts["quantizations"] = ["none"]
        facts["stage"] = stage(facts)
        return facts


def stage(facts):
    """Where a boot stands, in the words the play reports while it waits (the latest phase reached)."""
    phases = facts["phases"]
    if "app_started" in phases:
        return "serving"
    if "engine_ready" in phases:
        return "engine ready, API server starting"
    if "graph_capture" in phases:
        return "graph capture"
    if "model_loaded" in phases:
        return "profiling, KV cache and graph capture"
    if "weights_loaded" in phases:
        return "weights loaded"
    if "shards_total" in facts:
        return "weights loading, %d of %d shards" % (facts["shards_loaded"], facts["shards_total"])
    if "load_started" in phases:
        return "weights loading"
    if "ray_placement" in phases:
        waited = facts.get("pg_waiting_s")
        return "Ray placement" + (" (waiting %d s for the GPU bundles)" % waited if waited else "")
    if "vllm_version" in facts:
        return "engine starting (vLLM %s)" % facts["vllm_version"]
    return "container started"


# ------------------------------------------------------------------------------------------ verdicts
def _version(text):
    m = re.match(r"v?(\d+)\.(\d+)\.(\d+)", str(text or ""))
    return tuple(int(x) for x in m.groups()) if m else None


def loggable(fact, vllm_version):
    """True when this release has an INFO/WARNING logger call that states the fact, False when it has none,
    None when the release is unknown or outside CATALOGUED (its logger calls were not read). A build between
    two releases (0.21.1.dev3) counts as the release before it."""
    v = _version(vllm_version)
    if v is None or not _version(RELEASES[0]) <= v <= _version(RELEASES[-1]):
        return None
    for first, last in loggable_ranges(fact):
        i = RELEASES.index(last)
        upper = _version(RELEASES[i + 1]) if i + 1 < len(RELEASES) else None
        if _version(first) <= v and (v < upper if upper else v <= _version(last)):
            return True
    return False


def loggable_ranges(fact):
    """The (first, last) release ranges of the documented formats that state this fact, adjacent ones merged."""
    spans = sorted({(RELEASES.index(d[2]), RELEASES.index(d[3]))
                    for f, _form, _rank, _rx, _read, docs in FORMS if f == fact for d in docs})
    merged = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(RELEASES[lo], RELEASES[hi]) for lo, hi in merged]


_MOE_ALIASES = {"vllmcutlass": "cutlass"}
_KV_ALIASES = {"fp8": "fp8e4m3", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
_KERNEL_ALIASES = {"vllmcutlass": "cutlass"}


def canonical(fact, value):
    """The comparable form of a logged or expected name (see the module docstring for each rule)."""
    if value is None:
        return None
    text = str(value).strip().strip("'\"")
    if fact in ("attention_backend", "moe_backend", "mxfp8_linear_kernel", "nvfp4_linear_kernel") and \
            re.match(r"^[A-Za-z]\w*\.[A-Za-z]\w*$", text):
        text = text.split(".", 1)[1]  # a logged enum: AttentionBackendEnum.TRITON_ATTN
    if fact == "moe_backend" and text.endswith("Experts"):
        text = experts_backend(text) or text
    key = re.sub(r"[^a-z0-9]", "", text.lower())
    if fact == "attention_backend":
        if key.endswith("backend"):
            key = key[: -len("backend")]
        key = key.replace("attention", "attn")
    elif fact in ("mxfp8_linear_kernel", "nvfp4_linear_kernel"):
        key = re.sub(r"(?:linearkernel|kernel|backend)$", "", key)
        key = re.sub(r"mxfp8|nvfp4", "", key)
        key = _KERNEL_ALIASES.get(key, key)
    elif fact == "moe_backend":
        key = re.sub(r"^batched|batched$", "", key)
        key = re.sub(r"(?:mxfp4|mxfp8|nvfp4)$", "", key)
        key = _MOE_ALIASES.get(key, key)
    elif fact == "kv_cache_dtype":
        key = _KV_ALIASES.get(key, key)
    return key


_WHAT = {
    "moe_backend": "MoE backend line",
    "attention_backend": "attention backend line",
    "kv_cache_dtype": "KV-cache dtype (engine config line)",
    "quantization": "quantization (engine config line)",
    "mxfp8_linear_kernel": "'Using ... for MXFP8 GEMM' line",
    "nvfp4_linear_kernel": "'Using ... for NVFP4 GEMM' line",
}
_HINT = {"mxfp8_linear_kernel": ": MXFP8 attention fell back to UnquantizedLinearMethod"}
_SHOUT = ("moe_backend",)


def _show(fact, value):
    if isinstance(value, list):
        return ", ".join(_show(fact, v) for v in value)
    return value.upper() if fact in _SHOUT else value


def verdicts(expected, facts, vllm_version=None):
    """Compare expected kernel facts with the ones the log states.

    expected: {fact: name}, facts from parse(); None or "auto" means no expectation, "any" (or True, for
    mxfp8_linear_kernel/nvfp4_linear_kernel) asks only that some value was logged. vllm_version defaults to
    the version the log states. Returns [{"fact", "expected", "found", "status", "message"}], status "ok",
    "mismatch" (a different value, or none logged by a release that logs this fact: found None) or
    "unverifiable" (none logged, and the release has no logger call that states it or is not catalogued).
    found is the logged value, or the list of values when the winning lines disagree.
    """
    version = vllm_version or facts.get("vllm_version")
    out = []
    for fact in FACTS:
        want = expected.get(fact)
        if want is None or (isinstance(want, str) and want.lower() == "auto") or want is False:
            continue
        values = facts.get(fact + "s") or ([facts[fact]] if facts.get(fact) else [])
        found = None if not values else (values[0] if len(values) == 1 else list(values))
        want_any = want is True or (isinstance(want, str) and want.lower() == "any")
        shown_want = "any" if want_any else want
        release = "vLLM %s" % version if version else "vLLM"
        if values:
            ok = want_any or all(canonical(fact, v) == canonical(fact, want) for v in values)
            status = "ok" if ok else "mismatch"
            if ok:
                msg = "%s: %s as expected (%s)" % (fact, _show(fact, found), release)
            else:
                msg = "%s: expected %s, but %s logged %s" % (fact, shown_want, release, _show(fact, found))
        else:
            can = loggable(fact, version)
            if can:
                status = "mismatch"
                msg = "%s: expected %s, but %s logged no %s (found None)%s" % (
                    fact, shown_want, release, _WHAT[fact], _HINT.get(fact, ""))
            else:
                status = "unverifiable"
                if can is False:
                    why = "%s has no logger call that states it" % release
                elif version:
                    why = "%s is outside the catalogued releases %s-%s" % ((release,) + CATALOGUED)
                else:
                    why = "the log names no vLLM release, so whether it would state it is not known"
                msg = "%s: expected %s, but no %s was logged and %s: unverifiable" % (
                    fact, shown_want, _WHAT[fact], why)
        out.append({"fact": fact, "expected": shown_want, "found": found, "status": status, "message": msg})
    return out


def problems(verdict_list, unverifiable_fails=False):
    """The failing verdicts as messages that name both values: mismatches, and unverifiable facts when asked to.
    Seed 000 and seed 004 read in their known words: "requested --moe-backend triton, but vLLM resolved MARLIN";
    no MXFP8 GEMM line means the attention fell back to UnquantizedLinearMethod."""
    out = []
    for v in verdict_list:
        if v["status"] == "unverifiable" and unverifiable_fails:
            out.append(v["message"])
        if v["status"] != "mismatch":
            continue
        if v["fact"] == "moe_backend" and v["found"] is not None:
            found = v["found"] if isinstance(v["found"], str) else "/".join(v["found"])
            out.append("requested --moe-backend %s, but vLLM resolved %s" % (v["expected"], found.upper()))
        elif v["fact"] == "mxfp8_linear_kernel" and v["found"] is None and \
                "UnquantizedLinearMethod" not in v["message"]:
            out.append(v["message"] + ": no MXFP8 GEMM line, so MXFP8 attention fell back to "
                       "UnquantizedLinearMethod")
        else:
            out.append(v["message"])
    return out
