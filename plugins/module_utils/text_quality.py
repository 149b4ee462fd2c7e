# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Is a completion text, or garbage? A pure verdict, used as a deploy gate.

The field's failure signatures are all cheap to see: a token repeated until max_tokens ("foss foss foss",
seed 000), a soup of unrelated scripts ("あるい", "ייך", seed 004), NUL bytes ("*\\0"), or nothing at
all. A probe may also name words its answer must contain ("Paris", "84").
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

_WORD = re.compile(r"\w+", re.UNICODE)

# Scripts by the first word of the Unicode character name.
_SCRIPT_OF_PREFIX = {
    "LATIN": "latin", "DIGIT": "common", "CJK": "han", "HIRAGANA": "kana", "KATAKANA": "kana",
    "HEBREW": "hebrew", "ARABIC": "arabic", "CYRILLIC": "cyrillic", "GREEK": "greek", "HANGUL": "hangul",
    "DEVANAGARI": "devanagari", "THAI": "thai", "JAVANESE": "javanese", "FULLWIDTH": "common",
}


def script_of(ch):
    if not ch.isalpha():
        return "common"
    try:
        name = unicodedata.name(ch)
    except ValueError:
        return "unknown"
    return _SCRIPT_OF_PREFIX.get(name.split(" ", 1)[0], "other")


def metrics(text):
    words = [w.lower() for w in _WORD.findall(text)]
    counts = Counter(words)
    scripts = Counter(script_of(ch) for ch in text if ch.isalpha())
    scripts.pop("common", None)
    # The longest run of one word repeated back to back.
    run, longest = 1, 1 if words else 0
    for a, b in zip(words, words[1:]):
        run = run + 1 if a == b else 1
        longest = max(longest, run)
    return {
        "chars": len(text),
        "words": len(words),
        "distinct_ratio": round(len(counts) / len(words), 3) if words else 0.0,
        "top_word_share": round(counts.most_common(1)[0][1] / len(words), 3) if words else 0.0,
        "longest_repeat_run": longest,
        "control_chars": sum(1 for ch in text if unicodedata.category(ch) == "Cc" and ch not in "\n\r\t"),
        "scripts": dict(scripts),
    }


def assess(text, expect_any=None, scripts=("latin",), min_words=1):
    """Return {"ok": bool, "reasons": [...], "metrics": {...}} for one completion."""
    m = metrics(text or "")
    reasons = []
    if m["words"] < min_words:
        reasons.append("empty or near-empty answer (%d words)" % m["words"])
    if m["control_chars"]:
        reasons.append("contains %d control/NUL characters" % m["control_chars"])
    if m["longest_repeat_run"] >= 4:
        reasons.append("degenerate repetition: one word repeated %d times in a row" % m["longest_repeat_run"])
    elif m["words"] >= 8 and (m["distinct_ratio"] < 0.3 or m["top_word_share"] > 0.5):
        reasons.append("degenerate repetition: %.0f%% distinct words, top word %.0f%% of the text"
                       % (100 * m["distinct_ratio"], 100 * m["top_word_share"]))
    foreign = {s: n for s, n in m["scripts"].items() if scripts and s not in scripts}
    if foreign:
        reasons.append("unexpected scripts %s (expected %s)" % (
            ", ".join("%s:%d" % kv for kv in sorted(foreign.items())), "/".join(scripts)))
    if expect_any:
        lowered = (text or "").lower()
        if not any(str(e).lower() in lowered for e in expect_any):
            reasons.append("answer lacks any of the expected words %s" % list(expect_any))
    return {"ok": not reasons, "reasons": reasons, "metrics": m}
