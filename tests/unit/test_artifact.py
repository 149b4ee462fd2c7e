"""The built collection (`ansible-galaxy collection build`): only the collection's content, and it works
where it is installed on its own: ansible-doc renders every module, every playbook passes a syntax check
by its FQCN."""

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
PLAYBOOKS = sorted(p.stem for p in (REPO / "playbooks").glob("*.yml"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("artifact")
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp / "none.cfg"), ANSIBLE_COLLECTIONS_PATH=str(tmp / "ac"),
               ANSIBLE_LOCAL_TEMP=str(tmp / "tmp"), ANSIBLE_HOME=str(tmp / "home"))
    (tmp / "none.cfg").write_text("[defaults]\n")
    subprocess.run([BIN / "ansible-galaxy", "collection", "build", "--output-path", tmp, REPO], cwd=tmp, env=env,
                   check=True, capture_output=True)
    (tarball,) = tmp.glob("sparkfleet-vllm-*.tar.gz")
    subprocess.run([BIN / "ansible-galaxy", "collection", "install", "--offline", "-p", tmp / "ac", tarball],
                   cwd=tmp, env=env, check=True, capture_output=True)
    return tmp, tarball, env


def test_the_artifact_holds_only_the_collections_content(installed):
    tarball = installed[1]
    with tarfile.open(tarball) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        texts = [tar.extractfile(m).read() for m in members if m.isfile()]
    for prefix in ("tests/", "extensions/", "inventory/local", "site/local", ".gpu", "collections/", ".venv"):
        assert not [n for n in names if n.startswith(prefix)], prefix
    assert not {"ansible.cfg", "Makefile", "requirements-dev.txt"} & set(names)
    assert not [t for t in texts if b"StrictHostKeyChecking=no" in t or b"host_key_checking = False" in t]
    assert not [m.name for m in members if m.issym() and not m.linkname.startswith("../")]
    for needed in ("galaxy.yml", "README.md", "LICENSE", "meta/runtime.yml", "recipes/kimi-k2.5.yml",
                   "playbooks/deploy_mimo.yml", "site/spark16/hosts.yml", "inventory/spark16/hosts.yml"):
        assert needed in names or (needed == "galaxy.yml" and "MANIFEST.json" in names), needed


def test_ansible_doc_renders_every_module_from_the_installed_copy(installed):
    tmp, env = installed[0], installed[2]
    res = subprocess.run([BIN / "ansible-doc", "-t", "module", "--json"] + ["sparkfleet.vllm.%s" % m for m in MODULES],
                         cwd=tmp, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    import json

    docs = json.loads(res.stdout)
    assert sorted(docs) == ["sparkfleet.vllm.%s" % m for m in MODULES]
    for name, doc in docs.items():
        assert doc["doc"]["attributes"]["check_mode"]["description"], name  # from the attributes fragment
        assert doc["examples"] and doc["return"] is not None, name


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_every_playbook_passes_a_syntax_check_by_fqcn(installed, playbook):
    tmp, env = installed[0], installed[2]
    res = subprocess.run([BIN / "ansible-playbook", "--syntax-check", "-i", "localhost,",
                          "sparkfleet.vllm.%s" % playbook], cwd=tmp, env=env, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
