import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.waiter import WaitAborted, WaitTimeout, wait_for


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, s):
        self.now += s


def test_returns_when_ready():
    seen = iter([1, 2, 3, 4])
    obs, desc, elapsed = wait_for("x", lambda: next(seen), lambda o: (o >= 3, "at %d" % o), 100, 5, FakeClock())
    assert obs == 3 and desc == "at 3" and elapsed == 10


def test_timeout_says_what_was_last_seen():
    with pytest.raises(WaitTimeout) as err:
        wait_for("Ray gate", lambda: 2, lambda o: (False, "2/4 nodes"), 30, 10, FakeClock())
    assert "Ray gate: not ready after 30s; last seen: 2/4 nodes" == str(err.value)


def test_probe_errors_are_not_ready_yet():
    calls = {"n": 0}

    def probe():
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionRefusedError("refused")
        return "up"

    assert wait_for("http", probe, lambda o: (True, o), 60, 1, FakeClock())[0] == "up"


def test_abort_stops_at_once():
    def predicate(_unused):
        raise WaitAborted("container exited")

    clock = FakeClock()
    with pytest.raises(WaitAborted):
        wait_for("serve", lambda: 1, predicate, 600, 5, clock)
    assert clock.now == 0
