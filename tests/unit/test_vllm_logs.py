import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.vllm_logs import backend_verdict, parse

# Shaped as vLLM 0.21 prints them (prefix from decorate_logs) and as 0.34 prints them (prefix in the format).
KIMI_021_MARLIN = """\
(APIServer pid=7) INFO 05-16 10:00:00 [utils.py:253] vLLM server version 0.21.0, serving model /models/kimi
(EngineCore_DP0 pid=9) INFO 05-16 10:00:05 [compressed_tensors_moe.py:120] Using CompressedTensorsWNA16MarlinMoEMethod
(RayWorkerProc pid=11, ip=192.168.0.12) INFO 05-16 10:00:06 [marlin.py:40] Using Marlin backend for WNA16 MoE (group_size=32, num_bits=4)
(EngineCore_DP0 pid=9) INFO 05-16 10:10:00 [default_loader.py:291] Loading weights took 512.33 seconds
(EngineCore_DP0 pid=9) INFO 05-16 10:10:01 [gpu_model_runner.py:2102] Model loading took 35.1 GiB memory and 530.250000 seconds
(EngineCore_DP0 pid=9) INFO 05-16 10:11:00 [gpu_worker.py:300] Available KV cache memory: 52.10 GiB
(EngineCore_DP0 pid=9) INFO 05-16 10:11:00 [kv_cache_utils.py:1000] GPU KV cache size: 1,234,567 tokens
(EngineCore_DP0 pid=9) INFO 05-16 10:11:05 [core.py:90] init engine (profile, create kv cache, warmup model) took 64.12 s
INFO:     Application startup complete.
"""

KIMI_034_TRITON = """\
(APIServer pid=7) INFO 11-16 10:00:00 [startup.py:60] vLLM server version 0.34.0, serving model /models/kimi
(EngineCore_DP0 pid=9) INFO 11-16 10:00:05 [compressed_tensors_moe.py:120] Using CompressedTensorsWNA16MoEMethod
(EngineCore_DP0 pid=9) INFO 11-16 10:00:05 [oracle.py:77] Using TRITON WNA16 MoE backend.
(EngineCore_DP0 pid=9) INFO 11-16 10:00:05 [triton.py:12] Using TritonWNA16Experts
(EngineCore_DP0 pid=9) INFO 11-16 10:10:01 [model_runner.py:2102] Model loading took 35.1 GiB and 530.250000 seconds
(EngineCore_DP0 pid=9) INFO 11-16 10:11:00 [kv_cache_utils.py:1000] GPU KV cache size: 98,304 tokens
"""

MIMO_NO_MXFP8 = """\
(EngineCore_DP0 pid=9) INFO 05-16 10:00:05 [modelopt.py:1] Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN'].
"""

CRASH = """\
(EngineCore_DP0 pid=9) ERROR 05-16 10:05:00 [ray_executor.py:1] RayWorkerProc rank=7 died unexpectedly, shutting down executor.
(APIServer pid=7) ERROR 05-16 10:05:01 [api_server.py:3] RuntimeError: Engine core initialization failed. See root cause above.
"""


def test_phases_and_figures_of_a_boot():
    facts = parse(KIMI_021_MARLIN)
    assert facts["vllm_version"] == "0.21.0"
    assert facts["phases"] == ["weights_loaded", "model_loaded", "engine_ready", "app_started"]
    assert facts["weights_loaded_s"] == 512.33
    assert facts["model_gib"] == 35.1 and facts["model_loaded_s"] == 530.25
    assert facts["kv_cache_gib"] == 52.10 and facts["kv_cache_tokens"] == 1234567
    assert facts["engine_ready_s"] == 64.12
    assert facts["moe_backend"] == "marlin"
    assert facts["errors"] == []


def test_v2_runner_line_without_memory_and_unquoted_backend():
    facts = parse(KIMI_034_TRITON)
    assert facts["model_gib"] == 35.1
    assert facts["moe_backend"] == "triton"
    assert facts["kv_cache_tokens"] == 98304


def test_marlin_despite_triton_is_caught():
    """Seed 000: --moe-backend triton on the command line, Marlin in the logs."""
    problems = backend_verdict("triton", parse(KIMI_021_MARLIN))
    assert problems == ["requested --moe-backend triton, but vLLM resolved MARLIN"]


def test_honoured_backend_passes():
    assert backend_verdict("triton", parse(KIMI_034_TRITON)) == []
    assert backend_verdict("auto", parse(KIMI_021_MARLIN)) == []
    assert backend_verdict(None, parse("")) == []


def test_missing_mxfp8_gemm_line_is_the_patch2_symptom():
    problems = backend_verdict("marlin", parse(MIMO_NO_MXFP8), expect_mxfp8=True)
    assert len(problems) == 1 and "UnquantizedLinearMethod" in problems[0]


@pytest.mark.parametrize("needle", ["Ray worker rank 7 died", "Engine core initialization failed"])
def test_errors_are_collected(needle):
    assert any(needle in e for e in parse(CRASH)["errors"])
