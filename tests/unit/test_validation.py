"""Hostile and mistaken inputs, table-driven: each is refused with a finding that names the field and the fix,
and the shipped recipes and inventories pass."""

import copy
import os

import pytest
import yaml
from module_runner import run

from ansible_collections.sparkfleet.vllm.plugins.module_utils.serve_plan import flag_name, serve_argv
from ansible_collections.sparkfleet.vllm.plugins.module_utils.validation import check_inputs
from ansible_collections.sparkfleet.vllm.plugins.modules import validate_inputs

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
API = "sparkfleet_api_port (or the recipe's api_port)"


def recipe(name="mimo-v2.5-pro"):
    with open(os.path.join(ROOT, "recipes", "%s.yml" % name)) as fh:
        doc = yaml.safe_load(fh)
    doc["revision"] = "a" * 40
    return doc


def good():
    settings = {"sparkfleet_base_image": "vllm/vllm-openai:v0.34.0", "sparkfleet_vllm_version": "0.34.0",
                "sparkfleet_ray_version": "2.60.0", "sparkfleet_tensor_parallel_size": 4,
                "sparkfleet_pipeline_parallel_size": 1, "sparkfleet_kv_cache_gib": 0.5,
                "sparkfleet_memory_margin_gib": 1, "sparkfleet_serve_extra_args": ["--max-num-seqs", "8"],
                "sparkfleet_serve_env": {"VLLM_LOGGING_LEVEL": "INFO"}}
    nodes = {"spark-%02d" % i: {"sparkfleet_node_ip": "192.168.0.%d" % (10 + i)} for i in range(4)}
    return {"settings": settings, "recipe": recipe(), "nodes": nodes, "ports": {API: 5001}}


def findings(inputs):
    return check_inputs(inputs["settings"], inputs["recipe"], inputs["nodes"], inputs["ports"])


def setting(key, value):
    return lambda i: i["settings"].__setitem__(key, value)


def unset(key):
    return lambda i: i["settings"].pop(key)


def rec(key, value):
    return lambda i: i["recipe"].__setitem__(key, value)


def rec_drop(key):
    return lambda i: i["recipe"].pop(key)


def ip(host, value):
    return lambda i: i["nodes"][host].__setitem__("sparkfleet_node_ip", value)


def node_var(host, key, value):
    return lambda i: i["nodes"][host].__setitem__(key, value)


def extra(*args):
    return setting("sparkfleet_serve_extra_args", list(args))


def env(name, value="1"):
    return setting("sparkfleet_serve_env", {name: value})


def rec_env(name, value="1"):
    return rec("env", {name: value})


