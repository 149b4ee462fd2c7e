"""The capability reader and checker against the real vLLM sources of 0.21.0 and 0.34.0 (wheels from PyPI, cached).

The sources are taken from the wheel exactly as SOURCE_PATHS names them (files, and *.py under directories), as the
role copies them out of an image; so these tests also prove SOURCE_PATHS is enough.
"""

import json
import zipfile
from pathlib import Path

import pytest
import simctl
import yaml

from ansible_collections.sparkfleet.vllm.plugins.module_utils import vllm_capabilities as vc
from ansible_collections.sparkfleet.vllm.plugins.module_utils.serve_plan import serve_argv

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
MODEL = "/root/.cache/huggingface/hub/models--x--y/snapshots/0123"


def sources_from_wheel(wheel):
    out = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if not name.startswith("vllm/") or not name.endswith(".py"):
                continue
            rel = name[len("vllm/"):]
            if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in vc.SOURCE_PATHS):
                out[rel] = zf.read(name).decode("utf-8")
    return out


@pytest.fixture(scope="session")
def facts():
    return {v: vc.read(sources_from_wheel(simctl.vllm_wheel(v))) for v in ("0.21.0", "0.34.0")}


@pytest.fixture(params=["0.21.0", "0.34.0"])
def caps(request, facts):
    return facts[request.param]


def serve(*extra):
    return ["vllm", "serve", MODEL, "--served-model-name", "x", *extra]


def recipe(name):
    return yaml.safe_load((RECIPES / (name + ".yml")).read_text())


def recipe_argv(rec, tp=8):
    return serve_argv(MODEL, rec["served_model_name"], tp, 1, rec["api_port"], "0.0.0.0", rec["serve_args"])


# --------------------------------------------------------------------------------------------------- facts

