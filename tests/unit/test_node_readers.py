"""The node-side readers the preflight and the memory watchdog rely on, on recorded /proc and cgroup text."""

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _ray, gpu, memory, netstat

# /proc/net/tcp of a node: a LISTEN socket on 0.0.0.0:6379 (0x18EB), one on 127.0.0.1:10998 (0x2AF6), and an
# ESTABLISHED connection that is not a listener.
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41234 1 0 100 0 0 10 0
   1: 0100007F:2AF6 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41300 1 0 100 0 0 10 0
   2: 0A001DAC:18EB 0B001DAC:9C40 01 00000000:00000000 00:00000000 00000000     0        0 41400 1 0 20 4 30 10 -1
"""


def test_listen_sockets_only():
    assert netstat.parse_tcp_table(TCP) == {"41234": 6379, "41300": 10998}


@pytest.mark.parametrize(("cgroup", "cid"), [
    ("0::/system.slice/docker-" + "a" * 64 + ".scope\n", "a" * 64),
    # a simulated node: the node's own container, then the container inside it (cgroup v1, cgroupns host)
    ("4:memory:/docker/" + "b" * 64 + "/docker/" + "c" * 64 + "\n", "c" * 64),
    ("0::/user.slice/user-0.slice/session-1.scope\n", None),
])
def test_container_of_a_process(cgroup, cid):
    assert netstat.container_id_of(cgroup) == cid


MEMINFO = "MemTotal:       126556000 kB\nMemFree:         1000000 kB\nMemAvailable:    2000000 kB\n"


def test_meminfo_in_bytes():
    info = memory.parse_meminfo(MEMINFO)
    assert info["MemTotal"] == 126556000 * 1024 and info["MemAvailable"] == 2000000 * 1024


def test_cgroup_paths_v1_and_v2():
    assert memory.parse_cgroup_paths("0::/docker/x\n") == {"v2": "/docker/x"}
    assert memory.parse_cgroup_paths("9:cpu:/a\n4:memory:/docker/y\n") == {"v1": "/docker/y"}


def test_available_is_bounded_by_a_cgroup_limit_and_counts_reclaimable_cache():
    info = memory.parse_meminfo(MEMINFO)
    six_gib = 6 << 30
    # 5.5 GiB used, 0.5 GiB of it reclaimable page cache: 1 GiB left under the limit, below MemAvailable
    headroom = memory.cgroup_headroom(six_gib, int(5.5 * 2**30), 2**29)
    assert headroom == 1 << 30
    assert memory.available(info, [headroom, None]) == 1 << 30
    assert memory.cgroup_headroom(memory.UNLIMITED, 10, 0) is None
    assert memory.available(info, []) == 2000000 * 1024


def test_read_walks_the_cgroup_up_to_the_root(tmp_path):
    proc, root = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(MEMINFO)
    (proc / "self" / "cgroup").write_text("4:memory:/docker/node\n")
    node = root / "memory" / "docker" / "node"
    node.mkdir(parents=True)
    (node / "memory.limit_in_bytes").write_text(str(6 << 30))
    (node / "memory.usage_in_bytes").write_text(str(5 << 30))
    (node / "memory.stat").write_text("cache 0\ntotal_inactive_file 0\n")
    (root / "memory" / "memory.limit_in_bytes").write_text(str(memory.UNLIMITED + 1))
    (root / "memory" / "memory.usage_in_bytes").write_text(str(9 << 30))
    got = memory.read(proc=str(proc), cgroup_root=str(root))
    assert got == {"available_bytes": 1 << 30, "total_bytes": 6 << 30}


@pytest.mark.parametrize(("samples", "fires_at"), [
    ([(8, 0), (8, 10), (8, 20)], None),               # plenty free
    ([(1, 0), (1, 10), (1, 15)], 15),                 # low for the whole grace period
    ([(1, 0), (1, 10), (3, 12), (1, 20), (1, 30)], None),  # recovered in between: the clock restarts
    ([(1, 0), (1, 10), (3, 12), (1, 20), (1, 35)], 35),
])
def test_memory_watchdog(samples, fires_at):
    dog = memory.Watchdog(floor_bytes=2 << 30, grace_s=15)
    fired = None
    for gib, now in samples:
        if dog.observe(gib << 30, now) and fired is None:
            fired = now
    assert fired == fires_at


def test_watchdog_off():
    assert memory.Watchdog(0, 15).observe(0, 100) is None


def test_gb10_memory_reads_not_available():
    """A GB10 has no memory of its own to report (unified memory): nvidia-smi prints [N/A]."""
    out = "compute_cap, name, memory.total [MiB], driver_version\n12.1, NVIDIA GB10, [N/A], 580.95.05\n"
    assert gpu.parse_query(out) == [{"compute_cap": "12.1", "name": "NVIDIA GB10", "memory_mib": None,
                                     "driver": "580.95.05"}]


def test_ray_is_started_on_the_ports_the_preflight_checks():
    argv = _ray.start_argv("worker", "10.0.0.2", 6379, head_ip="10.0.0.1")
    single, ranges = _ray.port_plan(6379)
    flags = dict(zip(argv, argv[1:]))
    for key, flag in (("node_manager", "--node-manager-port"), ("object_manager", "--object-manager-port"),
                      ("metrics_export", "--metrics-export-port")):
        assert int(flags[flag]) == _ray.PORTS[key]
        assert _ray.PORTS[key] in [p["port"] for p in single]
    assert ranges == [{"from": int(flags["--min-worker-port"]), "to": int(flags["--max-worker-port"]),
                       "what": "Ray worker ports"}]
    assert "--num-gpus" not in argv  # Ray counts the GPU itself, through NVML
