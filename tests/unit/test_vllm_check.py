"""vllm_check's expectations: which kernel facts a serve command line and a recipe ask the log to show."""

import http.server
import ssl
import subprocess
import threading

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import vllm_logs
from ansible_collections.sparkfleet.vllm.plugins.module_utils._http import request
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


def test_an_https_endpoint_certificate_is_checked_unless_turned_off(tmp_path):
    """_http validates certificates by default: a self-signed endpoint is refused, and reached only when the
    check is turned off explicitly."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-keyout", str(tmp_path / "k.pem"), "-out", str(tmp_path / "c.pem")],
                   check=True, capture_output=True)

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "https://127.0.0.1:%d/health" % server.server_address[1]
    try:
        with pytest.raises(Exception, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            request(url, timeout=5)
        assert request(url, timeout=5, validate_certs=False) == (200, {})
    finally:
        server.shutdown()
