"""The text verdict over a corpus of garbage and coherent answers in many scripts (fixtures/text_quality)."""

from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.vllm.plugins.module_utils.text_quality import (
    KNOWN_SCRIPTS,
    SCRIPT_RANGES,
    assess,
    script_of,
)

CORPUS = yaml.safe_load((Path(__file__).parent / "fixtures" / "text_quality" / "corpus.yml").read_text("utf-8"))
GARBAGE, COHERENT = CORPUS["garbage"], CORPUS["coherent"]

# The words each category's reason starts with.
CATEGORY_REASON = {
    "repetition": "degenerate repetition",
    "flood": "character flood",
    "script_mix": "unexpected scripts",
    "byte_fallback": "byte-fallback noise",
    "control": "control characters",
    "empty": "empty",
    "list": "endless list",
    "expected_words": "answer lacks any of the expected words",
}
# Every measure a reason can name; the corpus must trip each one at least once.
MEASURES = ("(repeated_unit)", "(longest_repeat_run)", "(repeated_word_unit)", "(distinct_ratio/top_word_share)",
            "(ngram_distinct_ratio)", "(longest_char_run)", "(blank_line_run)", "(space_run)", "(control_chars)",
            "(replacement_chars)", "(byte_tokens)", "(private_use_chars)", "(list_items)", "(script_mix)",
            "empty answer", "(words)", "lacks any of the expected words")
# Coherent answers in scripts other than Latin that a Latin-only probe must reject.
NOT_LATIN = ("chinese", "chinese-long", "japanese", "japanese-katakana-heavy", "hebrew")


def text_of(item):
    if item.get("text") is None and "unit" not in item:
        return None
    return (item.get("text") or "") + item.get("unit", "") * item.get("repeat", 0)


def verdict(item, scripts="probe"):
    if scripts == "probe":
        scripts = tuple(item.get("scripts", ["latin"]))
    return assess(text_of(item), item.get("expect_any"), scripts)


def ids(items):
    return [item["id"] for item in items]


def by_id(name):
    return next(item for item in COHERENT + GARBAGE if item["id"] == name)


def test_corpus_is_well_formed():
    assert len(set(ids(GARBAGE + COHERENT))) == len(GARBAGE + COHERENT)
    assert {item["category"] for item in GARBAGE} == set(CATEGORY_REASON)
    assert all(s in KNOWN_SCRIPTS for item in GARBAGE + COHERENT for s in item.get("scripts", []))
    covered = {s for item in COHERENT for s in verdict(item)["metrics"]["scripts"]}
    assert {"latin", "han", "kana", "hebrew", "arabic", "cyrillic", "hangul", "devanagari"} <= covered


@pytest.mark.parametrize("item", GARBAGE, ids=ids(GARBAGE))
def test_garbage_fails_with_the_reason_of_its_category(item):
    result = verdict(item)
    assert not result["ok"], result
    assert any(r.startswith(CATEGORY_REASON[item["category"]]) for r in result["reasons"]), result


@pytest.mark.parametrize("item", [i for i in GARBAGE if not i.get("script_only")],
                         ids=ids(i for i in GARBAGE if not i.get("script_only")))
@pytest.mark.parametrize("off", [None, ()], ids=["None", "empty"])
def test_garbage_fails_with_the_script_check_off(item, off):
    result = verdict(item, scripts=off)
    assert not result["ok"], result
    assert not any(r.startswith("unexpected scripts") for r in result["reasons"])


@pytest.mark.parametrize("item", [i for i in GARBAGE if i.get("script_only")],
                         ids=ids(i for i in GARBAGE if i.get("script_only")))
def test_pure_script_mixing_is_only_a_script_failure(item):
    assert verdict(item, scripts=None)["ok"]


@pytest.mark.parametrize("item", COHERENT, ids=ids(COHERENT))
def test_coherent_answers_pass_with_their_scripts(item):
    result = verdict(item)
    assert result["ok"], result
    assert verdict(item, scripts=None)["ok"]


@pytest.mark.parametrize("name", NOT_LATIN)
def test_script_check_rejects_other_scripts_on_a_latin_probe(name):
    item = by_id(name)
    assert verdict(item)["ok"]
    result = verdict(item, scripts=("latin",))
    assert not result["ok"]
    assert [r for r in result["reasons"] if r.startswith("unexpected scripts")] == result["reasons"]


@pytest.mark.parametrize("measure", MEASURES)
def test_every_measure_can_fail(measure):
    assert any(measure in r for item in GARBAGE for r in verdict(item)["reasons"])


