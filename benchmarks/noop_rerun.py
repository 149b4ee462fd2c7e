"""make bench-noop: a no-op re-run of the deploy against a facts-only play on the same simulated nodes.

Brings up the simulated cluster (4 nodes: inventory/local), deploys once, then times, side by side and
alternating, --runs no-op re-runs of `deploy_mimo.yml` (each must end changed=0 on every host and take
the no-op path: one probe per node), --runs facts-only plays (`gather_facts: true` on spark_cluster,
nothing else) and --runs re-runs down the full path (`-e sparkfleet_skip_unchanged=false`: every step
checks its own stage, changed=0 too). Reports the medians and the ratios to the facts-only play; issue D's
target for the no-op re-run is a ratio of 2 or less.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "site"
BIN = Path(sys.executable).parent
ENV = dict(os.environ, ANSIBLE_CONFIG=str(SITE / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", NO_COLOR="1",
           SPARKFLEET_DIAGNOSE_ON_FAILURE="0", PATH=f"{BIN}:{os.environ.get('PATH', '')}")
FACTS_PLAY = """---
- name: Facts only
  hosts: spark_cluster
  gather_facts: true
  tasks: []
"""


def timed(argv):
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=SITE, env=ENV, capture_output=True, text=True, check=False)
    return res.returncode, time.monotonic() - t0, res.stdout + res.stderr


def changed_hosts(out):
    return sorted(m.group(1) for m in re.finditer(r"^(\S+)\s+: ok=\d+\s+changed=([1-9]\d*)", out, re.M))


def start(doc, result_name):
    """A benchmark's options (--runs, --keep, --out), then the simulated cluster of 4 nodes brought up; returns
    the options and simctl's command line (for its `down`)."""
    ap = argparse.ArgumentParser(description=doc.split("\n", maxsplit=1)[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="leave the simulated cluster up")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / result_name))
    args = ap.parse_args()
    sim = [sys.executable, str(REPO / "tests/sim/simctl.py")]
    subprocess.run(sim + ["up", "--nodes", "4"], check=True, capture_output=True)
    return args, sim


def finish(args, result):
    """Writes the result to --out and prints it."""
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


def main():
    args, sim = start(__doc__, "noop_rerun.json")
    try:
        deploy = [str(BIN / "ansible-playbook"), "deploy_mimo.yml", "-i", "local"]
        rc, first_s, out = timed(deploy)
        if rc != 0:
            raise SystemExit("the first deploy failed:\n" + out[-3000:])
        with tempfile.TemporaryDirectory() as tmp:
            facts_pb = Path(tmp) / "facts.yml"
            facts_pb.write_text(FACTS_PLAY)
            facts = [str(BIN / "ansible-playbook"), str(facts_pb), "-i", "local"]
            noop_s, facts_s, full_s = [], [], []
            for _run in range(args.runs):
                rc, secs, out = timed(deploy)
                if rc != 0 or changed_hosts(out) or "nothing is built, sent or started" not in out:
                    raise SystemExit("a no-op re-run failed, changed something (%s) or took the full path:\n%s"
                                     % (changed_hosts(out), out[-3000:]))
                noop_s.append(secs)
                rc, secs, out = timed(deploy + ["-e", "sparkfleet_skip_unchanged=false"])
                if rc != 0 or changed_hosts(out):
                    raise SystemExit("a full re-run failed or changed something (%s):\n%s"
                                     % (changed_hosts(out), out[-3000:]))
                full_s.append(secs)
                rc, secs, out = timed(facts)
                if rc != 0:
                    raise SystemExit("the facts-only play failed:\n" + out[-3000:])
                facts_s.append(secs)
    finally:
        if not args.keep:
            subprocess.run(sim + ["down"], check=False, capture_output=True)
    result = {"nodes": 4, "first_deploy_s": round(first_s, 1), "noop_s": [round(s, 1) for s in noop_s],
              "facts_s": [round(s, 1) for s in facts_s], "full_s": [round(s, 1) for s in full_s],
              "noop_median_s": round(statistics.median(noop_s), 1),
              "facts_median_s": round(statistics.median(facts_s), 1),
              "full_median_s": round(statistics.median(full_s), 1)}
    result["ratio"] = round(result["noop_median_s"] / result["facts_median_s"], 2)
    result["full_ratio"] = round(result["full_median_s"] / result["facts_median_s"], 2)
    return finish(args, result)


if __name__ == "__main__":
    sys.exit(main())
