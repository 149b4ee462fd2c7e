"""Preflight judgement: every defect of every node in one run. The facts below are shaped like what the gathering
module records on a DGX Spark (GB10, compute capability 12.1, unified memory so nvidia-smi reports no memory.total,
Debian's docker.io 20.10.24+dfsg1, driver 580.95.05)."""

import copy

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import preflight
from ansible_collections.sparkfleet.vllm.plugins.module_utils.preflight import (
    KNOWN_BAD_IMAGES,
    judge,
    port_conflicts,
    render,
    skew,
)

GIB = 1024 ** 3
NODES = ["spark-01", "spark-02", "spark-03", "spark-04"]
IPS = {n: "192.168.100.%d" % (11 + i) for i, n in enumerate(NODES)}
IFACE = "enp1s0f0np0"
NIGHTLY_ARCH = ["sm_80", "sm_90", "sm_100", "sm_120", "compute_120"]  # seed 000
GOOD_IMAGE = "sha256:" + "ab" * 32
CACHE = "/root/.cache/huggingface"


def node_facts(node):
    return {
        "gpu_with_request": {"visible": True, "count": 1, "error": None},
        "gpu_without_request": {"visible": False},
        "gpus": [{"name": "NVIDIA GB10", "compute_cap": "12.1", "memory_mib": None, "driver": "580.95.05"}],
        "memory": {"available_bytes": 117 * GIB, "total_bytes": 121 * GIB},
        "disk": {"path": CACHE, "free_bytes": 1500 * GIB},
        "net": {"ip": IPS[node], "interface": IFACE, "mtu": 9000},
        "listeners": [
            {"port": 22, "pid": 811, "process": "sshd", "container": None},
            {"port": 6379, "pid": 4242, "process": "gcs_server", "container": "sparkfleet-ray"},
            {"port": 53, "pid": 512, "process": "systemd-resolve", "container": None},
        ],
        "containers": [
            {"name": "sparkfleet-ray", "image": "sparkfleet/vllm:gb10", "status": "running",
             "labels": {"sparkfleet.role": "head"}, "gpu": True},
            {"name": "portainer", "image": "portainer/portainer-ce", "status": "running", "labels": {}, "gpu": False},
        ],
        "time": {"before": 1760000000.000, "node": 1760000000.030, "after": 1760000000.060},
        "docker_version": "20.10.24+dfsg1",
        "driver_version": "580.95.05",
        "image_ids": {"sparkfleet/vllm:gb10": GOOD_IMAGE},
    }


def cluster():
    return {n: node_facts(n) for n in NODES}


def expect(**over):
    e = {
        "node_ips": dict(IPS),
        "interface": IFACE,
        "compute_cap": "12.1",
        "arch_list": NIGHTLY_ARCH,
        "gpus_per_node": 1,
        "memory_need_bytes": 100 * GIB,
        "disk_need_bytes": {n: 0 for n in NODES},
        "ports": [{"port": 6379, "what": "Ray GCS"}, {"port": 8265, "what": "Ray dashboard"},
                  {"port": 8000, "what": "vLLM API"}],
        "port_ranges": [{"from": 10002, "to": 10999, "what": "Ray worker ports"}],
        "managed_containers": ["sparkfleet-ray", "sparkfleet-vllm"],
        "max_clock_skew_s": 2.0,
        "min_docker": "19.03",
        "min_driver": "580.0",
        "known_bad_images": list(KNOWN_BAD_IMAGES),
    }
    e.update(over)
    return e


def only(defects):
    assert len(defects) == 1, render(defects)
    return defects[0]


def test_clean_four_node_cluster():
    assert judge(cluster(), expect()) == []
    assert render([]) == "preflight found 0 defect(s) on 0 node(s)"


def test_known_bad_images_are_seeded_from_the_field_report():
    ids = {b["id"]: b for b in KNOWN_BAD_IMAGES}
    assert "foss foss foss" in ids["sha256:4c5e61c590207edb771c294014193c719ca9eee330c0b51756f4b6a25951360d"]["reason"]
    assert "Marlin" in ids["sha256:d78917343e4159618d8fd766d800809246a68b56cf132464b0eeec91a23bc5ca"]["reason"]


