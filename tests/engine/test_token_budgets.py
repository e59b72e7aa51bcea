"""Token counts of content budgets: Chinese and Japanese characters about one token each,
other text about four characters a token; cuts within budgets of both kinds."""

from __future__ import annotations

import unicodedata

import pytest

from connector.engine.format.tokens import Budget, count_tokens, prefix_within, quarters
from connector.thinking.evidence import build_pack

ZH = "我家的猫每年三月去宠物医院打疫苗，医生说它很健康。"
JA = "土曜日は鎌倉で友達と海辺を散歩する予定です。カメラも持っていきます。"
EN = "The webhook relay retries failed deliveries with exponential backoff."
MIXED = "周五 deploy 之前先跑 database migrations，然后检查 dashboards。"


def reference_tokens(text: str) -> int:
    """An independent estimate: wide (East Asian W/F) characters one token, the rest four a token."""
    wide = sum(1 for char in text if unicodedata.east_asian_width(char) in "WF")
    return wide + -(-(len(text) - wide) // 4)


EMOJI = "今日のリリース🚀🎉✅ 𠮷野家で打ち上げ🍜🍺 ☕ and done 👍"  # emoji and an extension B ideograph are wide too


@pytest.mark.parametrize("text", [ZH, JA, EN, MIXED, "", "ｈｅｌｌｏ　ワールド", "한국어 문장입니다", EMOJI])
def test_counts_match_a_width_based_estimate(text: str) -> None:
    assert count_tokens(text) == reference_tokens(text)


def test_cjk_costs_about_four_times_what_a_quarter_per_character_said() -> None:
    assert count_tokens(ZH) == len(ZH)  # every character of it is wide
    assert count_tokens(EN) == -(-len(EN) // 4)
    assert count_tokens(ZH * 10) > 3 * (len(ZH * 10) // 4)


@pytest.mark.parametrize("text", [ZH, JA, EN, MIXED])
def test_prefix_within_is_the_longest_start_that_fits(text: str) -> None:
    for allowed in range(0, quarters(text) + 6):
        length = prefix_within(text, allowed)
        assert quarters(text[:length]) <= allowed
        if length < len(text):
            assert quarters(text[: length + 1]) > allowed


def test_a_budget_bounds_characters_and_tokens_both() -> None:
    budget = Budget(chars=30, tokens=10)
    assert budget.room(ZH) == 10  # ten Chinese characters are ten tokens
    assert budget.room(EN) == 30  # forty English characters would be ten tokens: the characters bind
    budget.spend(ZH[:5])
    assert budget.tokens == 5 and budget.chars == 25 and budget.room(JA) == 5
    budget.spend(JA[:5])
    assert budget.empty and budget.room(EN) == 0
    assert Budget(chars=0).empty and Budget(tokens=0).empty and not Budget().empty


def _hit(memory_id: str, content: str) -> dict[str, str]:
    return {"id": memory_id, "title": "t", "type": "learning", "content": content}


def test_evidence_pack_counts_cjk_tokens_and_always_keeps_the_best_hit() -> None:
    hits = [_hit(f"mem_{n}", ZH * 20) for n in range(5)]
    pack = build_pack(hits, {}, 400, budget_tokens=100)
    assert pack.ids and pack.ids[0] == "mem_0"
    assert count_tokens(pack.render()) <= 100 and len(pack.render()) <= 400
    # Counted as a quarter token a character, the same pack would have held ~4x the text.
    assert len(pack.groups[0][1][0].content) < 100
    # A budget too small for any memory's text still shows the best one, cut.
    tiny = build_pack([_hit("mem_a", EN * 10), _hit("mem_b", EN)], {}, 150, budget_tokens=38)
    assert tiny.ids == ["mem_a"] and tiny.groups[0][1][0].truncated and tiny.left_out == 1


def _framed() -> int:
    """What the best memory (EN, whole) and the frames of both blocks cost, the second block marked
    cut, in quarter tokens (as many characters: all of it is ASCII): a pack of both, the second empty."""
    framed = build_pack([_hit("mem_a", EN), {**_hit("mem_b", ""), "content_truncated": True}], {}, 10_000, nonce="abc")
    return quarters(framed.render())


def _frame(tokens: int = 0) -> int:
    """A token budget leaving ``tokens`` (as many Chinese or Japanese characters) for the second
    memory's text."""
    return -(-_framed() // 4) + tokens


@pytest.mark.parametrize("language", [ZH, JA])
def test_evidence_keeps_a_chinese_or_japanese_cut_of_ten_tokens_and_leaves_out_less(language: str) -> None:
    # The rule was 40 characters: 40 Chinese characters are about 40 tokens, four times the 40
    # English characters (10 tokens) it meant; a cut of 20 such characters was left out.
    second = language * 3
    for kept in (10, 20, 39):
        tokens = _frame(kept)
        pack = build_pack([_hit("mem_a", EN), _hit("mem_b", second)], {}, tokens * 4, budget_tokens=tokens, nonce="abc")
        assert pack.ids == ["mem_a", "mem_b"] and pack.left_out == 0
        cut = pack.groups[0][1][1]
        assert cut.truncated and cut.content == second[:kept] and count_tokens(pack.render()) <= tokens
    tokens = _frame(9)
    short = build_pack([_hit("mem_a", EN), _hit("mem_b", second)], {}, tokens * 4, budget_tokens=tokens, nonce="abc")
    assert short.ids == ["mem_a"] and short.left_out == 1
    # A memory shorter than ten tokens is quoted whole when it fits, and only whole.
    brief = language[:6]
    tokens = _frame(6)
    assert build_pack([_hit("mem_a", EN), _hit("mem_b", brief)], {}, tokens * 4, budget_tokens=tokens,
                      nonce="abc").groups[0][1][1].content == brief
    cramped = build_pack([_hit("mem_a", EN), _hit("mem_b", brief)], {}, (tokens - 1) * 4, budget_tokens=tokens - 1,
                         nonce="abc")
    assert cramped.ids == ["mem_a"] and cramped.left_out == 1


def test_evidence_keeps_an_english_cut_of_forty_characters_and_leaves_out_less() -> None:
    # Forty English characters are ten tokens: the floor is the same as it was for English text.
    second = EN * 3
    for chars, shown in ((40, True), (39, False)):
        tokens = _frame(11)  # the characters bind
        budget = _framed() + chars
        pack = build_pack([_hit("mem_a", EN), _hit("mem_b", second)], {}, budget, budget_tokens=tokens, nonce="abc")
        assert (pack.ids == ["mem_a", "mem_b"]) is shown, chars
        if shown:
            assert pack.groups[0][1][1].content == second[:chars]
