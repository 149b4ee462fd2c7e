"""vllm_check's expectations: which kernel facts a serve command line and a recipe ask the log to show."""

from ansible_collections.sparkfleet.vllm.plugins.module_utils import vllm_logs
from ansible_collections.sparkfleet.vllm.plugins.modules.vllm_check import expected_kernels

NONE = dict(serve_args=[], moe_backend=None, attention_backend=None, kv_cache_dtype=None, quantization=None,
            mxfp8_linear_kernel=None, expect_mxfp8=False)


def params(**kw):
    return dict(NONE, **kw)


def test_flags_of_the_command_line_in_both_spellings():
    got = expected_kernels(params(serve_args=["--kv-cache-dtype", "fp8", "--attention-backend=TRITON_ATTN_DIFFKV",
                                              "--moe-backend", "marlin", "--enforce-eager"]))
    assert got == {"kv_cache_dtype": "fp8", "attention_backend": "TRITON_ATTN_DIFFKV", "moe_backend": "marlin"}


def test_the_command_line_wins_options_fill_in_and_mxfp8_defaults_to_any():
    """The server was told what the command line says (its last --moe-backend, as argparse takes it)."""
    got = expected_kernels(params(serve_args=["--moe-backend", "marlin", "--moe-backend=triton"],
                                  moe_backend="marlin", quantization="compressed-tensors", expect_mxfp8=True))
    assert got == {"moe_backend": "triton", "quantization": "compressed-tensors", "mxfp8_linear_kernel": "any"}
    assert expected_kernels(params(expect_mxfp8=True, mxfp8_linear_kernel="flashinfer_cutlass")) == {
        "mxfp8_linear_kernel": "flashinfer_cutlass"}
    assert expected_kernels(params()) == {}


def test_problems_name_both_values_and_the_seed_symptoms():
    verdicts = [
        {"fact": "moe_backend", "expected": "triton", "found": "marlin", "status": "mismatch", "message": "m"},
        {"fact": "mxfp8_linear_kernel", "expected": "any", "found": None, "status": "mismatch",
         "message": "mxfp8_linear_kernel: expected any, but vLLM 0.21.0 logged none"},
        {"fact": "attention_backend", "expected": "TRITON_ATTN_DIFFKV", "found": "FLASH_ATTN_DIFFKV",
         "status": "mismatch", "message": "attention_backend: expected TRITON_ATTN_DIFFKV, but vLLM 0.34.0 logged "
                                          "FLASH_ATTN_DIFFKV"},
        {"fact": "kv_cache_dtype", "expected": "fp8", "found": None, "status": "unverifiable", "message": "u"},
        {"fact": "quantization", "expected": "modelopt_mixed", "found": "modelopt_mixed", "status": "ok",
         "message": "o"},
    ]
    out = vllm_logs.problems(verdicts)
    assert out[0] == "requested --moe-backend triton, but vLLM resolved MARLIN"
    assert "UnquantizedLinearMethod" in out[1]
    assert "TRITON_ATTN_DIFFKV" in out[2] and "FLASH_ATTN_DIFFKV" in out[2]
    assert len(out) == 3  # unverifiable is not a mismatch...
    assert vllm_logs.problems(verdicts, unverifiable_fails=True)[3] == "u"  # ...and fails when asked to


def test_a_mismatch_from_a_real_line_fails():
    log = ("(EngineCore_DP0 pid=9) INFO 12-03 10:00:00 [mimo_v2.py:354] Using FLASH_ATTN_DIFFKV for attention.\n"
           "(APIServer pid=7) INFO 12-03 10:00:00 [startup.py:60] vLLM server version 0.34.0, serving model m\n")
    verdicts = vllm_logs.verdicts({"attention_backend": "TRITON_ATTN_DIFFKV"}, vllm_logs.parse(log))
    assert [v["status"] for v in verdicts] == ["mismatch"]
    assert vllm_logs.problems(verdicts) == [verdicts[0]["message"]]


def test_a_log_that_names_no_known_release_proves_nothing():
    """Without a release the catalogue knows, no expected fact can pass: it is unverifiable (and vllm_check
    fails on unverifiable facts unless told to warn)."""
    for log, version in (("", None), ("(APIServer pid=7) INFO 12-03 10:00:00 [startup.py:60] vLLM server version "
                                      "0.35.0, serving model m\n", None)):
        verdicts = vllm_logs.verdicts({"moe_backend": "triton", "mxfp8_linear_kernel": "any"},
                                      vllm_logs.parse(log), version)
        assert {v["status"] for v in verdicts} == {"unverifiable"}
    # The pinned release decides: 0.34.0 logs both facts, so their absence is a mismatch.
    verdicts = vllm_logs.verdicts({"moe_backend": "triton", "mxfp8_linear_kernel": "any"}, vllm_logs.parse(""),
                                  "0.34.0")
    assert {v["status"] for v in verdicts} == {"mismatch"}