N1 = "spark-01: sparkfleet_node_ip"
REV = "sparkfleet_model_revision (or the recipe's revision)"
REPO = "sparkfleet_model_repo_id (or the recipe's repo_id)"
R = "recipe mimo-v2.5-pro"
CASES = [
    # addresses
    ("ip unspecified", ip("spark-01", "0.0.0.0"), N1),
    ("ip loopback", ip("spark-01", "127.0.0.1"), N1),
    ("ip loopback other", ip("spark-01", "127.1.2.3"), N1),
    ("ip6 unspecified", ip("spark-01", "::"), N1),
    ("ip6 loopback", ip("spark-01", "::1"), N1),
    ("ip4-mapped loopback", ip("spark-01", "::ffff:127.0.0.1"), N1),
    ("ip4-mapped unspecified", ip("spark-01", "::ffff:0.0.0.0"), N1),
    ("ip multicast", ip("spark-01", "224.0.0.1"), N1),
    ("ip6 multicast", ip("spark-01", "ff02::1"), N1),
    ("ip link-local", ip("spark-01", "169.254.1.2"), N1),
    ("ip reserved", ip("spark-01", "240.0.0.1"), N1),
    ("ip broadcast", ip("spark-01", "255.255.255.255"), N1),
    ("ip not an address", ip("spark-01", "spark-01.local"), N1),
    ("ip with a newline", ip("spark-01", "192.168.0.11\n"), N1),
    ("ip an integer", ip("spark-01", 3232235531), N1),
    ("ip duplicate", ip("spark-01", "192.168.0.10"), N1),
    ("ip missing", lambda i: i["nodes"]["spark-01"].pop("sparkfleet_node_ip"), N1),
    ("ip shell", ip("spark-01", "192.168.0.11; rm -rf /"), N1),
    # integers
    ("tp true", setting("sparkfleet_tensor_parallel_size", True), "sparkfleet_tensor_parallel_size"),
    ("tp false", setting("sparkfleet_tensor_parallel_size", False), "sparkfleet_tensor_parallel_size"),
    ("tp float", setting("sparkfleet_tensor_parallel_size", 4.0), "sparkfleet_tensor_parallel_size"),
    ("tp words", setting("sparkfleet_tensor_parallel_size", "four"), "sparkfleet_tensor_parallel_size"),
    ("tp zero", setting("sparkfleet_tensor_parallel_size", 0), "sparkfleet_tensor_parallel_size"),
    ("tp negative", setting("sparkfleet_tensor_parallel_size", -4), "sparkfleet_tensor_parallel_size"),
    ("tp list", setting("sparkfleet_tensor_parallel_size", [4]), "sparkfleet_tensor_parallel_size"),
    ("pp true", setting("sparkfleet_pipeline_parallel_size", True), "sparkfleet_pipeline_parallel_size"),
    ("gpus per node 2", node_var("spark-01", "sparkfleet_gpus_per_node", 2), "spark-01: sparkfleet_gpus_per_node"),
    ("gpus per node true", node_var("spark-01", "sparkfleet_gpus_per_node", True),
     "spark-01: sparkfleet_gpus_per_node"),
    ("kv cache bool", setting("sparkfleet_kv_cache_gib", True), "sparkfleet_kv_cache_gib"),
    ("kv cache negative", setting("sparkfleet_kv_cache_gib", -1), "sparkfleet_kv_cache_gib"),
    ("margin text", setting("sparkfleet_memory_margin_gib", "lots"), "sparkfleet_memory_margin_gib"),
    ("max_tp bool", rec("max_tp", True), R + ": max_tp"),
    ("max_tp zero", rec("max_tp", 0), R + ": max_tp"),
    ("attention_heads text", rec("attention_heads", "many"), R + ": attention_heads"),
    ("attention_heads zero", rec("attention_heads", 0), R + ": attention_heads"),
    ("no nodes", lambda i: i.__setitem__("nodes", {}), "inventory"),
    # revision and repo id
    ("revision trailing newline", rec("revision", "a" * 40 + "\n"), REV),
    ("revision leading space", rec("revision", " " + "a" * 40), REV),
    ("revision branch", rec("revision", "main"), REV),
    ("revision short", rec("revision", "a" * 12), REV),
    ("revision upper", rec("revision", "A" * 40), REV),
    ("revision path", rec("revision", "../" + "a" * 37), REV),
    ("repo dotdot", rec("repo_id", "../etc/passwd"), REPO),
    ("repo dotdot name", rec("repo_id", "org/.."), REPO),
    ("repo dotdot inside", rec("repo_id", "org/a..b"), REPO),
    ("repo no org", rec("repo_id", "MiMo"), REPO),
    ("repo three parts", rec("repo_id", "a/b/c"), REPO),
    ("repo space", rec("repo_id", "org/na me"), REPO),
    ("repo absolute", rec("repo_id", "/org/name"), REPO),
    ("served name newline", rec("served_model_name", "mimo\nx"), "sparkfleet_served_model_name"),
    # recipe schema
    ("recipe without max_tp", rec_drop("max_tp"), R + ": max_tp"),
    ("recipe without api_port", rec_drop("api_port"), R + ": api_port"),
    ("recipe without min_vllm", rec_drop("min_vllm"), R + ": min_vllm"),
    ("recipe without probes", rec_drop("probes"), R + ": probes"),
    ("recipe serve_args a string", rec("serve_args", "--enforce-eager"), R + ": serve_args"),
    ("recipe unknown key", rec("max_tpp", 8), R),
    ("recipe env a list", rec("env", ["A=1"]), R + ": env"),
    ("recipe probe without prompt", rec("probes", [{"expect_any": ["x"]}]), R + ": probes[0]"),
    ("recipe patches not ids", rec("patches", [{"id": "x"}]), R + ": patches"),
    ("recipe min_vllm not pep440", rec("min_vllm", "0.24.0; import os"), R + ": min_vllm"),
    ("recipe expect_mxfp8 a string", rec("expect_mxfp8", "yes"), R + ": expect_mxfp8"),
    # serve flags the collection owns, in every spelling
    ("extra tp", extra("--tensor-parallel-size", "2"), "sparkfleet_serve_extra_args"),
    ("extra tp underscore", extra("--tensor_parallel_size", "2"), "sparkfleet_serve_extra_args"),
    ("extra tp equals", extra("--tensor-parallel-size=2"), "sparkfleet_serve_extra_args"),
    ("extra tp underscore equals", extra("--tensor_parallel_size=2"), "sparkfleet_serve_extra_args"),
    ("extra tp short", extra("-tp", "2"), "sparkfleet_serve_extra_args"),
    ("extra pp", extra("--pipeline_parallel_size=2"), "sparkfleet_serve_extra_args"),
    ("extra port", extra("--port=80"), "sparkfleet_serve_extra_args"),
    ("extra host", extra("--host", "0.0.0.0"), "sparkfleet_serve_extra_args"),
    ("extra backend", extra("--distributed_executor_backend=mp"), "sparkfleet_serve_extra_args"),
    ("extra served name", extra("--served_model_name", "x"), "sparkfleet_serve_extra_args"),
    ("extra api key", extra("--api-key", "k"), "sparkfleet_serve_extra_args"),
    ("extra api key underscore", extra("--api_key=k"), "sparkfleet_serve_extra_args"),
    ("extra api key case", extra("--API-KEY=k"), "sparkfleet_serve_extra_args"),
    ("extra newline", extra("--max-num-seqs\n8"), "sparkfleet_serve_extra_args"),
    ("extra a mapping", extra({"--x": 1}), "sparkfleet_serve_extra_args"),
    ("extra not a list", setting("sparkfleet_serve_extra_args", "--enforce-eager"), "sparkfleet_serve_extra_args"),
    ("recipe owns a flag", rec("serve_args", ["--tensor_parallel_size=16"]), R + ": serve_args"),
    # environment passthrough
    ("env LD_PRELOAD", env("LD_PRELOAD", "/tmp/x.so"), "sparkfleet_serve_env.LD_PRELOAD"),
    ("env LD_LIBRARY_PATH", env("LD_LIBRARY_PATH", "/tmp"), "sparkfleet_serve_env.LD_LIBRARY_PATH"),
    ("env LD_AUDIT", env("LD_AUDIT", "/tmp/a.so"), "sparkfleet_serve_env.LD_AUDIT"),
    ("env PYTHONPATH", env("PYTHONPATH", "/tmp"), "sparkfleet_serve_env.PYTHONPATH"),
    ("env PYTHONSTARTUP", env("PYTHONSTARTUP", "/tmp/x.py"), "sparkfleet_serve_env.PYTHONSTARTUP"),
    ("env PYTHONHOME", env("PYTHONHOME", "/tmp"), "sparkfleet_serve_env.PYTHONHOME"),
    ("env PATH", env("PATH", "/tmp"), "sparkfleet_serve_env.PATH"),
    ("env BASH_ENV", env("BASH_ENV", "/tmp/x"), "sparkfleet_serve_env.BASH_ENV"),
    ("env NODE_OPTIONS", env("NODE_OPTIONS", "--require /tmp/x"), "sparkfleet_serve_env.NODE_OPTIONS"),
    ("env GLIBC_TUNABLES", env("GLIBC_TUNABLES", "x"), "sparkfleet_serve_env.GLIBC_TUNABLES"),
    ("env lower case", env("ld_preload", "/tmp/x.so"), "sparkfleet_serve_env.ld_preload"),
    ("env bad name", env("A-B"), "sparkfleet_serve_env.A-B"),
    ("env owned", env("VLLM_HOST_IP", "1.2.3.4"), "sparkfleet_serve_env.VLLM_HOST_IP"),
    ("env api key", env("VLLM_API_KEY", "k"), "sparkfleet_serve_env.VLLM_API_KEY"),
    ("env newline value", env("VLLM_X", "a\nb"), "sparkfleet_serve_env.VLLM_X"),
    ("env list value", env("VLLM_X", ["a"]), "sparkfleet_serve_env.VLLM_X"),
    ("env not a mapping", setting("sparkfleet_serve_env", ["A=1"]), "sparkfleet_serve_env"),
    ("recipe env LD_PRELOAD", rec_env("LD_PRELOAD", "/x.so"), R + ": env.LD_PRELOAD"),
    # versions, image
    ("ray version code", setting("sparkfleet_ray_version", "2.60.0'); import os; ('"), "sparkfleet_ray_version"),
    ("ray version spaces", setting("sparkfleet_ray_version", "2.60.0 "), "sparkfleet_ray_version"),
    ("ray version newline", setting("sparkfleet_ray_version", "2.60.0\nRUN id"), "sparkfleet_ray_version"),
    ("ray version float", setting("sparkfleet_ray_version", 2.6), "sparkfleet_ray_version"),
    ("ray version unset", unset("sparkfleet_ray_version"), "sparkfleet_ray_version"),
    ("vllm version local", setting("sparkfleet_vllm_version", "0.34.0+cu130"), "sparkfleet_vllm_version"),
    ("vllm version word", setting("sparkfleet_vllm_version", "latest"), "sparkfleet_vllm_version"),
    ("base image newline", setting("sparkfleet_base_image", "vllm/vllm-openai:v0.34.0\nRUN id"),
     "sparkfleet_base_image"),
    ("base image unset", unset("sparkfleet_base_image"), "sparkfleet_base_image"),
    # ports
    ("api port zero", lambda i: i["ports"].__setitem__(API, 0), API),
    ("api port too high", lambda i: i["ports"].__setitem__(API, 70000), API),
    ("api port privileged", lambda i: i["ports"].__setitem__(API, 80), API),
    ("api port bool", lambda i: i["ports"].__setitem__(API, True), API),
    ("api port text", lambda i: i["ports"].__setitem__(API, "http"), API),
    ("api port on Ray's GCS", lambda i: i["ports"].__setitem__(API, 6379), API),
    ("api port in Ray's worker range", lambda i: i["ports"].__setitem__(API, 10500), API),
    ("two ports the same", lambda i: i["ports"].update({"other port": 5001}), API),
]


