"""The node-table read that runs inside the Ray container (_ray.NODES_SNIPPET), run here against stand-in
``ray`` packages: Ray's GCS client at the address ray start wrote, and ray.init() + ray.nodes() for a Ray
whose GCS client lacks that API. The real client is exercised on the simulated cluster's Ray."""

import json
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _ray

GCS = """
    class _Id:
        def __init__(self, h):
            self.h = h
        def hex(self):
            return self.h
    class _Node:
        def __init__(self, h, state, ip, res):
            self.node_id, self.state, self.node_manager_address, self.resources_total = _Id(h), state, ip, res
    class GcsClient:
        def __init__(self, address):
            self.address = address
        def get_all_node_info(self, timeout):
            assert self.address == "10.0.0.1:6379" and timeout == 7, (self.address, timeout)
            return {b"a": _Node("aa", 0, "10.0.0.1", {"GPU": 1.0}), b"b": _Node("bb", 1, "10.0.0.2", {"GPU": 1.0})}
"""
PB2 = """
    class GcsNodeInfo:
        class GcsNodeState:
            @staticmethod
            def Value(name):
                return {"ALIVE": 0, "DEAD": 1}[name]
"""
INIT = """
    def init(**kw):
        assert kw["address"] == "auto"
    def nodes():
        return [{"NodeID": "cc", "Alive": True, "NodeManagerAddress": "10.0.0.3", "Resources": {"GPU": 1.0},
                 "Other": 1}]
"""


def fake_ray(root, raylet, init=INIT):
    files = {"ray/__init__.py": init, "ray/_raylet.py": raylet, "ray/core/__init__.py": "",
             "ray/core/generated/__init__.py": "", "ray/core/generated/gcs_pb2.py": PB2}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


def run(tmp_path, address="10.0.0.1:6379"):
    tmp = tmp_path / "tmp"
    if address:
        (tmp / "ray").mkdir(parents=True)
        (tmp / "ray" / "ray_current_cluster").write_text(address + "\n")
    env = {"PYTHONPATH": str(tmp_path / "site"), "RAY_TMPDIR": str(tmp), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", _ray.NODES_SNIPPET, "7"], env=env, capture_output=True,
                          text=True, check=False)


def table(res):
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_gcs_client_reads_the_table_at_the_address_ray_start_wrote(tmp_path):
    fake_ray(tmp_path / "site", GCS, init="def init(**kw):\n    raise AssertionError('no driver')\n")
    assert table(run(tmp_path)) == [
        {"NodeID": "aa", "Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"GPU": 1.0}},
        {"NodeID": "bb", "Alive": False, "NodeManagerAddress": "10.0.0.2", "Resources": {"GPU": 1.0}}]


def test_no_address_file_means_no_ray_on_this_node(tmp_path):
    fake_ray(tmp_path / "site", GCS)
    res = run(tmp_path, address=None)
    assert res.returncode != 0 and "Could not find any running Ray instance" in res.stderr


@pytest.mark.parametrize("raylet", ["", GCS.replace("get_all_node_info", "all_nodes")],
                         ids=["no GcsClient", "another GcsClient API"])
def test_a_ray_without_that_client_api_reads_through_a_driver(tmp_path, raylet):
    fake_ray(tmp_path / "site", raylet)
    assert table(run(tmp_path)) == [
        {"NodeID": "cc", "Alive": True, "NodeManagerAddress": "10.0.0.3", "Resources": {"GPU": 1.0}}]


def test_a_gcs_that_refuses_fails_the_read(tmp_path):
    fake_ray(tmp_path / "site", GCS.replace("assert self.address", "raise ConnectionError('refused')\n"
                                            "            assert self.address"))
    res = run(tmp_path)
    assert res.returncode != 0 and "refused" in res.stderr
