"""A background step's progress: the file a sender, a receiver or the image build keeps, and the poll that
reports it, through the poll module's entry point."""

import json
import subprocess
import sys
import threading
import time

from module_runner import run

from ansible_collections.sparkfleet.vllm.plugins.module_utils.progress import Progress, describe, read_progress, redact
from ansible_collections.sparkfleet.vllm.plugins.modules import job_progress


def test_the_file_is_rate_limited_atomic_and_per_session(tmp_path):
    path = str(tmp_path / "p.json")
    progress = Progress(path, "s1", total=4 << 20, phase="sent")
    for nbytes in range(1, 50):  # fifty updates within a second write the file once at most
        progress.update(nbytes << 10)
    assert read_progress(path, "s1")["state"] == "starting" and read_progress(path, "s0") is None
    progress.last = 0.0
    progress.update(2 << 20)
    doc = read_progress(path, "s1")
    assert doc["state"] == "running" and doc["done"] == 2 << 20 and doc["total"] == 4 << 20
    progress.finish({"bytes": 4 << 20, "sha256": "ab", "seconds": 2.0})
    assert read_progress(path, "s1")["result"]["sha256"] == "ab"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]  # no temporary file left


def test_a_new_phase_is_written_at_once_and_counts_from_its_own_start(tmp_path):
    path = str(tmp_path / "p.json")
    progress = Progress(path, "s1", total=8 << 30, phase="received")
    progress.update(8 << 30)  # within the first second: not written
    progress.update(0, phase="verified")  # a phase change is written at once
    doc = read_progress(path, "s1")
    assert doc["phase"] == "verified" and doc["done"] == 0 and doc["phase_started"] >= doc["started"]
    doc.update(done=2 << 30, phase_started=doc["updated"] - 4, seconds=30)
    assert describe("weights", doc).startswith("weights: 2.00 of 8.00 GiB verified, 25%, 512.0 MiB/s")


def test_build_steps_read_as_steps_with_their_instruction():
    doc = {"state": "running", "unit": "steps", "done": 4, "total": 9, "phase": "building", "seconds": 38.2,
           "note": "RUN pip install ray==2.60.0 | Collecting ray==2.60.0", "updated": 0, "started": 0}
    assert describe("image build", doc) == ("image build: step 4 of 9, RUN pip install ray==2.60.0 | "
                                            "Collecting ray==2.60.0 (38 s)")
    assert describe("image build", dict(doc, done=0, note="")) == "image build: building (38 s)"


def test_a_running_transfer_is_reported_with_its_share_and_rate_then_its_end(tmp_path):
    path = str(tmp_path / "p.json")
    progress = Progress(path, "s1", total=8 << 30, phase="sent")
    progress.start -= 10
    progress.phase_start -= 10
    progress.last = 0.0
    progress.update(2 << 30)
    rc, res = run(job_progress, {"progress_file": path, "session": "s1", "what": "weights", "poll_seconds": 1})
    assert rc == 0 and res["done"] is False and res["amount"] == 2 << 30 and res["phase"] == "sent"
    assert res["progress"].startswith("weights: 2.00 of 8.00 GiB sent, 25%, ")
    assert 170 < res["mib_per_s"] < 210  # 2 GiB in about 10 to 11 s

    def finish():
        time.sleep(0.5)
        progress.finish({"bytes": 8 << 30, "sha256": "cd", "seconds": 11.0})

    threading.Thread(target=finish).start()
    started = time.monotonic()
    rc, res = run(job_progress, {"progress_file": path, "session": "s1", "what": "weights", "poll_seconds": 20})
    assert rc == 0 and res["done"] is True and res["transfer"]["sha256"] == "cd"
    assert time.monotonic() - started < 10  # it returned when the step ended, not after its window


def test_a_receiver_result_holds_its_transfer(tmp_path):
    path = str(tmp_path / "p.json")
    Progress(path, "s1", phase="verified").finish({"published": 3, "transfer": {"bytes": 5, "sha256": "ef"}})
    rc, res = run(job_progress, {"progress_file": path, "session": "s1", "what": "weights"})
    assert rc == 0 and res["phase"] == "verified" and res["transfer"]["sha256"] == "ef"
    assert res["result"]["published"] == 3


def test_a_failed_step_fails_the_poll_with_its_own_message(tmp_path):
    path = str(tmp_path / "p.json")
    Progress(path, "s1").fail("10.0.0.2:29401 closed the stream after 1048576 bytes: Connection reset by peer")
    rc, res = run(job_progress, {"progress_file": path, "session": "s1", "what": "image"})
    assert rc == 1 and res["msg"] == ("image failed: 10.0.0.2:29401 closed the stream after 1048576 "
                                      "bytes: Connection reset by peer")


