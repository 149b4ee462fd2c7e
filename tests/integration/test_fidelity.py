"""Spark fidelity on the shared simulated cluster: every defect a real Spark cluster would trip over is found
by the preflight, on the node at fault, before any Ray or vLLM container starts; then it is repaired.

Each test injects one fault into the running cluster, runs the deploy, checks the verdict and that no
container of the deploy was (re)started, and removes the fault again. The deploy is asked for its full path
(sparkfleet_skip_unchanged=false): a re-run whose probe finds every node as its last verified deploy left it
and the endpoint coherent restarts nothing, so it runs no preflight (README, "a second run"); the preflight
runs first on every run that has anything to change, and on its own as preflight.yml.
"""

import re
import shutil
import subprocess
import sys
import threading
import time

import pytest
from conftest import ENV, HEAD, REPO, SITE_ENV, deploy, node_exec

pytestmark = pytest.mark.usefixtures("sim_cluster")

NODES = [f"sparkfleet-sim-node-{i}" for i in range(4)]
MANAGED = ("sparkfleet-ray", "sparkfleet-vllm")


def started():
    """StartedAt of the deploy's containers on every node (what a verdict must leave untouched)."""
    out = {}
    for node in NODES:
        for name in MANAGED:
            res = node_exec(node, "docker", "inspect", "--format", "{{.State.StartedAt}}", name)
            out[(node, name)] = res.stdout.strip() if res.returncode == 0 else None
    return out


def refused(extra=None, args=(), **kw):
    before = started()
    rc, out = deploy(extra, args=("-e", "sparkfleet_skip_unchanged=false", *args), **kw)
    assert rc != 0, out[-3000:]
    assert started() == before, "a Ray or vLLM container was (re)started before the verdict"
    return out


def test_memory_held_on_a_worker_is_named():
    node = NODES[2]
    node_exec(node, "sh", "-c", "nohup python3 -c 'import time; b = b\"x\" * (5500 << 20); time.sleep(900)' "
                                ">/dev/null 2>&1 &")
    try:
        time.sleep(4)  # the allocation is written, so it is really held
        out = refused()
        assert re.search(r"sim-spark-02: memory: found [\d.]+ GiB available; expected", out), out[-3000:]
        assert "sim-spark-01: memory" not in out
    finally:
        node_exec(node, "pkill", "-f", "sleep.900")


def test_small_disk_on_a_node_without_the_weights_is_named():
    node, hub = NODES[3], "/root/.cache/huggingface/hub"
    mounted = node_exec(node, "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", hub)
    assert mounted.returncode == 0, mounted.stderr
    try:
        out = refused()
        assert re.search(r"sim-spark-03: disk: found [\d.]+ GiB free", out), out[-3000:]
    finally:
        node_exec(node, "umount", hub)


def test_mtu_mismatch_is_named():
    node = NODES[1]
    node_exec(node, "ip", "link", "set", "eth0", "mtu", "1400")
    try:
        out = refused()
        assert "sim-spark-01: mtu: found MTU 1400 on eth0" in out, out[-3000:]
        assert "MTU 1500" in out
    finally:
        node_exec(node, "ip", "link", "set", "eth0", "mtu", "1500")


def test_port_held_by_another_process_is_named():
    node = NODES[1]
    node_exec(node, "sh", "-c", "nohup python3 -m http.server 10998 >/dev/null 2>&1 &")
    try:
        time.sleep(2)
        out = refused()
        assert re.search(r"sim-spark-01: port: found port 10998 \(Ray worker ports[^)]*\) held by python3", out), \
            out[-3000:]
    finally:
        node_exec(node, "pkill", "-f", "http.server 10998")


def test_leftover_container_is_named():
    node = NODES[3]
    image = node_exec(node, "docker", "inspect", "--format", "{{.Config.Image}}", "sparkfleet-ray").stdout.strip()
    run = node_exec(node, "docker", "run", "-d", "--name", "vllm_node", "--gpus", "all", "--entrypoint", "sleep",
                    image, "900")
    assert run.returncode == 0, run.stderr
    try:
        out = refused()
        assert "sim-spark-03: container: found leftover container vllm_node" in out, out[-3000:]
        assert "docker rm -f vllm_node" in out
    finally:
        node_exec(node, "docker", "rm", "-f", "vllm_node")


def test_known_bad_base_image_is_refused():
    image_id = node_exec(HEAD, "docker", "image", "inspect", "--format", "{{.Id}}",
                         "sparkfleet-sim/vllm-openai:0.34.0").stdout.strip()
    out = refused({"sparkfleet_known_bad_images": [{"id": image_id, "reason": "answers foss foss foss"}]})
    assert "sim-spark-00: image: found sparkfleet-sim/vllm-openai:0.34.0" in out, out[-3000:]
    assert "answers foss foss foss" in out


