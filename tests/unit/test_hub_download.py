"""The real huggingface_hub client against the Hub stand-in (tests/sim/hub_server.py): a pinned snapshot
downloads into the cache layout the weights chain ships and verifies; a link cut mid-file fails the run
and the next run resumes it; a refused token, an unknown revision and a full disk are named, and the
token is never in a message."""

import io
import os
import pathlib

import make_checkpoint
import pytest
from hub_server import HubServer

from ansible_collections.sparkfleet.vllm.plugins.module_utils import checkpoint, hub_download

TOKEN = "hf_canary_" + "t" * 30


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-origin")
    info = make_checkpoint.write_checkpoint(root, "mimo", {"layers": 4, "shards": 4})
    server = HubServer(str(root), token=TOKEN).start()
    yield server, info
    server.stop()


@pytest.fixture(autouse=True)
def quiet_env(monkeypatch, tmp_path):
    # The client must find no token, cache or offline switch of the machine running the tests.
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT", "HF_HOME", "HF_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


def fetch(server, info, dest, token=TOKEN, revision=None, report=None):
    return hub_download.download(str(dest), info["repo_id"], revision or info["revision"], endpoint=server.url,
                                 token=token, report=report)


def test_a_pinned_snapshot_downloads_into_the_layout_the_chain_verifies(hub, tmp_path):
    server, info = hub
    seen = []
    path = fetch(server, info, tmp_path / "cache", report=lambda done, total: seen.append((done, total)))
    assert path == checkpoint.snapshot_dir(str(tmp_path / "cache"), info["repo_id"], info["revision"])
    report = checkpoint.verify_snapshot(str(tmp_path / "cache"), info["repo_id"], info["revision"])
    assert report["ok"], report["problems"]
    assert report["files"] == info["files"]  # the same blob names: the Hub's etags are the cache's names
    assert seen and seen[-1][0] == seen[-1][1] == report["total_bytes"]
    assert {c for c, p in server.requests} <= {"GET", "HEAD"}


def test_a_link_cut_mid_file_fails_and_the_next_run_resumes_it(hub, tmp_path, monkeypatch):
    server, info = hub
    monkeypatch.setattr(hub_download.time, "sleep", lambda _s: None, raising=False)
    sdir = checkpoint.snapshot_dir(str(server.hub_dir), info["repo_id"], info["revision"])
    total = sum(os.path.getsize(os.path.join(sdir, f)) for f in info["files"])
    server.bytes_served, server.cut_after = 0, total // 3
    try:
        with pytest.raises(hub_download.DownloadError) as err:
            fetch(server, info, tmp_path / "cache")
    finally:
        server.down = False
    assert "the next run resumes" in str(err.value) and TOKEN not in str(err.value)
    first = server.bytes_served
    assert 0 < first < total
    # huggingface_hub keeps every file it completed; the one cut is fetched again whole (it resumes within
    # a run, by Range requests, but not a file a failed run left behind).
    rdir = checkpoint.repo_dir(str(tmp_path / "cache"), info["repo_id"])
    kept = {b: os.path.getsize(os.path.join(rdir, "blobs", b)) for b in os.listdir(os.path.join(rdir, "blobs"))
            if b in set(info["files"].values())}
    assert kept and len(kept) < len(set(info["files"].values()))
    server.bytes_served = 0
    fetch(server, info, tmp_path / "cache")
    assert checkpoint.verify_snapshot(str(tmp_path / "cache"), info["repo_id"], info["revision"])["ok"]
    assert server.bytes_served == total - sum(kept.values()), (server.bytes_served, kept, total)


@pytest.mark.parametrize("case, expect", [
    ("no token", "it is private and no token was given"),
    ("wrong token", "the token was refused"),
    ("unknown revision", "has no revision " + "0" * 40),
    ("unknown repo", "was not found on"),
])
def test_a_refusal_is_named_and_the_token_is_never_shown(hub, tmp_path, case, expect):
    server, info = hub
    kw = {"no token": {"token": ""}, "wrong token": {"token": "hf_wrong_" + "w" * 30},
          "unknown revision": {"revision": "0" * 40}, "unknown repo": {}}[case]
    if case == "unknown repo":
        info = dict(info, repo_id="sparkfleet-sim/absent")
    with pytest.raises(hub_download.DownloadError) as err:
        fetch(server, info, tmp_path / "cache", **kw)
    assert expect in str(err.value), str(err.value)
    assert TOKEN not in str(err.value) and "hf_wrong_" not in str(err.value)


def test_a_full_disk_is_named(hub, tmp_path, monkeypatch):
    server, info = hub
    real_open = io.open

    def no_room(path, mode="r", *a, **k):
        if str(path).endswith(".incomplete") and "w" in mode:
            raise OSError(28, "No space left on device")
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(io, "open", no_room)
    monkeypatch.setattr(pathlib.Path, "open", lambda self, mode="r", *a, **k: no_room(str(self), mode, *a, **k))
    with pytest.raises(hub_download.DownloadError) as err:
        fetch(server, info, tmp_path / "cache")
    assert "the disk under %s is full" % (tmp_path / "cache") in str(err.value), str(err.value)


def test_the_module_plans_downloads_and_then_changes_nothing(hub, tmp_path):
    from module_runner import run

    from ansible_collections.sparkfleet.vllm.plugins.modules import weights_download

    server, info = hub
    args = {"hub_dir": str(tmp_path / "cache"), "repo_id": info["repo_id"], "revision": info["revision"],
            "endpoint": server.url, "token": TOKEN, "progress_file": str(tmp_path / "progress.json")}
    rc, plan = run(weights_download, dict(args, plan_only=True))
    assert rc == 0 and not plan["changed"] and plan["files"] == len(info["files"]) == len(plan["missing"])
    assert plan["missing_bytes"] == plan["total_bytes"] > 0
    rc, res = run(weights_download, args)
    assert rc == 0 and res["changed"] and res["missing_bytes"] == plan["total_bytes"], res
    assert checkpoint.verify_snapshot(str(tmp_path / "cache"), info["repo_id"], info["revision"])["ok"]
    rc, again = run(weights_download, args)
    assert rc == 0 and not again["changed"] and again["missing"] == []
    assert TOKEN not in repr(res) + repr(plan) + (tmp_path / "progress.json").read_text()
    rc, bad = run(weights_download, dict(args, token="hf_wrong_" + "w" * 30, hub_dir=str(tmp_path / "other")))
    assert rc == 1 and "the token was refused" in bad["msg"] and "hf_wrong_" not in bad["msg"], bad


def test_the_token_is_not_sent_to_another_origin(monkeypatch):
    class Page:
        def __init__(self):
            self.headers = {"Link": '<http://elsewhere.example/api/models/o/n/tree/x?cursor=2>; rel="next"'}

        def read(self):
            return b"[]"

    seen = []
    monkeypatch.setattr(hub_download, "open_url", lambda url, **kw: seen.append((url, kw)) or Page())
    with pytest.raises(hub_download.DownloadError, match="at another origin"):
        hub_download.hub_listing("https://hub.example", "o/n", "x" * 40, token=TOKEN)
    assert len(seen) == 1 and seen[0][1]["follow_redirects"] == "none"
