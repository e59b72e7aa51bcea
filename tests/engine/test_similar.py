"""The similar-memory check: duplicates, updates and neither, in English, Chinese and Japanese."""

from __future__ import annotations

import pytest

from connector.engine.format.brain import Brain
from connector.engine.recall.hybrid import HybridIndex
from connector.engine.recall.index import BrainIndex
from connector.engine.tending.similar import (
    DUPLICATE,
    FEATURES,
    MODEL,
    RELATED,
    UPDATE,
    Candidate,
    Incoming,
    _logistic,
    _Text,
    candidates,
    classify,
    decide,
    exact_duplicates,
    find_similar,
    negated,
    normalised_content,
    pair_features,
    reports_change,
    script_of,
    similar_in_brain,
    values_of,
)
from connector.workcopy.vectors import VectorStore
from tests.engine.similar_support import MEMORIES, governance_brain


@pytest.fixture(scope="module")
def model_store() -> VectorStore:
    """The real multilingual model, memory only (shared: loading it takes about a second)."""
    return VectorStore()


@pytest.fixture(scope="module")
def prepared(model_store: VectorStore):  # type: ignore[no-untyped-def]
    brain, ids = governance_brain()
    index = BrainIndex.build(brain)
    return brain, ids, index, HybridIndex.build(brain, index, model_store)


def check(prepared, store: VectorStore, content: str, title: str | None = None):  # type: ignore[no-untyped-def]
    brain, ids, index, hybrid = prepared
    by_id = {memory_id: name for name, memory_id in ids.items()}
    found = find_similar(brain, Incoming(content, title), index=index, hybrid=hybrid, embed=store.embed_query)
    return [(by_id[item.id], item.relation) for item in found if item.flagged], found


def test_values_meet_across_notations_and_languages() -> None:
    assert values_of("Standup at 3 pm, rent 128,000 yen, in July, every Monday") == {"15:00", "128000", "m7", "d1"}
    assert values_of("meeting 15:00") == values_of("meeting at 3pm")
    # Chinese numerals and weekdays; Japanese digits with units and weekdays.
    assert values_of("十一月十日，每周四") >= {"11", "10", "m11", "d4"}
    assert values_of("月2万3千円、金曜の夜") == {"23000", "d5"}
    assert values_of("4月に") == {"4", "m4"}


def test_negation_and_scripts() -> None:
    assert negated("He does not own a car") and negated("I don't drink coffee") and negated("他不喝咖啡")
    assert negated("車は持っていない") and not negated("車を買った") and not negated("I own a car")
    assert [script_of(t) for t in ("a car", "汽车", "車を買った")] == ["en", "zh", "ja"]


def test_traditional_chinese_reads_as_simplified() -> None:
    # Words, values, negation and aspect alike; Japanese 無 (無料: free of charge) is no negation.
    assert _Text.of("他已經兩週沒去健身房了，會員費每月三萬") == _Text.of("他已经两周没去健身房了，会员费每月三万")
    assert _Text.of("他已经两周没去健身房了").negated and _Text.of("他已經兩週沒去健身房了").change
    assert not _Text.of("無料のカフェで勉強する").negated


def test_a_reported_change_is_told_by_tense_and_aspect() -> None:
    # English past tense (regular, irregular, perfect), not a passive; the Chinese perfective
    # 了 and 已经 / 不再, not 了解 or 为了; the Japanese past, not the progressive ている.
    assert reports_change("Gave up on the Rust plan") and reports_change("Cancelled the insurance in October")
    assert reports_change("He has decided to stay in Tokyo") and reports_change("Lin moved from Neovim to Zed")
    assert not reports_change("Lin uses Neovim") and not reports_change("Status is cached in Redis for 60 seconds")
    assert not reports_change("The lock is held for nine minutes") and not reports_change("a hundred people")
    assert reports_change("林悦上个月买了一辆车") and reports_change("电梯已经装好") and reports_change("周末不再用共享汽车")
    assert not reports_change("为了了解情况，每周去一次") and not reports_change("电梯正在加装")
    assert reports_change("ヨガは先月でやめた。") and reports_change("ターミナルはGhosttyにした。")
    assert reports_change("発表は2月の回に延期になりました") and not reports_change("ヨガクラスに参加している。")


