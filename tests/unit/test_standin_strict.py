"""The TEST DOUBLE of `vllm serve` (tests/sim/standin/vllm_standin.py), run against real vLLM sources.

These tests are about the stand-in, not about vLLM or the collection: the double must refuse what the vLLM
release in its image refuses, the way that release refuses it, judged only from that release's own source
files (0.21.0 always; 0.34.0 when its wheel is in the cache), and require a GPU through NVML as vLLM does.
No Ray and no cluster: every command line here fails or is judged before the stand-in would join Ray.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import simctl
import yaml

from ansible_collections.sparkfleet.vllm.plugins.module_utils.serve_plan import serve_argv

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "sim" / "standin" / "vllm_standin.py"
VERSIONS = ["0.21.0"] + (["0.34.0"] if sorted((simctl.CACHE / "wheels").glob("vllm-0.34.0-*.whl")) else [])

# A minimal NVML: the three entry points vLLM's platform detection (and the stand-in) calls; the GPU count comes
# from SIM_NVML_GPUS so one library serves "one GPU" and "no GPU".
NVML_SHIM = r"""
#include <stdlib.h>
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) {
    const char *n = getenv("SIM_NVML_GPUS");
    *count = n ? (unsigned int)atoi(n) : 1;
    return 0;
}
"""


def _load_standin():
    spec = importlib.util.spec_from_file_location("vllm_standin_under_test", STANDIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


standin = _load_standin()


@pytest.fixture(scope="session", params=VERSIONS)
def image_site(request, tmp_path_factory):
    """site-packages as the stand-in base image has it: simctl's extraction of the real wheel."""
    dest = tmp_path_factory.mktemp("standin-site-" + request.param)
    simctl.extract_vllm_sources(simctl.vllm_wheel(request.param), dest)
    return request.param, dest


@pytest.fixture(scope="session", params=VERSIONS)
def prefix_site(request, tmp_path_factory):
    """Only the files VLLM_SOURCE_PREFIXES names: what the stand-in's reader needs must be among them."""
    dest = tmp_path_factory.mktemp("standin-prefixes-" + request.param)
    with zipfile.ZipFile(simctl.vllm_wheel(request.param)) as zf:
        for name in zf.namelist():
            if name.startswith(simctl.VLLM_SOURCE_PREFIXES) and name.endswith(".py"):
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                (dest / name).write_bytes(zf.read(name))
    return request.param, dest


@pytest.fixture(scope="session")
def nvml_dir(tmp_path_factory):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler for the NVML test library")
    d = tmp_path_factory.mktemp("nvml")
    (d / "shim.c").write_text(NVML_SHIM)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "libnvidia-ml.so.1"), str(d / "shim.c")], check=True)
    return d


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A model directory with a config.json and no weights: the stand-in gets past its model check, and a
    command line it accepts fails only later, when it looks for the weights (before any Ray)."""
    d = tmp_path_factory.mktemp("model")
    (d / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (d / "tokenizer.json").write_text('{"version": "1.0"}')
    (d / "tokenizer_config.json").write_text("{}")
    return d


def run_standin(site, *args, nvml=None, gpus=1, env=None):
    """`vllm ARGS` in a process whose vllm package is `site`'s; `nvml` set: the process sees a GPU library."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SPARKFLEET_SIM_", "LD_LIBRARY"))}
    base["PYTHONPATH"] = str(site)
    if nvml is not None:
        base["LD_LIBRARY_PATH"] = str(nvml)
        base["SIM_NVML_GPUS"] = str(gpus)
    base.update(env or {})
    return subprocess.run([sys.executable, str(STANDIN), *args], env=base, capture_output=True, text=True,
                          timeout=120, check=False)


def read_cli(site, *args):
    return standin.read_cli(list(args), Path(site) / "vllm")


def parse_exit(site, capsys, *args):
    with pytest.raises(SystemExit) as exc:
        read_cli(site, *args)
    return exc.value.code, capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- flags
def test_standin_refuses_an_unknown_flag_as_argparse_does(image_site):
    _unused, site = image_site
    res = run_standin(site, "serve", "/nonexistent", "--no-such-flag", "1")
    assert res.returncode == 2
    assert "vllm: error: unrecognized arguments: --no-such-flag 1" in res.stderr


