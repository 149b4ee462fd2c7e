"""The patch engine against the real vLLM sources of 0.21.0 and 0.34.0 (wheels from PyPI, cached)."""

import py_compile
import shutil

import numpy as np
import pytest
import simctl

from ansible_collections.sparkfleet.vllm.plugins.module_utils import patches
from ansible_collections.sparkfleet.vllm.plugins.module_utils.patches import qkv

ALL = list(patches.CATALOGUE)
EXPECTED = {
    "0.21.0": {pid: patches.APPLIED for pid in ALL},
    "0.34.0": {
        "marlin_chunked_repack": patches.FIXED,
        "modelopt_mxfp8_dispatch": patches.FIXED,
        "mxfp8_scale_name": patches.APPLIED,
        "mimo_qkv_split": patches.APPLIED,
        "wna16_moe_backend": patches.FIXED,
    },
}


@pytest.fixture(scope="session", params=sorted(EXPECTED))
def pristine_sources(request, tmp_path_factory):
    version = request.param
    dest = tmp_path_factory.mktemp("vllm-" + version)
    simctl.extract_vllm_sources(simctl.vllm_wheel(version), dest)
    return version, dest / "vllm"


@pytest.fixture
def sources(pristine_sources, tmp_path):
    version, src = pristine_sources
    shutil.copytree(src, tmp_path / "vllm")
    return version, tmp_path / "vllm"


def test_per_version_verdicts_and_idempotence(sources):
    version, vllm = sources
    report = patches.run(str(vllm), patches.select(ALL), required=ALL)
    assert {r["id"]: r["verdict"] for r in report} == EXPECTED[version]
    assert all(r["vllm_version"] == version for r in report)
    for r in report:
        py_compile.compile(str(vllm / r["target"]), doraise=True)
    before = {p: p.read_text() for p in vllm.rglob("*.py")}
    again = patches.run(str(vllm), patches.select(ALL), required=ALL)
    assert {r["id"]: r["verdict"] for r in again} == {
        pid: (patches.ALREADY if v == patches.APPLIED else v) for pid, v in EXPECTED[version].items()}
    assert {p: p.read_text() for p in vllm.rglob("*.py")} == before  # applying twice changes nothing


def test_dry_run_writes_nothing(sources):
    _unused, vllm = sources
    before = {p: p.read_text() for p in vllm.rglob("*.py")}
    patches.run(str(vllm), patches.select(ALL), write=False)
    assert {p: p.read_text() for p in vllm.rglob("*.py")} == before


def test_buggy_shapes_are_gone_after_patching(sources):
    version, vllm = sources
    patches.run(str(vllm), patches.select(ALL))
    fp4 = (vllm / patches.CATALOGUE["marlin_chunked_repack"].target).read_text()
    repack = fp4[fp4.index("def repack_weight"):fp4.index("w13 = repack_weight")]
    assert "torch.cat" not in repack
    mimo = (vllm / patches.CATALOGUE["mimo_qkv_split"].target).read_text()
    assert "_sparkfleet_load_plain_qkv" in mimo and "name = _sparkfleet_scale_name(name, params_dict)" in mimo
    if version == "0.21.0":
        modelopt = (vllm / patches.CATALOGUE["modelopt_mxfp8_dispatch"].target).read_text()
        assert 'if quant_algo == "MXFP8":' in modelopt
        moe = (vllm / patches.CATALOGUE["wna16_moe_backend"].target).read_text()
        assert '_sparkfleet_requested_moe_backend() == "triton"' in moe


def test_required_patch_without_anchor_fails_naming_everything(pristine_sources, tmp_path):
    version, src = pristine_sources
    vllm = tmp_path / "vllm"
    shutil.copytree(src, vllm)
    target = vllm / patches.CATALOGUE["mimo_qkv_split"].target
    # A future release that moved the qkv loading elsewhere: the loader's loop has no fused qkv_proj path left
    # (no `if "qkv_proj" in name:` branch, no method that picks qkv_proj names). Renaming the method would not
    # do: the detectors judge structure, not names.
    text = target.read_text().replace('"qkv_proj" in name', '"fused_proj" in name')
    target.write_text(text.replace('"qkv_proj.weight', '"fused_proj.weight'))
    with pytest.raises(patches.PatchError) as err:
        patches.run(str(vllm), patches.select(["mimo_qkv_split"]), required=["mimo_qkv_split"])
    msg = str(err.value)
    assert "required patch mimo_qkv_split" in msg and "vLLM %s" % version in msg
    assert "model_executor/models/mimo_v2.py" in msg and "looked for" in msg
    # Not required: reported, not fatal.
    report = patches.run(str(vllm), patches.select(["mimo_qkv_split"]), required=[])
    assert report[0]["verdict"] == patches.NOT_FOUND


def test_unknown_patch_id():
    with pytest.raises(ValueError, match="unknown patch id nope; known: marlin_chunked_repack"):
        patches.select(["nope"])


# ------------------------------------------------------------------------------ the pure functions
MIMO = {"num_heads": 128, "num_kv_heads": 8, "head_dim": 192, "v_head_dim": 128}  # MiMo-V2.5-Pro attention


