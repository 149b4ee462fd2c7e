"""`make test-16`: the 16-node simulated cluster (kept out of `make test`; the README gives its measured time).

MiMo-V2.5-Pro is planned as 2 replicas of TP8 behind the balancer, as on spark16; a re-run with nothing to
change is timed against a facts-only play on the same 16 nodes; a rolling redeploy of both replicas runs
while a client keeps calling the balancer; then Kimi-K2.5 runs as one TP16 engine, as seed 000 ran it.
The inventory is inventory/local's settings with 16 hosts, written under .sim/ (the simulation's state).
"""

import json
import os
import re
import statistics
import sys
import time

import pytest
from conftest import BIN, REPO, SITE, SITE_ENV, node_exec, run_report, sh
from test_faults import KIMI, Client, balancer_servers, failed, new_recipe

pytestmark = pytest.mark.skipif(os.environ.get("SPARKFLEET_TEST_16") != "1",
                                reason="16 simulated nodes: make test-16 (SPARKFLEET_TEST_16=1)")

NODES = 16
INVENTORY = REPO / ".sim" / "local16"
FACTS_PLAY = "---\n- name: Facts only\n  hosts: spark_cluster\n  gather_facts: true\n  tasks: []\n"


def write_inventory():
    ips = {"sim-spark-%02d" % i: "172.29.0.%d" % (10 + i) for i in range(NODES)}
    hosts = {name: {"ansible_host": ip, "sparkfleet_node_ip": ip} for name, ip in ips.items()}
    head = "sim-spark-00"
    inventory = {"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                 "ansible_python_interpreter": "{{ ansible_playbook_python }}"}},
                         "children": {"spark_cluster": {"children": {
                             "ray_head": {"hosts": {head: hosts.pop(head)}},
                             "ray_workers": {"hosts": hosts}}}}}}
    INVENTORY.mkdir(parents=True, exist_ok=True)
    (INVENTORY / "hosts.yml").write_text(json.dumps(inventory, indent=1) + "\n")  # JSON is YAML
    link = INVENTORY / "group_vars"
    if not link.is_symlink():
        link.symlink_to(REPO / "inventory" / "local" / "group_vars")
    (INVENTORY / "facts.yml").write_text(FACTS_PLAY)


def play(playbook, extra=None, args=()):
    """(rc, seconds, output) of `cd site && ansible-playbook PLAYBOOK -i .sim/local16 ...`."""
    argv = [str(BIN / "ansible-playbook"), str(playbook), "-i", str(INVENTORY), *args]
    if extra:
        argv += ["-e", json.dumps(extra)]
    began = time.monotonic()
    res = sh(argv, env=SITE_ENV, cwd=SITE, timeout=3600)
    return res.returncode, time.monotonic() - began, res.stdout + res.stderr


def recap(out):
    return dict(re.findall(r"^(\S+)\s+: (ok=.*)$", out, re.M))


@pytest.fixture(scope="module")
def sixteen():
    up = sh([sys.executable, "tests/sim/simctl.py", "up", "--nodes", str(NODES)], timeout=3600)
    assert up.returncode == 0, up.stderr[-3000:]
    write_inventory()
    yield
    sh([sys.executable, "tests/sim/simctl.py", "down"], timeout=1800)


def test_mimo_on_sixteen_nodes_is_two_replicas_of_tp8_behind_the_balancer(sixteen):
    rc, secs, out = play("deploy_mimo.yml")
    assert rc == 0, out[-5000:]
    report = run_report(out)
    assert sorted(report["nodes"]) == ["sim-spark-%02d" % i for i in range(NODES)]
    for head in ("sim-spark-00", "sim-spark-08"):
        assert report["nodes"][head]["ray"].startswith("head; cluster 8 nodes alive"), report["nodes"][head]
        assert report["endpoints"][head]["verdict"] == "coherent"
    assert report["endpoints"]["sim-spark-00 balancer"]["verdict"] == "coherent"
    assert {n: r["status"] for n, r in balancer_servers().items()} == {"replica-0": "UP", "replica-1": "UP"}
    print("first deploy of MiMo-V2.5-Pro on 16 nodes (2 x TP8): %.0f s" % secs)


def test_a_noop_rerun_on_sixteen_nodes_against_a_facts_only_play(sixteen):
    noop, facts = [], []
    for _run in range(3):
        rc, secs, out = play("deploy_mimo.yml")
        assert rc == 0 and "nothing is built, sent or started" in out, out[-5000:]
        assert all("changed=0" in line for line in recap(out).values()), recap(out)
        noop.append(secs)
        rc, secs, out = play(INVENTORY / "facts.yml")
        assert rc == 0, out[-3000:]
        facts.append(secs)
    result = {"nodes": NODES, "noop_s": [round(s, 1) for s in noop], "facts_s": [round(s, 1) for s in facts],
              "ratio": round(statistics.median(noop) / statistics.median(facts), 2)}
    (REPO / "benchmarks" / "results").mkdir(parents=True, exist_ok=True)
    (REPO / "benchmarks" / "results" / "noop_rerun_16.json").write_text(json.dumps(result, indent=2) + "\n")
    print("no-op re-run on 16 nodes: %s" % json.dumps(result))


def test_a_rolling_redeploy_of_two_tp8_replicas_fails_no_request(sixteen):
    client = Client()
    rc, secs, out = play("redeploy.yml", new_recipe(64))
    requests = client.stop()
    assert rc == 0, out[-5000:]
    assert out.count("TASK [sparkfleet.vllm.rollout : Drain the replica from the balancer") == 2
    for head in ("sparkfleet-sim-node-0", "sparkfleet-sim-node-8"):
        cmd = node_exec(head, "docker", "inspect", "--format", "{{json .Config.Cmd}}", "sparkfleet-vllm").stdout
        assert '"--max-num-seqs","64"' in cmd, cmd
    assert len(requests) > 20 and failed(requests) == (0, 0.0), failed(requests)
    print("rolling redeploy of 2 x TP8 on 16 nodes: %d requests through the balancer, %d failed, in %.0f s"
          % (len(requests), failed(requests)[0], secs))


def test_kimi_on_sixteen_nodes_is_one_tp16_engine(sixteen):
    rc, secs, out = play("deploy_kimi.yml", KIMI)
    assert rc == 0, out[-5000:]
    report = run_report(out)
    assert report["nodes"]["sim-spark-00"]["ray"].startswith("head; cluster 16 nodes alive, 0 dead, 16 GPUs")
    assert report["endpoints"]["sim-spark-00"]["verdict"] == "coherent"
    assert node_exec("sparkfleet-sim-node-8", "docker", "ps", "-q", "--filter", "name=^sparkfleet-vllm$").stdout == ""
    assert list(balancer_servers()) == ["replica-0"]
    print("Kimi-K2.5 on 16 nodes (TP16): %.0f s" % secs)