def test_standin_refuses_kv_cache_dtype_fp9_the_way_each_release_does(image_site, nvml_dir, model_dir):
    version, site = image_site
    res = run_standin(site, "serve", str(model_dir), "--kv-cache-dtype", "fp9", nvml=nvml_dir)
    if version == "0.21.0":  # CacheDType is a plain Literal: argparse choices
        assert res.returncode == 2
        assert "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'fp9' (choose from 'auto'," in res.stderr
    else:  # `CacheDType | str`: any string parses, CacheConfig's validator refuses it
        assert res.returncode == 1
        assert "ValidationError: 1 validation error for CacheConfig" in res.stderr
        assert "Value error, Invalid kv_cache_dtype: 'fp9'. Valid values are: ['auto'," in res.stderr


def test_standin_moe_backend_choices_come_from_the_release(image_site, capsys):
    _unused, site = image_site
    code, err = parse_exit(site, capsys, "serve", "m", "--moe-backend", "no_such_backend")
    assert code == 2
    assert "argument --moe-backend: invalid choice: 'no_such_backend' (choose from " in err
    assert "'marlin'" in err and "'triton'" in err
    args, _unused, _unused = read_cli(site, "serve", "m", "--moe-backend", "TRITON")
    assert args.moe_backend == "triton"  # vLLM lower-cases it before checking


def test_standin_normalises_flags_as_flexible_argument_parser(image_site, capsys):
    _unused, site = image_site
    args, _unused, _unused = read_cli(site, "serve", "m", "--max_model_len", "4k", "--gpu_memory_utilization=0.8",
                                      "--enforce_eager", "--no-trust-remote-code", "-tp", "2")
    assert (args.max_model_len, args.gpu_memory_utilization) == (4000, 0.8)
    assert (args.enforce_eager, args.trust_remote_code, args.tensor_parallel_size) == (True, False, 2)
    code, err = parse_exit(site, capsys, "serve", "m", "--gpu-memory-utilization", "lots")
    assert code == 2 and "argument --gpu-memory-utilization" in err and "lots" in err
    code, err = parse_exit(site, capsys, "serve", "m", "--tensor-parallel-size", "two")
    assert code == 2 and "argument --tensor-parallel-size/-tp: invalid int value: 'two'" in err


def test_standin_validates_json_config_flags_at_parse_time(image_site, capsys):
    _unused, site = image_site
    code, err = parse_exit(site, capsys, "serve", "m", "-ac.no_such_key", "1")
    assert code == 2
    assert "argument --attention-config/-ac: 1 validation error for AttentionConfig" in err
    assert "Unexpected keyword argument" in err


# ------------------------------------------------------------------------------- attention backends
def test_standin_attention_backend_is_judged_by_the_release_registry(image_site, nvml_dir, model_dir):
    version, site = image_site
    res = run_standin(site, "serve", str(model_dir), "--attention-backend", "TRITON_ATTN_DIFFKV", nvml=nvml_dir)
    assert res.returncode == 1
    if version == "0.21.0":  # registry.py has FLASH_ATTN_DIFFKV but no TRITON_ATTN_DIFFKV
        assert "ValueError: Unknown attention backend: 'TRITON_ATTN_DIFFKV'. Valid options are: FLASH_ATTN, " \
               "FLASH_ATTN_DIFFKV, TRITON_ATTN," in res.stderr
        assert "Cannot find any model weights" not in res.stdout
    else:  # accepted: the start goes on and fails later, on the weights this model directory lacks
        assert "Unknown attention backend" not in res.stdout + res.stderr
        assert "EngineCore failed to start. RuntimeError: Cannot find any model weights" in res.stdout


def test_standin_attention_backend_inside_attention_config_is_an_argparse_error(image_site, capsys):
    version, site = image_site
    args = ("serve", "m", "--attention-config", '{"backend": "TRITON_ATTN_DIFFKV"}')
    if version == "0.21.0":
        code, err = parse_exit(site, capsys, *args)
        assert code == 2
        assert "argument --attention-config/-ac: 1 validation error for AttentionConfig" in err
        assert "Unknown attention backend: 'TRITON_ATTN_DIFFKV'" in err
    else:
        assert read_cli(site, *args)[0].attention_config == {"backend": "TRITON_ATTN_DIFFKV"}