def test_a_stalled_step_fails_the_poll_but_waiting_for_a_peer_does_not(tmp_path):
    path = str(tmp_path / "p.json")
    progress = Progress(path, "s1", phase="sent")
    progress.last = 0.0
    progress.update(1 << 20)
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["moved"] -= 400
    doc["updated"] -= 1  # written a second ago, but nothing moved for 400 s: a heartbeat is not progress
    (tmp_path / "p.json").write_text(json.dumps(doc))
    rc, res = run(job_progress, {"progress_file": path, "session": "s1", "stall_seconds": 300})
    assert rc == 1 and "no progress for 400 s; last seen: transfer: 0.00 GiB sent" in res["msg"]
    # A receiver waiting 400 s for its stream (the sender hashes first) is bounded by its own timeout.
    doc.update(phase="waiting for the stream on port 29401", done=0)
    (tmp_path / "p.json").write_text(json.dumps(doc))
    rc, res = run(job_progress, {"progress_file": path, "session": "s1", "stall_seconds": 300, "poll_seconds": 1})
    assert rc == 0 and res["done"] is False and res["progress"].startswith("transfer: waiting for the stream")


def test_a_step_that_never_started_fails_once_start_seconds_passed_since_its_launch_not_per_call(tmp_path):
    args = {"progress_file": str(tmp_path / "none.json"), "session": "s1", "poll_seconds": 1, "start_seconds": 30}
    rc, res = run(job_progress, dict(args, started_at=time.time() - 10))
    assert rc == 0 and res["done"] is False  # 11 s after the launch: it may still start
    rc, res = run(job_progress, dict(args, started_at=time.time() - 40))
    assert rc == 1 and "s after the step was launched: it never started" in res["msg"]


def test_a_file_an_earlier_run_left_is_not_read_as_this_runs(tmp_path):
    path = str(tmp_path / "p.json")
    old = Progress(path, "img-1", phase="sent")
    old.start -= 3600
    old.finish({"bytes": 5, "sha256": "old", "seconds": 1.0})  # the same session (image ID), an hour ago
    args = {"progress_file": path, "session": "img-1", "poll_seconds": 1}
    rc, res = run(job_progress, dict(args, started_at=time.time() - 2))
    assert rc == 0 and res["done"] is False and res["progress"] == "transfer: waiting for it to start"
    rc, res = run(job_progress, args)  # without started_at only the session tells runs apart
    assert rc == 0 and res["done"] is True


def test_a_step_whose_process_died_without_a_result_fails_at_once(tmp_path):
    path = str(tmp_path / "p.json")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    Progress(path, "s1", phase="sent")
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["pid"] = child.pid
    (tmp_path / "p.json").write_text(json.dumps(doc))
    rc, res = run(job_progress, {"progress_file": path, "session": "s1", "poll_seconds": 1})
    assert rc == 0 and res["done"] is False  # alive: still running
    child.kill()
    child.wait()
    started = time.monotonic()
    rc, res = run(job_progress, {"progress_file": path, "session": "s1", "poll_seconds": 20})
    assert rc == 1 and "its process (pid %d) ended without a result" % child.pid in res["msg"]
    assert time.monotonic() - started < 5


def test_the_file_is_private_and_never_written_through_a_link(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    path = tmp_path / "dir" / "p.json"
    Progress(str(path), "s1")
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    path.unlink()
    path.symlink_to(target)
    Progress(str(path), "s2")  # the link itself is replaced; its target is untouched
    assert target.read_text() == "keep" and not path.is_symlink()


def test_build_output_is_redacted():
    assert redact("Collecting x from https://bob:hunter2@pypi.example/simple HF_TOKEN=hf_abc api_key: s3") == (
        "Collecting x from https://<redacted>@pypi.example/simple HF_TOKEN=<redacted> api_key: <redacted>")


def test_output_of_a_long_build_step_counts_as_progress(tmp_path):
    path = str(tmp_path / "p.json")
    progress = Progress(path, "b1", unit="steps", phase="building")
    progress.update(3, total=9, note="RUN pip install ray")
    moved = progress.moved
    time.sleep(0.01)
    progress.update(3, note="RUN pip install ray | Collecting ray", alive=True)
    assert progress.moved > moved
    moved = progress.moved
    progress.update(3)
    assert progress.moved == moved
