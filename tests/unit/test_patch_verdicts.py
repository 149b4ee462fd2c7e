"""Every patch's verdict on the real source of every vLLM release 0.17.0-0.34.0 (PyPI sdists, extracted by
tests/tools/vllm_fixtures.py), established by reading each release's code on the path a GB10 runs (CUDA,
SM 12.1, Marlin supporting the layer), not by trusting the detectors.

Each release's watched files (plus _version.py) are materialised into a tmp vllm tree and the engine runs on
it: the verdicts must equal the table; applied results compile and pass their post-conditions; a second run
reports "already applied" and changes nothing."""

import ast
import io
import json
import os
import py_compile
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from vllm_fixture_tree import INDEX, materialise, vt

from ansible_collections.sparkfleet.vllm.plugins.module_utils import patches
from ansible_collections.sparkfleet.vllm.plugins.module_utils.patches import cuda_path, p5_wna16_moe_backend

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "tools"))
import patch_verdicts

A, F, N = patches.APPLIED, patches.FIXED, patches.NOT_FOUND
IDS = ("marlin_chunked_repack", "modelopt_mxfp8_dispatch", "mxfp8_scale_name", "mimo_qkv_split", "wna16_moe_backend")
# p1 repack, p2 dispatch, p3 scale name, p4 qkv split, p5 wna16 backend: the structural reason on GB10.
#
# p3/p4 N (0.17-0.20): only models/mimo_v2_flash.py exists; MiMoV2Model.load_weights has no fused qkv_proj
#   path (MiMo-V2.5-Pro, MiMoV2ForCausalLM, arrives with models/mimo_v2.py in 0.21): festr2 cannot load at all.
# p5 A (0.17-0.19): the target is still the module compressed_tensors/compressed_tensors_moe.py; on CUDA
#   `not check_moe_marlin_supports_layer(...) or current_platform.is_rocm()` is False -> the else branch returns
#   CompressedTensorsWNA16MarlinMoEMethod whatever --moe-backend says. 0.20 on: the same, in the package.
TABLE = {
    "0.17.0": (A, A, N, N, A),
    "0.17.1": (A, A, N, N, A),
    "0.18.0": (A, A, N, N, A),
    "0.18.1": (A, A, N, N, A),
    "0.19.0": (A, A, N, N, A),
    "0.19.1": (A, A, N, N, A),
    "0.20.0": (A, A, N, N, A),  # p5 target moved into the compressed_tensors_moe/ package (same condition)
    "0.20.1": (A, A, N, N, A),
    "0.20.2": (A, A, N, N, A),
    "0.21.0": (A, A, A, A, A),  # p4: `if "qkv_proj" in name:` loads loaded_weight.chunk(tp_size, dim=0)[tp_rank]
    "0.22.0": (A, A, A, A, A),
    "0.22.1": (A, A, A, A, A),
    "0.23.0": (A, A, A, A, A),
    # p5: kernel_config.moe_backend is read only inside `if current_platform.is_rocm():` (flydsl); the CUDA
    # path still returns the Marlin method. p4: an FP8 fused qkv_proj (festr2's MXFP8 is e4m3) goes through
    # _try_load_fp8_qkv_proj -> _shard_fp8_qkv_proj, which assumes the interleaved layout (rank chunk at TP=8).
    "0.24.0": (A, A, A, A, A),
    # p2: get_quant_method gained `if quant_algo == "MXFP8": return ModelOptMxFp8LinearMethod(self.mxfp8_config)`.
    # p5: the CUDA path still binds CompressedTensorsWNA16MarlinMoEMethod, whose constructor asks
    #   oracle/int_wna16.py::map_wna16_backend, which has no "triton" and raises ValueError. Not fixed upstream:
    #   the patched condition routes triton to CompressedTensorsWNA16MoEMethod (no oracle in this release)
    #   before the Marlin constructor runs, so triton is honoured.
    "0.25.0": (A, F, A, A, A),
    "0.25.1": (A, F, A, A, A),
    # p1: repack_weight delegates to _repack_marlin_experts, which writes out[i] of one preallocated tensor
    #   (vllm#47851). p5: as 0.25; the new Marlin return for moe_backend == "emulation" is under is_rocm().
    "0.26.0": (F, F, A, A, A),
    # p5: on CUDA the WNA16 branch returns CompressedTensorsWNA16MoEMethod unconditionally (the Marlin method
    #   is gone); that method asks the oracle, whose map_wna16_backend has "triton".
    "0.27.0": (F, F, A, A, F),
    "0.27.1": (F, F, A, A, F),
    "0.28.0": (F, F, A, A, F),
    "0.29.0": (F, F, A, A, F),
    # p2: linear algorithms are table-driven: "MXFP8" in LINEAR_ALGOS -> build_linear_method (the class
    #   ModelOptMxFp8LinearMethod is gone). p3: MiMo's loop still matches names as they come. p4:
    #   _shard_fp8_qkv_proj still assumes pre-sharded chunks (chunk(ckpt_tp, dim=0)[tp_rank] from 0.31).
    "0.30.0": (F, F, A, A, F),
    "0.31.0": (F, F, A, A, F),
    "0.32.0": (F, F, A, A, F),
    "0.33.0": (F, F, A, A, F),
    "0.34.0": (F, F, A, A, F),
}

