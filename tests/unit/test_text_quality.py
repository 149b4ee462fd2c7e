import pytest

from ansible_collections.sparkfleet.vllm.plugins.module_utils.text_quality import assess


@pytest.mark.parametrize(
    ("text", "expect", "reason"),
    [
        (" foss foss foss foss foss foss foss foss foss foss", ["Paris"], "degenerate repetition"),
        (" あるい ייך あるい ייך", None, "unexpected scripts"),
        ("*\0*\0*\0", None, "control/NUL"),
        ("", None, "empty"),
        (" London is the capital.", ["Paris"], "lacks any of the expected words"),
        (" the the cat the the dog the the end the", None, "degenerate repetition"),
    ],
)
def test_garbage_is_rejected(text, expect, reason):
    verdict = assess(text, expect)
    assert not verdict["ok"]
    assert any(reason in r for r in verdict["reasons"]), verdict


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (" Paris. It is the largest city in France and sits", ["Paris"]),
        ("Hey there! 👋 How's it going?", ["hello", "hey"]),
        (" 12 × 7 = 84.", ["84"]),
        ("\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n", None),
    ],
)
def test_coherent_answers_pass(text, expect):
    verdict = assess(text, expect)
    assert verdict["ok"], verdict


def test_other_scripts_can_be_allowed():
    assert assess("東京は日本の首都です", None, scripts=("han", "kana"))["ok"]
