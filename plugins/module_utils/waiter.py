# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Waiting done one way everywhere: a probe, a pure predicate, a clock and a deadline.

The predicate turns one observation into ``(done, description)``. The waiter never decides anything by
itself; on timeout its error says what the last observation was, so a user sees *why* it gave up.
"""

from __future__ import annotations

import time


class Clock:
    """Real time. Tests pass a fake with the same two methods."""

    def monotonic(self):
        return time.monotonic()

    def sleep(self, seconds):
        time.sleep(seconds)


class WaitTimeout(Exception):
    def __init__(self, what, timeout, last):
        self.what, self.timeout, self.last = what, timeout, last
        super().__init__("%s: not ready after %ss; last seen: %s" % (what, int(timeout), last))


class WaitAborted(Exception):
    """The predicate saw a state that cannot become ready (a crashed server, a dead node)."""


def wait_for(what, probe, predicate, timeout, interval, clock=None):
    """Call ``probe`` until ``predicate(observation)`` says done; return (observation, description, elapsed).

    ``predicate`` may raise WaitAborted to stop early. A probe that raises is an observation too: its
    exception text is recorded and the wait goes on (a server that is still starting refuses connections).
    """
    clock = clock or Clock()
    start = clock.monotonic()
    last = "nothing observed yet"
    while True:
        try:
            observation = probe()
        except WaitAborted:
            raise
        except Exception as exc:  # noqa: BLE001 (a failing probe is "not ready yet")
            observation, done, last = None, False, "%s: %s" % (type(exc).__name__, exc)
        else:
            done, last = predicate(observation)
        elapsed = clock.monotonic() - start
        if done:
            return observation, last, elapsed
        if elapsed >= timeout:
            raise WaitTimeout(what, timeout, last)
        clock.sleep(min(interval, max(0.0, timeout - elapsed)))
