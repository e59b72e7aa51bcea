"""The answer gate's judge: the packaged model loads and reads a question the way the gate was
fitted on, and the gate asks it only about the queries it doubts, in a script it reads."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from connector.engine.recall import judge as judge_module
from connector.engine.recall.answergate import (
    ANSWER_GATE,
    CASCADE,
    JUDGE_FEATURES,
    JUDGED_CASCADE,
    JUDGED_GATE,
    PASSAGE_FEATURES,
    alike_gap,
    judge_candidates,
)
from connector.engine.recall.embedding import quantize
from connector.engine.recall.hybrid import HybridIndex, answer_decision, hybrid_recall
from connector.engine.recall.index import BrainIndex
from connector.engine.recall.judge import JudgeEmbedder, JudgeUnavailable, judge_embedder, judge_reads
from connector.workcopy.vectors import VectorStore
from tests.engine.hybrid_support import NOW, CountingEmbedder, make_brain
from tests.engine.test_answergate import _near_and_far


@pytest.fixture(scope="module")
def judge() -> JudgeEmbedder:
    found = judge_embedder()
    assert found is not None, judge_module.judge_unavailable_reason()
    return found


def test_the_judge_scores_an_answer_above_a_stranger(judge: JudgeEmbedder) -> None:
    vectors = judge.embed([
        "how do I know I'm overloaded",
        "Warning signs of burnout: I take on too many commitments and stop sleeping well.",
        "The hamster cage gets cleaned every Sunday.",
        "",
    ])
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-5)
    answer, stranger = float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2])
    # The scale the gate was fitted on (JUDGED_GATE's mean judge_top ~0.46): an answer well above a stranger.
    assert answer > 0.3 > stranger
    # A text embeds the same alone and beside others (a vector is the text's alone, whoever asks).
    assert np.array_equal(judge.embed(["how do I know I'm overloaded"])[0], vectors[0])
    assert np.array_equal(judge.embed(["The hamster cage gets cleaned every Sunday.", "x" * 5000])[0], vectors[2])
    # Many texts (a background job's batch, shared by threads): each row still its text's alone.
    many = [f"Note {n}: the plants on the balcony need water every {n % 7 + 1} days." for n in range(20)]
    together = judge.embed(many)
    assert all(np.array_equal(together[n], judge.embed([text])[0]) for n, text in enumerate(many))


def test_the_judge_reads_latin_script_only() -> None:
    assert judge_reads("what should I buy my boyfriend") and judge_reads("café près de la gare")
    assert not judge_reads("東京の天気") and not judge_reads("カフェ") and not judge_reads("ｶﾌｪ")
    assert not judge_reads("서울 날씨") and not judge_reads("Redis 缓存")


def test_a_judge_that_cannot_load_says_why_once_and_stays_off(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(judge_module, "_MODEL", ("no-such-distribution-here", "model.onnx"))
    broken = JudgeEmbedder()
    with caplog.at_level(logging.WARNING, logger="connector.recall"):
        for _ in range(2):
            with pytest.raises(JudgeUnavailable, match="no-such-distribution-here is not installed"):
                broken.embed(["a question"])
    assert [r.getMessage() for r in caplog.records].count(
        "the package no-such-distribution-here is not installed; the answer gate runs without its judge") == 1
    assert not broken.ready and broken.failed is not None


def test_judge_candidates_are_each_channels_first_few_that_may_be_listed() -> None:
    count = 30
    e5 = np.linspace(0.0, 1.0, count).astype(np.float32)  # best: 29, 28, ...
    use = e5[::-1].copy()  # best: 0, 1, ...
    bm25 = np.zeros(count, dtype=np.float32)
    bm25[[10, 12]] = (2.0, 1.0)  # only two memories match a word
    eligible = np.ones(count, dtype=bool)
    eligible[29] = False
    found = judge_candidates(e5, use, bm25, eligible, count=3)
    assert found.tolist() == [0, 1, 2, 10, 12, 26, 27, 28]


def test_the_judged_gate_asks_the_judge_about_doubtful_queries_only() -> None:
    assert JUDGE_FEATURES == (*PASSAGE_FEATURES, "judge_reads", "judge_top")
    assert len(JUDGED_GATE.weights) == len(JUDGED_GATE.means) == len(JUDGED_GATE.scales) == len(JUDGE_FEATURES)
    # The band holds the cascade's and more: the judge decides wherever the passage gate would.
    assert JUDGED_CASCADE.low <= CASCADE.low and CASCADE.high <= JUDGED_CASCADE.high
    eligible = np.ones(60, dtype=bool)
    alike = np.random.default_rng(3).uniform(0.7, 0.9, 60).astype(np.float32)
    found = _near_and_far(JUDGED_CASCADE, eligible)
    assert set(found) == {"near", "far"}
    asked: list[list[int]] = []

    def judge_saying(cosine: float | None):  # type: ignore[no-untyped-def]
        def judge(positions: np.ndarray) -> float | None:
            asked.append(positions.tolist())
            return cosine
        return judge

    # Far from the band: the first gate decides; the judge is never asked.
    signals, e5, features, score = found["far"]
    assert answer_decision(signals, eligible, e5, alike=lambda: alike, judge=judge_saying(0.9), reads=True) == (
        score >= ANSWER_GATE.threshold)
    assert asked == []
    # In it: the judge's verdict on the channels' first memories decides, a confident one answering
    # where a low one refuses.
    signals, e5, features, score = found["near"]
    verdicts = {}
    for cosine in (0.1, 0.8):
        verdicts[cosine] = answer_decision(signals, eligible, e5, alike=lambda: alike, judge=judge_saying(cosine),
                                           reads=True)
        assert verdicts[cosine] == JUDGED_GATE.answers(
            np.concatenate([features, [alike_gap(alike, eligible)], [1.0, cosine]]))
    assert asked[0] == judge_candidates(e5, signals.semantic, signals.bm25, eligible).tolist() == asked[1]
    assert JUDGED_GATE.score(np.concatenate([features, [alike_gap(alike, eligible)], [1.0, 0.8]])) > JUDGED_GATE.score(
        np.concatenate([features, [alike_gap(alike, eligible)], [1.0, 0.1]]))
    # A query the judge does not read: the judged gate decides without asking it.
    asked.clear()
    unread = answer_decision(signals, eligible, e5, alike=lambda: alike, judge=judge_saying(0.9), reads=False)
    assert asked == [] and unread == JUDGED_GATE.answers(
        np.concatenate([features, [alike_gap(alike, eligible)], [0.0, 0.0]]))
    # A judge that cannot say (not loaded): the cascade without it decides, as before the judge.
    assert answer_decision(signals, eligible, e5, alike=lambda: alike, judge=judge_saying(None), reads=True) == (
        answer_decision(signals, eligible, e5, alike=lambda: alike))


def test_the_judge_channel_raises_what_it_reads_as_the_answer_for_latin_script_queries() -> None:
    # A stand-in judge whose vectors point one memory at the query: fused in as a channel, that
    # memory ranks higher; a query in Japanese, or a judge not ready to embed, changes nothing.
    brain, _ = make_brain()
    index = BrainIndex.build(brain)
    use = VectorStore(CountingEmbedder()).for_brain("b")
    hybrid = HybridIndex.build(brain, index, use)
    positions = {record.id: position for position, record in enumerate(index.memories)}

    def ranked(query: str, **judge: object) -> list[str]:
        return [hit["id"] for hit in hybrid_recall(brain, query, index=index, hybrid=hybrid, embed_query=use.embed_query,
                                                   now=NOW, top=10, **judge)]  # type: ignore[arg-type]

    query = "what do we do about slow database queries"
    plain = ranked(query)
    rows = np.random.default_rng(0).standard_normal((len(index.memories), 16)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    axis = np.zeros(16, dtype=np.float32)
    axis[0] = 1.0
    rose = 0
    for target in plain[1:]:  # the first has nowhere to rise
        pointed = rows.copy()
        pointed[positions[target]] = axis
        lifted = ranked(query, judge=quantize(pointed), embed_judge_query=lambda text: axis)
        assert sorted(lifted) == sorted(plain) and lifted.index(target) <= plain.index(target)
        rose += lifted.index(target) < plain.index(target)
    # One channel of five at a fixed weight: it lifts a memory, it cannot carry one the others sink far.
    assert rose >= len(plain[1:]) // 2 + 1
    judged = {"judge": quantize(rows), "embed_judge_query": lambda text: axis}

    def not_ready(text: str) -> np.ndarray:
        raise JudgeUnavailable("the judge is loading")

    assert ranked(query, judge=quantize(rows), embed_judge_query=not_ready) == plain
    japanese = "遅いデータベースの問い合わせ"
    assert ranked(japanese, **judged) == ranked(japanese)


def test_the_judge_channel_reads_a_query_typed_in_full_width_as_its_ascii() -> None:
    brain, _ = make_brain()
    index = BrainIndex.build(brain)
    use = VectorStore(CountingEmbedder()).for_brain("b")
    hybrid = HybridIndex.build(brain, index, use)
    asked: list[str] = []
    rows = quantize(np.eye(len(index.memories), 16, dtype=np.float32) + 0.01)

    def embed(text: str) -> np.ndarray:
        asked.append(text)
        return np.eye(16, dtype=np.float32)[0]

    hybrid_recall(brain, "ＲＥＤＩＳ cache", index=index, hybrid=hybrid, embed_query=use.embed_query, now=NOW,
                  judge=rows, embed_judge_query=embed)
    assert asked == ["REDIS cache"]
