"""Real startup logs of vLLM 0.21.0 on an NVIDIA H200, recorded by `make gpu-check` (tests/gpu/check.py):
the log parser, the kernel verdicts and vllm_check read them, and the stand-in's emulated lines match them.

The runs (tests/unit/fixtures/vllm_real/runs.json holds their record): a tiny compressed-tensors W4A16 MoE
served with the Kimi-K2.5 recipe's flags, `--moe-backend triton`:
- ``unpatched``: the release as published binds Marlin anyway (seed 000's bug, seen on real vLLM);
- ``patched``: the same release after our ``wna16_moe_backend`` patch binds the Triton WNA16 method;
- ``random``: patched, with random weights; the server is "healthy" and answers noise;
- ``fp8``: patched, the same lessons in a compressed-tensors W8A8 FP8 checkpoint (the FP8 MoE oracle).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_fixture_tree import materialise

from ansible_collections.sparkfleet.vllm.plugins.module_utils import patches, vllm_logs

REPO = Path(__file__).resolve().parents[2]
REAL = Path(__file__).resolve().parent / "fixtures" / "vllm_real"
RUNS = json.loads((REAL / "runs.json").read_text())
sys.path.insert(0, str(REPO / "tests" / "sim" / "standin"))
import gb10


def log(run):
    return (REAL / ("vllm-0.21.0-%s-h200.log" % run)).read_text()


def messages(text):
    """The message part of each logger line ("(EngineCore pid=1) INFO 12-03 15:48:03 [file.py:122] message")."""
    return {line.split("] ", 1)[1] for line in text.splitlines() if "] " in line and " INFO " in line}


def test_every_log_is_marked_with_its_release_and_gpu():
    for run in RUNS["runs"]:
        assert run["vllm"] == "0.21.0" and run["gpu"].startswith("NVIDIA H200")
        assert (REAL / run["log"]).is_file()
        assert "version 0.21.0" in (REAL / run["log"]).read_text()


@pytest.mark.parametrize("run, backend", [("unpatched", "marlin"), ("patched", "triton"), ("random", "triton"),
                                          ("fp8", "triton")])
def test_parser_reads_the_real_lines(run, backend):
    facts = vllm_logs.parse(log(run))
    assert facts["vllm_version"] == "0.21.0"
    assert facts["phases"] == ["weights_loaded", "model_loaded", "engine_ready", "app_started"]
    assert facts["errors"] == [] and facts["kv_cache_gib"] > 100
    assert facts["moe_backend"] == backend
    assert facts["quantization"] == "compressed-tensors"
    assert facts["attention_backend"] == "FLASH_ATTN"
    assert facts["kv_cache_dtype"] == "auto"


def test_seed_000_on_real_vllm_fails_in_its_own_words_and_the_patched_release_passes():
    expected = {"moe_backend": "triton", "quantization": "compressed-tensors"}
    unpatched = vllm_logs.verdicts(expected, vllm_logs.parse(log("unpatched")), "0.21.0")
    assert vllm_logs.problems(unpatched, unverifiable_fails=True) == [
        "requested --moe-backend triton, but vLLM resolved MARLIN"]
    patched = vllm_logs.verdicts(expected, vllm_logs.parse(log("patched")), "0.21.0")
    assert [v["status"] for v in patched] == ["ok", "ok"]


def test_the_recorded_run_judged_what_a_user_needs():
    """What vllm_check said on the GPU: the unpatched server answered well but failed on its backend; the patched
    one passed; the random one failed on its answers alone (its backend was right)."""
    by = {r["log"].split("-")[2]: r for r in RUNS["runs"]}
    assert by["unpatched"]["vllm_check_failed"] and "resolved MARLIN" in by["unpatched"]["vllm_check_msg"]
    assert all(a["ok"] for a in by["unpatched"]["answers"])
    assert not by["patched"]["vllm_check_failed"]
    assert [a["answer"] for a in by["patched"]["answers"]] == [" Paris.", "法国的首都是巴黎。"]
    assert by["random"]["vllm_check_failed"] and not any(a["ok"] for a in by["random"]["answers"])
    assert all(k["status"] == "ok" for k in by["random"]["kernels"])
    assert not by["fp8"]["vllm_check_failed"]
    assert "Using TRITON Fp8 MoE backend" in log("fp8")


def test_the_lock_carries_what_serving_imported():
    """tests/gpu/requirements.txt holds the distributions a serving process imported on the GPU (the cold
    machine's run, from this lock), and ansible-core for vllm_check: nothing more, nothing less."""
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    import wheels

    locked = {norm(name) for name, _, _ in wheels.requirements()}
    imported = {norm(name) for name in RUNS["cold_machine_run"]["imported"]}
    assert locked == imported | {"ansible-core"}
    assert RUNS["cold_machine_run"]["not_imported"] == ["ansible-core"]
    assert all(not r["check_failed"] for r in RUNS["cold_machine_run"]["runs"] if r["run"] != "unpatched")


def norm(name):
    return name.lower().replace("_", "-").replace(".", "-")


@pytest.mark.parametrize("run, patched", [("unpatched", False), ("patched", True)])
def test_the_stand_ins_emulated_lines_are_the_real_ones(run, patched, tmp_path):
    """The stand-in emulates GB10, the log came from an H200; both are CUDA GPUs that Marlin supports, so
    0.21.0 takes the same WNA16 branch on both, and every line the emulation prints must be a line the real
    release printed."""
    tree = materialise("0.21.0", tmp_path)
    if patched:
        patches.run(str(tree), patches.select(["wna16_moe_backend"]), write=True)
    _, lines = gb10.wna16(gb10.Release(tree), "triton")
    assert lines
    assert set(lines) <= messages(log(run))


def _module(args, tmp_path):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    out = subprocess.run([sys.executable, "-m", "ansible_collections.sparkfleet.vllm.plugins.modules.vllm_check",
                          str(path)], capture_output=True, text=True, check=False,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
    return json.loads(out.stdout)


@pytest.mark.parametrize("run, mismatch", [("unpatched", True), ("patched", False)])
def test_vllm_check_reads_a_log_file(run, mismatch, tmp_path):
    """log_file: the startup log of a server run outside a container, read like a container's log."""
    result = _module({"url": "http://127.0.0.1:9", "served_model_name": "kimi-k2.5", "probes": [{"prompt": "x"}],
                      "log_file": str(REAL / ("vllm-0.21.0-%s-h200.log" % run)), "moe_backend": "triton",
                      "quantization": "compressed-tensors", "vllm_version": "0.21.0", "timeout": 2}, tmp_path)
    assert result["failed"]  # nothing listens on port 9
    assert ("resolved MARLIN" in result["msg"]) is mismatch
    assert result["boot"]["moe_backend"] == ("marlin" if mismatch else "triton")


def test_vllm_check_names_an_unreadable_log_file(tmp_path):
    result = _module({"url": "http://127.0.0.1:9", "served_model_name": "m", "probes": [{"prompt": "x"}],
                      "log_file": str(tmp_path / "absent.log"), "timeout": 2}, tmp_path)
    assert "cannot read the startup log %s" % (tmp_path / "absent.log") in result["msg"]