def test_the_baseline_and_the_shipped_recipes_pass():
    assert findings(good()) == []
    for name in ("mimo-v2.5-pro", "kimi-k2.5"):
        inputs = good()
        inputs["recipe"] = recipe(name)
        assert findings(inputs) == [], name


def test_there_are_at_least_sixty_hostile_cases():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_hostile_input_is_refused_naming_the_field_and_the_fix(case):
    _name, mutate, field = case
    inputs = good()
    mutate(inputs)
    found = findings(inputs)
    named = [f for f in found if f.startswith(field + ":") or f.startswith(field + " ")]
    assert named, found
    assert all("; fix: " in f for f in named)


def test_a_passthrough_value_is_never_echoed():
    inputs = good()
    inputs["settings"]["sparkfleet_serve_env"] = {"HF_TOKEN": ["hf_canary_secret"], "LD_PRELOAD": "hf_canary2"}
    found = findings(inputs)
    assert found and not any("canary" in f for f in found)


def test_flag_names_are_compared_in_vllms_canonical_spelling():
    assert flag_name("--Tensor_Parallel_Size=4") == "--tensor-parallel-size"
    assert flag_name("-tp") == "-tp" and flag_name("fp8") == "fp8"
    with pytest.raises(ValueError, match="--tensor-parallel-size"):
        serve_argv("/m", "m", 4, 1, 5001, "h", ["--tensor_parallel_size=2"])
    with pytest.raises(ValueError, match="API key"):
        serve_argv("/m", "m", 4, 1, 5001, "h", ["--api_key=k"])


