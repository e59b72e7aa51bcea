"""bench/gate_cv.py: the answer-decision features read what the channels say about the query's
best memories, the logistic fit separates what it is given, and a decision only chooses between
the fusion's own listing and nothing."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.engine.conftest import REPO_ROOT, synthetic_channels

sys.path.insert(0, str(REPO_ROOT / "bench"))
import gate_cv  # type: ignore[import-not-found]  # noqa: E402


def test_features_describe_the_best_memories_of_each_channel() -> None:
    count = 40
    use, e5, words, bm25 = synthetic_channels(
        count, 5, model_tops={3: (0.6, 0.9), 7: (0.5, 0.85)}, word_hits={3: 0.5, 11: 1.0}, e5_spread=0.01)
    strength = use + 0.3 * words
    eligible = np.ones(count, dtype=bool)
    found = dict(zip(gate_cv.FEATURES, gate_cv.gate_features(0.05, strength, use, e5, bm25, words, words, eligible)))
    assert found["floor_margin"] == 0.05 and found["e5_top"] == pytest.approx(0.9) and found["use_top"] == pytest.approx(0.6)
    assert found["strength"] == pytest.approx(max(0.6 + 0.15, float(use[11]) + 0.3))
    assert found["e5_zgap"] == pytest.approx((0.9 - 0.85) / float(e5.std()), rel=1e-4)
    assert found["words"] == 1.0 and found["words_at_e5"] == 0.5 and found["bm25_at_e5"] == 0.5
    assert found["agree_use"] == 1.0 and found["agree_bm25"] == 1.0
    # Memory 3 not eligible: e5's best is 7, which holds no word and which USE puts first.
    eligible[3] = False
    found = dict(zip(gate_cv.FEATURES, gate_cv.gate_features(0.05, strength, use, e5, bm25, words, words, eligible)))
    assert found["e5_top"] == pytest.approx(0.85) and found["words_at_e5"] == 0.0 and found["agree_bm25"] == 0.0
    assert found["agree_use"] == 1.0


def test_the_logistic_fit_separates_and_the_gate_scores_standardised_features() -> None:
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(1.0, 0.3, (40, 2)), rng.normal(-1.0, 0.3, (40, 2))])
    y = np.concatenate([np.ones(40), np.zeros(40)])
    weights, intercept = gate_cv.logistic(x, y, l2=0.1)
    assert (weights > 0).all() and np.mean(((x @ weights + intercept) >= 0) == (y == 1)) == 1.0
    gate = gate_cv.AnswerGate(means=(1.0, 2.0), scales=(2.0, 4.0), weights=(1.0, -1.0), intercept=0.5, threshold=0.0)
    assert gate.score(np.array([3.0, 2.0])) == pytest.approx(1.5)
    assert gate.answers(np.array([3.0, 2.0])) and not gate.answers(np.array([-1.0, 10.0]))


def test_a_decision_picks_the_answered_or_the_empty_outcome() -> None:
    outcomes = gate_cv.Outcomes(passed=np.array([[1, 10], [3, 4]]), blocked=np.array([[0, 0], [0, 1]]),
                                floor=np.array([[1, 10], [0, 1]]))
    assert outcomes.under(np.array([True, False])).tolist() == [[1, 10], [0, 1]]
