"""The stand-in's GB10 emulation (tests/sim/standin/gb10.py) on the real source of every vLLM release
0.17.0-0.34.0, as released and as the collection patches it.

These tests pin what the emulation answers, so that the integration tests which rely on it (Kimi on Marlin
answers "foss", MiMo without a patch answers seed 004's garbage) rest on the releases' own structure."""

import re
import sys
from pathlib import Path

import pytest
from vllm_fixture_tree import RELEASES, materialise, vt

from ansible_collections.sparkfleet.vllm.plugins.module_utils import patches

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim" / "standin"))
import gb10


def kimi(release):
    try:
        return gb10.wna16(release, "triton")
    except gb10.ReleaseError as exc:
        return "refused", [str(exc)]


def mimo(release):
    try:
        return gb10.mimo_outcome(release)[0]
    except gb10.ReleaseError:
        return "refused"


@pytest.mark.parametrize("version", RELEASES)
def test_emulated_kimi_backend_as_released(version, tmp_path):
    """FIELD-NOTES §2: --moe-backend triton is ignored in 0.17-0.24 (Marlin), refused in 0.25-0.26, honoured
    from 0.27; the log lines are the release's own."""
    backend, lines = kimi(gb10.Release(materialise(version, tmp_path)))
    if vt(version) < (0, 25):
        assert backend == "MARLIN"
        assert lines[0] == "Using CompressedTensorsWNA16MarlinMoEMethod"
        assert lines[1] == ("Using Marlin backend for WNA16 MoE (group_size=32, num_bits=4)" if vt(version) < (0, 23)
                            else "Using 'MARLIN' WNA16 MoE backend.")
    elif vt(version) < (0, 27):
        assert backend == "refused"
        assert lines[0].startswith("moe_backend='triton' is not supported for WNA16 MoE. Expected one of [")
    else:
        assert backend == "TRITON"
        q = "" if vt(version) >= (0, 34) else "'"
        assert lines == ["Using CompressedTensorsWNA16MoEMethod", f"Using {q}TRITON{q} WNA16 MoE backend."]


@pytest.mark.parametrize("version", RELEASES)
def test_emulated_mimo_outcome_as_released(version, tmp_path):
    """Seed 004's stages on unpatched releases: the MXFP8 dispatch arrives in 0.25, the scale name never."""
    outcome = mimo(gb10.Release(materialise(version, tmp_path)))
    assert outcome.strip().startswith("あるい" if vt(version) < (0, 25) else "ייך")


@pytest.mark.parametrize("version", RELEASES)
def test_emulation_judges_the_patched_source(version, tmp_path):
    """After the collection's patch engine, the emulation follows what each patch really changed."""
    vllm = materialise(version, tmp_path)
    report = {r["id"]: r["verdict"] for r in patches.run(str(vllm), patches.select(list(patches.CATALOGUE)))}
    release = gb10.Release(vllm)
    backend, _unused = kimi(release)
    if report["wna16_moe_backend"] == patches.APPLIED:
        assert backend == "TRITON"
    elif report["wna16_moe_backend"] == patches.FIXED:
        assert backend == "TRITON"
    else:
        assert backend in ("MARLIN", "refused")
    outcome = mimo(release)
    mimo_ids = ("modelopt_mxfp8_dispatch", "mxfp8_scale_name", "mimo_qkv_split")
    if all(report[i] in (patches.APPLIED, patches.FIXED) for i in mimo_ids):
        assert outcome is None, "all MiMo patches in place, yet the emulation answers %r" % outcome
    else:
        assert outcome is not None


def test_wrong_shapes_are_not_taken_for_fixes(tmp_path):
    """A condition that reads the request but is never true on CUDA does not make Triton happen."""
    vllm = materialise("0.21.0", tmp_path)
    target = next(vllm.glob("model_executor/layers/quantization/compressed_tensors/**/compressed_tensors_moe.py"))
    src = target.read_text()
    src = src.replace("or current_platform.is_rocm()",
                      "or current_platform.is_rocm()\n                or (current_platform.is_rocm() and "
                      "get_current_vllm_config().kernel_config.moe_backend == 'triton')", 1)
    target.write_text(src)
    assert kimi(gb10.Release(vllm))[0] == "MARLIN"
    target.write_text(src.replace("(current_platform.is_rocm() and", "(current_platform.is_cuda() and", 1))
    assert kimi(gb10.Release(vllm))[0] == "TRITON"


def test_the_stand_in_never_reads_our_patch_names():
    names = set()
    for path in (REPO / "plugins" / "module_utils" / "patches").glob("*.py"):
        names |= set(re.findall(r"def (_sparkfleet_\w+)", path.read_text()))
    assert names, "the patches define no helper functions any more: update this test"
    for path in (REPO / "tests" / "sim" / "standin").glob("*.py"):
        text = path.read_text()
        assert "sparkfleet-patch" not in text and not any(n in text for n in names), path


@pytest.mark.parametrize("version", RELEASES)
def test_nvfp4_moe_line_is_the_releases_own(version, tmp_path):
    line = gb10.nvfp4_moe_line(gb10.Release(materialise(version, tmp_path)), "MARLIN")
    q = "" if vt(version) >= (0, 34) else "'"
    assert line == (f"Using {q}MARLIN{q} NvFp4 MoE backend out of potential backends: "
                    "['FLASHINFER_TRTLLM', 'FLASHINFER_CUTLASS', 'CUTLASS', 'MARLIN'].")
