"""make bench: image distribution to N = 2, 4, 8 simulated nodes, the collection's pipelined chain against a
fan-out from the head, in one run, each node's egress shaped with tc tbf so that the network is the bottleneck.

Reports T(N) and T(N)/T(2) for both. T is the time until the last node has loaded the image, as reported by
the receiving modules themselves (Ansible's own start-up time is not part of it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "sim"))
import simctl

PAYLOAD = "sparkfleet-bench/payload:1"


def node(i):
    return simctl.node_name(i)


def dexec(i, *argv, check=True):
    return subprocess.run(["docker", "exec", node(i), *argv], check=check, capture_output=True, text=True)


def inventory(n, path, key):
    lines = ["all:", "  children:", "    bench_nodes:", "      children:",
             "        bench_head:", "          hosts:",
             f"            n0: {{ansible_host: {simctl.node_ip(0)}, sparkfleet_node_ip: {simctl.node_ip(0)}}}",
             "        bench_targets:", "          hosts:"]
    lines += [f"            n{i}: {{ansible_host: {simctl.node_ip(i)}, sparkfleet_node_ip: {simctl.node_ip(i)}}}"
              for i in range(1, n)]
    lines += ["  vars:", "    ansible_user: root", "    ansible_python_interpreter: /usr/bin/python3",
              f"    ansible_ssh_private_key_file: {key}",
              "    ansible_ssh_common_args: >-",
              "      -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"]
    Path(path).write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--sizes", default="2,4,8")
    ap.add_argument("--rate", default="50mbit", help="tc tbf rate of every node's egress")
    ap.add_argument("--payload-mib", type=int, default=96)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "image_distribution.json"))
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    top = max(sizes)
    subprocess.run([sys.executable, str(REPO / "tests/sim/simctl.py"), "up", "--nodes", str(top)], check=True)
    key = simctl.STATE / "ssh" / "id_ed25519"
    # An incompressible payload image in the head's engine.
    dexec(0, "sh", "-c", f"docker image inspect {PAYLOAD} >/dev/null 2>&1 || (mkdir -p /tmp/p && head -c "
          f"{args.payload_mib}M /dev/urandom > /tmp/p/blob && tar -C /tmp/p -c blob | docker import - {PAYLOAD})")
    for i in range(top):
        dexec(i, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", args.rate, "burst", "256kb",
              "latency", "1000ms")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    results = {"rate": args.rate, "payload_mib": args.payload_mib, "runs": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in sizes:
                inv = Path(tmp) / f"hosts-{n}.yml"
                inventory(n, inv, key)
                for mode in ("chain", "fanout"):
                    for i in range(1, top):
                        dexec(i, "docker", "rmi", "-f", PAYLOAD, check=False)
                    out = Path(tmp) / f"{mode}-{n}.json"
                    start = time.monotonic()
                    proc = subprocess.run([str(REPO / ".venv/bin/ansible-playbook"), "benchmarks/distribute.yml",
                                           "-i", str(inv), "-e", f"bench_mode={mode} bench_image={PAYLOAD} "
                                           f"bench_result_file={out}"], cwd=REPO, env=env, capture_output=True,
                                          text=True, check=False)
                    wall = time.monotonic() - start
                    if proc.returncode != 0:
                        sys.exit(proc.stdout[-4000:] + proc.stderr[-2000:])
                    r = json.loads(out.read_text())
                    results["runs"].append({"nodes": n, "mode": mode, "transfer_s": round(r["seconds"], 2),
                                            "bytes": r["bytes"], "playbook_wall_s": round(wall, 1)})
                    print(f"N={n:2d} {mode:6s} transfer {r['seconds']:7.2f} s  (playbook {wall:5.1f} s)", flush=True)
    finally:
        for i in range(top):
            dexec(i, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
    summarise(results, sizes, args.out)


def summarise(results, sizes, out):
    """Add T(N)/T(smallest N) to every run, write the results to ``out`` and print the table."""
    for mode in ("chain", "fanout"):
        base = next(r["transfer_s"] for r in results["runs"] if r["mode"] == mode and r["nodes"] == sizes[0])
        for r in results["runs"]:
            if r["mode"] == mode:
                r["ratio_to_smallest"] = round(r["transfer_s"] / base, 2)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n| N | chain T(N) s | chain T(N)/T({sizes[0]}) | fan-out T(N) s | fan-out T(N)/T({sizes[0]}) |")
    print("|---|---|---|---|---|")
    for n in sizes:
        c = next(r for r in results["runs"] if r["mode"] == "chain" and r["nodes"] == n)
        f = next(r for r in results["runs"] if r["mode"] == "fanout" and r["nodes"] == n)
        print(f"| {n} | {c['transfer_s']} | {c['ratio_to_smallest']} | {f['transfer_s']} | {f['ratio_to_smallest']} |")


if __name__ == "__main__":
    main()