def test_the_module_fails_with_every_finding_at_once_and_changes_nothing():
    inputs = good()
    inputs["settings"]["sparkfleet_tensor_parallel_size"] = True
    inputs["nodes"]["spark-02"]["sparkfleet_node_ip"] = "127.0.0.1"
    before = copy.deepcopy(inputs)
    rc, res = run(validate_inputs, inputs)
    assert rc == 1 and res["msg"].startswith("2 problem(s) in the deploy's inputs, nothing was changed:")
    assert len(res["findings"]) == 2 and inputs == before
    rc, res = run(validate_inputs, good())
    assert rc == 0 and res["findings"] == [] and res["changed"] is False


def test_the_dockerfile_takes_the_versions_as_data_and_refuses_code():
    from ansible_collections.sparkfleet.vllm.plugins.module_utils import image_build

    dockerfile = image_build.render("base:1", "sha256:" + "a" * 64, "2.60.0", [])
    assert "2.60.0" not in dockerfile  # it arrives as the RAY_VERSION build argument, read from the environment
    assert "os.environ['RAY_VERSION']" in dockerfile
    for version in ("2.60.0'); import os; ('", "2.60.0\nRUN id", "2.60.0 ", ""):
        with pytest.raises(ValueError, match="ray_version"):
            image_build.render("base:1", "sha256:" + "a" * 64, version, [])
    with pytest.raises(ValueError, match="base image"):
        image_build.render("base:1\nRUN id", "sha256:" + "a" * 64, "2.60.0", [])
    with pytest.raises(ValueError, match="pinned as name==version"):
        image_build.render("base:1", "sha256:" + "a" * 64, "2.60.0", ["numpy==2.3.5\n"])


