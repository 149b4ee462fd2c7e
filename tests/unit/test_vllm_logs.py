"""vllm_logs on log lines rendered from the releases' own logger format strings (vllm_log_lines.py reads them
from tests/unit/fixtures/vllm/log_formats.json): every documented form, in every release 0.17.0-0.34.0 that
has it, in every prefix form, must parse back; a documented format that leaves a release fails here."""

import re
import sys
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import vllm_logs
from ansible_collections.sparkfleet.vllm.plugins.module_utils.vllm_logs import (
    FACTS,
    FORMS,
    canonical,
    loggable,
    loggable_ranges,
    message,
    parse,
    problems,
    verdicts,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_log_lines as vl

ORACLE = "model_executor/layers/fused_moe/oracle/"

# Representative values for every documented format: (values for its placeholders, the value parse() reads).
# moe_backend is read lower-cased; the other facts as logged.
VALUES = {
    "Using %s attention backend out of potential backends: %s.":
        (("TRITON_ATTN", "['FLASH_ATTN', 'TRITON_ATTN']"), "TRITON_ATTN"),
    "Using %s backend.": (("AttentionBackendEnum.TRITON_ATTN_DIFFKV",), "TRITON_ATTN_DIFFKV"),
    "Using FlashAttentionDiffKVBackend for attention.": ((), "FlashAttentionDiffKVBackend"),
    "Using %s for attention.": (("TRITON_ATTN_DIFFKV",), "TRITON_ATTN_DIFFKV"),
    "Using fp8 data type to store kv cache. ...": ((), "fp8"),
    "Using %s data type to store kv cache. ...": (("fp8_e4m3",), "fp8_e4m3"),
    "Layer %s: kv_cache_dtype=%s, sliding_window=%s": (("model.layers.0.self_attn.attn", "fp8", None), "fp8"),
    "Using %s backend for MXFP8 GEMM": (("flashinfer-cutlass",), "flashinfer-cutlass"),
    "Using %s for MXFP8 GEMM": (("FlashInferCutlassMxfp8LinearKernel",), "FlashInferCutlassMxfp8LinearKernel"),
    "Using {...} for NVFP4 GEMM": (("NvFp4LinearBackend.FLASHINFER_CUTLASS",), "NvFp4LinearBackend.FLASHINFER_CUTLASS"),
    "Using %s for NVFP4 GEMM": (("MarlinNvFp4LinearKernel",), "MarlinNvFp4LinearKernel"),
    "Using '{...}' NvFp4 MoE backend out of potential backends: {...}.":
        (("MARLIN", ["FLASHINFER_CUTLASS", "VLLM_CUTLASS", "MARLIN"]), "marlin"),
    "Using '%s' MxFp8 MoE backend.": (("FLASHINFER_CUTLASS",), "flashinfer_cutlass"),
    "Using '%s' MxFp8 MoE backend (user-requested).": (("MARLIN",), "marlin"),
    "Using '{...}' WNA16 MoE backend.": (("TRITON",), "triton"),
    "Using {...} Fp8 MoE backend out of potential backends: {...}.": (("TRITON", ["DEEPGEMM", "TRITON"]), "triton"),
    "Using '{...}' Mxfp4 MoE backend.": (("MARLIN",), "marlin"),
    "Using {...} Int8 MoE backend out of potential backends: {...}.": (("TRITON", ["TRITON"]), "triton"),
    "Using {...} Unquantized MoE backend out of potential backends: {...}.":
        (("TRITON", ["FLASHINFER_CUTLASS", "TRITON"]), "triton"),
    "Using %s W4A8 MoE backend.": (("CUTLASS",), "cutlass"),
    "Using {...} W4A8 Int8 MoE backend out of potential backends: {...}.": (("TRITON", ["TRITON"]), "triton"),
    "Using {...} backend for WNA16 MoE (group_size={...}, num_bits={...})": (("Marlin", 32, 4), "marlin"),
    "Using %s": (("TritonWNA16Experts",), "triton"),
    "Using {...} Humming MoE backend.": (("HummingExperts",), "humming"),
    "Using Nvfp4QuantizationEmulationTritonExperts MOE backend. ...": ((), "emulation"),
    "Using OCP_MXQuantizationEmulationTritonExperts MOE backend. ...": ((), "emulation"),
    "Using Mxfp8EmulationTritonExperts MoE backend. ...": ((), "emulation"),
    "Using Int4EmulationTritonExperts MoE backend. ...": ((), "emulation"),
    "Using MarlinExperts for MXFP4 MoE": ((), "marlin"),
    "Using CompressedTensorsWNA16MarlinMoEMethod (emulation backend requested)": ((), "emulation"),
    "Using CompressedTensorsWNA16MoEMethod (emulation backend requested)": ((), "emulation"),
    "Using CompressedTensorsWNA16MarlinMoEMethod": ((), "marlin"),
    "Using CompressedTensorsWNA16MoEMethod": ((), "triton"),
}
ENGINE = "Initializing a V1 LLM engine (v%s) with config: %s"
BASE_TEMPLATE = "Using {...} {...} MoE {...}backend{...}."


def docs():
    """Every documented format: (fact, form, file, format, first, last)."""
    return [(fact, form, *d) for fact, form, _rank, _rx, _read, ds in FORMS for d in ds]


def catalogue_hits(rel, fmt):
    """The INFO/WARNING catalogue entries a documented format stands for."""
    if rel.endswith(".__str__"):
        return [e for e in vl.CATALOGUE if e["level"] == "__str__" and fmt in e["format"]]
    prefix = fmt[:-3] if fmt.endswith("...") else None
    return [e for e in vl.CATALOGUE if e["file"] == rel and not e["level"].startswith("debug")
            and (e["format"].startswith(prefix) if prefix else e["format"] == fmt)]


def experts_line_releases():
    """{file: releases} where the WNA16 oracle logs the experts class ("Using TritonWNA16Experts").
    log_formats.json keeps only the format, "Using %s", which 0.23-0.26 use for the prepare/finalize class
    alone, so the watched source decides: ("Using %s", experts_cls.__name__) in int_wna16.py, or base.py's
    logger.info_once(experts_log, experts_cls.__name__) fed experts_log="Using %s" by int_wna16.py."""
    out = {ORACLE + "int_wna16.py": set(), ORACLE + "base.py": set()}
    for r in vl.RELEASES:
        wna16, base = vl.source(r, ORACLE + "int_wna16.py") or "", vl.source(r, ORACLE + "base.py") or ""
        if re.search(r'logger\.info_once\(\s*"Using %s",\s*experts_cls\.__name__', wna16):
            out[ORACLE + "int_wna16.py"].add(r)
        if 'experts_log="Using %s"' in wna16 and \
                re.search(r"logger\.info_once\(\s*experts_log,\s*experts_cls\.__name__", base):
            out[ORACLE + "base.py"].add(r)
    return out


def documented_releases(rel, fmt, form):
    if form == "moe_experts" and fmt == "Using %s":
        return experts_line_releases()[rel]
    return {r for e in catalogue_hits(rel, fmt) for r in e["releases"]}


# ------------------------------------------------------------------ the catalogue against the documentation
@pytest.mark.parametrize(("fact", "form", "rel", "fmt", "first", "last"), docs(),
                         ids=["%s:%s:%s" % (d[1], d[2].rsplit("/", 1)[-1], d[3][:40]) for d in docs()])
def test_documented_format_is_in_exactly_the_documented_releases(fact, form, rel, fmt, first, last):
    """Fails when vLLM drops (or renames) a format the parser relies on in a release that should have it."""
    assert sorted(documented_releases(rel, fmt, form), key=vl.vt) == vl.between(first, last)


@pytest.mark.parametrize("fact", FACTS)
def test_loggable_follows_the_catalogue(fact):
    from_catalogue = {r for f, form, rel, fmt, _a, _b in docs() if f == fact
                      for r in documented_releases(rel, fmt, form)}
    assert {r for r in vl.RELEASES if loggable(fact, r)} == from_catalogue
    assert all(loggable(fact, r) is True for r in from_catalogue)


def test_catalogued_releases_are_those_of_the_fixtures():
    assert list(vllm_logs.RELEASES) == vl.RELEASES


def test_docstring_table_states_every_documented_range():
    doc = vllm_logs.__doc__
    table = doc[doc.index("fact  "):doc.index("So within")]
    blocks = re.split(r"\n  (?=[a-z_0-9]+ {2,})", table)
    for fact in FACTS:
        (block,) = [b for b in blocks if b.startswith(fact + " ")]
        ranges = set(re.findall(r"(\d+\.\d+\.\d+)-(\d+\.\d+\.\d+)", block))
        documented = {(first, last) for f, _form, _rel, _fmt, first, last in docs() if f == fact}
        assert documented == ranges, fact
    assert "%s-%s" % vllm_logs.CATALOGUED in doc


# -------------------------------------------------------------------------- every line, every release
def rendered(fact, form, rel, fmt, release):
    """(level, file, message, expected value) lines for one documented format in one release."""
    if fmt == ENGINE:
        value = {"kv_engine": "fp8", "quant_engine": "modelopt_mixed"}[form]
        return [("info", rel, vl.engine_line(release, kv_cache_dtype="fp8", quantization="modelopt_mixed"), value)]
    if rel.endswith(".__str__"):
        return []  # read through the engine line above
    if fmt == BASE_TEMPLATE:  # 0.34: one message for every oracle; the oracle's name from its own source
        out = []
        for path in sorted(p for p in vl.INDEX[release] if p.startswith(ORACLE)):
            name = re.search(r'^    name = "([^"]+)"', vl.source(release, path) or "", re.M)
            if name:
                for values, want in (
                        (("MARLIN", name.group(1), "", " out of potential backends: ['MARLIN', 'TRITON']"), "marlin"),
                        (("TRITON", name.group(1), "", ""), "triton")):
                    out.append(("info_once", path, vl.fill(fmt, values), want))
        assert any(p.endswith("int_wna16.py") for _l, p, _m, _w in out) and any(
            p.endswith("nvfp4.py") for _l, p, _m, _w in out), "the 0.34 oracles lost their names"
        return out
    values, want = VALUES[fmt]
    if form == "moe_experts" and fmt == "Using %s":
        return [("info_once", rel, "Using %s" % v, w) for v, w in
                (("TritonWNA16Experts", "triton"), ("MarlinExperts", "marlin"), ("BatchedMarlinExperts", "marlin"))]
    out = []
    for e in catalogue_hits(rel, fmt):
        if release in e["releases"]:
            out.append((e["level"], rel, vl.fill(e["format"], values), want))
    return out


@pytest.mark.parametrize("release", vl.RELEASES)
def test_every_documented_line_of_the_release_parses_back(release):
    failures, checked = [], 0
    for fact, form, rel, fmt, first, last in docs():
        if release not in vl.between(first, last):
            continue
        for level, path, body, want in rendered(fact, form, rel, fmt, release):
            for line in vl.variants(release, level, path, body):
                checked += 1
                got = parse(line)[fact]
                if got != want:
                    failures.append("%s %s: %r -> %r, expected %r" % (release, form, line, got, want))
    assert checked and not failures, "\n".join(failures)


def test_debug_lines_are_read_when_present():
    (e,) = vl.entries("model_executor/layers/attention/attention.py", "Layer %s: kv_cache_dtype=%s, sliding_window=%s",
                      "debug")
    body = vl.fill(e["format"], ("model.layers.3.self_attn.attn", "fp8_e5m2", 128))
    assert parse(vl.wrap("0.34.0", "debug", e["file"], body))["kv_cache_dtype"] == "fp8_e5m2"


# Read when present, never expected: DEBUG lines, and a ROCm-only line ("ck") that no CUDA log prints.
DEBUG_READ = {"Layer %s: kv_cache_dtype=%s, sliding_window=%s", "Layer %s: kv_cache_dtype=%s"}
ROCM_READ = {"Using CK MXFP4 MoE backend (Aiter ROCm)"}


def test_no_other_logger_call_of_any_release_states_a_kernel_fact():
    """Every other catalogued format, rendered with neutral values, yields no kernel fact."""
    documented = {fmt for _f, _form, _rel, fmt, _a, _b in docs()} | DEBUG_READ | ROCM_READ
    stray = []
    for e in vl.CATALOGUE:
        if e["level"] == "__str__" or e["format"] in documented or any(
                e["format"].startswith(f[:-3]) for f in documented if f.endswith("...")):
            continue
        body = vl.fill(e["format"], vl.neutral(e["format"]))
        facts = parse(vl.wrap(e["releases"][-1], e["level"], e["file"], body))
        if any(facts[f] for f in FACTS):
            stray.append((e["file"], e["format"], {f: facts[f] for f in FACTS if facts[f]}))
    assert not stray


@pytest.mark.parametrize(("line", "body"), [
    ("(EngineCore_DP0 pid=9) INFO 05-16 10:00:05 [core.py:90] Using X", "Using X"),
    ("INFO 05-16 10:00:05 [core.py:90] Using X", "Using X"),
    ("(RayWorkerProc pid=11, ip=192.168.0.12) (RayWorkerProc pid=11) WARNING 11-16 10:00:00 "
     "[model_executor/.../linear/__init__.py:12] Using X", "Using X"),
    ("\x1b[0;36m(APIServer pid=7)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m05-16 10:00:05\x1b[0m "
     "\x1b[90m[api_server.py:3]\x1b[0m Using X", "Using X"),
    ("INFO:     Application startup complete.", "INFO:     Application startup complete."),
    ("(APIServer pid=7) INFO:     Application startup complete.", "INFO:     Application startup complete."),
])
def test_message_strips_every_prefix(line, body):
    assert message(line) == body


# ------------------------------------------------------------------------------ normalisation
@pytest.mark.parametrize(("fact", "a", "b"), [
    ("moe_backend", "MARLIN", "marlin"),
    ("moe_backend", "'MARLIN'", "marlin"),
    ("moe_backend", "Marlin", "marlin"),
    ("moe_backend", "VLLM_CUTLASS", "cutlass"),
    ("moe_backend", "FLASHINFER_CUTEDSL_BATCHED", "flashinfer_cutedsl"),
    ("moe_backend", "BATCHED_MARLIN", "marlin"),
    ("moe_backend", "DEEPGEMM", "deep_gemm"),
    ("moe_backend", "DEEPGEMM_MXFP4", "deep_gemm"),
    ("moe_backend", "TritonWNA16Experts", "triton"),
    ("attention_backend", "TRITON_ATTN_DIFFKV", "triton_attn_diffkv"),
    ("attention_backend", "TritonAttnDiffKV", "TRITON_ATTN_DIFFKV"),
    ("attention_backend", "TritonAttentionDiffKVBackend", "TRITON_ATTN_DIFFKV"),
    ("attention_backend", "FlashAttentionDiffKVBackend", "FLASH_ATTN_DIFFKV"),
    ("attention_backend", "AttentionBackendEnum.FLASHINFER", "FlashInferBackend"),
    ("attention_backend", "FlexAttentionBackend", "FLEX_ATTENTION"),
    ("kv_cache_dtype", "fp8", "fp8_e4m3"),
    ("kv_cache_dtype", "bf16", "bfloat16"),
    ("quantization", "compressed-tensors", "compressed_tensors"),
    ("mxfp8_linear_kernel", "flashinfer_cutlass", "FlashInferCutlassMxfp8LinearKernel"),
    ("mxfp8_linear_kernel", "flashinfer-cutlass", "FlashInferCutlassMxfp8LinearKernel"),
    ("mxfp8_linear_kernel", "marlin", "MarlinMxfp8LinearKernel"),
    ("nvfp4_linear_kernel", "NvFp4LinearBackend.VLLM_CUTLASS", "CutlassNvFp4LinearKernel"),
    ("nvfp4_linear_kernel", "flashinfer-cutlass", "FlashInferCutlassNvFp4LinearKernel"),
])
def test_equivalent_names(fact, a, b):
    assert canonical(fact, a) == canonical(fact, b)


@pytest.mark.parametrize(("fact", "a", "b"), [
    ("moe_backend", "triton", "marlin"),
    ("kv_cache_dtype", "fp8", "fp8_e5m2"),
    ("kv_cache_dtype", "fp8", "auto"),
    ("attention_backend", "TRITON_ATTN", "TRITON_ATTN_DIFFKV"),
    ("attention_backend", "FLASH_ATTN_DIFFKV", "TRITON_ATTN_DIFFKV"),
    ("mxfp8_linear_kernel", "flashinfer_cutlass", "FlashInferCutedslMxfp8LinearKernel"),
    ("quantization", "modelopt", "modelopt_mixed"),
])
def test_different_names(fact, a, b):
    assert canonical(fact, a) != canonical(fact, b)


def test_attention_class_names_map_to_registry_names_for_the_classes_logged():
    """The attention rule on the registry of every release: each DiffKV / FlashAttention / Triton entry's
    class name canonicalises to its registry name (MiMo 0.20-0.23 logs the class name)."""
    pairs = {("FLASH_ATTN_DIFFKV", "FlashAttentionDiffKVBackend"),
             ("TRITON_ATTN_DIFFKV", "TritonAttentionDiffKVBackend"),
             ("FLASH_ATTN", "FlashAttentionBackend"), ("TRITON_ATTN", "TritonAttentionBackend"),
             ("FLASHINFER", "FlashInferBackend"), ("FLEX_ATTENTION", "FlexAttentionBackend")}
    for name, cls in pairs:
        assert canonical("attention_backend", name) == canonical("attention_backend", cls)


# ---------------------------------------------------------------------------------------- seed 000: Kimi
SEED000_LINES = ["Using CompressedTensorsWNA16MarlinMoEMethod",
                 "Using Marlin backend for WNA16 MoE (group_size=32, num_bits=4)"]


def kimi_log(release, backend):
    """The kernel lines of a Kimi-K2.5 (compressed-tensors WNA16) boot of this release on GB10, from its own
    formats: backend is what the release binds ("MARLIN" or "TRITON")."""
    engine = vl.engine_line(release, quantization="compressed-tensors")
    lines = [vl.wrap(release, "info", "v1/engine/core.py", engine)]
    marlin_method = backend == "MARLIN" and vl.vt(release) <= (0, 26, 0)  # the Marlin method's name, to 0.26
    method = "Using CompressedTensorsWNA16%sMoEMethod" % ("Marlin" if marlin_method else "")
    (entry,) = [e for e in vl.CATALOGUE if e["format"] == method and release in e["releases"]]
    lines.append(vl.wrap(release, "info_once", entry["file"], entry["format"], who="ray"))
    if vl.vt(release) <= (0, 22, 1):
        (old,) = [e for e in vl.CATALOGUE if e["format"].startswith("Using {...} backend for WNA16 MoE")
                  and release in e["releases"]]
        body = vl.fill(old["format"], (backend.capitalize(), 32, 4))
        lines.append(vl.wrap(release, "info_once", old["file"], body, who="ray"))
    elif vl.vt(release) <= (0, 33, 0):
        (orc,) = vl.entries(ORACLE + "int_wna16.py", "Using '{...}' WNA16 MoE backend.")
        lines.append(vl.wrap(release, "info_once", orc["file"], vl.fill(orc["format"], (backend,))))
    else:
        body = vl.fill(BASE_TEMPLATE, (backend, "WNA16", "", ""))
        lines.append(vl.wrap(release, "info_once", ORACLE + "base.py", body))
    if vl.vt(release) >= (0, 27, 0):
        experts = "TritonWNA16Experts" if backend == "TRITON" else "MarlinExperts"
        lines.append(vl.wrap(release, "info_once", ORACLE + "int_wna16.py", "Using %s" % experts))
    return "\n".join(lines) + "\n"


def test_seed000_lines_are_the_release_formats():
    body = [message(line) for line in kimi_log("0.21.0", "MARLIN").splitlines()[1:]]
    assert body == SEED000_LINES


@pytest.mark.parametrize("release", vl.between("0.17.0", "0.24.0"))
def test_seed000_triton_requested_marlin_logged_is_a_mismatch(release):
    """--moe-backend triton on the command line, Marlin in the logs (0.17-0.24 bind Marlin regardless)."""
    facts = parse(kimi_log(release, "MARLIN"))
    (v,) = verdicts({"moe_backend": "triton"}, facts, release)
    assert v["status"] == "mismatch" and v["found"] == "marlin"
    assert "triton" in v["message"] and "MARLIN" in v["message"]
    assert problems([v]) == ["requested --moe-backend triton, but vLLM resolved MARLIN"]


@pytest.mark.parametrize("release", vl.between("0.27.0", "0.34.0"))
def test_seed000_triton_honoured(release):
    facts = parse(kimi_log(release, "TRITON"))
    expected = {"moe_backend": "triton", "quantization": "compressed-tensors"}
    assert [v["status"] for v in verdicts(expected, facts, release)] == ["ok", "ok"]


def test_a_patched_release_that_logs_only_the_triton_method_passes():
    """0.17-0.22 with the wna16_moe_backend patch: the Triton method's name is the only MoE line."""
    (e,) = [e for e in vl.CATALOGUE
            if e["format"] == "Using CompressedTensorsWNA16MoEMethod" and "0.21.0" in e["releases"]]
    facts = parse(vl.wrap("0.21.0", e["level"], e["file"], e["format"]))
    assert verdicts({"moe_backend": "triton"}, facts, "0.21.0")[0]["status"] == "ok"


# ---------------------------------------------------------------------------------------- seed 004: MiMo
def mimo_log(release, mxfp8_line=True, attention="TRITON_ATTN_DIFFKV", kv="fp8"):
    lines = [vl.wrap(release, "info", "v1/engine/core.py",
                     vl.engine_line(release, quantization="modelopt_mixed", kv_cache_dtype=kv))]
    if vl.vt(release) <= (0, 33, 0):
        (e,) = vl.entries(ORACLE + "nvfp4.py", "Using '{...}' NvFp4 MoE backend out of potential backends: {...}.")
        moe = vl.fill(e["format"], ("MARLIN", ["FLASHINFER_CUTLASS", "VLLM_CUTLASS", "MARLIN"]))
    else:
        available = " out of potential backends: ['FLASHINFER_CUTLASS', 'MARLIN']"
        moe = vl.fill(BASE_TEMPLATE, ("MARLIN", "NvFp4", "", available))
    lines.append(vl.wrap(release, "info_once", ORACLE + "nvfp4.py", moe, who="ray"))
    (att,) = [e for e in vl.entries("model_executor/models/mimo_v2.py") if e["format"] == "Using %s for attention."]
    lines.append(vl.wrap(release, "info_once", att["file"], vl.fill(att["format"], (attention,)), who="ray"))
    if mxfp8_line:
        (g,) = vl.entries("model_executor/kernels/linear/__init__.py", "Using %s for MXFP8 GEMM")
        body = vl.fill(g["format"], ("FlashInferCutlassMxfp8LinearKernel",))
        lines.append(vl.wrap(release, "info_once", g["file"], body, who="ray"))
    return "\n".join(lines) + "\n"


MIMO_EXPECTED = {"moe_backend": "marlin", "attention_backend": "TRITON_ATTN_DIFFKV", "kv_cache_dtype": "fp8",
                 "quantization": "modelopt_mixed", "mxfp8_linear_kernel": "flashinfer_cutlass"}


@pytest.mark.parametrize("release", vl.between("0.24.0", "0.34.0"))
def test_seed004_recipe_verdicts_pass_on_a_good_boot(release):
    out = verdicts(MIMO_EXPECTED, parse(mimo_log(release)), release)
    assert [(v["fact"], v["status"]) for v in out] == [(f, "ok") for f in FACTS if f in MIMO_EXPECTED]
    assert problems(out) == []


@pytest.mark.parametrize("release", vl.between("0.24.0", "0.34.0"))
def test_seed004_no_mxfp8_gemm_line_is_the_unquantized_fallback(release):
    facts = parse(mimo_log(release, mxfp8_line=False))
    out = verdicts(MIMO_EXPECTED, facts, release)
    (bad,) = problems(out)
    assert "UnquantizedLinearMethod" in bad and "flashinfer_cutlass" in bad
    (v,) = [v for v in out if v["status"] != "ok"]
    assert v["fact"] == "mxfp8_linear_kernel" and v["status"] == "mismatch" and v["found"] is None
    (any_kernel,) = problems(verdicts({"mxfp8_linear_kernel": "any"}, facts, release))
    assert "UnquantizedLinearMethod" in any_kernel


def test_seed004_wrong_attention_and_kv_cache_name_both_values():
    out = verdicts(MIMO_EXPECTED, parse(mimo_log("0.24.0", attention="FLASH_ATTN_DIFFKV", kv="auto")), "0.24.0")
    bad = problems(out)
    assert len(bad) == 2
    assert "TRITON_ATTN_DIFFKV" in bad[0] and "FLASH_ATTN_DIFFKV" in bad[0]
    assert "fp8" in bad[1] and "auto" in bad[1]


def test_mimo_021_logs_the_class_name_of_its_attention_backend():
    (e,) = vl.entries("model_executor/models/mimo_v2.py", "Using FlashAttentionDiffKVBackend for attention.")
    facts = parse(vl.wrap("0.21.0", e["level"], e["file"], e["format"]))
    assert verdicts({"attention_backend": "FLASH_ATTN_DIFFKV"}, facts, "0.21.0")[0]["status"] == "ok"
    assert verdicts({"attention_backend": "TRITON_ATTN_DIFFKV"}, facts, "0.21.0")[0]["status"] == "mismatch"


# ---------------------------------------------------------------------------------------- verdict rules
def test_no_expectation_no_verdict():
    assert verdicts({"moe_backend": "auto", "attention_backend": None, "kv_cache_dtype": "AUTO"}, parse("")) == []


def test_a_catalogued_release_that_logged_nothing_is_a_mismatch_with_found_none():
    out = verdicts({"attention_backend": "TRITON_ATTN", "quantization": "fp8"}, parse(""), "0.21.0")
    assert [(v["status"], v["found"]) for v in out] == [("mismatch", None), ("mismatch", None)]
    assert all("logged no" in m for m in problems(out))


@pytest.mark.parametrize("version", [None, "0.16.0", "0.35.0", "nightly"])
def test_an_uncatalogued_release_that_logged_nothing_is_unverifiable(version):
    (v,) = verdicts({"kv_cache_dtype": "fp8"}, parse(""), version)
    assert v["status"] == "unverifiable" and v["found"] is None
    assert problems([v]) == [] and problems([v], unverifiable_fails=True) == [v["message"]]


def test_a_release_without_a_logger_call_for_the_fact_is_unverifiable(monkeypatch):
    """Were the KV-cache dtype stated only from 0.20 on, an fp8 expectation on 0.18 could not be verified."""
    forms = tuple(f if f[0] != "kv_cache_dtype" else f[:5] + ([d for d in f[5] if vl.vt(d[2]) >= (0, 20, 0)],)
                  for f in FORMS)
    monkeypatch.setattr(vllm_logs, "FORMS", forms)
    assert loggable("kv_cache_dtype", "0.18.0") is False and loggable_ranges("kv_cache_dtype") == [("0.20.0", "0.34.0")]
    (v,) = verdicts({"kv_cache_dtype": "fp8"}, parse(""), "0.18.0")
    assert v["status"] == "unverifiable" and "no logger call" in v["message"]


def test_a_value_logged_by_an_uncatalogued_release_is_still_compared():
    facts = parse(vl.wrap("0.34.0", "info_once", "platforms/cuda.py",
                          "Using FLASHINFER attention backend out of potential backends: ['FLASHINFER']."))
    (v,) = verdicts({"attention_backend": "TRITON_ATTN"}, facts, "0.40.0")
    assert v["status"] == "mismatch" and v["found"] == "FLASHINFER"


def test_every_logged_value_must_match():
    log = "\n".join(vl.wrap("0.34.0", "info_once", p, b) for p, b in [
        ("model_executor/models/mimo_v2.py", "Using TRITON_ATTN_DIFFKV for attention."),
        ("platforms/cuda.py", "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN']."),
    ])
    facts = parse(log)
    assert facts["attention_backends"] == ["TRITON_ATTN_DIFFKV", "FLASH_ATTN"]
    (v,) = verdicts({"attention_backend": "TRITON_ATTN_DIFFKV"}, facts, "0.34.0")
    assert v["status"] == "mismatch" and v["found"] == ["TRITON_ATTN_DIFFKV", "FLASH_ATTN"]


def test_the_oracle_line_outranks_the_method_name():
    """0.27+: the compressed-tensors method is named whatever the oracle then binds."""
    facts = parse(kimi_log("0.27.0", "MARLIN"))
    assert facts["moe_backend"] == "marlin" and facts["moe_backends"] == ["marlin"]


def test_any_mxfp8_kernel():
    facts = parse(mimo_log("0.30.0"))
    assert verdicts({"mxfp8_linear_kernel": "any"}, facts)[0]["status"] == "ok"
    assert facts["vllm_version"] == "0.30.0"  # from the engine line


def test_unquantized_engine_logs_none():
    facts = parse(vl.wrap("0.25.0", "info", "v1/engine/core.py", vl.engine_line("0.25.0", quantization=None)))
    assert facts["quantization"] == "none"
    assert verdicts({"quantization": "modelopt_mixed"}, facts)[0]["status"] == "mismatch"


# ------------------------------------------------------------------------- phases, figures and errors
def phase_line(release, fmt_prefix, values, files=None):
    """The release's own format that begins with fmt_prefix (INFO/WARNING/ERROR), filled and wrapped."""
    hits = [e for e in vl.CATALOGUE if e["format"].startswith(fmt_prefix) and release in e["releases"]
            and not e["level"].startswith("debug") and (files is None or e["file"] in files)
            and len(vl.placeholders(e["format"])) == len(values)]
    assert hits, "%s has no %r" % (release, fmt_prefix)
    e = hits[0]
    return vl.wrap(release, e["level"], e["file"], vl.fill(e["format"], values))


def boot(release):
    """A boot's phase lines, each from the release's own format (uvicorn's line is not vLLM's)."""
    runner = "v1/worker/gpu_model_runner.py" if vl.vt(release) <= (0, 33, 0) else "v1/worker/gpu/model_runner.py"
    if vl.vt(release) >= (0, 30, 0):
        kv_size = phase_line(release, "%s KV cache size: %s tokens", ("GPU", "1,234,567", "32,768", 37.68))
    elif vl.vt(release) >= (0, 28, 0):
        kv_size = phase_line(release, "GPU KV cache size: %s tokens", ("1,234,567", "32,768", 37.68))
    else:
        kv_size = phase_line(release, "GPU KV cache size: %s tokens", ("1,234,567",))
    return "\n".join([
        phase_line(release, "vLLM server version %s, serving model %s", (release, "/models/kimi")),
        phase_line(release, "Loading weights took %.2f seconds", (512.33,),
                   {"model_executor/model_loader/default_loader.py"}),
        phase_line(release, "Model loading took %s GiB memory and %.6f seconds", ("35.1", 530.25), {runner}),
        phase_line(release, "Available KV cache memory: %s GiB", ("52.1",)),
        kv_size,
        phase_line(release, "init engine (profile, create kv cache, warmup model) took %.2f s", (64.12,)),
        "INFO:     Application startup complete.",
    ]) + "\n"


@pytest.mark.parametrize("release", vl.RELEASES)
def test_phases_and_figures_of_a_boot(release):
    facts = parse(boot(release))
    assert facts["vllm_version"] == release
    assert facts["phases"] == ["weights_loaded", "model_loaded", "engine_ready", "app_started"]
    assert facts["stage"] == "serving"
    assert facts["weights_loaded_s"] == 512.33
    assert facts["model_gib"] == 35.1 and facts["model_loaded_s"] == 530.25
    assert facts["kv_cache_gib"] == 52.10 and facts["kv_cache_tokens"] == 1234567
    assert facts["engine_ready_s"] == 64.12
    assert facts["errors"] == []


@pytest.mark.parametrize("release", vl.between("0.17.0", "0.27.1"))
def test_v2_runner_line_without_memory(release):
    line = phase_line(release, "Model loading took %s GiB and %.6f seconds", ("35.1", 530.25),
                      {"v1/worker/gpu/model_runner.py"})
    assert parse(line)["model_gib"] == 35.1


@pytest.mark.parametrize("release", vl.RELEASES)
def test_placement_group_wait_is_read(release):
    line = phase_line(release, "Waiting for creating a placement group of specs for %d seconds",
                      (120, "[{'GPU': 1.0}]"))
    assert parse(line)["pg_waiting_s"] == 120


@pytest.mark.parametrize("release", vl.between("0.20.0", "0.34.0"))
def test_errors_are_collected(release):
    crash = "\n".join([
        phase_line(release, "RayWorkerProc rank=%s died unexpectedly", (7,)),
        phase_line(release, "EngineCore failed to start.", ()),
        # The exception vLLM raises (v1/engine/utils.py), printed in the traceback, not through a logger.
        "(APIServer pid=7) RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
    ])
    errors = parse(crash)["errors"]
    assert any("Ray worker rank 7 died" in e for e in errors)
    assert any("EngineCore failed to start" in e for e in errors)
    assert any("Engine core initialization failed" in e for e in errors)


@pytest.mark.parametrize("release", vl.between("0.20.0", "0.34.0"))
def test_a_lost_rank_is_named_by_the_node_ray_ran_it_on(release):
    """Ray's prefix on a worker's line names its node; the rank line says which rank that worker is, so the
    death of rank 2 names 10.0.0.12, and a rank whose line was not seen names no node."""
    etp = ", ETP rank 0" if vl.vt(release) >= (0, 34, 0) else ""  # VLLM-LOG-LINES.md: 0.34 adds ETP
    body = ("rank 2 in world size 4 is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 2%s, EP rank 2, "
            "EPLB rank 0" % etp)
    rank = vl.wrap(release, "info", "distributed/parallel_state.py", body)
    log = "\n".join([
        "\x1b[36m(RayWorkerProc pid=812, ip=10.0.0.12)\x1b[0m " + rank,
        phase_line(release, "RayWorkerProc rank=%s died unexpectedly", (2,)),
        phase_line(release, "RayWorkerProc rank=%s died unexpectedly", (3,)),
    ])
    facts = parse(log)
    assert facts["rank_ips"] == {"2": "10.0.0.12"}
    assert facts["errors"][:2] == ["Ray worker rank 2 died (on 10.0.0.12)", "Ray worker rank 3 died"]
    # Fed piece by piece, as the boot follower does, the map survives between polls.
    reader = vl_reader(log)
    assert reader.facts()["rank_ips"] == {"2": "10.0.0.12"}


def vl_reader(log):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.vllm_logs import LogReader
    state = None
    for line in log.splitlines(keepends=True):
        state = LogReader(state).feed(line + ("" if line.endswith("\n") else "\n")).state()
    return LogReader(state)