def _gpu_hidden(f):
    f["gpu_with_request"] = {"visible": False, "count": 0,
                             "error": 'could not select device driver "" with capabilities: [[gpu]]'}


def _gpu_leaks(f):
    f["gpu_without_request"] = {"visible": True}


def _wrong_cap(f):
    f["gpus"][0]["compute_cap"] = "9.0"
    f["gpus"][0]["name"] = "NVIDIA H200"


def _no_gpu(f):
    f["gpus"] = []


def _low_memory(f):
    f["memory"]["available_bytes"] = int(80.25 * GIB)


def _low_disk(f):
    f["disk"]["free_bytes"] = 200 * GIB


def _ip_nowhere(f):
    f["net"]["interface"] = None
    f["net"]["mtu"] = None


def _ip_on_other_iface(f):
    f["net"]["interface"] = "wlP9s9"


def _port_taken(f):
    f["listeners"].append({"port": 8000, "pid": 123, "process": "python3", "container": None})


def _port_in_range(f):
    f["listeners"].append({"port": 10500, "pid": 9001, "process": "node", "container": None})


def _leftover_gpu(f):
    f["containers"].append({"name": "vllm_node", "image": "vllm/vllm-openai:nightly", "status": "running",
                            "labels": {}, "gpu": True})


def _leftover_label(f):
    f["containers"].append({"name": "sparkfleet-ray-old", "image": "sparkfleet/vllm:gb10", "status": "exited",
                            "labels": {"sparkfleet.role": "worker"}, "gpu": False})


def _clock_ahead(f):
    f["time"] = {"before": 1760000000.0, "node": 1760000003.05, "after": 1760000000.1}


def _old_docker(f):
    f["docker_version"] = "18.09.1"


def _old_driver(f):
    f["driver_version"] = "575.57.08"


def _bad_image(f):
    f["image_ids"]["nvcr.io/nvidia/vllm:26.03-py3"] = KNOWN_BAD_IMAGES[0]["id"]


def _missing_time(f):
    del f["time"]


def _none_listeners(f):
    f["listeners"] = None


@pytest.mark.parametrize(
    ("mutate", "check", "found", "expected", "fix"),
    [
        (_gpu_hidden, "gpu_with_request", "could not select device driver", "1 GPU(s) visible with --gpus",
         "install the NVIDIA Container Toolkit"),
        (_gpu_leaks, "gpu_without_request", "visible in a container started without --gpus", "no GPU unless",
         "default-runtime"),
        (_wrong_cap, "compute_cap", "NVIDIA H200 with compute capability 9.0", "compute capability 12.1",
         "remove spark-03 from the inventory"),
        (_no_gpu, "gpus", "lists 0 GPU(s)", "1 GPU(s)", "nvidia-smi must list the GPU"),
        (_low_memory, "memory", "80.2 GiB available", ">= 100.0 GiB available", "free 19.8 GiB of memory on spark-03"),
        (_low_disk, "disk", "200.0 GiB free on " + CACHE, ">= 700.0 GiB free on " + CACHE, "free 500.0 GiB on " + CACHE),
        (_ip_nowhere, "fabric_ip", "no interface holds 192.168.100.13", "192.168.100.13 on enp1s0f0np0",
         "assign 192.168.100.13 to enp1s0f0np0 on spark-03"),
        (_ip_on_other_iface, "fabric_interface", "192.168.100.13 on wlP9s9", "192.168.100.13 on enp1s0f0np0",
         "move 192.168.100.13 to enp1s0f0np0"),
        (_port_taken, "port", "port 8000 (vLLM API) held by python3, pid 123",
         "port 8000 free or held by sparkfleet-ray/sparkfleet-vllm",
         "stop the process holding port 8000 (python3, pid 123) on spark-03"),
        (_leftover_gpu, "container", "leftover container vllm_node (vllm/vllm-openai:nightly, running) holds the GPU",
         "only sparkfleet-ray/sparkfleet-vllm", "docker rm -f vllm_node on spark-03"),
        (_leftover_label, "container", "sparkfleet-ray-old (sparkfleet/vllm:gb10, exited) carries sparkfleet.role=worker",
         "only sparkfleet-ray/sparkfleet-vllm", "docker rm -f sparkfleet-ray-old on spark-03"),
        (_clock_ahead, "clock", "+3.00 s off the controller (+/- 0.05 s)", "within +/- 2.0 s",
         "sync the clock (chrony/NTP) on spark-03"),
        (_old_docker, "docker_version", "Docker 18.09.1", ">= 19.03", "upgrade Docker on spark-03 to 19.03 or newer"),
        (_old_driver, "driver_version", "NVIDIA driver 575.57.08", ">= 580.0", "install NVIDIA driver 580.0 or newer"),
        (_bad_image, "image", "nvcr.io/nvidia/vllm:26.03-py3 is sha256:4c5e61c5", "not on the known-bad list",
         "docker rmi nvcr.io/nvidia/vllm:26.03-py3"),
        (_missing_time, "time", "not gathered", "the 'time' fact", "re-run the preflight on spark-03"),
        (_none_listeners, "listeners", "not gathered", "the 'listeners' fact", "re-run the preflight on spark-03"),
    ],
)
def test_each_defect_kind(mutate, check, found, expected, fix):
    facts = cluster()
    mutate(facts["spark-03"])
    e = expect(disk_need_bytes={"spark-01": 0, "spark-02": 0, "spark-03": 700 * GIB, "spark-04": 0})
    d = only(judge(facts, e))
    assert d["node"] == "spark-03" and d["check"] == check
    assert found in d["found"], d
    assert expected in d["expected"], d
    assert fix in d["fix"], d