def test_a_reported_change_makes_an_update_likelier() -> None:
    # The same pair, once with the new memory reporting a change the existing one does not:
    # both the flag and, for a flag, the update are likelier; a change on both sides is no sign.
    state = _Text.of("I go to the gym in Nakano on Mondays.")
    quit_ = _Text.of("Cancelled the gym membership in Nakano.")
    still = _Text.of("Keeping the gym membership in Nakano.")
    changed, unchanged = (pair_features(new, state, 0.6, 0.4, lambda term: 1.0, 0.3) for new in (quit_, still))
    named = dict(zip(FEATURES, changed.tolist(), strict=True))
    assert named["reports_change"] == 1.0 and dict(zip(FEATURES, unchanged.tolist(), strict=True))["reports_change"] == 0.0
    assert _logistic(MODEL.flag, changed) > _logistic(MODEL.flag, unchanged)
    assert _logistic(MODEL.kind, changed) > _logistic(MODEL.kind, unchanged)
    both = pair_features(quit_, _Text.of("Renewed the gym membership in Nakano."), 0.6, 0.4, lambda term: 1.0, 0.3)
    assert dict(zip(FEATURES, both.tolist(), strict=True))["reports_change"] == 0.0


@pytest.mark.parametrize(
    ("title", "content", "target"),
    [
        # A paraphrase with the time written another way.
        ("Dentist visit", "Dentist visit on May 14 at 15:00, at the clinic by Ikebukuro station.", "Dentist appointment"),
        # Translations: English -> Japanese, Chinese -> English, English -> Chinese.
        ("中野のジム", "中野のジムは月8000円で、仕事の後に月曜と木曜に通っている。", "Gym membership"),
        ("Grandma's birthday", "Grandma's birthday is November 8; she loves Longjing tea, and I send her a box "
         "every year.", "奶奶的生日"),
        ("工作电脑", "我的工作电脑是ThinkPad X1 Carbon，32GB内存，装的是Ubuntu 24.04。", "Work laptop"),
    ],
)
def test_restatements_are_duplicates(prepared, model_store, title: str, content: str, target: str) -> None:  # type: ignore[no-untyped-def]
    flags, found = check(prepared, model_store, content, title)
    assert flags == [(target, DUPLICATE)]
    assert 0.0 < found[0].score <= 1.0 and not found[0].exact


@pytest.mark.parametrize(
    ("title", "content", "target"),
    [
        # The same sentence with one value changed: a date, a weekday, a Chinese date, an amount.
        ("Dentist appointment moved", "The dentist appointment is on 21 May at 3 pm at the clinic near Ikebukuro "
         "station.", "Dentist appointment"),
        ("図書館の休館日", "区立図書館は毎週火曜日が休館日。本は二週間まで借りられる。", "図書館"),
        ("奶奶的生日", "奶奶的生日是十一月十日，她最喜欢喝龙井茶，每年都给她寄一盒。", "奶奶的生日"),
        ("Work laptop", "My work laptop is a ThinkPad X1 Carbon with 64 GB of memory and Ubuntu 24.04.", "Work laptop"),
        # A negation of what the brain holds.
        ("Gym", "I no longer go to the gym in Nakano; the membership ended in March.", "Gym membership"),
        # A reversal without a value, also across languages: no number or date changed, only
        # what happened (`reports_change`; before it the first two were not flagged at all).
        ("健身房", "中野的健身房会员已经退了。", "Gym membership"),
        ("ジム", "中野のジムは先月で退会した。", "Gym membership"),
        ("面包", "周日不再烤酸面包了，改在面包店买。", "Bread baking"),
        ("Dentist", "Cancelled the dentist appointment at the Ikebukuro clinic.", "Dentist appointment"),
    ],
)
def test_changed_facts_are_updates(prepared, model_store, title: str, content: str, target: str) -> None:  # type: ignore[no-untyped-def]
    flags, _ = check(prepared, model_store, content, title)
    assert flags == [(target, UPDATE)]


@pytest.mark.parametrize(
    ("title", "content"),
    [
        ("Cello", "Started cello lessons on Saturday mornings with a teacher in Kichijoji."),
        ("养花", "阳台上种了三盆薄荷，夏天每天早上浇水。"),
        ("ドラマ", "最近は韓国のドラマをよく見ている。"),
        # Same place or subject as a memory, a different fact.
        ("Climbing gym", "The bouldering gym in Ogikubo is closed on Wednesdays and has a chalk ban."),
        ("図書館のカフェ", "図書館の二階にカフェがあって、コーヒーは一杯三百円。"),
        # Same subject as a memory, a different fact about another person: a known miss (flagged as
        # an update of "Climbing shoes", 0.682), kept here and in `bench/similar_bench.py --hard-cases`
        # until the check gets it right (docs/memory-governance.md, "Known misses"). Strict: a fix
        # turns this red until the mark goes.
        pytest.param("Partner's climbing shoes", "My partner climbs in Scarpa Instinct shoes, size 43.",
                     marks=pytest.mark.xfail(strict=True, reason="known miss: another person's fact flagged as an "
                                             "update (docs/memory-governance.md)")),
    ],
)
def test_new_facts_are_not_flagged(prepared, model_store, title: str, content: str) -> None:  # type: ignore[no-untyped-def]
    flags, found = check(prepared, model_store, content, title)
    assert flags == []
    assert all(item.relation == RELATED for item in found)


