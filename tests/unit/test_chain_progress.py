"""A chain transfer's progress: the sender's file, and the poll that reports it, through its entry point."""

import json
import threading
import time

from module_runner import run

from ansible_collections.sparkfleet.vllm.plugins.module_utils.stream_chain import Progress, read_progress
from ansible_collections.sparkfleet.vllm.plugins.modules import chain_progress


def test_the_sender_file_is_rate_limited_atomic_and_per_session(tmp_path):
    path = str(tmp_path / "p.json")
    progress = Progress(path, "s1", total=4 << 20)
    for nbytes in range(1, 50):  # fifty updates within a second write the file once at most
        progress.update(nbytes << 10)
    assert read_progress(path, "s1")["state"] == "starting" and read_progress(path, "s0") is None
    progress.last = 0.0
    progress.update(2 << 20)
    doc = read_progress(path, "s1")
    assert doc["state"] == "running" and doc["bytes"] == 2 << 20 and doc["total"] == 4 << 20
    progress.finish({"bytes": 4 << 20, "sha256": "ab", "seconds": 2.0})
    assert read_progress(path, "s1")["result"]["sha256"] == "ab"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]  # no temporary file left


def test_a_running_transfer_is_reported_with_its_share_and_rate_then_its_end(tmp_path):
    path = str(tmp_path / "p.json")
    progress = Progress(path, "s1", total=8 << 30)
    progress.start -= 10
    progress.last = 0.0
    progress.update(2 << 30)
    rc, res = run(chain_progress, {"progress_file": path, "session": "s1", "what": "weights", "poll_seconds": 1})
    assert rc == 0 and res["done"] is False and res["bytes"] == 2 << 30
    assert res["progress"].startswith("weights: 2.00 of 8.00 GiB sent, 25%, ")
    assert 190 < res["mib_per_s"] < 210  # 2 GiB in about 10 s

    def finish():
        time.sleep(0.5)
        progress.finish({"bytes": 8 << 30, "sha256": "cd", "seconds": 11.0})

    threading.Thread(target=finish).start()
    started = time.monotonic()
    rc, res = run(chain_progress, {"progress_file": path, "session": "s1", "what": "weights", "poll_seconds": 20})
    assert rc == 0 and res["done"] is True and res["transfer"]["sha256"] == "cd"
    assert time.monotonic() - started < 10  # it returned when the transfer ended, not after its window


def test_a_failed_sender_fails_the_poll_with_its_own_message(tmp_path):
    path = str(tmp_path / "p.json")
    Progress(path, "s1").fail("10.0.0.2:29401 closed the stream after 1048576 bytes: Connection reset by peer")
    rc, res = run(chain_progress, {"progress_file": path, "session": "s1", "what": "image"})
    assert rc == 1 and res["msg"] == ("image transfer failed: 10.0.0.2:29401 closed the stream after 1048576 "
                                      "bytes: Connection reset by peer")


def test_a_stalled_or_never_started_sender_fails_the_poll(tmp_path):
    path = str(tmp_path / "p.json")
    progress = Progress(path, "s1")
    progress.last = 0.0
    progress.update(1 << 20)
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["updated"] -= 400
    (tmp_path / "p.json").write_text(json.dumps(doc))
    rc, res = run(chain_progress, {"progress_file": path, "session": "s1", "stall_seconds": 300})
    assert rc == 1 and "no byte moved for 400 s after 0.00 GiB" in res["msg"]
    rc, res = run(chain_progress, {"progress_file": str(tmp_path / "none.json"), "session": "s1",
                                   "stall_seconds": 0, "poll_seconds": 2})
    assert rc == 1 and "the sender never started" in res["msg"]