def test_standin_without_a_gpu_accepts_the_flags_then_fails_like_vllm(image_site):
    """Nothing here is a parse error for either release (0.21.0 judges the backend only while it builds its
    engine config, after detecting the platform): without NVML, the missing GPU is what ends the start."""
    _unused, site = image_site
    res = run_standin(site, "serve", "/nonexistent", "--attention-backend", "TRITON_ATTN_DIFFKV")
    assert res.returncode == 1  # not argparse's 2: nothing on this command line is a parse error
    assert "RuntimeError: Failed to infer device type, please set the environment variable " \
           "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue." in res.stderr


# ------------------------------------------------------------------------------------- quantization
def test_standin_refuses_an_unknown_quantization_method(image_site, nvml_dir, model_dir):
    _unused, site = image_site
    res = run_standin(site, "serve", str(model_dir), "--quantization", "no_such_quant", nvml=nvml_dir)
    assert res.returncode == 1
    assert "1 validation error for ModelConfig" in res.stderr
    assert "Value error, Unknown quantization method: no_such_quant. Must be one of ['awq'," in res.stderr


# -------------------------------------------------------------------------------------------- env
def test_standin_refuses_a_vllm_env_value_outside_its_declared_choices(image_site, nvml_dir, model_dir):
    _unused, site = image_site
    res = run_standin(site, "serve", str(model_dir), nvml=nvml_dir, env={"VLLM_WORKER_MULTIPROC_METHOD": "threads"})
    assert res.returncode == 1
    assert "EngineCore failed to start. ValueError: Invalid value 'threads' for VLLM_WORKER_MULTIPROC_METHOD. " \
           "Valid options: ['spawn', 'fork']." in res.stdout


def test_standin_only_warns_on_an_unknown_vllm_env_name_unless_asked_to_fail(image_site, nvml_dir, model_dir):
    _unused, site = image_site
    env = {"VLLM_SPARKFLEET_STANDIN_TEST": "1"}
    res = run_standin(site, "serve", str(model_dir), nvml=nvml_dir, env=env)
    assert "WARNING" in res.stdout and "Unknown vLLM environment variable detected: VLLM_SPARKFLEET_STANDIN_TEST" \
        in res.stdout
    assert "Cannot find any model weights" in res.stdout  # it went on
    res = run_standin(site, "serve", str(model_dir), "--fail-on-environ-validation", nvml=nvml_dir, env=env)
    assert res.returncode == 1
    assert "ValueError: Unknown vLLM environment variable detected: VLLM_SPARKFLEET_STANDIN_TEST" in res.stderr


# ------------------------------------------------------------------------------------------------ GPU
def test_standin_without_nvml_fails_in_the_api_server_as_vllm(image_site, nvml_dir, model_dir):
    _unused, site = image_site
    for nvml in (None, nvml_dir):  # no libnvidia-ml.so.1 at all; a library that reports 0 devices
        res = run_standin(site, "serve", str(model_dir), nvml=nvml, gpus=0)
        assert res.returncode == 1
        assert "(APIServer pid=" in res.stderr
        assert "RuntimeError: Failed to infer device type" in res.stderr


def test_standin_nvml_gpu_count_and_the_worker_check(nvml_dir):
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('s', sys.argv[1]); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); print(m.nvml_gpu_count()); "
            "m.worker_device_check(3, '172.29.0.13', ('RuntimeError', 'Failed to infer device type'))")
    base = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ok = subprocess.run([sys.executable, "-c", code, str(STANDIN)], capture_output=True, text=True, check=False,
                        env={**base, "LD_LIBRARY_PATH": str(nvml_dir), "SIM_NVML_GPUS": "2"})
    assert ok.returncode == 0 and ok.stdout.splitlines()[0] == "2"
    none = subprocess.run([sys.executable, "-c", code, str(STANDIN)], capture_output=True, text=True, check=False,
                          env=base)
    assert none.stdout.splitlines()[0] == "0"
    assert none.returncode == 1
    assert "RuntimeError: Failed to infer device type (RayWorkerProc rank=3 on node 172.29.0.13: NVML finds no " \
           "GPU in this container)" in none.stderr
    assert "ERROR" in none.stdout and "[ray_executor.py:1] RayWorkerProc failed: RuntimeError: Failed to infer " \
        "device type (RayWorkerProc rank=3 on node 172.29.0.13" in none.stdout


