"""The literal commands of a user's site directory, on the controller only (no cluster, no sim_cluster).

`--limit localhost` leaves only the controller's plays with hosts (spark8/spark16 list the controller as
localhost): validating and planning, and digesting the run's inputs; every other play matches no host, so
nothing is contacted.
"""

import os
import re
import tarfile

import pytest
from conftest import BIN, REPO, install_artifact, sh

VALIDATE_PLAY = "PLAY [Validate the inventory and plan the deploy]"
PLAN_TASK = "TASK [sparkfleet.vllm.validate : Plan the topology]"
DIGEST_PLAY = "PLAY [Digest every input of this run]"


def recap_ok(out, host="localhost"):
    lines = [ln for ln in out.splitlines() if ln.startswith(host + " ") and "failed=" in ln]
    return len(lines) == 1 and "failed=0" in lines[0] and "unreachable=0" in lines[0]


def only_validate_ran(out):
    """Validate, then the inputs' digest, ran on the controller alone; every later play matched no host: no
    task banner between its PLAY line and the next."""
    plays = re.split(r"^PLAY (?:\[|RECAP)", out, flags=re.M)[1:]
    return (len(plays) > 3 and plays[0].startswith(VALIDATE_PLAY[6:]) and "TASK [" in plays[0]
            and plays[1].startswith(DIGEST_PLAY[6:]) and "ok: [localhost]" in plays[1]
            and not re.search(r"^\w+: \[(?!localhost\])", plays[0] + plays[1], flags=re.M)
            and all("TASK [" not in p and "skipping: no hosts matched" in p for p in plays[2:-1]))


@pytest.mark.parametrize("playbook", ["deploy_mimo.yml", "deploy_kimi.yml"])
@pytest.mark.parametrize("inventory", ["spark16", "spark8"])
def test_site_command_validates_on_the_controller(playbook, inventory):
    """`cd site && ansible-playbook deploy_mimo.yml -i spark16`, limited to the controller."""
    # env -C site: the command runs from site/, with site/ansible.cfg (no ANSIBLE_CONFIG from the helper).
    res = sh(["env", "-C", "site", "-u", "ANSIBLE_CONFIG", str(BIN / "ansible-playbook"), playbook,
              "-i", inventory, "--limit", "localhost", "-v"], timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    assert "Using %s as config file" % (REPO / "site" / "ansible.cfg") in out, out[:2000]
    assert VALIDATE_PLAY in out and PLAN_TASK in out, out[-5000:]
    assert recap_ok(out) and only_validate_ran(out), out[-5000:]
    # The inventories set no TP, PP or replicas: the recipe's max_tp plans them (Kimi-K2.5 on 16 Sparks: TP=16,
    # seed 000; MiMo-V2.5-Pro, max TP 8, on 16 Sparks: 2 replicas of TP=8 behind spark16's balancer).
    want = {("spark16", "deploy_mimo.yml"): (2, 8, 1), ("spark16", "deploy_kimi.yml"): (1, 16, 1),
            ("spark8", "deploy_mimo.yml"): (1, 8, 1), ("spark8", "deploy_kimi.yml"): (1, 8, 1)}[(inventory, playbook)]
    sizes = set(re.findall(r'"pipeline_parallel_size": (\d+), "replica_count": (\d+), .*?"sizes_from": "recipe", '
                           r'"tensor_parallel_size": (\d+)', out))
    assert sizes == {(str(want[2]), str(want[0]), str(want[1]))}, sizes


def test_installed_collection_runs_without_the_checkout(tmp_path):
    """Build the collection, install the tarball, run its playbook by FQCN with only the installed copy."""
    tarball, colls, installed, env = install_artifact(tmp_path)
    neutral = tmp_path / "ansible.cfg"

    with tarfile.open(tarball) as tf:
        names = tf.getnames()
    for banned in (".venv", ".sim", ".git", ".gitignore", ".ansible", ".pytest_cache", ".ruff_cache", "collections",
                   "tests/sim", "benchmarks"):
        hits = [n for n in names if n == banned or n.startswith(banned + "/")]
        assert not hits, "%s in the tarball: %s" % (banned, hits[:5])
    assert not [n for n in names if n.endswith(".tar.gz")]
    assert "playbooks/deploy_mimo.yml" in names and "recipes/mimo-v2.5-pro.yml" in names

    assert (installed / "MANIFEST.json").is_file()

    res = sh([*env, str(BIN / "ansible-galaxy"), "collection", "list", "sparkfleet.vllm"], timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert str(colls / "ansible_collections") in res.stdout, res.stdout
    assert str(REPO / "collections") not in res.stdout, res.stdout

    res = sh([*env, str(BIN / "ansible-playbook"), "sparkfleet.vllm.deploy_mimo", "-i", str(REPO / "site" / "spark16"),
              "--limit", "localhost", "-v"], timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    assert "Using %s as config file" % neutral in out, out[:2000]
    assert VALIDATE_PLAY in out and PLAN_TASK in out, out[-5000:]
    assert recap_ok(out) and only_validate_ran(out), out[-5000:]
    # The validate role that ran is the installed one (-v prints its path), never the checkout's link.
    assert "path: %s" % (installed / "roles" / "validate") in out or \
        '"path": "%s"' % (installed / "roles" / "validate") in out, out[:4000]
    assert str(REPO / "collections") not in out
    assert os.path.realpath(REPO) + "/roles" not in out