def test_exact_content_is_an_exact_duplicate_first(prepared, model_store) -> None:  # type: ignore[no-untyped-def]
    _, ids, _, _ = prepared
    original = MEMORIES[6]["content"]
    flags, found = check(prepared, model_store, "  " + original.upper().replace(" ", "  ") + "\n", "Another title")
    assert found[0].id == ids["Bread baking"] and found[0].exact and found[0].score == 1.0
    assert flags[0] == ("Bread baking", DUPLICATE)
    assert normalised_content(original) == normalised_content(original.upper() + "  ")


def test_answer_shapes(prepared, model_store) -> None:  # type: ignore[no-untyped-def]
    _, _, _, _ = prepared
    _, found = check(prepared, model_store, MEMORIES[0]["content"])
    assert found[0].to_json() == {"id": found[0].id, "relation": "duplicate", "score": 1.0}
    assert found[0].to_json(detail=True) == {
        "id": found[0].id, "relation": "duplicate", "score": 1.0, "title": "Dentist appointment", "exact": True,
    }
    # Best first: flags by score, then related memories by cosine, whatever order the memories were
    # examined in; at most `limit`, the best ones. One pair of texts at several cosines: the closer
    # ones are updates, the farther related; a restatement is a duplicate even at a lower cosine.
    new = _Text.of("The company check-up is in June this year.")
    changed = _Text.of("The company health check-up is in September.")
    same = _Text.of("The company check-up is in June this year!")

    def examined(name: str, old: _Text, cosine: float, exact: bool = False) -> Candidate:
        return Candidate(name, name, cosine, pair_features(new, old, cosine, cosine - 0.1, lambda term: 1.0, 0.3), exact)

    pool = [examined("related-0.5", changed, 0.5), examined("update-0.8", changed, 0.8),
            examined("related-0.55", changed, 0.55), examined("duplicate-0.6", same, 0.6),
            examined("below-floor", changed, 0.3), examined("update-0.95", changed, 0.95),
            examined("related-0.46", changed, 0.46), examined("exact", same, 0.2, exact=True)]
    listed = decide(pool, limit=10)
    assert [(item.id, item.relation) for item in listed] == [
        ("exact", DUPLICATE), ("duplicate-0.6", DUPLICATE), ("update-0.95", UPDATE), ("update-0.8", UPDATE),
        ("related-0.55", RELATED), ("related-0.5", RELATED), ("related-0.46", RELATED)]
    scores = [item.score for item in listed]
    assert scores[0] == 1.0 and scores[1:4] == sorted(scores[1:4], reverse=True) and scores[4:] == [0.55, 0.5, 0.46]
    assert decide(pool, limit=3) == listed[:3] and decide(pool, limit=0) == []


def test_empty_brain_and_convenience(model_store) -> None:  # type: ignore[no-untyped-def]
    assert similar_in_brain(Brain(), Incoming("anything"), model_store) == []
    brain, ids = governance_brain()
    found = similar_in_brain(brain, Incoming(MEMORIES[3]["content"], "図書館"), model_store)
    assert found[0].id == ids["図書館"] and found[0].exact


def test_exact_duplicates_without_vectors() -> None:
    brain, ids = governance_brain()
    index = BrainIndex.build(brain)
    content = MEMORIES[7]["content"]
    found = exact_duplicates(brain, index, content.lower() + " ")
    assert [(item.id, item.relation, item.exact) for item in found] == [(ids["Train pass"], DUPLICATE, True)]
    assert exact_duplicates(brain, index, content, among=[ids["Gym membership"], "mem_unknown"]) == []


