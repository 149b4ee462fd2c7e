"""The boot follower reads each log line once, however the log grows and however often it is polled."""

import datetime
import json
import time

import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _docker, memory, vllm_logs
from ansible_collections.sparkfleet.vllm.plugins.modules import vllm_boot

EPOCH = datetime.datetime(2026, 12, 3, 18, 0, 0, tzinfo=datetime.timezone.utc)


def stamp(ns):
    """Docker's form: RFC 3339 with nanoseconds, trailing zeros trimmed."""
    whole = (EPOCH + datetime.timedelta(seconds=ns // 10**9)).strftime("%Y-%m-%dT%H:%M:%S")
    frac = ("%09d" % (ns % 10**9)).rstrip("0")
    return whole + ("." + frac if frac else "") + "Z"


class DockerLog:
    """A container's log as the engine serves it: ``since`` in whole seconds, inclusive; every read counted."""

    def __init__(self):
        self.lines, self.served = [], 0
        self.id, self.status = "c0ffee", "running"
        self.attrs = {"State": {"StartedAt": stamp(0)}}

    def write(self, ns, text):
        self.lines.append((ns, text))

    def reload(self):
        pass

    def stop(self, timeout=10):
        self.status = "exited"

    def logs(self, stdout, stderr, timestamps, since=None):
        assert stdout and stderr and timestamps
        first = (since - EPOCH.timestamp()) * 10**9 if since else 0
        out = ["%s %s\n" % (stamp(ns), text) for ns, text in self.lines if ns >= first]
        self.served += len(out)
        return "".join(out).encode()


def read_all(log, polls_at, writes):
    """Apply ``writes`` (ns, text) one by one, polling after the indices in ``polls_at``; every text read."""
    cursor, got = None, []
    for i, (ns, text) in enumerate(writes):
        log.write(ns, text)
        if i in polls_at:
            entries, cursor = _docker.logs_after(log, json.loads(json.dumps(cursor)))
            got += [text for _ns, text in entries]
    entries, cursor = _docker.logs_after(log, cursor)
    return got + [text for _ns, text in entries]


def test_every_line_once_across_polls_even_within_one_second_and_one_nanosecond():
    log, t, writes = DockerLog(), 5 * 10**9, []
    for i in range(300):
        writes.append((t + i * 10**8, "line %d" % i))  # ten lines a second
        if i % 7 == 0:
            writes.append((t + i * 10**8, "twin %d" % i))  # a second line with the very same timestamp
    got = read_all(log, set(range(0, len(writes), 4)), writes)
    assert got == ["%s\n" % text for _ns, text in writes]
    # Each poll asked only for the last two seconds again (20 lines), never for the whole log (which would
    # serve 15,049 lines over these 86 polls).
    assert log.served < len(writes) + 86 * 25


def test_stdout_and_stderr_stored_out_of_timestamp_order_are_read_once_each():
    """Docker stamps each stream's lines itself; a stderr line may be stored after a later-stamped one."""
    t = 9 * 10**9
    # c and g are stored after a line stamped in the next second; e within the same second.
    writes = [(t, "a"), (t + 11 * 10**8, "b"), (t + 95 * 10**7, "c (stderr, stamped earlier)"), (t + 14 * 10**8, "d"),
              (t + 12 * 10**8, "e (stderr)"), (t + 30 * 10**8, "f"), (t + 29 * 10**8, "g (stderr)")]
    for polls in ({0}, {1}, {2}, {1, 3}, {0, 1, 2, 3, 4, 5, 6}, {4}, {5}):
        got = read_all(DockerLog(), polls, writes)
        assert got == ["%s\n" % text for _ns, text in writes], polls


def test_a_carriage_return_stays_inside_its_line():
    """tqdm bars come as "(EngineCore pid=1) \rLoading ... 0/2": one entry, read once, never split."""
    writes = [(10**9, "(EngineCore pid=1) \rLoading safetensors checkpoint shards:   0% Completed | 0/2"),
              (2 * 10**9, "(EngineCore pid=1) \rLoading safetensors checkpoint shards:  50% Completed | 1/2")]
    got = read_all(DockerLog(), {0}, writes)
    assert got == ["%s\n" % text for _ns, text in writes]
    facts = vllm_logs.LogReader().feed("".join(got)).facts()
    assert facts["stage"] == "weights loading, 1 of 2 shards"


def test_a_poll_reports_the_stage_and_the_state_it_keeps_resumes_the_next():
    log = DockerLog()
    log.write(1 * 10**9, "INFO 12-03 18:00:01 [api_server.py:1] vLLM server version 0.21.0, serving model /m")
    log.write(2 * 10**9, "(EngineCore_DP0 pid=1) INFO 12-03 18:00:02 [ray_utils.py:1] Using the existing placement "
                         "group")
    log.write(3 * 10**9, "(RayWorkerProc pid=7, ip=10.0.0.2) Loading safetensors checkpoint shards:  25% Completed | "
                         "1/4 [00:01<00:00]")
    watchdog = memory.Watchdog(0, 15)
    follower = vllm_boot.Follower(log, {}, watchdog, time.time())
    facts = vllm_boot.poll(follower, None, poll_seconds=0, deadline_s=100, interval=0)
    assert facts["stage"] == "weights loading, 1 of 4 shards"
    saved = json.loads(json.dumps(follower.saved()))
    log.write(4 * 10**9, "(EngineCore_DP0 pid=1) INFO 12-03 18:00:04 [default_loader.py:2] Loading weights took 3.00 "
                         "seconds")
    log.write(5 * 10**9, "(APIServer pid=1) INFO:     Application startup complete.")
    served = log.served
    again = vllm_boot.Follower(log, saved, memory.Watchdog(0, 15), time.time())
    facts = vllm_boot.poll(again, "weights loading, 1 of 4 shards", poll_seconds=0, deadline_s=100, interval=0)
    assert facts["stage"] == "serving" and facts["weights_loaded_s"] == 3.0
    assert facts == vllm_logs.parse("\n".join(text for _ns, text in log.lines) + "\n")
    assert log.served - served <= 4  # the second poll read the new lines and the two seconds before, not the log


def test_a_container_from_another_boot_starts_a_fresh_reader():
    log = DockerLog()
    log.write(1 * 10**9, "INFO:     Application startup complete.")
    older = vllm_logs.LogReader().feed("INFO: Application startup complete.\n").state()
    saved = {"id": "an-older-container", "reader": older, "cursor": {"ns": 10**18, "same": 1}}
    follower = vllm_boot.Follower(log, saved, memory.Watchdog(0, 15), 0)
    assert follower.cursor is None and follower.reader.facts()["phases"] == []


@pytest.mark.parametrize("line, status, reason", [
    ("(EngineCore_DP0 pid=1) ERROR 12-03 18:00:01 [core.py:1] EngineCore failed to start.", "running",
     "EngineCore failed to start"),
    ("INFO 12-03 18:00:01 [api_server.py:1] vLLM server version 0.34.0, serving model /m", "exited",
     "the serve container is exited"),
])
def test_an_engine_failure_or_an_exited_container_stops_the_follow(line, status, reason):
    log = DockerLog()
    log.write(1 * 10**9, line)
    log.status = status
    follower = vllm_boot.Follower(log, {}, memory.Watchdog(0, 15), time.time())
    with pytest.raises(vllm_boot.WaitAborted, match=reason):
        vllm_boot.poll(follower, None, poll_seconds=0, deadline_s=100, interval=0)


def test_the_startup_timeout_counts_from_the_container_start():
    log = DockerLog()
    log.write(1 * 10**9, "INFO 12-03 18:00:01 [api_server.py:1] vLLM server version 0.21.0, serving model /m")
    follower = vllm_boot.Follower(log, {}, memory.Watchdog(0, 15), started=0)  # started at the epoch: long ago
    with pytest.raises(vllm_boot.WaitAborted, match=r"not serving 7200 s after the container started .*engine "
                                                    r"starting.*the boot was stopped"):
        vllm_boot.poll(follower, None, poll_seconds=0, deadline_s=7200, interval=0)
    # Stopped, so that the next deploy starts a fresh boot instead of finding this one and failing again.
    assert log.status == "exited"
