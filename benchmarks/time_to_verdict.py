"""make bench-verdicts: time from `ansible-playbook` start to the failure message, on the 4-node simulated
cluster, for five defects a user hits on a first run, each on a freshly created cluster and on a warm one
(after a successful deploy). Also records whether any container of the deploy was created or (re)started
on any node before the verdict (the preflight's short-lived probe containers are removed again, and are
listed separately).

Cases: a missing shard on the head; TP above the recipe's maximum; a required patch whose anchor is gone in
the base image; an attention backend the image's vLLM release does not have; a collection whose container
spec does not ask for the GPU (a mutated copy of the collection).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "site"
sys.path.insert(0, str(REPO / "tests" / "sim"))
import simctl

BIN = Path(sys.executable).parent
HEAD = simctl.node_name(0)
SNAP = "/root/.cache/huggingface/hub/models--sparkfleet-sim--MiMo-V2.5-Pro-tiny/snapshots/" \
       "adf62bedb5f84dd6529c6ce75e89f47d9edd7b9d"
NOANCHOR = "sparkfleet-sim/vllm-openai:0.34.0-noanchor"
ENV = dict(os.environ, ANSIBLE_CONFIG=str(SITE / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", NO_COLOR="1",
           PATH=f"{BIN}:{os.environ.get('PATH', '')}")


def dexec(node, *argv):
    return subprocess.run(["docker", "exec", node, *argv], capture_output=True, text=True, check=False)


def containers(n):
    """Every container on every node, with its start time; probes are removed, so they do not show."""
    out = {}
    for i in range(n):
        res = dexec(simctl.node_name(i), "docker", "ps", "-a", "--no-trunc", "--format", "{{.ID}}")
        for cid in res.stdout.split():
            started = dexec(simctl.node_name(i), "docker", "inspect", "--format", "{{.State.StartedAt}}", cid)
            out[(i, cid)] = started.stdout.strip()
    return out


def playbook(extra=None, env=None):
    argv = [str(BIN / "ansible-playbook"), "deploy_mimo.yml", "-i", "local"]
    if extra:
        argv += ["-e", json.dumps(extra)]
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=SITE, env=env or ENV, capture_output=True, text=True, check=False)
    return res.returncode, time.monotonic() - t0, res.stdout + res.stderr


def mutated_collection(tmp):
    root = Path(tmp) / "ansible_collections" / "sparkfleet" / "vllm"
    shutil.copytree(REPO, root, ignore=shutil.ignore_patterns(".venv", ".sim", "collections", ".git", "*.pyc"))
    path = root / "plugins" / "module_utils" / "_docker.py"
    path.write_text(re.sub(r'return \[\{"Driver": "", "Count": -1.*?\}\]', "return []", path.read_text()))
    return dict(ENV, ANSIBLE_COLLECTIONS_PATH=str(tmp))


def ensure_noanchor_image():
    """A base image whose mimo_v2.py lost the qkv loader the mimo_qkv_split patch anchors on."""
    if dexec(HEAD, "docker", "image", "inspect", NOANCHOR).returncode == 0:
        return
    dockerfile = ("FROM sparkfleet-sim/vllm-openai:0.34.0\n"
                  "RUN f=$(find / -path '*vllm/model_executor/models/mimo_v2.py' | head -1) && "
                  "sed -i 's/_try_load_fp8_qkv_proj/_renamed_loader/g; s/qkv_proj/fused_qkv/g' $f\n")
    subprocess.run(["docker", "exec", "-i", HEAD, "docker", "build", "-q", "-t", NOANCHOR, "-"],
                   input=dockerfile, text=True, check=True, capture_output=True)


CASES = [
    ("missing shard on the head", "is not intact on this node",
     lambda: dexec(HEAD, "sh", "-c", f"mv {SNAP}/model-00003-of-00004.safetensors /tmp/held-shard"),
     lambda: dexec(HEAD, "sh", "-c", f"mv /tmp/held-shard {SNAP}/model-00003-of-00004.safetensors"),
     {}),
    ("TP above the recipe's maximum", "exceeds mimo-v2.5-pro's max_tp of 8", None, None,
     {"sparkfleet_tensor_parallel_size": 16}),
    ("unappliable required patch", "required patch mimo_qkv_split cannot be applied", ensure_noanchor_image, None,
     {"sparkfleet_base_image": NOANCHOR}),
    ("unknown attention backend for the release", "TRITON_ATTN_DIFFKV", None, None,
     {"sparkfleet_base_image": "sparkfleet-sim/vllm-openai:0.21.0", "sparkfleet_vllm_version": "0.21.0"}),
    ("GPU not requested", "gpu_with_request", "mutate", None, {}),
]


def run_case(name, expect, inject, repair, extra, nodes):
    with tempfile.TemporaryDirectory(prefix="sparkfleet-bench-") as tmp:
        env = None
        if inject == "mutate":
            env = mutated_collection(tmp)
        elif inject:
            inject()
        before = containers(nodes)
        try:
            rc, seconds, out = playbook(extra, env)
        finally:
            if repair:
                repair()
        after = containers(nodes)
    return {"case": name, "rc": rc, "seconds": round(seconds, 1), "verdict_found": expect in out,
            "containers_created_or_started": sorted(f"node{k[0]}:{k[1][:12]}" for k in after
                                                    if before.get(k) != after[k]),
            "tail": out.strip().splitlines()[-3:] if expect not in out else []}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "time_to_verdict.json"))
    args = ap.parse_args()
    up = [sys.executable, str(REPO / "tests/sim/simctl.py")]
    results = []
    for state in ("fresh", "warm"):
        for name, expect, inject, repair, extra in CASES:
            if state == "fresh":
                subprocess.run(up + ["down"], check=True, capture_output=True)
                subprocess.run(up + ["up", "--nodes", str(args.nodes)], check=True, capture_output=True)
            elif not results or results[-1]["state"] == "fresh":
                rc, _unused, out = playbook()
                if rc != 0:
                    raise SystemExit("the warm-up deploy failed:\n" + out[-3000:])
            row = dict(run_case(name, expect, inject, repair, extra, args.nodes), state=state)
            print(json.dumps(row), flush=True)
            results.append(row)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"nodes": args.nodes, "results": results}, indent=2) + "\n")
    bad = [r for r in results if r["rc"] == 0 or not r["verdict_found"] or r["containers_created_or_started"]]
    print(f"{len(results) - len(bad)}/{len(results)} verdicts early, named, and with no container started")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