def test_mtu_mismatch_names_both_values():
    facts = cluster()
    facts["spark-02"]["net"]["mtu"] = 1500
    d = only(judge(facts, expect()))
    assert d["node"] == "spark-02" and d["check"] == "mtu"
    assert d["found"] == "MTU 1500 on enp1s0f0np0"
    assert d["expected"] == "MTU 9000 like spark-01, spark-03, spark-04"
    assert d["fix"].startswith("set MTU 9000 on enp1s0f0np0 like the other nodes")


def test_mtu_tie_goes_to_the_larger_value():
    facts = cluster()
    for n in ("spark-01", "spark-02"):
        facts[n]["net"]["mtu"] = 1500
    defects = judge(facts, expect())
    assert [(d["node"], d["check"]) for d in defects] == [("spark-01", "mtu"), ("spark-02", "mtu")]
    assert all("set MTU 9000" in d["fix"] for d in defects)


def test_memory_short_in_total_says_so():
    defects = judge(cluster(), expect(memory_need_bytes=125 * GIB))
    assert [(d["node"], d["check"]) for d in defects] == [(n, "memory") for n in NODES]
    assert defects[0]["found"] == "117.0 GiB available" and defects[0]["expected"] == ">= 125.0 GiB available"
    assert "spark-01 has only 121.0 GiB in all" in defects[0]["fix"]


def test_image_without_native_gb10_code_is_reported_on_every_node():
    defects = judge(cluster(), expect(arch_list=["sm_80", "sm_90", "sm_100", "compute_120"]))
    assert [d["node"] for d in defects] == NODES
    assert all(d["check"] == "arch_list" and "no native code for 12.1" in d["found"] for d in defects)


def test_no_torch_in_the_image_skips_the_arch_check():
    assert judge(cluster(), expect(arch_list=None)) == []


def test_several_defects_on_several_nodes_in_one_call():
    facts = cluster()
    _gpu_hidden(facts["spark-04"])
    _port_taken(facts["spark-04"])
    facts["spark-04"]["net"]["mtu"] = 1500
    _clock_ahead(facts["spark-02"])
    _bad_image(facts["spark-02"])
    _leftover_gpu(facts["spark-01"])
    del facts["spark-01"]["disk"]
    defects = judge(facts, expect())
    assert [(d["node"], d["check"]) for d in defects] == [
        ("spark-01", "container"),
        ("spark-01", "disk"),
        ("spark-02", "clock"),
        ("spark-02", "image"),
        ("spark-04", "gpu_with_request"),
        ("spark-04", "mtu"),
        ("spark-04", "port"),
    ]
    msg = render(defects)
    lines = msg.splitlines()
    assert lines[0] == "preflight found 7 defect(s) on 3 node(s)"
    assert len(lines) == 8
    assert lines[2] == ("spark-01: disk: found not gathered; expected the 'disk' fact; fix: re-run the preflight on "
                        "spark-01 and check why the gathering step did not report 'disk'")
    assert lines[7].startswith("spark-04: port: found port 8000 (vLLM API) held by python3, pid 123; expected port 8000")


