# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""The progress of a long step that runs in the background on a node, kept in a small JSON file.

A module started with ``async`` (a transfer's sender or receiver, the image build) writes the file; the
``job_progress`` module reads it on the same node in polls of a few seconds, so the play prints the step's
phase, amount and rate while it runs. Ansible's own ``async_status`` only says "not finished" (it reads
the job's final result, nothing in between), hence this file.

Document: {session, pid, state (starting|running|done|failed), phase, done, total, unit (bytes|steps),
note, started, phase_started, moved, seconds, updated, error, result}. ``moved`` is the last time ``done``
grew, so a poll can tell a stalled step from a slow one; ``pid`` lets it tell a step that died without a
word (killed, or an uncaught error) from one that is still running.

The file may name hosts and show a build's output, so its directory is 0700 and the file 0600, written
without following links (the default directory is under /var/tmp).
"""

from __future__ import annotations

import json
import os
import re
import time

# The phases that count bytes; any other phase is shown by its name alone.
COUNTING = ("sent", "received", "verified")


class Progress:
    """Writes are atomic (temporary file, then rename) and at most one a second within a phase, so a reader
    never sees half a file and a fast stream is not slowed by its own reporting. ``path`` None reports
    nothing."""

    def __init__(self, path, session, total=None, unit="bytes", phase="", clock=time):
        self.path, self.session, self.clock = path, session, clock
        self.total, self.unit, self.phase, self.note = total, unit, phase, ""
        self.start = self.phase_start = self.moved = clock.time()
        self.done = 0
        self.last = 0.0
        self._write("starting")

    def _write(self, state, **extra):
        if not self.path:
            return
        now = self.clock.time()
        doc = dict(session=self.session, pid=os.getpid(), state=state, phase=self.phase, done=self.done,
                   total=self.total, unit=self.unit, note=self.note, started=self.start,
                   phase_started=self.phase_start, moved=self.moved, seconds=round(now - self.start, 3),
                   updated=now, **extra)
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
        tmp = "%s.%d.tmp" % (self.path, os.getpid())
        if os.path.lexists(tmp):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, self.path)
        self.last = now

    def update(self, done, phase=None, total=None, note=None, alive=False):
        """Record ``done`` (bytes or steps) of the current phase; a new ``phase`` starts counting again.
        ``alive`` counts as progress although ``done`` stays (a build step that prints output)."""
        now = self.clock.time()
        new_phase = phase is not None and phase != self.phase
        if new_phase:
            self.phase, self.phase_start = phase, now
        if total is not None:
            self.total = total
        if note is not None:
            self.note = note
        if done != self.done or new_phase or alive:
            self.moved = now
        self.done = done
        if self.path and (new_phase or now - self.last >= 1.0):
            self._write("running")

    def finish(self, result):
        self._write("done", result=result)

    def fail(self, message):
        self._write("failed", error=message)


# A step's start on its node against the controller's time of launching it: the preflight refuses clock
# skew over 2 s, so a file started more than this before the launch is an earlier run's.
SKEW = 5.0

# Credentials a build's output line may carry (a URL's user:password, NAME=value of a secret-like name).
_SECRETS = re.compile(r"(://)[^/\s@]+@|((?:KEY|TOKEN|SECRET|PASSW\w*|CREDENTIAL\w*)\s*[=:]\s*)\S+", re.I)


def redact(text):
    """Pure: ``text`` with URL credentials and secret-like assignments replaced by <redacted>."""
    return _SECRETS.sub(lambda m: (m.group(1) + "<redacted>@") if m.group(1) else m.group(2) + "<redacted>", text)


def read_progress(path, session, since=None):
    """The progress file of ``session`` at ``path``; None while there is none, or only an older session's,
    or (``since``: the controller's time of launching the step) one that an earlier run left."""
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("session") != session:
        return None
    if since is not None and doc.get("started", 0) < since - SKEW:
        return None
    return doc


def process_gone(doc):
    """Whether the process that writes ``doc`` has ended although the document is not final (it was killed,
    or died on an error it did not report)."""
    if doc.get("state") in ("done", "failed") or not doc.get("pid"):
        return False
    try:
        os.kill(doc["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def describe(what, doc, now=None):
    """Pure: the one-line report of a progress document, e.g.
    ``weights: 2.00 of 8.00 GiB received, 25%, 204.8 MiB/s (10 s)`` or
    ``image build: step 4 of 9, RUN pip install ray (38 s)``."""
    if doc is None:
        return "%s: waiting for it to start" % what
    running = now is not None and doc.get("state") not in ("done", "failed")
    secs = now - doc.get("started", now) if running else doc.get("seconds") or 0
    done, total, phase = doc.get("done") or 0, doc.get("total"), doc.get("phase") or "done"
    if doc.get("unit") == "steps":
        line = "%s: step %d of %s" % (what, done, total or "?") if done else "%s: %s" % (what, phase)
    elif phase not in COUNTING:
        line = "%s: %s" % (what, phase)  # waiting for the stream, connecting, checking
    else:
        # The rate of what the file holds: the amount at its last write over the phase's time until then.
        span = max(doc["updated"] - doc.get("phase_started", doc["updated"]), 0.0)
        rate = done / 2**20 / span if span else 0.0
        size = "%.2f of %.2f GiB %s, %d%%" % (done / 2**30, total / 2**30, phase, 100 * done // total) \
            if total else "%.2f GiB %s" % (done / 2**30, phase)
        line = "%s: %s, %.1f MiB/s" % (what, size, rate)
    if doc.get("note"):
        line += ", %s" % doc["note"]
    return "%s (%d s)" % (line, secs)