def test_several_defects_are_reported_in_one_run():
    node_exec(NODES[1], "ip", "link", "set", "eth0", "mtu", "1400")
    node_exec(NODES[2], "sh", "-c", "nohup python3 -m http.server 10997 >/dev/null 2>&1 &")
    try:
        time.sleep(2)
        out = refused()
        assert "preflight found 2 defect(s) on 2 node(s)" in out, out[-3000:]
    finally:
        node_exec(NODES[1], "ip", "link", "set", "eth0", "mtu", "1500")
        node_exec(NODES[2], "pkill", "-f", "http.server 10997")


def test_attention_backend_missing_from_the_release_is_refused_before_boot():
    """TRITON_ATTN_DIFFKV is in 0.34.0's attention registry (the default deploy uses it) but not 0.21.0's."""
    out = refused({"sparkfleet_base_image": "sparkfleet-sim/vllm-openai:0.21.0",
                   "sparkfleet_vllm_version": "0.21.0"})
    assert "TRITON_ATTN_DIFFKV" in out and "0.21.0" in out and "FLASH_ATTN_DIFFKV" in out, out[-3000:]
    assert "min_vllm" in out


def test_a_collection_that_does_not_ask_for_the_gpu_fails_the_deploy(tmp_path):
    """Mutation test of the simulation: drop the GPU request from the collection's container spec."""
    root = tmp_path / "ansible_collections" / "sparkfleet" / "vllm"
    shutil.copytree(REPO, root, ignore=shutil.ignore_patterns(".venv", ".sim", "collections", ".git", "*.pyc"))
    docker_py = root / "plugins" / "module_utils" / "_docker.py"
    src = docker_py.read_text()
    mutated = re.sub(r'return \[\{"Driver": "", "Count": -1.*?\}\]', "return []", src)
    assert mutated != src
    docker_py.write_text(mutated)
    out = refused(env=dict(SITE_ENV, ANSIBLE_COLLECTIONS_PATH=str(tmp_path)))
    assert "sim-spark-00: gpu_with_request: found no GPU in a container started with --gpus" in out, out[-3000:]


def test_head_memory_watchdog_stops_a_starving_boot():
    """The head runs short of memory while the weights load (seed 000's thrashing head): the boot is stopped
    and the run fails naming the head, instead of crawling on for hours."""
    result = {}

    def run():
        result["rc"], result["out"] = deploy({"vllm_serve_env": {"SPARKFLEET_SIM_FAULT": "slow_load=60"}})

    before = node_exec(HEAD, "docker", "inspect", "--format", "{{.State.StartedAt}}", "sparkfleet-vllm").stdout
    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # wait for the new serve container: the load has begun
        now = node_exec(HEAD, "docker", "inspect", "--format", "{{.State.StartedAt}}", "sparkfleet-vllm").stdout
        if now and now != before:
            break
        time.sleep(2)
    node_exec(HEAD, "sh", "-c", "nohup python3 -c 'import time; b = b\"x\" * (5000 << 20); time.sleep(901)' "
                                ">/dev/null 2>&1 &")
    try:
        thread.join(timeout=600)
    finally:
        node_exec(HEAD, "pkill", "-f", "sleep.901")
    assert result.get("rc") not in (None, 0), result.get("out", "")[-3000:]
    assert "memory watchdog" in result["out"] and "free on the head" in result["out"], result["out"][-3000:]
    status = node_exec(HEAD, "docker", "inspect", "--format", "{{.State.Status}}", "sparkfleet-vllm").stdout.strip()
    assert status == "exited"


def test_stopped_node_is_started_again_and_the_deploy_heals_it():
    subprocess.run(["docker", "stop", NODES[3]], check=True, capture_output=True)
    up = subprocess.run([sys.executable, str(REPO / "tests/sim/simctl.py"), "up", "--nodes", "4"], cwd=REPO,
                        env=ENV, capture_output=True, text=True, check=False)
    assert up.returncode == 0, up.stderr[-2000:]
    assert node_exec(NODES[3], "docker", "info", "--format", "{{.ServerVersion}}").returncode == 0


def test_fewer_nodes_remove_the_extra_nodes_and_their_volumes():
    simctl = [sys.executable, str(REPO / "tests/sim/simctl.py")]
    down = subprocess.run(simctl + ["up", "--nodes", "3"], cwd=REPO, env=ENV, capture_output=True, text=True,
                          check=False)
    assert down.returncode == 0, down.stderr[-2000:]
    vols = subprocess.run(["docker", "volume", "ls", "--format", "{{.Name}}"], capture_output=True, text=True,
                          check=True).stdout.split()
    assert f"{NODES[3]}-docker" not in vols and f"{NODES[2]}-docker" in vols
    up = subprocess.run(simctl + ["up", "--nodes", "4"], cwd=REPO, env=ENV, capture_output=True, text=True,
                        check=False)
    assert up.returncode == 0, up.stderr[-2000:]


def test_repaired_cluster_deploys_again():
    """After every fault above is removed (and node 3 was recreated empty), one deploy heals the cluster."""
    rc, out = deploy()
    assert rc == 0, out[-4000:]