# ---------------------------------------------------------------------------------------------- recipes
@pytest.mark.parametrize("recipe", sorted((REPO / "recipes").glob("*.yml")), ids=lambda p: p.stem)
def test_standin_parses_the_recipes_command_lines(recipe, image_site):
    version, site = image_site
    r = yaml.safe_load(recipe.read_text())
    argv = serve_argv("/models/x", r["served_model_name"], 8, 1, 8000, "0.0.0.0", r.get("serve_args", []))
    args, parser, source = read_cli(site, *argv[1:])
    assert args.moe_backend == r["moe_backend"]
    assert args.distributed_executor_backend == "ray" and args.tensor_parallel_size == 8
    needs = tuple(int(x) for x in str(r.get("min_vllm", "0")).split(".")[:2])
    if tuple(int(x) for x in version.split(".")[:2]) >= needs:
        source.check_config_values(args, parser)  # and the release's config validators take them too
    elif "TRITON_ATTN_DIFFKV" in r.get("serve_args", []):
        with pytest.raises(standin.StartupError, match="Unknown attention backend: 'TRITON_ATTN_DIFFKV'"):
            source.check_config_values(args, parser)


# ---------------------------------------------------------------------------- the image's file list
def test_standin_reader_needs_only_the_vllm_source_prefixes(prefix_site, capsys):
    version, site = prefix_site
    assert not (site / "vllm" / "__init__.py").exists()  # far from the whole package
    code, err = parse_exit(site, capsys, "serve", "m", "--no-such-flag")
    assert code == 2 and "unrecognized arguments: --no-such-flag" in err
    args, parser, source = read_cli(site, "serve", "m", "--attention-backend", "TRITON_ATTN_DIFFKV",
                                    "--quantization", "no_such_quant")
    with pytest.raises(standin.StartupError, match="Unknown quantization method: no_such_quant"):
        source.check_config_values(args, parser)
    args, parser, source = read_cli(site, "serve", "m", "--attention-backend", "TRITON_ATTN_DIFFKV")
    if version == "0.21.0":
        with pytest.raises(standin.StartupError, match="Unknown attention backend: 'TRITON_ATTN_DIFFKV'"):
            source.check_config_values(args, parser)
    else:
        source.check_config_values(args, parser)
    assert source.device_error() == ("RuntimeError", "Failed to infer device type, please set the environment "
                                     "variable `VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug "
                                     "the issue.")
    assert source.notes == []


