"""The answer decision of hybrid recall: the learned gate's features and score, and when it decides
instead of the strength floor (e5 voting, a populated brain)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.engine.recall.answergate import (
    ANSWER_GATE,
    CASCADE,
    FEATURES,
    PASSAGE_FEATURES,
    PASSAGE_GATE,
    AnswerGate,
    Cascade,
    alike_gap,
    gate_features,
)
from connector.engine.recall.hybrid import Signals, Z_POPULATION, answer_decision, floor_margin, matches_well
from tests.engine.conftest import synthetic_channels


def test_features_describe_the_best_memories_of_each_channel() -> None:
    count = 40
    use, e5, words, bm25 = synthetic_channels(
        count, 5, model_tops={3: (0.6, 0.9), 7: (0.5, 0.85)}, word_hits={3: 0.5, 11: 1.0}, e5_spread=0.01)
    strength = use + 0.3 * words
    eligible = np.ones(count, dtype=bool)
    found = dict(zip(FEATURES, gate_features(0.05, strength, use, e5, bm25, words, words, eligible)))
    assert found["floor_margin"] == 0.05 and found["e5_top"] == pytest.approx(0.9) and found["use_top"] == pytest.approx(0.6)
    assert found["strength"] == pytest.approx(max(0.6 + 0.15, float(use[11]) + 0.3))
    assert found["e5_zgap"] == pytest.approx((0.9 - 0.85) / float(e5.std()), rel=1e-4)
    assert found["words"] == 1.0 and found["words_at_e5"] == 0.5 and found["bm25_at_e5"] == 0.5
    assert found["agree_use"] == 1.0 and found["agree_bm25"] == 1.0
    # Memory 3 not eligible: e5's best is 7, which holds no word and which USE puts first.
    eligible[3] = False
    found = dict(zip(FEATURES, gate_features(0.05, strength, use, e5, bm25, words, words, eligible)))
    assert found["e5_top"] == pytest.approx(0.85) and found["words_at_e5"] == 0.0 and found["agree_bm25"] == 0.0
    assert found["agree_use"] == 1.0


def test_the_gate_scores_standardised_features_against_its_threshold() -> None:
    gate = AnswerGate(means=(1.0, 2.0), scales=(2.0, 4.0), weights=(1.0, -1.0), intercept=0.5, threshold=0.0)
    assert gate.score(np.array([3.0, 2.0])) == pytest.approx(1.5)
    assert gate.answers(np.array([3.0, 2.0])) and not gate.answers(np.array([-1.0, 10.0]))
    shipped = ANSWER_GATE
    assert len(shipped.means) == len(shipped.scales) == len(shipped.weights) == len(FEATURES)
    assert all(scale > 0 for scale in shipped.scales)


def _query(seed: int, use_top: float, use_level: float, e5_top: float, e5_level: float, e5_spread: float,
           hubness: float, count: int = 60) -> tuple[Signals, np.ndarray]:
    """A query's channels over ``count`` memories: memory 3 is each model's best, no memory holds
    the query's words; every memory's hubness is ``hubness``."""
    rng = np.random.default_rng(seed)
    use = rng.normal(use_level, 0.05, count).astype(np.float32)
    e5 = rng.normal(e5_level, e5_spread, count).astype(np.float32)
    use[3], e5[3] = use_top, e5_top
    none = np.zeros(count, dtype=np.float32)
    signals = Signals(semantic=use, words=none, near_words=none, fuzzy=none, exact=none, strong=None,
                      hubness=np.full(count, hubness, dtype=np.float32), bm25=none)
    return signals, e5


def test_once_e5_votes_the_gate_decides_where_the_floor_would_not() -> None:
    eligible = np.ones(60, dtype=bool)
    # e5 sets memory 3 far apart (a paraphrase USE misses: its best is weak, in a dense part of
    # the brain): the floor refuses, the gate answers.
    signals, e5 = _query(1, use_top=0.25, use_level=0.15, e5_top=0.95, e5_level=0.80, e5_spread=0.01, hubness=0.7)
    assert not matches_well(signals, eligible)
    assert answer_decision(signals, eligible, e5)
    assert not answer_decision(signals, eligible, None)  # before e5 votes: the floor
    # A stranger: USE's best sits in a sparse corner of the brain (the floor lets it through),
    # but e5 sets nothing apart and no memory holds the query's words: the gate refuses.
    signals, e5 = _query(1, use_top=0.33, use_level=0.20, e5_top=0.765, e5_level=0.76, e5_spread=0.02, hubness=0.1)
    assert matches_well(signals, eligible)
    assert not answer_decision(signals, eligible, e5)
    assert answer_decision(signals, eligible, None)
    # Either way the decision is the gate's over the query's features.
    features = gate_features(floor_margin(signals, eligible), signals.semantic, signals.semantic, e5, signals.bm25,
                             signals.words, signals.near_words, eligible)
    assert answer_decision(signals, eligible, e5) == ANSWER_GATE.answers(features)


def _near_and_far(cascade: Cascade, eligible: np.ndarray) -> dict[str, tuple]:  # type: ignore[type-arg]
    """A synthetic query the first gate scores inside ``cascade``'s band ("near") and one outside
    it ("far"), each as (signals, e5, features, score): e5's best rising from query to query."""
    found: dict[str, tuple] = {}  # type: ignore[type-arg]
    for seed in range(600):
        e5_top = 0.79 + 0.002 * (seed % 80)
        signals, e5 = _query(seed, use_top=0.3, use_level=0.2, e5_top=e5_top, e5_level=0.79, e5_spread=0.01, hubness=0.4)
        features = gate_features(floor_margin(signals, eligible), signals.semantic, signals.semantic, e5, signals.bm25,
                                 signals.words, signals.near_words, eligible)
        score = ANSWER_GATE.score(features)
        found.setdefault("near" if cascade.asks(score) else "far", (signals, e5, features, score))
    return found


