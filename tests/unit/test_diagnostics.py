"""Diagnostics and teardown's purge: what reaches the tarball, what is redacted, what is removed."""

import os
import sys
import types

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import redact
from ansible_collections.sparkfleet.vllm.plugins.modules import diagnostics_bundle, node_diagnostics, node_purge

KEY = "sk-canary-0123456789abcdef0123456789abcdef"
TOKEN = "ray-canary-fedcba9876543210fedcba9876543210"  # noqa: S105 (a canary, looked for in the output)


def test_the_node_redacts_every_secret_value_and_counts_it():
    files = {"logs/sparkfleet-vllm.log": "auth %s ok\nagain %s\n" % (KEY, KEY), "ray-status.txt": "token=" + TOKEN,
             "memory.txt": "MemTotal: 1 kB\n"}
    clean, count = redact.texts(files, [KEY, TOKEN])
    assert count == 3
    assert clean["memory.txt"] == files["memory.txt"]
    assert not [name for name, text in clean.items() if KEY in text or TOKEN in text]
    assert clean["logs/sparkfleet-vllm.log"] == "auth <redacted> ok\nagain <redacted>\n"


def test_the_serve_env_keeps_its_settings_and_hides_values_named_as_secrets():
    env = node_diagnostics._env(["VLLM_MOE_BACKEND=triton", "HF_TOKEN=hf_abc", "RAY_AUTH_TOKEN=t", "API_KEY=k",
                                 "AWS_SECRET_ACCESS_KEY=s", "DB_PASSWORD=p", "NCCL_DEBUG=INFO", "EMPTY="])
    assert env == ["VLLM_MOE_BACKEND=triton", "HF_TOKEN=<redacted>", "RAY_AUTH_TOKEN=<redacted>", "API_KEY=<redacted>",
                   "AWS_SECRET_ACCESS_KEY=<redacted>", "DB_PASSWORD=<redacted>", "NCCL_DEBUG=INFO", "EMPTY="]


def test_the_bundle_has_a_directory_per_node_names_the_silent_ones_and_redacts_again():
    nodes = {
        "spark-00": {"changed": False, "files": {"ray-status.txt": "Active: 2 nodes", "logs/v.log": "key " + KEY}},
        "spark-01": {"unreachable": True, "msg": "Failed to connect to the host via ssh"},
        "spark-02": {"failed": True, "msg": "node_diagnostics: the Docker engine did not answer"},
        "spark-03": {},
    }
    members, missing = diagnostics_bundle.build(nodes, '{"failures": ["x %s"]}' % TOKEN, [KEY, TOKEN], "20261206T000000Z")
    root = "sparkfleet-diagnostics-20261206T000000Z/"
    assert sorted(members) == [root + n for n in ("README.txt", "report.json", "spark-00/logs/v.log",
                                                  "spark-00/ray-status.txt")]
    assert missing == {"spark-01": "Failed to connect to the host via ssh",
                       "spark-02": "node_diagnostics: the Docker engine did not answer",
                       "spark-03": "no diagnostics returned"}
    assert not [n for n, data in members.items() if KEY.encode() in data or TOKEN.encode() in data]
    assert members[root + "spark-00/logs/v.log"] == b"key <redacted>"
    readme = members[root + "README.txt"].decode()
    assert "spark-01: nothing collected (Failed to connect to the host via ssh)" in readme
    assert "spark-00: logs/v.log, ray-status.txt" in readme


@pytest.mark.parametrize("name", ["../../etc/cron.d/x", "/etc/passwd", "a/../../b"])
def test_a_node_cannot_name_a_file_outside_its_directory(name):
    members, _missing = diagnostics_bundle.build({"spark-00": {"files": {name: "x", "ok.txt": "y"}}}, None, [], "T")
    assert sorted(members) == ["sparkfleet-diagnostics-T/README.txt", "sparkfleet-diagnostics-T/spark-00/ok.txt"]


def test_the_report_is_left_out_when_there_is_none():
    members, _missing = diagnostics_bundle.build({}, None, [], "T")
    assert sorted(members) == ["sparkfleet-diagnostics-T/README.txt"]


@pytest.mark.parametrize("repo", ["../etc", "org/../../x", "org", "/abs/path", "org/name/extra", ""])
def test_teardown_refuses_a_weights_name_that_is_not_a_repository_id(repo):
    with pytest.raises(ValueError, match="not a Hugging Face repository ID"):
        node_purge.cache_dir("/root/.cache/huggingface/hub", repo)


def test_teardown_removes_the_hub_cache_directory_of_the_named_model_only():
    assert node_purge.cache_dir("/hub", "festr2/MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8") == \
        "/hub/models--festr2--MiMo-V2.5-Pro-NVFP4-MXFP8-attn-TP8"


def test_teardown_takes_only_images_of_the_named_repositories():
    image = types.SimpleNamespace
    images = [image(tags=["sparkfleet/vllm:abc", "mine:1"]), image(tags=["sparkfleet/vllm-other:1"]),
              image(tags=["vllm/vllm-openai:v0.34.0"]), image(tags=[]), image(tags=["reg:5000/sparkfleet/vllm:x"])]
    doomed = node_purge.doomed_images(images, {"sparkfleet/vllm"})
    assert [tags for _image, tags in doomed] == [["sparkfleet/vllm:abc"]]


def test_a_failed_deploy_reruns_diagnose_with_the_runs_inventory_vars_and_vault(monkeypatch):
    from ansible import context
    from ansible.module_utils.common.collections import ImmutableDict

    from ansible_collections.sparkfleet.vllm.plugins.callback import report

    monkeypatch.setattr(context, "CLIARGS", ImmutableDict(
        inventory=("spark16",), extra_vars=("@vault.yml", "sparkfleet_api_key=%s" % KEY), remote_user="ops",
        private_key_file="/k", connection="ssh", vault_ids=("prod@prompt",), vault_password_files=("/p",),
        become=False, check=False))
    monkeypatch.setattr(sys, "argv", ["/venv/bin/ansible-playbook", "deploy_mimo.yml"])
    seen = {}

    def fake_run(argv, env, **kw):
        files = [a[1:] for a in argv if a.startswith("@/")]
        seen.update(argv=argv, env=env, files={f: (oct(os.stat(f).st_mode & 0o777), open(f).read()) for f in files})
        return types.SimpleNamespace(returncode=0, stdout="ok: sparkfleet diagnostics: /x/d-1.tar.gz\n", stderr="")

    monkeypatch.setattr(report.subprocess, "run", fake_run)
    shown = []
    callback = report.CallbackModule()
    callback._display = types.SimpleNamespace(display=shown.append, warning=shown.append)
    callback._diagnose("/r/report.json")
    (inline,) = seen["files"]  # the inline extra var reached the child in a 0600 file, not in its argv
    assert seen["files"][inline] == ("0o600", '{"sparkfleet_api_key": "%s"}' % KEY)
    assert not os.path.exists(inline)
    assert seen["argv"] == ["/venv/bin/ansible-playbook", "sparkfleet.vllm.diagnose", "-i", "spark16",
                            "-e", "@vault.yml", "-e", "@" + inline, "--private-key", "/k",
                            "-u", "ops", "-c", "ssh", "--vault-id", "prod@prompt", "--vault-password-file", "/p"]
    assert not [a for a in seen["argv"] if KEY in a]
    assert seen["env"]["SPARKFLEET_DIAGNOSE_ON_FAILURE"] == "0"
    assert seen["env"]["SPARKFLEET_DIAGNOSE_REPORT"] == "/r/report.json"
    assert shown[-1] == "sparkfleet diagnostics: /x/d-1.tar.gz"