def test_node_without_any_facts():
    facts = cluster()
    del facts["spark-04"]
    d = only(judge(facts, expect()))
    assert (d["node"], d["check"], d["found"]) == ("spark-04", "facts", "no facts from this node")


def test_empty_facts_dict_reports_every_key_not_gathered():
    facts = cluster()
    facts["spark-04"] = {}
    defects = judge(facts, expect())
    assert {d["check"] for d in defects} == set(preflight.FACT_KEYS)
    assert all(d["node"] == "spark-04" and d["found"] == "not gathered" for d in defects)
    assert [d["check"] for d in defects] == sorted(preflight.FACT_KEYS)


@pytest.mark.parametrize(
    ("time_fact", "want_skew", "want_unc", "defect"),
    [
        ({"before": 100.0, "node": 103.05, "after": 100.1}, 3.0, 0.05, True),    # 3 s ahead, tight bracket
        ({"before": 100.0, "node": 108.0, "after": 110.0}, 3.0, 5.0, False),    # 3 s apparent, 5 s uncertainty
        ({"before": 100.0, "node": 97.55, "after": 100.1}, -2.5, 0.05, True),   # 2.5 s behind
        ({"before": 100.0, "node": 101.9, "after": 100.0}, 1.9, 0.0, False),    # inside the limit
        ({"before": 100.0, "node": 102.5, "after": 101.0}, 2.0, 0.5, False),    # 2.0 - 0.5 is not over 2.0
    ],
)
def test_clock_skew_planner(time_fact, want_skew, want_unc, defect):
    s, unc = skew(time_fact)
    assert s == pytest.approx(want_skew) and unc == pytest.approx(want_unc)
    facts = cluster()
    facts["spark-02"]["time"] = time_fact
    defects = judge(facts, expect())
    assert bool(defects) is defect
    if defect:
        d = only(defects)
        assert d["check"] == "clock" and ("%+.2f s" % want_skew) in d["found"]
        assert "sync the clock (chrony/NTP)" in d["fix"]


@pytest.mark.parametrize(
    ("listener", "conflict"),
    [
        ({"port": 6379, "pid": 4242, "process": "gcs_server", "container": "sparkfleet-ray"}, False),
        ({"port": 8000, "pid": 77, "process": "python3", "container": "sparkfleet-vllm"}, False),
        ({"port": 6379, "pid": 901, "process": "redis-server", "container": None}, True),
        ({"port": 8000, "pid": 55, "process": "docker-proxy", "container": "open-webui"}, True),
        ({"port": 10002, "pid": 1, "process": "x", "container": None}, True),    # first port of the range
        ({"port": 10999, "pid": 1, "process": "x", "container": None}, True),    # last port of the range
        ({"port": 11000, "pid": 1, "process": "x", "container": None}, False),   # just outside
        ({"port": 8001, "pid": 1, "process": "x", "container": None}, False),    # not a port we need
    ],
)
def test_port_conflicts(listener, conflict):
    assert bool(port_conflicts([listener], expect())) is conflict


def test_port_in_range_defect_names_the_range():
    facts = cluster()
    _port_in_range(facts["spark-01"])
    d = only(judge(facts, expect()))
    assert d["found"] == "port 10500 (Ray worker ports 10002-10999) held by node, pid 9001"
    assert d["fix"] == "stop the process holding port 10500 (node, pid 9001) on spark-01"


def test_port_held_by_foreign_container_fix_removes_it():
    facts = cluster()
    facts["spark-01"]["listeners"].append({"port": 8265, "pid": 66, "process": "docker-proxy",
                                           "container": "ray-dashboard-old"})
    d = only(judge(facts, expect()))
    assert d["fix"] == "remove the container holding port 8265: docker rm -f ray-dashboard-old on spark-01"