def fused_rows():
    q, k, v = qkv._sparkfleet_qkv_rows(128 * 192 + 8 * 192 + 8 * 128, **MIMO)
    labels = np.array(["Q"] * q + ["K"] * k + ["V"] * v)
    return q, k, v, labels


def test_qkv_rows_of_mimo():
    q, k, v, _unused = fused_rows()
    assert (q, k, v) == (24576, 1536, 1024)
    with pytest.raises(ValueError, match="not a plain \\[Q\\|K\\|V\\] stack"):
        qkv._sparkfleet_qkv_rows(27000, **MIMO)


def test_split_gives_every_rank_its_own_q_k_v_rows():
    q, k, v, labels = fused_rows()
    tp = 8
    fused = np.arange(q + k + v)
    for rank in range(tp):
        q_rows, k_rows, v_rows = qkv.shard_rows(q, k, v, tp, rank)
        assert set(labels[q_rows]) == {"Q"} and set(labels[k_rows]) == {"K"} and set(labels[v_rows]) == {"V"}
        assert fused[k_rows][0] == q + rank * (k // tp)  # its own KV head, not a neighbour's
        assert len(q_rows) == q // tp and len(k_rows) == k // tp and len(v_rows) == v // tp


def test_naive_chunk_is_wrong_on_seven_of_eight_ranks():
    q, k, v, labels = fused_rows()
    tp = 8
    per_rank = (q + k + v) // tp
    q_r, k_r = q // tp, k // tp
    all_q_in_kv_slots = 0
    for rank in range(tp):
        chunk = labels[rank * per_rank:(rank + 1) * per_rank]
        k_slot, v_slot = chunk[q_r:q_r + k_r], chunk[q_r + k_r:]
        if set(k_slot) == {"Q"} and set(v_slot) == {"Q"}:
            all_q_in_kv_slots += 1
    assert all_q_in_kv_slots == 7


def test_scale_name_mapping():
    params = {"layers.0.self_attn.qkv_proj.weight", "layers.0.self_attn.qkv_proj.weight_scale"}
    assert qkv._sparkfleet_scale_name("layers.0.self_attn.qkv_proj.weight_scale_inv", params) == \
        "layers.0.self_attn.qkv_proj.weight_scale"
    # Names vLLM knows, and names with no counterpart, are left alone.
    assert qkv._sparkfleet_scale_name("layers.0.self_attn.qkv_proj.weight", params) == "layers.0.self_attn.qkv_proj.weight"
    assert qkv._sparkfleet_scale_name("x.weight_scale_inv", params) == "x.weight_scale_inv"
    assert qkv._sparkfleet_scale_name("x.weight_scale_inv", {"x.weight_scale_inv", "x.weight_scale"}) == \
        "x.weight_scale_inv"


def test_in_image_runner_from_the_shipped_files(pristine_sources, tmp_path):
    """The files vllm_image puts in the build context form a package that runs on its own (no collection)."""
    import subprocess
    import sys

    from ansible_collections.sparkfleet.vllm.plugins.module_utils import image_build

    version, src = pristine_sources
    ctx = tmp_path / "ctx"
    for rel, text in image_build.patch_sources(patches).items():
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        (ctx / rel).write_text(text)
    site = tmp_path / "site"
    shutil.copytree(src, site / "vllm")
    ids = ",".join(ALL)
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    dry = subprocess.run([sys.executable, "-S", str(ctx / "apply_patches.py"), str(ctx),
                          "dry-run", ids, ids], capture_output=True, text=True, env=env, check=False)
    report, error = image_build.parse_patch_output(dry.stdout)
    assert error is None and dry.returncode == 0, dry.stdout + dry.stderr
    assert {r["id"]: r["verdict"] for r in report} == EXPECTED[version]
    assert not any("sparkfleet-patch" in p.read_text() for p in (site / "vllm").rglob("*.py"))  # dry run
    real = subprocess.run([sys.executable, "-S", str(ctx / "apply_patches.py"), str(ctx), "apply", ids, ids],
                          capture_output=True, text=True, env=env, check=False)
    report, _unused = image_build.parse_patch_output(real.stdout)
    assert real.returncode == 0 and {r["id"]: r["verdict"] for r in report} == EXPECTED[version]


def test_in_image_runner_reports_a_missing_required_anchor(pristine_sources, tmp_path):
    import subprocess
    import sys

    from ansible_collections.sparkfleet.vllm.plugins.module_utils import image_build

    _unused, src = pristine_sources
    ctx, site = tmp_path / "ctx", tmp_path / "site"
    for rel, text in image_build.patch_sources(patches).items():
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        (ctx / rel).write_text(text)
    shutil.copytree(src, site / "vllm")
    (site / "vllm" / patches.CATALOGUE["mimo_qkv_split"].target).unlink()
    res = subprocess.run([sys.executable, "-S", str(ctx / "apply_patches.py"), str(ctx), "dry-run", "mimo_qkv_split",
                          "mimo_qkv_split"], capture_output=True, text=True, env={"PYTHONPATH": str(site)}, check=False)
    _unused, error = image_build.parse_patch_output(res.stdout)
    assert res.returncode == 3
    assert "required patch mimo_qkv_split cannot be applied" in error and "mimo_v2.py does not exist" in error
