"""make bench-weights: a checkpoint snapshot to N = 2, 4, 8 simulated nodes, the weights role's pipelined chain
against a fan-out from the head, in one run, every node's egress shaped with tc tbf so that the network is the
bottleneck; then a chain transfer killed once the last node holds half of the bytes, and the resumed one.

Reports T(N) and T(N)/T(2) for both (T: until the last node has verified and published the snapshot, as its
own module reports), and the share of the snapshot's bytes the resumed transfer sent again.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "sim"))
sys.path.insert(0, str(REPO / "benchmarks"))
import make_checkpoint
import simctl
from image_distribution import dexec, inventory, summarise

HUB = "/root/bench-hub"
PROGRESS = "/var/tmp/sparkfleet/weights-receive.json"  # noqa: S108 - on the node, where the module writes it


def clear_targets(top):
    for i in range(1, top):
        dexec(i, "rm", "-rf", HUB, PROGRESS, check=False)


def playbook(inv, mode, out, info, env, background=False):
    argv = [str(REPO / ".venv/bin/ansible-playbook"), "benchmarks/distribute_weights.yml", "-i", str(inv), "-e",
            json.dumps({"bench_mode": mode, "bench_result_file": str(out), "bench_hub": HUB,
                        "bench_repo_id": info["repo_id"], "bench_revision": info["revision"]})]
    if background:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(proc.stdout[-4000:] + proc.stderr[-2000:])
    return json.loads(Path(out).read_text())


def received(i):
    res = dexec(i, "sh", "-c", "cat %s 2>/dev/null || echo {}" % PROGRESS, check=False)
    try:
        return json.loads(res.stdout).get("done") or 0
    except ValueError:
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--sizes", default="2,4,8")
    ap.add_argument("--rate", default="50mbit", help="tc tbf rate of every node's egress")
    ap.add_argument("--layers", type=int, default=32, help="checkpoint layers, one shard each (about 2 MiB a layer)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "weights_distribution.json"))
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    top = max(sizes)
    subprocess.run([sys.executable, str(REPO / "tests/sim/simctl.py"), "up", "--nodes", str(top)], check=True)
    key = simctl.STATE / "ssh" / "id_ed25519"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    with tempfile.TemporaryDirectory() as tmp:
        info = make_checkpoint.write_checkpoint(Path(tmp) / "hub", "mimo",
                                                {"layers": args.layers, "shards": args.layers})
        dexec(0, "rm", "-rf", HUB, check=False)
        subprocess.run(["docker", "cp", str(Path(tmp) / "hub"), "%s:%s" % (simctl.node_name(0), HUB)], check=True)
        for i in range(top):
            dexec(i, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", args.rate, "burst", "256kb",
                  "latency", "1000ms")
        results = {"rate": args.rate, "shards": args.layers, "runs": []}
        try:
            for n in sizes:
                inv = Path(tmp) / f"hosts-{n}.yml"
                inventory(n, inv, key)
                for mode in ("chain", "fanout"):
                    clear_targets(top)
                    r = playbook(inv, mode, Path(tmp) / f"{mode}-{n}.json", info, env)
                    results["snapshot_bytes"] = r["snapshot_bytes"]
                    results["runs"].append({"nodes": n, "mode": mode, "transfer_s": round(r["seconds"], 2)})
                    print(f"N={n:2d} {mode:6s} transfer {r['seconds']:7.2f} s", flush=True)
            # A chain transfer to every node, killed (the play and every module process, as a lost head
            # would) once the last node holds half of the bytes; then the same run again.
            inv = Path(tmp) / f"hosts-{top}.yml"
            clear_targets(top)
            play = playbook(inv, "chain", Path(tmp) / "killed.json", info, env, background=True)
            deadline = time.monotonic() + 600
            while received(top - 1) < results["snapshot_bytes"] // 2:
                if time.monotonic() > deadline or play.poll() is not None:
                    sys.exit("the transfer to kill ended or never reached half way")
                time.sleep(0.2)
            at = received(top - 1)
            os.killpg(play.pid, signal.SIGKILL)
            play.wait()
            for i in range(top):
                dexec(i, "pkill", "-9", "-f", "weights_", check=False)
            r = playbook(inv, "chain", Path(tmp) / "resumed.json", info, env)
            results["resume"] = {"nodes": top, "killed_at_bytes": at, "resent_bytes": r["blob_bytes_sent"],
                                 "resent_share": round(r["blob_bytes_sent"] / results["snapshot_bytes"], 3),
                                 "transfer_s": round(r["seconds"], 2)}
        finally:
            for i in range(top):
                dexec(i, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
            clear_targets(top)
            dexec(0, "rm", "-rf", HUB, check=False)
    print(f"\nsnapshot: {results['snapshot_bytes'] / 2**20:.1f} MiB in {args.layers} shards, egress {args.rate}")
    summarise(results, sizes, args.out)
    res = results["resume"]
    print(f"\nkilled at {res['killed_at_bytes'] / results['snapshot_bytes']:.0%} on the last node; the resumed run "
          f"sent {res['resent_share']:.1%} of the snapshot again ({res['transfer_s']} s)")


if __name__ == "__main__":
    main()