def test_dual_stack_listener_is_one_conflict():
    lis = {"port": 8000, "pid": 123, "process": "python3", "container": None}
    conflicts = port_conflicts([lis, copy.deepcopy(lis)], expect())
    assert conflicts == [{"port": 8000, "what": "vLLM API", "pid": 123, "process": "python3", "container": None}]


def test_unknown_pid_fix_says_how_to_find_it():
    facts = cluster()
    facts["spark-01"]["listeners"].append({"port": 8000, "pid": None, "process": "", "container": None})
    d = only(judge(facts, expect()))
    assert "pid unknown" in d["found"] and "ss -ltnp 'sport = :8000'" in d["fix"]


def test_managed_container_holding_gpu_and_labels_is_fine_and_unlabelled_others_are_ignored():
    facts = cluster()
    facts["spark-01"]["containers"].append({"name": "sparkfleet-vllm", "image": "sparkfleet/vllm:gb10",
                                            "status": "created", "labels": {"sparkfleet.role": "serve"},
                                            "gpu": True})
    assert judge(facts, expect()) == []


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("20.10.24+dfsg1", (20, 10, 24)),
        ("Docker version 24.0.7, build afdd53b", (24, 0, 7)),
        ("580.95.05", (580, 95, 5)),
        ("19.03", (19, 3)),
        ("", None),
    ],
)
def test_version_tuple(text, want):
    assert preflight.version_tuple(text) == want


def test_versions_compare_numerically():
    assert preflight.version_at_least("19.03.0", "19.03") is True
    assert preflight.version_at_least("19.3", "19.03") is True
    assert preflight.version_at_least("9.10", "19.03") is False  # not a string comparison
    assert preflight.version_at_least("580.100.1", "580.95") is True


def test_unparseable_version_is_a_defect():
    facts = cluster()
    facts["spark-02"]["docker_version"] = "unknown"
    d = only(judge(facts, expect()))
    assert d["check"] == "docker_version" and "unparseable" in d["found"]


def test_known_bad_id_without_prefix_still_matches():
    facts = cluster()
    facts["spark-01"]["image_ids"]["vllm/vllm-openai:nightly"] = KNOWN_BAD_IMAGES[1]["id"].split(":")[1]
    d = only(judge(facts, expect()))
    assert d["check"] == "image" and "Marlin" in d["found"]


def test_user_known_bad_addition_is_used():
    facts = cluster()
    e = expect(known_bad_images=[*KNOWN_BAD_IMAGES, {"id": GOOD_IMAGE, "reason": "site ban"}])
    defects = judge(facts, e)
    assert [d["node"] for d in defects] == NODES and all("site ban" in d["found"] for d in defects)


def test_memory_held_by_the_managed_containers_counts_as_available():
    """A serving cluster's vLLM holds most of the node; the re-deploy replaces it, so it is not a defect."""
    facts = {"n0": {"memory": {"available_bytes": 2 << 30, "total_bytes": 121 << 30, "managed_bytes": 100 << 30}}}
    expect = {"node_ips": {"n0": "10.0.0.1"}, "memory_need_bytes": 60 << 30}
    assert not [d for d in judge(facts, expect) if d["check"] == "memory"]
    facts["n0"]["memory"]["managed_bytes"] = 10 << 30
    (mem,) = [d for d in judge(facts, expect) if d["check"] == "memory"]
    assert "held by sparkfleet-ray/sparkfleet-vllm" in mem["found"]


def test_a_node_without_image_needs_at_least_the_container_toolkit():
    facts = {"n0": {"gpu_with_request": {"visible": False, "deferred": True, "toolkit": False}},
             "n1": {"gpu_with_request": {"visible": False, "deferred": True, "toolkit": True}}}
    found = [d for d in judge(facts, {"node_ips": {"n0": "a", "n1": "b"}}) if d["check"] == "gpu_with_request"]
    assert [d["node"] for d in found] == ["n0"] and "NVIDIA Container Toolkit" in found[0]["fix"]