OLD_CT = "model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe.py"
NEW_CT = "model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py"


def snapshot(vllm):
    return {p: p.read_bytes() for p in vllm.rglob("*.py")}


def test_the_table_covers_every_fixture_release_and_patch():
    assert list(TABLE) == list(INDEX)
    assert len(TABLE) == 26
    assert IDS == tuple(patches.CATALOGUE)


@pytest.mark.parametrize("version", list(TABLE))
def test_verdicts_of_every_release(version, tmp_path):
    vllm = materialise(version, tmp_path)
    report = patches.run(str(vllm), patches.select(list(IDS)))
    assert [r["verdict"] for r in report] == list(TABLE[version]), [(r["id"], r["detail"]) for r in report]
    assert all(r["vllm_version"] == version for r in report)
    for r in report:
        if r["verdict"] == A:
            py_compile.compile(str(vllm / r["target"]), doraise=True)
            assert not patches.CATALOGUE[r["id"]].postcondition((vllm / r["target"]).read_text())
    before = snapshot(vllm)
    again = patches.run(str(vllm), patches.select(list(IDS)))
    assert [r["verdict"] for r in again] == [patches.ALREADY if v == A else v for v in TABLE[version]]
    assert snapshot(vllm) == before  # applying twice changes nothing


@pytest.mark.parametrize("version", list(TABLE))
def test_the_candidate_target_that_exists_is_the_one_judged(version, tmp_path):
    vllm = materialise(version, tmp_path)
    report = {r["id"]: r for r in patches.run(str(vllm), patches.select(list(IDS)), write=False)}
    assert report["wna16_moe_backend"]["target"] == (OLD_CT if vt(version) < (0, 20) else NEW_CT)
    mimo = "model_executor/models/mimo_v2_flash.py" if vt(version) < (0, 21) else "model_executor/models/mimo_v2.py"
    assert report["mxfp8_scale_name"]["target"] == report["mimo_qkv_split"]["target"] == mimo
    if vt(version) < (0, 21):
        for pid in ("mxfp8_scale_name", "mimo_qkv_split"):
            assert "takes no fused qkv_proj" in report[pid]["detail"] and "MiMo-V2.5-Pro" in report[pid]["detail"]


