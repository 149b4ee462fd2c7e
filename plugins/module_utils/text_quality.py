# Copyright: sparkfleet maintainers. MIT License (see LICENSE).
"""Is a completion text, or garbage? A pure verdict, used as a deploy gate, for answers in any script.

The field's failure signatures are all cheap to see once you look at characters, not only at words:
  - a token repeated until max_tokens: "foss foss foss" (seed 000), or with no spaces at all, "あるいあるいあるい";
  - a flood of one character: "!!!!!!!!", "ーーーーーー", "。。。。。";
  - a soup of unrelated scripts: "あるい ייך ꧁ ḁ" (seed 004), judged against the scripts the probe expects;
  - byte-fallback and control noise: NUL ("*\\0*\\0", seed 004), U+FFFD, literal "<0xE3>" tokens, private-use
    characters;
  - nothing at all, or an endless list whose items repeat until the token limit.
A probe may also name words its answer must contain ("Paris", "84").

Every check is a measure in metrics and, when it trips, a reason that names the measure. Repetition is judged
on words and on the answer's letters with spaces and punctuation taken out, so it works in scripts written
without spaces. Scripts are told apart by Unicode block ranges; digits, punctuation, symbols, emoji, fullwidth
forms, CJK punctuation and the prolonged sound mark U+30FC are common to every script and never foreign. A few
stray foreign letters pass, and so do Latin terms ("vLLM", "GPU") in an answer in another script. Standard
library only, Python 3.9.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from bisect import bisect_right
from collections import Counter

# (first, last, script) Unicode block ranges, sorted and disjoint. "common" marks letters inside or beside a
# script's blocks that every script uses (U+30FC "ー", fullwidth Latin, letterlike and math symbols).
SCRIPT_RANGES = (
    (0x0041, 0x005A, "latin"), (0x0061, 0x007A, "latin"), (0x00AA, 0x00AA, "latin"),
    (0x00B5, 0x00B5, "common"), (0x00BA, 0x00BA, "latin"), (0x00C0, 0x02AF, "latin"),
    (0x02B0, 0x036F, "common"), (0x0370, 0x03FF, "greek"), (0x0400, 0x052F, "cyrillic"),
    (0x0530, 0x058F, "armenian"), (0x0590, 0x05FF, "hebrew"), (0x0600, 0x06FF, "arabic"),
    (0x0700, 0x074F, "syriac"), (0x0750, 0x077F, "arabic"), (0x0780, 0x07BF, "thaana"),
    (0x0870, 0x08FF, "arabic"), (0x0900, 0x097F, "devanagari"), (0x0980, 0x09FF, "bengali"),
    (0x0A00, 0x0A7F, "gurmukhi"), (0x0A80, 0x0AFF, "gujarati"), (0x0B00, 0x0B7F, "oriya"),
    (0x0B80, 0x0BFF, "tamil"), (0x0C00, 0x0C7F, "telugu"), (0x0C80, 0x0CFF, "kannada"),
    (0x0D00, 0x0D7F, "malayalam"), (0x0D80, 0x0DFF, "sinhala"), (0x0E00, 0x0E7F, "thai"),
    (0x0E80, 0x0EFF, "lao"), (0x0F00, 0x0FFF, "tibetan"), (0x1000, 0x109F, "myanmar"),
    (0x10A0, 0x10FF, "georgian"), (0x1100, 0x11FF, "hangul"), (0x1200, 0x139F, "ethiopic"),
    (0x13A0, 0x13FF, "cherokee"), (0x1780, 0x17FF, "khmer"), (0x1800, 0x18AF, "mongolian"),
    (0x1C80, 0x1C8F, "cyrillic"), (0x1C90, 0x1CBF, "georgian"), (0x1D00, 0x1DBF, "latin"),
    (0x1E00, 0x1EFF, "latin"), (0x1F00, 0x1FFF, "greek"), (0x2070, 0x209F, "common"),
    (0x2100, 0x218F, "common"), (0x24B6, 0x24E9, "common"), (0x2C60, 0x2C7F, "latin"),
    (0x2D00, 0x2D2F, "georgian"), (0x2DE0, 0x2DFF, "cyrillic"), (0x2E80, 0x2FDF, "han"),
    (0x3005, 0x3005, "han"), (0x3007, 0x3007, "han"), (0x3021, 0x3029, "han"), (0x3038, 0x303B, "han"),
    (0x3040, 0x309F, "kana"), (0x30A0, 0x30FA, "kana"), (0x30FB, 0x30FC, "common"), (0x30FD, 0x30FF, "kana"),
    (0x3100, 0x312F, "bopomofo"), (0x3130, 0x318F, "hangul"), (0x31A0, 0x31BF, "bopomofo"),
    (0x31F0, 0x31FF, "kana"), (0x3400, 0x4DBF, "han"), (0x4E00, 0x9FFF, "han"), (0xA640, 0xA69F, "cyrillic"),
    (0xA720, 0xA7FF, "latin"), (0xA8E0, 0xA8FF, "devanagari"), (0xA960, 0xA97F, "hangul"),
    (0xA980, 0xA9DF, "javanese"), (0xAB30, 0xAB6F, "latin"), (0xAC00, 0xD7FF, "hangul"),
    (0xF900, 0xFAFF, "han"), (0xFB00, 0xFB06, "latin"), (0xFB1D, 0xFB4F, "hebrew"), (0xFB50, 0xFDFF, "arabic"),
    (0xFE70, 0xFEFF, "arabic"), (0xFF00, 0xFF65, "common"), (0xFF66, 0xFF6F, "kana"), (0xFF70, 0xFF70, "common"),
    (0xFF71, 0xFF9D, "kana"), (0xFF9E, 0xFF9F, "common"), (0xFFA0, 0xFFDC, "hangul"),
    (0x1B000, 0x1B16F, "kana"), (0x1D400, 0x1D7FF, "common"), (0x20000, 0x3134F, "han"),
)
_RANGE_STARTS = [first for first, _unused, _unused in SCRIPT_RANGES]
KNOWN_SCRIPTS = frozenset(script for _unused, _unused, script in SCRIPT_RANGES) - {"common"}

# Thresholds, each named after the measure it bounds.
LETTER_RUN_FLOOD = 6  # "ーーーーーー", "哈哈哈哈哈哈": no word holds one letter six times in a row
ASCII_RUN_FLOOD = 10  # "aaaaaaaaaa"; placeholders ("XXXXXX", "\\uHHHH") stay under it
SYMBOL_RUN_FLOOD = 10  # "!!!!!!!!!!", "😂😂😂..."
LONG_RUN_FLOOD = 80  # digits ("1000000000") and rule characters (table rules, "# -----" rulers) run long honestly
RULE_CHARS = frozenset("-=_*#~.─━═")
DOMINANT_RUN = (5, 0.4)  # a run of 5+ that is 40%+ of the non-space characters is the whole answer: "。。。。。"
BLANK_LINE_FLOOD = 6  # newlines until max_tokens
SPACE_RUN_FLOOD = 120  # spaces beyond any indentation or table padding
ODD_SPACE_FLOOD = 8  # other Unicode spaces in a row (U+3000, NBSP, U+2028 ...): no answer pads with them
PUNCT_LOOP = re.compile(r"([^\w\s]{2,4}?)\1{7,}")  # "?!?!?!…", "。，。，…", "()()()…": punctuation looping
MAX_UNIT_CHARS = 48  # longest character unit looked for back to back
MAX_UNIT_WORDS = 16  # longest word unit looked for back to back
UNIT_REPEATS = 4  # a unit of 2+ characters 4 times back to back: "あるいあるいあるいあるい"
UNIT_REPEATS_DOMINANT = (3, 12, 0.75)  # or 3 times, 12+ characters, 3/4 of the answer: "the cat sat" x3
WORD_RUN = 4  # one word 4 times in a row: "foss foss foss foss"
WORD_UNIT_REPEATS = 3  # a unit of 2+ words 3 times in a row
WORD_SHARES = (8, 0.3, 0.5)  # from 8 words: under 30% distinct words, or one word over half of them
NGRAM = (4, 64, 256, 0.3)  # char 4-grams in windows of 256 (from 64 chars): under 30% distinct is a loop
LIST_ITEMS = (6, 0.5, 0.9)  # 6+ list items, half of them (near-)repeats: SequenceMatcher ratio 0.9+
TRAILING_REPLACEMENTS = 3  # max_tokens may cut a multi-byte character: up to 3 U+FFFD at the very end pass
STRAY_FOREIGN = (3, 0.05, 0.25)  # foreign letters tolerated: 3 or 5% of letters, unless 25%+ of them
LATIN_TERMS_SHARE = 0.8  # Latin terms in a non-Latin answer: tolerated while its own scripts hold 20% of letters

_PROLONGED_SOUND_MARKS = frozenset("\u30fc\uff70")
_DENSE_CATEGORIES = frozenset(("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "So"))
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")
_LINE_ITEM = re.compile(r"^[ \t]*(?:\d{1,4}[.)]|[-*+•‣◦▪●·])(?:[ \t]+(.*))?$")
_INLINE_NUMBER = re.compile(r"(?:^|(?<=\s))(\d{1,4})[.)](?=\s)")
_SPACE_RUN = re.compile(r"[^\S\n\r]+")  # spaces, tabs and the other Unicode spaces (U+3000, NBSP, ...)
UNSPACED_SCRIPTS = frozenset(("han", "kana", "thai"))
_BLANK_LINES = re.compile(r"\n(?:[ \t\r]*\n)+")


def _contains_word(text, word):
    """Whether text holds word as a word of its own: "hi" is not in "this", "84" is not in "1984" or "845",
    while "3.14" is in "3.14159" and "84" is in "答えは84です" (scripts written without spaces bound nothing).
    A word in such a script is looked for as a substring."""
    if not word:
        return False
    if any(script_of(ch) in UNSPACED_SCRIPTS for ch in word):
        return word in text

    def binds(ch):  # a neighbour that continues the word
        return ch.isdigit() or (ch.isalpha() and script_of(ch) not in UNSPACED_SCRIPTS)

    start = text.find(word)
    while start >= 0:
        end = start + len(word)
        before = text[start - 1] if start else ""
        after = text[end] if end < len(text) else ""
        decimal_prefix = after.isdigit() and "." in word and word[-1].isdigit()
        if not (before and binds(before)) and not (after and binds(after) and not decimal_prefix):
            return True
        start = text.find(word, start + 1)
    return False


def script_of(ch):
    """The script of one character by Unicode block: "latin", "han", ..., "common", or "other"."""
    if not ch.isalpha():
        return "common"
    code = ord(ch)
    i = bisect_right(_RANGE_STARTS, code) - 1
    if i >= 0 and code <= SCRIPT_RANGES[i][1]:
        return SCRIPT_RANGES[i][2]
    return "other"


def _words(text):
    """Casefolded words: runs of letters, marks and digits (marks keep Thai and Devanagari words whole).

    A run of prolonged sound marks alone ("ーーー") is no word.
    """
    words, current = [], []
    for ch in text + " ":
        if unicodedata.category(ch)[0] in "LMN":
            current.append(ch)
        elif current:
            word = "".join(current).casefold()
            if any(c.isalnum() and c not in _PROLONGED_SOUND_MARKS for c in word):
                words.append(word)
            current = []
    return words


def _periodic_stretches(seq, max_period, accept):
    """For each period p, the longest stretch of seq equal to itself shifted by p, as (length, p, start).

    A stretch of length L with period p is a unit seq[start:start+p] repeated L // p times back to back.
    accept(unit) drops units that another check owns (one character, digits only).
    """
    best = {}
    n = len(seq)
    for p in range(1, min(max_period, n // 2) + 1):
        run = 0
        for i in range(n - p + 1):
            if i < n - p and seq[i] == seq[i + p]:
                run += 1
                continue
            start, length = i - run, run + p
            if run >= p and length > best.get(p, (0,))[0] and accept(seq[start:start + p]):
                best[p] = (length, p, start)
            run = 0
    return sorted(best.values(), key=lambda s: (-s[0], s[1]))


def _longest_runs(text, nonspace):
    """The longest runs: of one non-space character (spaces between its copies do not break it), of blank
    lines, of spaces or tabs."""
    longest, char, run, prev = 0, "", 0, None
    for ch in nonspace:
        run = run + 1 if ch == prev else 1
        prev = ch
        if run > longest:
            longest, char = run, ch
    blank = max((m.group().count("\n") - 1 for m in _BLANK_LINES.finditer(text)), default=0)
    spaces = max((len(m.group()) for m in _SPACE_RUN.finditer(text)), default=0)
    return longest, char, blank, spaces


def _punctuation_loop(nonspace):
    """A unit of 2-4 punctuation marks (of at least two kinds) repeated back to back 8 times or more."""
    for m in PUNCT_LOOP.finditer("".join(nonspace)):
        if len(set(m.group(1))) > 1:
            return m.group(1)
    return ""


def _flood_limit(ch):
    if ch.isdigit() or ch in RULE_CHARS:
        return LONG_RUN_FLOOD
    if ch.isalpha():
        return ASCII_RUN_FLOOD if ch.isascii() else LETTER_RUN_FLOOD
    return SYMBOL_RUN_FLOOD


def _ngram_distinct_ratio(seq):
    """The lowest share of distinct char n-grams over sliding windows; 1.0 when the text is too short."""
    n, min_len, window, _unused = NGRAM
    if len(seq) < min_len:
        return 1.0
    lowest = 1.0
    for start in range(0, max(1, len(seq) - window + window // 2), window // 2):
        part = seq[start:start + window]
        if len(part) < min_len:
            break
        grams = [part[i:i + n] for i in range(len(part) - n + 1)]
        lowest = min(lowest, len(set(grams)) / len(grams))
    return round(lowest, 3)


def _list_items(text):
    """Items of the longest list: lines that start with "1." "2)" "-" "*" "•", or inline "1. ... 2. ..."."""
    by_line = []
    for line in text.splitlines():
        m = _LINE_ITEM.match(line)
        if m:
            by_line.append(m.group(1) or "")
    inline, expected, last = [], 1, None
    for m in _INLINE_NUMBER.finditer(text):
        if int(m.group(1)) != expected:
            continue
        if last is not None:
            inline.append(text[last:m.start()])
        last, expected = m.end(), expected + 1
    if last is not None:
        inline.append(text[last:])
    return by_line if len(by_line) >= len(inline) else inline


def _repeated_items(items):
    """How many items repeat, or nearly repeat, one of the eight before them (digits and case ignored)."""
    keys = [" ".join("".join(ch for ch in item.casefold() if not ch.isdigit()).split())[:200] for item in items]
    repeated = 0
    for i, key in enumerate(keys):
        for earlier in keys[max(0, i - 8):i]:
            if key == earlier or difflib.SequenceMatcher(None, key, earlier).ratio() >= LIST_ITEMS[2]:
                repeated += 1
                break
    return repeated


def metrics(text):
    """Every measure the verdict reads, JSON-serialisable."""
    words = _words(text)
    counts = Counter(words)
    scripts = Counter(script_of(ch) for ch in text if ch.isalpha())
    scripts.pop("common", None)
    nonspace = [ch for ch in text if not ch.isspace()]
    # Letters, marks, digits and emoji-like symbols, casefolded: what repetition is judged on, with or without
    # spaces. Punctuation and math symbols ("|", "<", "=") go: tables and markup repeat them honestly.
    dense = "".join(ch for ch in text.casefold() if unicodedata.category(ch) in _DENSE_CATEGORIES)
    run, run_char, blank_lines, space_run = _longest_runs(text, nonspace)
    trailing = len(text) - len(text.rstrip("\ufffd"))

    def not_flood_or_digits(unit):
        return len(set(unit)) > 1 and not all(ch.isdigit() for ch in unit)

    stretches = _periodic_stretches(dense, MAX_UNIT_CHARS, not_flood_or_digits)
    units = [(dense[start:start + p], length // p, round(length // p * p / len(dense), 3))
             for length, p, start in stretches]
    unit, repeats, coverage = next((u for u in units if _unit_fails(*u)), units[0] if units else ("", 0, 0.0))
    # Numbers repeat honestly ("[0, 0, 0, 0]"); the word shares below still see them.
    word_stretches = _periodic_stretches(words, MAX_UNIT_WORDS, lambda unit: not all(w.isdigit() for w in unit))
    word_run = next((length for length, p, _unused in word_stretches if p == 1), 1 if words else 0)
    word_loops = [s for s in word_stretches if s[1] > 1 and s[0] // s[1] >= WORD_UNIT_REPEATS]
    word_unit, word_unit_repeats = "", 0
    for length, p, start in word_loops[:1]:
        word_unit, word_unit_repeats = " ".join(words[start:start + p]), length // p
    items = _list_items(text)
    return {
        "chars": len(text),
        "words": len(words),
        "distinct_ratio": round(len(counts) / len(words), 3) if words else 0.0,
        "top_word_share": round(counts.most_common(1)[0][1] / len(words), 3) if words else 0.0,
        "longest_repeat_run": word_run,
        "repeated_word_unit": word_unit,
        "word_unit_repeats": word_unit_repeats,
        "longest_char_run": run,
        "longest_char_run_char": run_char,
        "nonspace_chars": len(nonspace),
        "blank_line_run": blank_lines,
        "space_run": space_run,
        "odd_space_run": max((len(x) for x in re.findall(r"[^\S \t\n\r]+", text)), default=0),
        "punctuation_loop": _punctuation_loop(nonspace),
        "repeated_unit": unit,
        "unit_repeats": repeats,
        "unit_coverage": coverage,
        "ngram_distinct_ratio": _ngram_distinct_ratio(dense),
        "control_chars": sum(1 for ch in text if unicodedata.category(ch) == "Cc" and ch not in "\n\r\t"),
        "replacement_chars": text.count("\ufffd") - (trailing if trailing <= TRAILING_REPLACEMENTS else 0),
        "trailing_replacement_chars": trailing,
        "byte_tokens": len(_BYTE_TOKEN.findall(text)),
        "private_use_chars": sum(1 for ch in text if unicodedata.category(ch) in ("Co", "Cs")),
        "list_items": len(items),
        "list_repeated_items": _repeated_items(items) if len(items) >= LIST_ITEMS[0] else 0,
        "letters": sum(scripts.values()),
        "scripts": dict(scripts),
    }


def _unit_fails(unit, repeats, coverage):
    least, min_length, min_coverage = UNIT_REPEATS_DOMINANT
    return repeats >= UNIT_REPEATS or (
        repeats >= least and repeats * len(unit) >= min_length and coverage >= min_coverage)


def _foreign_letters(m, scripts):
    """Letters of scripts the probe does not expect, by script.

    Latin terms (names, acronyms, code) are how Chinese, Japanese, Hebrew... technical answers are written, and
    one han character weighs as much as several Latin letters: a probe that expects only non-Latin scripts
    tolerates Latin letters while its own scripts hold at least a fifth of the letters.
    """
    foreign = {s: n for s, n in m["scripts"].items() if s not in scripts}
    if "latin" in foreign and foreign["latin"] <= LATIN_TERMS_SHARE * m["letters"]:
        del foreign["latin"]
    return foreign


def _script_reasons(m, scripts, foreign):
    """A soup of scripts the probe does not expect; a few stray letters in a long answer pass."""
    count, letters = sum(foreign.values()), m["letters"]
    few, share, soup_share = STRAY_FOREIGN
    if count > max(few, share * letters) or (count >= 2 and count >= soup_share * letters):
        return ["unexpected scripts (script_mix): %s of %d letters (expected %s)" % (
            ", ".join("%s:%d" % kv for kv in sorted(foreign.items())), letters, "/".join(scripts))]
    return []


def _repetition_reasons(m):
    reasons = []
    if m["unit_repeats"] and _unit_fails(m["repeated_unit"], m["unit_repeats"], m["unit_coverage"]):
        reasons.append("degenerate repetition (repeated_unit): %r repeated %d times back to back, %.0f%% of the text"
                       % (m["repeated_unit"], m["unit_repeats"], 100 * m["unit_coverage"]))
    if m["longest_repeat_run"] >= WORD_RUN:
        reasons.append("degenerate repetition (longest_repeat_run): one word repeated %d times in a row"
                       % m["longest_repeat_run"])
    if m["word_unit_repeats"]:
        reasons.append("degenerate repetition (repeated_word_unit): %r repeated %d times in a row"
                       % (m["repeated_word_unit"], m["word_unit_repeats"]))
    least, distinct, top = WORD_SHARES
    if m["words"] >= least and (m["distinct_ratio"] < distinct or m["top_word_share"] > top):
        reasons.append("degenerate repetition (distinct_ratio/top_word_share): %.0f%% distinct words, "
                       "top word %.0f%% of the text" % (100 * m["distinct_ratio"], 100 * m["top_word_share"]))
    if m["ngram_distinct_ratio"] < NGRAM[3]:
        reasons.append("degenerate repetition (ngram_distinct_ratio): only %.0f%% of character %d-grams distinct"
                       % (100 * m["ngram_distinct_ratio"], NGRAM[0]))
    return reasons


def _flood_reasons(m):
    reasons = []
    run, char = m["longest_char_run"], m["longest_char_run_char"]
    min_run, min_share = DOMINANT_RUN
    dominant = not char.isdigit() and run >= min_run and run >= min_share * m["nonspace_chars"]
    if run and (run >= _flood_limit(char) or dominant):
        reasons.append("character flood (longest_char_run): %r repeated %d times in a row" % (char, run))
    if m["blank_line_run"] >= BLANK_LINE_FLOOD:
        reasons.append("character flood (blank_line_run): %d blank lines in a row" % m["blank_line_run"])
    if m["space_run"] >= SPACE_RUN_FLOOD:
        reasons.append("character flood (space_run): %d spaces in a row" % m["space_run"])
    if m["odd_space_run"] >= ODD_SPACE_FLOOD:
        reasons.append("character flood (odd_space_run): %d Unicode spaces in a row" % m["odd_space_run"])
    if m["punctuation_loop"]:
        reasons.append("degenerate repetition (punctuation_loop): %r repeated 8 times or more back to back"
                       % m["punctuation_loop"])
    return reasons


def assess(text, expect_any=None, scripts=("latin",), min_words=1):
    """Return {"ok": bool, "reasons": [...], "metrics": {...}} for one completion.

    scripts: the scripts the probe expects, named as in KNOWN_SCRIPTS (a Japanese probe: ("kana", "han"));
    "other" allows letters of no known script; None or () skips the script check, every other check still
    runs. min_words: fewer words is a near-empty answer.
    """
    text = text or ""
    m = metrics(text)
    reasons = []
    if not text.strip():
        reasons.append("empty answer: %d characters, all whitespace" % len(text))
    elif m["words"] < min_words:
        reasons.append("empty or near-empty answer (words): %d words, %d wanted" % (m["words"], min_words))
    if m["control_chars"]:
        reasons.append("control characters (control_chars): %d NUL or other Cc besides \\n\\r\\t"
                       % m["control_chars"])
    if m["replacement_chars"] or m["byte_tokens"] or m["private_use_chars"]:
        reasons.append("byte-fallback noise: %d U+FFFD (replacement_chars), %d <0xNN> (byte_tokens), "
                       "%d private-use or surrogate (private_use_chars)"
                       % (m["replacement_chars"], m["byte_tokens"], m["private_use_chars"]))
    reasons += _flood_reasons(m)
    reasons += _repetition_reasons(m)
    least, half, _unused = LIST_ITEMS
    if m["list_items"] >= least and m["list_repeated_items"] >= half * m["list_items"]:
        reasons.append("endless list (list_items): %d items, %d of them repeat an earlier one"
                       % (m["list_items"], m["list_repeated_items"]))
    if isinstance(scripts, str):
        scripts = (scripts,)
    scripts = tuple(str(s).lower() for s in scripts or ())
    unknown = sorted(set(scripts) - KNOWN_SCRIPTS - {"other"})
    m["foreign_letters"] = None  # the script check is off
    if unknown:
        reasons.append("unknown expected scripts %s (known: %s, other)"
                       % (", ".join(unknown), ", ".join(sorted(KNOWN_SCRIPTS))))
    elif scripts:
        foreign = _foreign_letters(m, scripts)
        m["foreign_letters"] = sum(foreign.values())
        reasons += _script_reasons(m, scripts, foreign)
    if expect_any:
        lowered = unicodedata.normalize("NFKC", text).casefold()
        if not any(_contains_word(lowered, unicodedata.normalize("NFKC", str(e)).casefold()) for e in expect_any):
            reasons.append("answer lacks any of the expected words %s" % list(expect_any))
    return {"ok": not reasons, "reasons": reasons, "metrics": m}