def test_newer_memories_are_checked_beside_an_older_version(prepared, model_store) -> None:  # type: ignore[no-untyped-def]
    from connector.engine.recall.embedding import content_hash
    from connector.engine.writes.ops import Memorize
    from connector.engine.tending.similar import Newer
    from tests.engine.hybrid_support import NOW

    brain, ids, index, hybrid = prepared
    later = brain.copy()
    stored = Memorize.from_request([{"title": "Piano lessons", "type": "learning", "path": "notes/",
                                     "content": "Piano lessons are on Wednesdays at 7 pm with Ms. Tanaka."}]
                                   ).apply(later, NOW)["stored"][0]
    later_index = BrainIndex.build(later)
    entries = [later_index.memories[later_index.positions[stored["id"]]].entry]
    texts = Newer.texts(later, entries)
    vectors = model_store.vectors([content_hash(model_store.model_id, text) for text in texts], texts)
    newer = Newer(later, [stored["id"]], entries, vectors)
    moved = Incoming("Piano lessons are on Fridays at 7 pm with Ms. Tanaka.", "Piano lessons moved")
    found = find_similar(brain, moved, index=index, hybrid=hybrid, embed=model_store.embed_query, newer=newer)
    assert [(item.id, item.relation) for item in found if item.flagged] == [(stored["id"], UPDATE)]
    # A memory gone since the older version is left out.
    dentist = Incoming(MEMORIES[0]["content"])
    assert find_similar(brain, dentist, index=index, hybrid=hybrid, embed=model_store.embed_query)[0].exact
    left = find_similar(brain, dentist, index=index, hybrid=hybrid, embed=model_store.embed_query,
                        skip={ids["Dentist appointment"]})
    assert ids["Dentist appointment"] not in [item.id for item in left]


def test_a_memory_in_a_dense_neighbourhood_needs_a_closer_cosine() -> None:
    # The same pair, the same cosine: against a memory whose own neighbours are as close as
    # the new one (a hub: many facts about one subject) it is less likely a flag.
    new = _Text.of("The company check-up is in June this year.")
    old = _Text.of("The company health check-up is in September.")
    lone = pair_features(new, old, 0.8, 0.5, lambda term: 1.0, 0.3)
    hub = pair_features(new, old, 0.8, 0.5, lambda term: 1.0, 0.75)
    assert dict(zip(FEATURES, lone.tolist(), strict=True))["above_hub"] == pytest.approx(0.5)
    assert dict(zip(FEATURES, hub.tolist(), strict=True))["above_hub"] == pytest.approx(0.05)
    assert classify(hub)[1] < classify(lone)[1]


def test_hubness_of_candidates_comes_from_the_hybrid_index(prepared, model_store) -> None:  # type: ignore[no-untyped-def]
    brain, ids, index, hybrid = prepared
    found = candidates(brain, Incoming("Bread baking on Sundays with a sourdough starter."), index=index, hybrid=hybrid,
                       embed=model_store.embed_query)
    for candidate in found:
        position = index.positions[candidate.id]
        features = dict(zip(FEATURES, candidate.features.tolist(), strict=True))
        assert features["above_hub"] == pytest.approx(candidate.cosine - hybrid.hubness([position])[position], abs=1e-6)


def test_a_same_language_pair_gets_its_language_offset_in_the_flag_model_only() -> None:
    # The sentence model's cosines run on another scale within Chinese and within Japanese
    # than within English: a pair of the same script gets its language's offset; a
    # cross-lingual pair gets `cross` instead, never an offset.
    english = _Text.of("The company check-up is in June this year.")
    chinese = _Text.of("公司体检今年在六月。")
    chinese_changed = _Text.of("公司体检改到九月了。")
    japanese = _Text.of("会社の健康診断は今年六月です。")
    japanese_changed = _Text.of("会社の健康診断は九月に変わった。")

    def offsets(new: _Text, old: _Text) -> tuple[float, float, float]:
        named = dict(zip(FEATURES, pair_features(new, old, 0.7, 0.5, lambda term: 1.0, 0.3).tolist(), strict=True))
        return named["same_zh"], named["same_ja"], named["cross"]

    assert offsets(chinese, chinese_changed) == (1.0, 0.0, 0.0)
    assert offsets(japanese, japanese_changed) == (0.0, 1.0, 0.0)
    assert offsets(english, _Text.of("The company health check-up is in September.")) == (0.0, 0.0, 0.0)
    assert offsets(chinese, english) == (0.0, 0.0, 1.0)
    assert offsets(japanese, chinese) == (0.0, 0.0, 1.0)
    # The offset moves where a flag starts, never which kind a flagged pair is.
    features = pair_features(japanese, japanese_changed, 0.7, 0.5, lambda term: 1.0, 0.3)
    without = features.copy()
    without[FEATURES.index("same_ja")] = 0.0
    assert _logistic(MODEL.flag, features) != pytest.approx(_logistic(MODEL.flag, without))
    assert _logistic(MODEL.kind, features) == pytest.approx(_logistic(MODEL.kind, without))