def test_0_24_rocm_only_text_is_not_a_fix(tmp_path):
    """0.24.0 mentions kernel_config.moe_backend in get_moe_method, but only under is_rocm(): on CUDA the
    WNA16 branch still binds the Marlin method, so the patch applies (a text search judged it fixed)."""
    vllm = materialise("0.24.0", tmp_path)
    src = (vllm / NEW_CT).read_text()
    tree = ast.parse(src)
    reads = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "moe_backend"]
    assert reads, "0.24.0 reads kernel_config.moe_backend"
    rocm_ifs = [n for n in ast.walk(tree) if isinstance(n, ast.If) and "is_rocm" in ast.unparse(n.test)
                and not isinstance(n.test, ast.BoolOp)]
    assert all(any(r in set(ast.walk(i)) for i in rocm_ifs) for r in reads), "every read is inside is_rocm()"
    as_released = p5_wna16_moe_backend.cuda_methods(tree, "triton")
    assert {n for n, _unused in as_released} == {"CompressedTensorsWNA16MarlinMoEMethod"}
    report = patches.run(str(vllm), patches.select(["wna16_moe_backend"]))
    assert report[0]["verdict"] == A
    patched = ast.parse((vllm / NEW_CT).read_text())
    assert {n for n, _unused in p5_wna16_moe_backend.cuda_methods(patched, "triton")} == {"CompressedTensorsWNA16MoEMethod"}
    assert {n for n, _unused in p5_wna16_moe_backend.cuda_methods(patched, "auto")} == {
        "CompressedTensorsWNA16MarlinMoEMethod"}  # upstream's default is kept when triton is not asked for


@pytest.mark.parametrize("version", ["0.25.0", "0.26.0"])
def test_0_25_0_26_triton_bypasses_the_refusing_oracle(version, tmp_path):
    """The release refuses triton in the Marlin method's oracle; patched, the CUDA path never builds it."""
    vllm = materialise(version, tmp_path)
    oracle = (vllm / "model_executor/layers/fused_moe/oracle/int_wna16.py").read_text()
    mapping = next(n for n in ast.walk(ast.parse(oracle)) if isinstance(n, ast.FunctionDef) and
                   n.name == "map_wna16_backend")
    keys = {k.value for d in ast.walk(mapping) if isinstance(d, ast.Dict) for k in d.keys}
    assert "triton" not in keys and "marlin" in keys  # --moe-backend triton raises ValueError there
    patches.run(str(vllm), patches.select(["wna16_moe_backend"]))
    tree = ast.parse((vllm / NEW_CT).read_text())
    assert {n for n, _unused in p5_wna16_moe_backend.cuda_methods(tree, "triton")} == {"CompressedTensorsWNA16MoEMethod"}
    triton_method = (vllm / NEW_CT).parent / "compressed_tensors_moe_wna16.py"
    assert "select_wna16_moe_backend" not in triton_method.read_text()  # it does not consult the oracle


def test_gb10_facts():
    facts = cuda_path.Facts()

    def ev(expr):
        return cuda_path.value(ast.parse(expr, mode="eval").body, facts)

    assert ev("current_platform.is_rocm()") is False and ev("current_platform.is_cuda()") is True
    assert ev("current_platform.has_device_capability(100)") is True
    assert ev("current_platform.has_device_capability((12, 0))") is True
    assert ev("current_platform.has_device_capability(130)") is False
    assert ev("current_platform.is_device_capability(100)") is False
    assert ev("current_platform.is_device_capability(121)") is True
    assert ev("current_platform.is_device_capability_family(120)") is True
    assert ev("not current_platform.is_cuda() or current_platform.is_xpu()") is False
    assert ev("current_platform.is_rocm() and unknown_helper()") is False
    assert ev("unknown_helper() or current_platform.is_cuda()") is True
    assert ev("unknown_helper() and current_platform.is_cuda()") is cuda_path.UNKNOWN


def test_a_moved_target_names_every_candidate(tmp_path):
    vllm = materialise("0.34.0", tmp_path)
    (vllm / "model_executor/models/mimo_v2.py").unlink()
    report = patches.run(str(vllm), patches.select(["mimo_qkv_split"]), write=False)
    assert report[0]["verdict"] == N
    assert report[0]["detail"] == ("model_executor/models/mimo_v2.py does not exist "
                                   "(nor model_executor/models/mimo_v2_flash.py)")