def test_facts_per_release(facts):
    old, new = facts["0.21.0"], facts["0.34.0"]
    assert (old["version"], new["version"]) == ("0.21.0", "0.34.0")
    for caps in (old, new):
        assert json.loads(json.dumps(caps)) == caps
        flags = caps["flags"]
        assert len(flags) > 300
        assert caps["positionals"] == ["model_tag"]
        # A bool config field gives --x and --no-x, neither taking a value.
        assert flags["--enforce-eager"]["takes_value"] is False
        assert flags["--no-enforce-eager"]["negates"] == "--enforce-eager"
        # Aliases share the entry of their long flag.
        assert flags["-tp"]["dest"] == "tensor_parallel_size" and flags["-tp"]["type"] == "int"
        assert flags["-q"]["dest"] == "quantization"
        # FrontendArgs fields and make_arg_parser's own flags.
        assert flags["--port"]["type"] == "int" and flags["--host"]["takes_value"] is True
        assert flags["--api-key"]["nargs"] == "+"
        assert flags["--headless"]["takes_value"] is False
        assert flags["--uvicorn-log-level"]["choices"] == ["critical", "error", "warning", "info", "debug", "trace"]
        assert flags["--max-model-len"]["type"] == "human_int_or_auto"
        assert flags["--hf-token"]["nargs"] == "?"  # bool | str | None: a bare flag or a value
        assert flags["--compilation-config"]["type"] == "json"
        assert "FLASH_ATTN_DIFFKV" in caps["attention_backends"]
        assert caps["attention_backend_ignore_case"] is True
        assert {"auto", "triton", "marlin"} <= set(caps["moe_backends"])
        assert {"auto", "fp8", "fp8_e5m2"} <= set(caps["kv_cache_dtypes"])
        assert {"modelopt_mixed", "compressed-tensors"} <= set(caps["quantization_methods"])
        assert caps["env"]["VLLM_WORKER_MULTIPROC_METHOD"]["choices"] == ["spawn", "fork"]
        assert caps["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == {"choices": None}
    assert "TRITON_ATTN_DIFFKV" not in old["attention_backends"]
    assert "TRITON_ATTN_DIFFKV" in new["attention_backends"]
    assert "VLLM_RPC_TIMEOUT" in old["env"] and "VLLM_RPC_TIMEOUT" not in new["env"]
    assert "VLLM_MARLIN_INPUT_DTYPE" in new["removed_env"]
    assert "fbgemm_fp8" in old["deprecated_quantization_methods"]


# ------------------------------------------------------------------------------------------ attention

def test_triton_attn_diffkv_refused_on_0_21_with_closest(facts):
    problems = vc.check(serve("--attention-backend", "TRITON_ATTN_DIFFKV"), {}, facts["0.21.0"])
    assert len(problems) == 1
    msg = problems[0]
    assert msg.startswith("--attention-backend TRITON_ATTN_DIFFKV is not a choice of vLLM 0.21.0; closest: ")
    closest = msg.split("closest: ", 1)[1].split(" (all: ", 1)[0].split(", ")
    assert "FLASH_ATTN_DIFFKV" in closest and "TRITON_ATTN" in closest
    assert "(all: FLASH_ATTN, FLASH_ATTN_DIFFKV, TRITON_ATTN," in msg
    # The --x=y spelling is judged the same way.
    assert vc.check(serve("--attention-backend=TRITON_ATTN_DIFFKV"), {}, facts["0.21.0"]) == problems


def test_triton_attn_diffkv_accepted_on_0_34(facts):
    assert vc.check(serve("--attention-backend", "TRITON_ATTN_DIFFKV"), {}, facts["0.34.0"]) == []


def test_attention_backend_case_is_ignored_as_vllm_does(caps):
    # AttentionConfig.validate_backend_before upper-cases the name and maps "auto" (any case) to None.
    assert vc.check(serve("--attention-backend", "flash_attn_diffkv"), {}, caps) == []
    assert vc.check(serve("--attention-backend", "AUTO"), {}, caps) == []
    assert vc.check(serve("--attention-backend", "flash_attn_diffkvv"), {}, caps)


# ------------------------------------------------------------------------------------------- recipes

def test_both_recipes_pass_on_0_34(facts):
    for name in ("mimo-v2.5-pro", "kimi-k2.5"):
        rec = recipe(name)
        env = rec.get("env") or {}
        assert vc.check(recipe_argv(rec), env, facts["0.34.0"], allowed_env=env) == [], name


def test_kimi_passes_on_0_21_and_mimo_does_not(facts):
    kimi = recipe("kimi-k2.5")
    assert vc.check(recipe_argv(kimi, tp=16), kimi.get("env") or {}, facts["0.21.0"]) == []
    mimo = recipe("mimo-v2.5-pro")
    problems = vc.check(recipe_argv(mimo), mimo["env"], facts["0.21.0"], allowed_env=mimo["env"])
    assert len(problems) == 1 and problems[0].startswith("--attention-backend TRITON_ATTN_DIFFKV is not a choice")


def test_recipe_env_needs_allowing(facts):
    mimo = recipe("mimo-v2.5-pro")
    problems = vc.check(recipe_argv(mimo), mimo["env"], facts["0.34.0"])
    assert problems == [p for p in problems if p.startswith("VLLM_SPARKFLEET_MIMO_QKV_LAYOUT is not an environment "
                                                            "variable of vLLM 0.34.0")]
    assert len(problems) == 1


# ------------------------------------------------------------------------------------- flag values

@pytest.mark.parametrize("spelling", [["--moe-backend", "triton"], ["--moe-backend", "marlin"], ["--moe-backend=marlin"],
                                      ["--moe-backend", "Triton"], ["--moe-backend", "deep-gemm"]])
def test_moe_backends_valid(caps, spelling):
    # vLLM's --moe-backend type lower-cases and turns "-" into "_" before checking the choices.
    assert vc.check(serve(*spelling), {}, caps) == []


def test_moe_backend_typo_refused(caps):
    problems = vc.check(serve("--moe-backend", "tritonn"), {}, caps)
    assert len(problems) == 1
    assert problems[0].startswith("--moe-backend tritonn is not a choice of vLLM %s; closest: triton" % caps["version"])


def test_kv_cache_dtype_fp9_refused_naming_fp8(caps):
    problems = vc.check(serve("--kv-cache-dtype", "fp9"), {}, caps)
    assert len(problems) == 1
    assert problems[0].startswith("--kv-cache-dtype fp9 is not a choice of vLLM %s; closest: fp8" % caps["version"])
    assert vc.check(serve("--kv-cache-dtype", "fp8"), {}, caps) == []


def test_quantization_checked_against_the_release(caps):
    assert vc.check(serve("--quantization", "modelopt_mixed"), {}, caps) == []
    problems = vc.check(serve("-q", "modelopt_mixd"), {}, caps)
    assert len(problems) == 1 and "closest: modelopt_mixed" in problems[0]
    deprecated = vc.check(serve("--quantization", "fbgemm_fp8"), {}, caps)
    assert deprecated == ["--quantization fbgemm_fp8 is deprecated in vLLM %s and needs "
                          "--allow-deprecated-quantization" % caps["version"]]
    assert vc.check(serve("--quantization", "fbgemm_fp8", "--allow-deprecated-quantization"), {}, caps) == []


def test_unknown_flag_refused_suggesting_the_real_one(caps):
    problems = vc.check(serve("--enforce-eagr"), {}, caps)
    assert len(problems) == 1
    assert problems[0].startswith("--enforce-eagr is not a flag of vLLM %s serve; closest: --enforce-eager"
                                  % caps["version"])


def test_underscore_spelling_accepted_like_flexible_argument_parser(caps):
    assert vc.check(serve("--tensor_parallel_size", "2"), {}, caps) == []
    assert vc.check(serve("--tensor_parallel_size=2", "--enforce_eager"), {}, caps) == []
    # The name was found (the value is judged as an int), so the spelling really resolved.
    problems = vc.check(serve("--tensor_parallel_size", "two"), {}, caps)
    assert problems == ["--tensor-parallel-size two is not an integer in vLLM %s" % caps["version"]]


def test_flag_that_takes_a_value_given_without_one(caps):
    release = "vLLM %s" % caps["version"]
    assert vc.check(serve("--max-model-len"), {}, caps) == [
        "--max-model-len expects a value in %s but none was given" % release]
    assert vc.check(serve("--max-model-len", "--enforce-eager"), {}, caps) == [
        "--max-model-len expects a value in %s but none was given" % release]
    assert vc.check(serve("--served-model-name"), {}, caps)[0].startswith("--served-model-name expects a value")
    assert vc.check(serve("--max-model-len", "32k", "--max-model-len", "auto", "-tp", "2"), {}, caps) == []


def test_bool_flag_given_a_value(caps):
    assert vc.check(serve("--enforce-eager=true"), {}, caps) == [
        "--enforce-eager takes no value in vLLM %s, but was given 'true'" % caps["version"]]
    assert vc.check(serve("--no-enforce-eager", "--no-enable-prefix-caching"), {}, caps) == []


def test_command_line_shape(caps):
    assert vc.check(serve("-O3", "--compilation-config.mode", "3", "--hf-token", "--api-key", "a", "b"), {}, caps) == []
    assert vc.check(serve("second-name"), {}, caps) == []  # --served-model-name takes one or more
    extra = vc.check(serve("--enforce-eager", "stray"), {}, caps)
    assert extra == ["vLLM %s serve takes 1 positional argument(s) (the model); unrecognised: stray" % caps["version"]]
    # FlexibleArgumentParser refuses --served-model-name unless the model comes first.
    late = vc.check(["vllm", "serve", "--served-model-name", "x", MODEL], {}, caps)
    assert len(late) == 1 and "model as the first argument" in late[0]


# ---------------------------------------------------------------------------------------- environment

def test_env_names(facts):
    old = facts["0.21.0"]
    assert vc.check(serve(), {"VLLM_RPC_TIMEOUT": "600000", "RAY_foo": "1", "NCCL_IB_DISABLE": "1"}, old) == []
    problems = vc.check(serve(), {"VLLM_RPC_TIMEOUTT": "600000"}, old)
    assert len(problems) == 1
    assert problems[0].startswith("VLLM_RPC_TIMEOUTT is not an environment variable of vLLM 0.21.0; "
                                  "closest: VLLM_RPC_TIMEOUT")
    assert vc.check(serve(), {"VLLM_RPC_TIMEOUTT": "1"}, old, allowed_env=["VLLM_RPC_TIMEOUTT"]) == []
    # 0.23.0 dropped VLLM_RPC_TIMEOUT: on 0.34.0 it is an unknown name.
    assert vc.check(serve(), {"VLLM_RPC_TIMEOUT": "600000"}, facts["0.34.0"])[0].startswith(
        "VLLM_RPC_TIMEOUT is not an environment variable of vLLM 0.34.0")


def test_env_choices(caps):
    release = "vLLM %s" % caps["version"]
    assert vc.check(serve(), {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}, caps) == []
    assert vc.check(serve(), {"VLLM_WORKER_MULTIPROC_METHOD": "forkk"}, caps) == [
        "VLLM_WORKER_MULTIPROC_METHOD=forkk is not a choice of %s; closest: fork (all: spawn, fork)" % release]
    # case_sensitive=False in envs.py
    assert vc.check(serve(), {"VLLM_FLOAT32_MATMUL_PRECISION": "HIGH"}, caps) == []
    # env_set_with_choices: comma-separated, each value judged
    problems = vc.check(serve(), {"VLLM_GPT_OSS_SYSTEM_TOOL_MCP_LABELS": "container,web_search"}, caps)
    assert len(problems) == 1 and problems[0].startswith("VLLM_GPT_OSS_SYSTEM_TOOL_MCP_LABELS=web_search is not a choice")


def test_removed_env_is_an_error_on_0_34(facts):
    problems = vc.check(serve(), {"VLLM_MARLIN_INPUT_DTYPE": "fp8"}, facts["0.34.0"])
    assert len(problems) == 1 and problems[0].startswith("VLLM_MARLIN_INPUT_DTYPE has been removed in vLLM 0.34.0")
    assert vc.check(serve(), {"VLLM_MARLIN_INPUT_DTYPE": "fp8"}, facts["0.21.0"]) == []


# ----------------------------------------------------------------------------------------- no facts

def test_empty_facts_do_not_pass_silently():
    problems = vc.check(serve("--enforce-eager"), {"VLLM_X": "1"}, {"version": "0.99.0"})
    assert problems == [
        "no `vllm serve` flags were read for vLLM 0.99.0; cannot judge the command line",
        "VLLM_X: no environment variables were read for vLLM 0.99.0; cannot judge it",
    ]


def test_read_without_sources_is_empty_not_an_error():
    caps = vc.read({})
    assert caps["version"] is None and caps["flags"] == {} and caps["env"] == {}
    assert caps["attention_backends"] == []


# ------------------------------------------------------------------------------------------ versions

@pytest.mark.parametrize(("text", "expected"), [
    ("0.21.0", (0, 21, 0)),
    ("0.21.1rc1.dev39+gad7125a43", (0, 21, 1)),
    ("v0.34.0", (0, 34, 0)),
    ("0.10.1.1", (0, 10, 1, 1)),
    ("nightly", ()),
    (None, ()),
])
def test_version_tuple(text, expected):
    assert vc.version_tuple(text) == expected


def test_at_least():
    assert vc.at_least("0.34.0", "0.24.0")
    assert vc.at_least("0.24", "0.24.0")
    assert vc.at_least("0.24.0rc1.dev3+g1", "0.24.0")  # release numbers only
    assert not vc.at_least("0.23.9", "0.24.0")
    assert not vc.at_least("0.21.0", "0.34.0")
    assert not vc.at_least(None, "0.1")
