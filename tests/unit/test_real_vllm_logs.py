"""Real startup logs of vLLM 0.21.0 on an NVIDIA H200, recorded by `make gpu-check` (tests/gpu/check.py):
the log parser, the kernel verdicts and vllm_check read them, and the stand-in's emulated lines match them.

The runs, as check.py recorded them (tests/unit/fixtures/vllm_real/{first,cold}/summary.json; meta.json says
what each was): a tiny compressed-tensors W4A16 MoE served with the Kimi-K2.5 recipe's flags,
`--moe-backend triton`:
- ``unpatched``: the release as published binds Marlin anyway (seed 000's bug, seen on real vLLM);
- ``patched``: the same release after our ``wna16_moe_backend`` patch binds the Triton WNA16 method;
- ``random``: patched, with random weights; the server is "healthy" and answers noise;
- ``fp8``: patched, the same lessons in a compressed-tensors W8A8 FP8 checkpoint (the FP8 MoE oracle).
"""

import json
import sys
from pathlib import Path

import pytest
from module_runner import run as run_module
from vllm_fixture_tree import materialise

from ansible_collections.sparkfleet.vllm.plugins.module_utils import patches, vllm_logs
from ansible_collections.sparkfleet.vllm.plugins.modules import vllm_check

REPO = Path(__file__).resolve().parents[2]
REAL = Path(__file__).resolve().parent / "fixtures" / "vllm_real"
META = json.loads((REAL / "meta.json").read_text())
FIRST = json.loads((REAL / "first" / "summary.json").read_text())
COLD = json.loads((REAL / "cold" / "summary.json").read_text())
LOGS = {"unpatched": "first", "patched": "first", "random": "first", "fp8": "cold"}
sys.path.insert(0, str(REPO / "tests" / "sim" / "standin"))
import gb10


def log(run, recording=None):
    return (REAL / (recording or LOGS[run]) / ("vllm-0.21.0-%s-h200.log" % run)).read_text()


def messages(text):
    """The message part of each logger line ("(EngineCore pid=1) INFO 12-03 15:48:03 [file.py:122] message")."""
    return {line.split("] ", 1)[1] for line in text.splitlines() if "] " in line and " INFO " in line}


def test_every_log_is_marked_with_its_release_and_gpu():
    assert FIRST["facts"]["nvidia_smi"].startswith("NVIDIA H200, 9.0") and FIRST["facts"] == COLD["facts"]
    for recording in (FIRST, COLD):
        for run in recording["runs"]:
            text = log(run["run"], "first" if recording is FIRST else "cold")
            assert "version 0.21.0" in text


@pytest.mark.parametrize("run, backend", [("unpatched", "marlin"), ("patched", "triton"), ("random", "triton"),
                                          ("fp8", "triton")])
def test_parser_reads_the_real_lines(run, backend):
    facts = vllm_logs.parse(log(run))
    assert facts["vllm_version"] == "0.21.0"
    assert facts["phases"] == ["load_started", "weights_loaded", "model_loaded", "engine_ready", "app_started"]
    assert (facts["shards_loaded"], facts["shards_total"]) == (1, 1) and facts["stage"] == "serving"
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


@pytest.mark.parametrize("recording", [FIRST, COLD], ids=["first", "cold"])
def test_the_recorded_runs_judged_what_a_user_needs(recording):
    """What vllm_check said on the GPU, in both recordings: the unpatched server answered well but failed on
    its backend; the patched one passed; the random one failed on its answers alone (its backend was right);
    the FP8 one passed."""
    by = {r["run"]: r for r in recording["runs"]}
    assert by["unpatched"]["check_failed"] and by["unpatched"]["msg"].endswith(
        "requested --moe-backend triton, but vLLM resolved MARLIN")
    assert all(a["ok"] for a in by["unpatched"]["answers"])
    assert not by["patched"]["check_failed"]
    assert [a["answer"] for a in by["patched"]["answers"]] == [" Paris.", "法国的首都是巴黎。"]
    if "random" in by:
        assert by["random"]["check_failed"] and not any(a["ok"] for a in by["random"]["answers"])
        assert all(k["status"] == "ok" for k in by["random"]["kernels"])
    if "fp8" in by:
        assert not by["fp8"]["check_failed"]
        assert "Using TRITON Fp8 MoE backend" in log("fp8")


def test_the_lock_carries_what_serving_imported():
    """tests/gpu/requirements.txt holds what a serving process imported when everything was installed (the
    first recording), the distributions its traces could not judge, and ansible-core for vllm_check; nothing
    the first recording saw unused."""
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    import wheels

    locked = {norm(name) for name, _unused, _unused in wheels.requirements()}
    imported = {norm(name) for name in FIRST["imports"]["imported"]}
    unproven = {norm(name) for name in FIRST["imports"]["unproven"]}
    unused = {norm(name) for name in FIRST["imports"]["not_imported"]}
    assert locked == imported | unproven | {"ansible-core"}
    assert not locked & (unused - {"ansible-core"})
    assert len(imported) + len(unproven) + len(unused) == 86
    assert COLD["imports"]["not_imported"] == ["ansible-core"]  # the cold machine needed every other one


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
    _unused, lines = gb10.wna16(gb10.Release(tree), "triton")
    assert lines
    assert set(lines) <= messages(log(run))


@pytest.mark.parametrize("run, mismatch", [("unpatched", True), ("patched", False)])
def test_vllm_check_reads_a_log_file(run, mismatch, tmp_path):
    """log_file: the startup log of a server run outside a container, read like a container's log, and in
    place of the container the verify role always names."""
    rc, result = run_module(vllm_check, {
        "url": "http://127.0.0.1:9", "served_model_name": "kimi-k2.5", "probes": [{"prompt": "x"}],
        "container_name": "sparkfleet-vllm", "log_file": str(REAL / "first" / ("vllm-0.21.0-%s-h200.log" % run)),
        "moe_backend": "triton", "quantization": "compressed-tensors", "vllm_version": "0.21.0", "timeout": 2})
    assert rc == 1 and result["failed"]  # nothing listens on port 9
    assert ("resolved MARLIN" in result["msg"]) is mismatch
    assert result["boot"]["moe_backend"] == ("marlin" if mismatch else "triton")


def test_vllm_check_names_an_unreadable_log_file(tmp_path):
    rc, result = run_module(vllm_check, {"url": "http://127.0.0.1:9", "served_model_name": "m",
                                         "probes": [{"prompt": "x"}], "log_file": str(tmp_path / "absent.log"),
                                         "timeout": 2})
    assert rc == 1 and "cannot read the startup log %s" % (tmp_path / "absent.log") in result["msg"]


@pytest.mark.parametrize("run", ["unpatched", "patched", "random", "fp8"])
def test_the_reader_fed_in_pieces_reads_what_parse_reads(run):
    """The boot follower feeds the log as it arrives, cut anywhere (mid-line too), keeping its state as
    plain data between polls; it must end with exactly the facts of one whole read."""
    text = log(run)
    state, stages = None, []
    for start in range(0, len(text), 997):
        reader = vllm_logs.LogReader(json.loads(json.dumps(state)) if state else None)
        reader.feed(text[start:start + 997])
        state = reader.state()
        stage = reader.facts()["stage"]
        if not stages or stages[-1] != stage:
            stages.append(stage)
    assert vllm_logs.LogReader(state).feed("", final=True).facts() == vllm_logs.parse(text)
    assert stages[-1] == "serving" and any(s.startswith("engine starting (vLLM 0.21.0") for s in stages)
    assert "profiling, KV cache and graph capture" in stages, stages