# ------------------------------------------------------------------------------------ the verdicts command
def test_verdicts_command_on_a_fixture_tree(tmp_path):
    """`make patch-verdicts VLLM_SRC=...` runs tests/tools/patch_verdicts.py: JSON on stdout, the table's
    verdicts, nothing written, for a directory that contains vllm/ and for the vllm package directory itself."""
    vllm = materialise("0.25.0", tmp_path / "tree")
    before = snapshot(vllm)
    for arg in (vllm.parent, vllm):
        out = io.StringIO()
        with redirect_stdout(out):
            assert patch_verdicts.main([str(arg)]) == 0
        doc = json.loads(out.getvalue())
        assert doc["vllm_version"] == "0.25.0" and doc["vllm_dir"] == str(vllm)
        assert [r["verdict"] for r in doc["patches"]] == list(TABLE["0.25.0"])
        assert [r["id"] for r in doc["patches"]] == list(IDS)
        assert "dry run: nothing written" in doc["patches"][0]["detail"]
    assert snapshot(vllm) == before


def test_verdicts_command_as_the_makefile_runs_it(tmp_path):
    root = tmp_path / "collections"
    (root / "ansible_collections" / "sparkfleet").mkdir(parents=True)
    os.symlink(REPO, root / "ansible_collections" / "sparkfleet" / "vllm")
    vllm = materialise("0.17.0", tmp_path / "tree")
    cmd = [sys.executable, str(REPO / "tests" / "tools" / "patch_verdicts.py")]
    env = dict(os.environ, PYTHONPATH=str(root))
    res = subprocess.run(cmd + [str(vllm.parent), "--patches", "wna16_moe_backend,mimo_qkv_split"],
                         capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert {r["id"]: r["verdict"] for r in doc["patches"]} == {"mimo_qkv_split": N, "wna16_moe_backend": A}
    bad = subprocess.run(cmd + [str(tmp_path / "nowhere")], capture_output=True, text=True, env=env, check=False)
    assert bad.returncode == 2 and "neither a vllm package directory" in bad.stderr


# --------------------------------------------------------------------- the WNA16 rule on shapes no release has
SHAPE = '''import x


class CompressedTensorsMoEMethod:
    def get_moe_method(quant_config, layer):
        if quant_config._is_wNa16_group_channel(w, i):
%s
'''


@pytest.mark.parametrize("body, verdict", [
    # a one-line condition: wrapped in parentheses with the request added
    ("""            if not check_moe_marlin_supports_layer(layer, g) or current_platform.is_rocm():
                return CompressedTensorsWNA16MoEMethod(w)
            return CompressedTensorsWNA16MarlinMoEMethod(w)""", A),
    # Marlin only on ROCm: the CUDA path is already right, whatever the text mentions
    ("""            if current_platform.is_rocm() and kernel_config.moe_backend == "marlin":
                return CompressedTensorsWNA16MarlinMoEMethod(w)
            return CompressedTensorsWNA16MoEMethod(w)""", F),
    # Marlin only on devices below SM 10.0: GB10 (12.1) never reaches it
    ("""            if not current_platform.has_device_capability(100):
                return CompressedTensorsWNA16MarlinMoEMethod(w)
            return CompressedTensorsWNA16MoEMethod(w)""", F),
    # Triton on ROCm only, Marlin after it: the request joins the ROCm test
    ("""            if current_platform.is_rocm():
                return CompressedTensorsWNA16MoEMethod(w)
            return CompressedTensorsWNA16MarlinMoEMethod(w)""", A),
    # Marlin unconditionally, with no branch to route the request to: cannot be patched
    ("""            logger.info("Using CompressedTensorsWNA16MarlinMoEMethod")
            return CompressedTensorsWNA16MarlinMoEMethod(w)""", N),
])
def test_wna16_rule_on_synthetic_shapes(body, verdict):
    patch = patches.CATALOGUE["wna16_moe_backend"]
    got, new, _unused = patches.engine.evaluate(patch, SHAPE % body)
    assert got == verdict
    if got == A:
        compile(new, "x.py", "exec")
        assert patches.engine.evaluate(patch, new)[0] == patches.ALREADY