def test_extra_args_appended_to_the_recipe_are_judged_once_under_their_own_name():
    inputs = good()
    inputs["settings"]["sparkfleet_serve_extra_args"] = ["--api_key=k"]
    inputs["recipe"]["serve_args"] = inputs["recipe"]["serve_args"] + ["--api_key=k"]
    found = findings(inputs)
    assert len(found) == 1 and found[0].startswith("sparkfleet_serve_extra_args: --api_key=k is --api-key")


@pytest.mark.parametrize(("nodes_listed", "tp"), [(1, 4), (5, 4), (17, 16), (1, 16)])
def test_a_node_count_that_does_not_match_the_topology_is_refused_by_the_planner(nodes_listed, tp):
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.topology import TopologyError, plan

    names = ["spark-%02d" % k for k in range(nodes_listed)]
    hostvars = {n: {"sparkfleet_node_ip": "10.0.0.%d" % (10 + k)} for k, n in enumerate(names)}
    with pytest.raises(TopologyError, match="%d x 1 = %d ranks, but the inventory has %d GPUs on %d nodes"
                       % (tp, tp, nodes_listed, nodes_listed)):
        plan(names[:1], names[1:], hostvars, tp, 1, None, "m")


def test_an_unset_tp_is_no_finding_the_recipe_plans_it():
    inputs = good()
    inputs["settings"].pop("sparkfleet_tensor_parallel_size", None)
    assert not [f for f in findings(inputs) if "parallel_size" in f]