# ------------------------------------------------------------------------------- kernels in the logs
@pytest.mark.parametrize("recipe", sorted((REPO / "recipes").glob("*.yml")), ids=lambda p: p.stem)
def test_standin_kernel_lines_are_what_verify_reads(recipe, image_site, tmp_path):
    """The stand-in's kernel, attention and config lines (its GB10 emulation, rendered from the release's own
    formats) meet the verify step's parser: on the patched release every fact the recipe asks for is read
    back as expected; the unpatched Kimi release shows seed 000's Marlin."""
    import make_checkpoint

    from ansible_collections.sparkfleet.vllm.plugins.module_utils import patches, vllm_logs
    from ansible_collections.sparkfleet.vllm.plugins.modules import vllm_check

    version, site = image_site
    r = yaml.safe_load(recipe.read_text())
    if tuple(int(x) for x in version.split(".")) < tuple(int(x) for x in r["min_vllm"].split(".")):
        pytest.skip("the recipe needs a later release")
    flavour = "mimo" if r["name"].startswith("mimo") else "kimi"
    config = {"architectures": make_checkpoint.FLAVOURS[flavour]["architectures"]}
    quant = make_checkpoint.FLAVOURS[flavour]["quantization_config"]
    argv = serve_argv("/models/x", r["served_model_name"], 8, 1, 8000, "0.0.0.0", r.get("serve_args", []))
    args, _unused, _unused = read_cli(site, *argv[1:])
    expected = vllm_check.expected_kernels(dict(
        serve_args=r["serve_args"], moe_backend=r["moe_backend"], attention_backend=None, kv_cache_dtype=None,
        quantization=r["quantization"], mxfp8_linear_kernel=r.get("mxfp8_linear_kernel"),
        expect_mxfp8=r.get("expect_mxfp8", False)))

    def boot_log(vllm_dir):
        release = standin.gb10.Release(vllm_dir)
        lines, garbage = standin.kernel_choice(quant, args.moe_backend, {}, release)
        lines += standin.attention_lines(config, args, release)
        text = standin.engine_config_text(args, quant, 8, 1, release)
        lines.append(f"Initializing a V1 LLM engine (v{version}) with config: {text}")
        return "\n".join(f"(EngineCore_DP0 pid=1) INFO 12-03 10:00:00 [x.py:1] {line}" for line in lines), garbage

    pristine = tmp_path / "vllm"
    shutil.copytree(site / "vllm", pristine)
    log, garbage = boot_log(pristine)
    if flavour == "kimi" and version == "0.21.0":
        verdicts = vllm_logs.verdicts(expected, vllm_logs.parse(log), version)
        assert vllm_logs.problems(verdicts) == ["requested --moe-backend triton, but vLLM resolved MARLIN"]
        assert garbage.split()[:3] == ["foss"] * 3
    patches.run(str(pristine), patches.select(r["patches"]), required=r["required_patches"])
    log, garbage = boot_log(pristine)
    verdicts = vllm_logs.verdicts(expected, vllm_logs.parse(log), version)
    assert {v["fact"]: v["status"] for v in verdicts} == {fact: "ok" for fact in expected}, verdicts
    assert garbage is None


# ------------------------------------------------------------------------------------ model files
@pytest.mark.parametrize("lost", ["tokenizer.json", "tokenizer_config.json", "modeling_x.py"])
def test_standin_fails_like_vllm_when_the_tokenizer_or_remote_code_is_missing(image_site, nvml_dir, tmp_path,
                                                                              lost):
    """vLLM's API server loads the remote code that config.json's auto_map names (--trust-remote-code), then
    the tokenizer, from the model directory; a snapshot whose weights alone arrived fails there."""
    _unused, site = image_site
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], '
                                       '"auto_map": {"AutoConfig": "modeling_x.XConfig"}}')
    for name in ("tokenizer.json", "tokenizer_config.json", "modeling_x.py"):
        if name != lost:
            (model / name).write_text("{}" if name.endswith(".json") else "class XConfig: pass\n")
    res = run_standin(site, "serve", str(model), "--trust-remote-code", nvml=nvml_dir)
    assert res.returncode == 1
    if lost == "modeling_x.py":
        assert f"OSError: {model} does not appear to have a file named modeling_x.py." in res.stderr
    else:
        assert f"OSError: Can't load tokenizer for '{model}'." in res.stderr


@pytest.mark.parametrize(("tp", "refused"), [(3, True), (5, True), (2, False), (4, False)])
def test_standin_refuses_a_tp_that_does_not_divide_the_attention_heads(image_site, nvml_dir, tmp_path, tp, refused):
    """vLLM checks the TP against the model's attention heads while it builds its config: TP=5 on a model of
    16 heads ends the server before any rank starts. A TP that divides them gets past the check."""
    _unused, site = image_site
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "num_attention_heads": 16}')
    (model / "tokenizer.json").write_text('{"version": "1.0"}')
    (model / "tokenizer_config.json").write_text("{}")
    res = run_standin(site, "serve", str(model), "--tensor-parallel-size", str(tp), nvml=nvml_dir)
    said = "ValueError: Total number of attention heads (16) must be divisible by tensor parallel size (%d)." % tp
    assert res.returncode == 1 and (said in res.stderr) == refused, res.stderr[-2000:]