def test_the_cascade_reads_the_query_as_a_passage_only_near_the_threshold() -> None:
    assert len(PASSAGE_GATE.weights) == len(PASSAGE_GATE.means) == len(PASSAGE_FEATURES) == len(FEATURES) + 1
    assert CASCADE.low < ANSWER_GATE.threshold < CASCADE.high and CASCADE.gate is PASSAGE_GATE
    eligible = np.ones(60, dtype=bool)
    asked: list[str] = []

    def alike_of(values: np.ndarray):  # type: ignore[no-untyped-def]
        def alike() -> np.ndarray:
            asked.append("alike")
            return values
        return alike

    rng = np.random.default_rng(5)
    found = _near_and_far(CASCADE, eligible)
    assert set(found) == {"near", "far"}, "the synthetic queries should fall both near and far from the threshold"
    # Far from the threshold the first gate decides and the second e5 pass never runs.
    signals, e5, features, score = found["far"]
    assert answer_decision(signals, eligible, e5, alike=alike_of(rng.uniform(0.7, 0.9, 60))) == (
        score >= ANSWER_GATE.threshold)
    assert asked == []
    # Near it the second gate decides, over the query's resemblance: a query whose best memory also
    # stands out as a lookalike (a large alike gap) is less likely an answer than one that does not.
    signals, e5, features, score = found["near"]
    flat = np.full(60, 0.8, np.float32)
    flat[0] = 0.8001
    standout = flat.copy()
    standout[3] = 0.99
    decisions = [answer_decision(signals, eligible, e5, alike=alike_of(values)) for values in (flat, standout)]
    assert asked == ["alike", "alike"]
    assert decisions == [PASSAGE_GATE.answers(np.append(features, alike_gap(values, eligible))) for values in (flat, standout)]
    assert PASSAGE_GATE.score(np.append(features, alike_gap(flat, eligible))) > PASSAGE_GATE.score(
        np.append(features, alike_gap(standout, eligible)))
    # No passage vector to be had (e5's kernels unavailable): the first gate decides.
    assert answer_decision(signals, eligible, e5, alike=lambda: None) == (score >= ANSWER_GATE.threshold)


def test_alike_gap_reads_the_eligible_memories_only() -> None:
    values = np.linspace(0.5, 0.9, 30).astype(np.float32)
    eligible = np.ones(30, dtype=bool)
    assert alike_gap(values, eligible) == pytest.approx(float(values[29] - values[20]))
    eligible[29] = False
    assert alike_gap(values, eligible) == pytest.approx(float(values[28] - values[19]))


def test_a_small_brain_keeps_the_strength_floor() -> None:
    count = Z_POPULATION - 1
    signals, e5 = _query(1, use_top=0.25, use_level=0.15, e5_top=0.95, e5_level=0.80, e5_spread=0.01, hubness=0.7,
                         count=count)
    eligible = np.ones(count, dtype=bool)
    assert answer_decision(signals, eligible, e5) == matches_well(signals, eligible) is False
    # Only the eligible memories count: a populated brain with too few of them eligible too.
    signals, e5 = _query(1, use_top=0.25, use_level=0.15, e5_top=0.95, e5_level=0.80, e5_spread=0.01, hubness=0.7)
    eligible = np.zeros(60, dtype=bool)
    eligible[: Z_POPULATION - 1] = True
    assert answer_decision(signals, eligible, e5) is False
    eligible[:] = False
    assert answer_decision(signals, eligible, e5) is False  # nothing eligible: nothing answers


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 80), seed=st.integers(0, 2**16), flat=st.booleans(), eligible_share=st.floats(0.0, 1.0))
def test_any_channels_give_a_decision(count: int, seed: int, flat: bool, eligible_share: float) -> None:
    # Flat channels (every memory alike), a few memories, few eligible: always a plain bool, never
    # an error; with nothing eligible, never an answer.
    rng = np.random.default_rng(seed)
    use = np.full(count, 0.4, np.float32) if flat else rng.uniform(-0.2, 1.0, count).astype(np.float32)
    e5 = np.full(count, 0.8, np.float32) if flat else rng.uniform(0.6, 1.0, count).astype(np.float32)
    words = np.zeros(count, np.float32) if flat else rng.uniform(0.0, 1.0, count).astype(np.float32)
    signals = Signals(semantic=use, words=words, near_words=words, fuzzy=words, exact=np.zeros(count, np.float32),
                      strong=None, hubness=np.full(count, np.nan, np.float32), bm25=words * 3)
    eligible = rng.uniform(0.0, 1.0, count) < eligible_share
    decided = answer_decision(signals, eligible, e5)
    assert isinstance(decided, bool)
    assert not eligible.any() and decided is False or eligible.any()