def test_metrics_keep_their_names_and_count_the_seed_signatures():
    m = verdict(by_id("seed004-soup"))["metrics"]
    assert m["scripts"] == {"hebrew": 9, "kana": 9, "latin": 1}  # ḁ is Latin Extended Additional; ꧁ is no letter
    assert m["control_chars"] == 1
    m = verdict(by_id("seed000-kimi-marlin-foss"))["metrics"]
    assert (m["chars"], m["words"], m["longest_repeat_run"]) == (50, 10, 10)
    assert (m["repeated_unit"], m["unit_repeats"]) == ("foss", 10)
    m = verdict(by_id("flood-prolonged-sound-mark"))["metrics"]
    assert (m["longest_char_run"], m["longest_char_run_char"], m["scripts"]) == (7, "ー", {})
    m = verdict(by_id("numbered-identical"))["metrics"]
    assert (m["list_items"], m["list_repeated_items"]) == (11, 9)


@pytest.mark.parametrize(("ch", "script"), [
    ("a", "latin"), ("ḁ", "latin"), ("ệ", "latin"), ("π", "greek"), ("Ж", "cyrillic"), ("ש", "hebrew"),
    ("ب", "arabic"), ("क", "devanagari"), ("ก", "thai"), ("한", "hangul"), ("あ", "kana"), ("ア", "kana"),
    ("ｱ", "kana"), ("東", "han"), ("々", "han"), ("ー", "common"), ("ｰ", "common"), ("Ａ", "common"),
    ("µ", "common"), ("7", "common"), ("。", "common"), ("「", "common"), ("👋", "common"), ("\0", "common"),
    ("ꦲ", "javanese"), ("ሀ", "ethiopic"),
])
def test_script_of_by_block(ch, script):
    assert script_of(ch) == script


def test_script_ranges_are_sorted_and_disjoint():
    for (_unused, last, _unused), (first, _unused, _unused) in zip(SCRIPT_RANGES, SCRIPT_RANGES[1:]):
        assert last < first


def test_a_few_stray_foreign_letters_pass_but_a_soup_does_not():
    assert assess(" The ratio is π ≈ 3.14159, and Tokyo is 東京 in Japanese.")["ok"]
    assert not assess(" The ratio is πωξψ ≈ 3.14159, Москва Tokyo 東京 in Japanese.")["ok"]


def test_a_cut_off_multibyte_character_at_the_end_passes():
    """max_tokens may stop inside a UTF-8 sequence: up to three U+FFFD at the very end are not noise."""
    assert assess("東京は日本の首都で\ufffd", None, ("kana", "han"))["ok"]
    assert not assess("東京は\ufffd日本の首都です", None, ("kana", "han"))["ok"]


def test_latin_terms_in_a_non_latin_answer():
    """Up to 80% of the letters may be Latin terms; beyond, the answer is in the wrong script."""
    result = assess("vLLM は DGX Spark で動いています。", None, ("kana", "han"))
    assert result["ok"] and result["metrics"]["foreign_letters"] == 0
    result = assess("I think the answer is 東京.", None, ("kana", "han"))
    assert not result["ok"] and result["metrics"]["foreign_letters"] == 17
    # Latin is no free pass for other scripts.
    assert not assess("vLLM は ייך ייך で動いています。", None, ("kana", "han"))["ok"]


def test_scripts_as_a_string_in_any_case_and_unknown_scripts():
    assert assess("Привет, мир.", None, "cyrillic")["ok"]
    assert assess(" Paris.", None, ["Latin"])["ok"]
    result = assess(" Paris.", None, ("latin", "klingon"))
    assert not result["ok"] and result["reasons"][0].startswith("unknown expected scripts klingon")
    assert assess(" Paris.", None, None)["metrics"]["foreign_letters"] is None


def test_expected_words_ignore_case_and_width():
    assert assess(" PARIS.", ["paris"])["ok"]
    assert assess("答えは８４です。", ["84"], ("kana", "han"))["ok"]
    assert not assess(" London.", ["Paris", "84"])["ok"]


def test_min_words():
    assert not assess(" Paris.", None, ("latin",), min_words=3)["ok"]
    assert assess(" Paris is nice.", None, ("latin",), min_words=3)["ok"]


def test_expected_words_are_whole_words_in_spaced_scripts():
    assert not assess(" Nothing in this answer helps.", ["hello", "hey", "hi"])["ok"]
    assert not assess(" The year was 1984.", ["84"])["ok"]
    assert assess(" Hi there!", ["hello", "hey", "hi"])["ok"]
    assert assess(" π ≈ 3.14159", ["3.14"])["ok"]


def test_punctuation_loops_and_unicode_space_floods_are_caught():
    for text in (" Paris" + "?!" * 30, "巴黎" + "。，" * 30, " Paris" + "\u3000" * 60, " Paris" + "\u2028" * 40):
        assert not assess(text, None, ("latin", "han"))["ok"], repr(text)
    assert assess(" Paris?! Really?!", None)["ok"]
    assert assess("| a | b | c |\n|---|---|---|\n| 1 | 2 | 3 |", None)["ok"]
