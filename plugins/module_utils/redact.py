# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Secret values out of text that leaves a node: the diagnostics, on the node and again on the controller."""

from __future__ import annotations

REDACTED = "<redacted>"
# A shorter "secret" would redact ordinary text; the collection's own are 32 characters or more.
MIN_LENGTH = 8


def usable(secrets):
    return [s for s in secrets if s and len(s) >= MIN_LENGTH]


def texts(files, secrets):
    """Pure: ({name: text with every secret value replaced}, how many replacements)."""
    count, out = 0, {}
    for name, text in files.items():
        clean = text
        for secret in usable(secrets):
            count += clean.count(secret)
            clean = clean.replace(secret, REDACTED)
        out[name] = clean
    return out, count
