"""Integration tests run the collection through ansible-playbook against the simulated cluster."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ENV = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", NO_COLOR="1", PY_COLORS="0",
           ANSIBLE_CALLBACK_RESULT_FORMAT="json",
           PATH=f"{BIN}:{os.environ.get('PATH', '')}")
# Deploys run the way the README tells users to: from the site directory, with its ansible.cfg.
SITE = REPO / "site"
SITE_ENV = dict(ENV, ANSIBLE_CONFIG=str(SITE / "ansible.cfg"))
REPORTS = REPO / "tests" / "output" / "reports"
ENV["SPARKFLEET_REPORT_DIR"] = SITE_ENV["SPARKFLEET_REPORT_DIR"] = str(REPORTS)
# A failed deploy collects diagnostics from every node (seconds each); one test keeps that default on.
ENV["SPARKFLEET_DIAGNOSE_ON_FAILURE"] = SITE_ENV["SPARKFLEET_DIAGNOSE_ON_FAILURE"] = "0"
HEAD = "sparkfleet-sim-node-0"


def sh(argv, timeout=1800, env=None, cwd=REPO, **kw):
    return subprocess.run(argv, cwd=cwd, env=env or ENV, capture_output=True, text=True, timeout=timeout,
                          check=False, **kw)


def deploy(extra=None, playbook="deploy_mimo.yml", env=None, args=()):
    """`cd site && ansible-playbook deploy_mimo.yml -i local [args] [-e ...]`; returns (rc, output)."""
    argv = [str(BIN / "ansible-playbook"), playbook, "-i", "local", *args]
    if extra:
        argv += ["-e", json.dumps(extra)]
    res = sh(argv, env=env or SITE_ENV, cwd=SITE)
    return res.returncode, res.stdout + res.stderr


def run_report(out):
    """The JSON report the sparkfleet.vllm.report callback wrote for the run whose output this is."""
    paths = [line.split(": ", 1)[1].strip() for line in out.splitlines() if line.startswith("sparkfleet report: ")]
    assert len(paths) == 1, out[-3000:]
    return json.loads(Path(paths[0]).read_text())


def install_artifact(tmp_path):
    """`ansible-galaxy collection build` of the checkout, installed into an empty collections path.

    Returns (tarball, collections path, the installed collection's directory, env argv prefix that runs a
    command in an empty work directory with a neutral ansible.cfg and only that collections path).
    """
    dist, colls, work = tmp_path / "dist", tmp_path / "collections", tmp_path / "work"
    for d in (dist, colls, work):
        d.mkdir()
    neutral = tmp_path / "ansible.cfg"
    neutral.write_text("[defaults]\n")
    res = sh([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(dist)], timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    (tarball,) = dist.glob("sparkfleet-vllm-*.tar.gz")
    env = ["env", "-C", str(work), "ANSIBLE_CONFIG=%s" % neutral, "ANSIBLE_COLLECTIONS_PATH=%s" % colls]
    res = sh([*env, str(BIN / "ansible-galaxy"), "collection", "install", str(tarball), "-p", str(colls)],
             timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return tarball, colls, colls / "ansible_collections" / "sparkfleet" / "vllm", env


def node_exec(node, *argv):
    return sh(["docker", "exec", node, *argv], timeout=120)


@pytest.fixture(scope="session")
def sim_cluster():
    """One simulated cluster, deployed once, shared by every fault test (inject, observe, repair)."""
    up = sh([sys.executable, "tests/sim/simctl.py", "up", "--nodes", "4"])
    assert up.returncode == 0, up.stderr[-3000:]
    rc, out = deploy()
    assert rc == 0, out[-5000:]
    yield
    sh([sys.executable, "tests/sim/simctl.py", "down"])
