"""Modules called through their entry point, the way Ansible's own module tests call them: arguments passed
with ``patch_module_args``, ``main()`` run, and the JSON that ``exit_json``/``fail_json`` print read back.
Argument validation, check mode and the failure messages are the modules' own, not their helpers'."""

import json

import pytest
from module_runner import run

from ansible_collections.sparkfleet.vllm.plugins.modules import ray_tuning, topology_plan, vllm_check


def hostvars(n):
    return {"s%d" % i: {"sparkfleet_node_ip": "10.0.0.%d" % (i + 1)} for i in range(n)}


@pytest.mark.parametrize("check_mode", [False, True])
def test_topology_plan_plans_sixteen_nodes_as_tp8_pp2_in_either_mode(check_mode):
    rc, res = run(topology_plan, {"heads": ["s0"], "workers": ["s%d" % i for i in range(1, 16)],
                                  "hostvars": hostvars(16), "tensor_parallel_size": 8,
                                  "pipeline_parallel_size": 2, "max_tp": 8}, check_mode)
    assert rc == 0 and res["changed"] is False
    assert res["plan"]["world_size"] == 16


def test_topology_plan_names_the_inventory_field_at_fault():
    hv = hostvars(2)
    hv["s1"]["sparkfleet_node_ip"] = "banana"
    rc, res = run(topology_plan, {"heads": ["s0"], "workers": ["s1"], "hostvars": hv, "tensor_parallel_size": 2})
    assert rc == 1 and res["failed"]
    assert res["msg"].startswith("inventory: ") and "s1" in res["msg"] and "sparkfleet_node_ip" in res["msg"]


def test_argument_validation_is_the_modules_own():
    rc, res = run(topology_plan, {"heads": ["s0"], "hostvars": {}, "tensor_parallel_size": "eight"})
    assert rc == 1 and "tensor_parallel_size" in res["msg"]
    rc, res = run(ray_tuning, {"node_count": 4, "bogus": 1})
    assert rc == 1 and "bogus" in res["msg"]


@pytest.mark.parametrize("check_mode", [False, True])
def test_ray_tuning_returns_its_environment_unchanged_in_either_mode(check_mode):
    rc, res = run(ray_tuning, {"node_count": 16, "model_bytes": 600_000_000_000}, check_mode)
    assert rc == 0 and res["changed"] is False
    assert res["env"] and all(isinstance(v, str) for v in res["env"].values())


def test_ray_tuning_refuses_a_cluster_of_no_nodes():
    rc, res = run(ray_tuning, {"node_count": 0})
    assert rc == 1 and res["msg"].startswith("ray_tuning: ")


def test_vllm_check_hides_the_api_key_and_names_what_it_could_not_prove(tmp_path):
    """Nothing listens: the check fails naming the endpoint, the log's absence, and never echoes the key."""
    secret = "sk-canary-0123456789"  # noqa: S105 (a canary, not a credential)
    rc, res = run(vllm_check, {"url": "http://127.0.0.1:9", "served_model_name": "m", "api_key": secret,
                               "probes": [{"prompt": "The capital of France is", "expect_any": ["Paris"]}],
                               "log_file": str(tmp_path / "absent.log"), "timeout": 2})
    assert rc == 1 and "not proven coherent" in res["msg"] and "cannot read the startup log" in res["msg"]
    assert secret not in json.dumps(res)
