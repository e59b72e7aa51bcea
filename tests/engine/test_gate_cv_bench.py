"""bench/gate_cv.py: the logistic fit separates what it is given, and a decision only chooses
between the fusion's own listing and nothing (the features and the shipped gate:
tests/engine/test_answergate.py)."""

from __future__ import annotations

import sys

import numpy as np

from tests.engine.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import gate_cv  # type: ignore[import-not-found]  # noqa: E402


def test_the_logistic_fit_separates_and_the_gate_scores_standardised_features() -> None:
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(1.0, 0.3, (40, 2)), rng.normal(-1.0, 0.3, (40, 2))])
    y = np.concatenate([np.ones(40), np.zeros(40)])
    weights, intercept = gate_cv.logistic(x, y, l2=0.1)
    assert (weights > 0).all() and np.mean(((x @ weights + intercept) >= 0) == (y == 1)) == 1.0


def test_a_decision_picks_the_answered_or_the_empty_outcome() -> None:
    outcomes = gate_cv.Outcomes(passed=np.array([[1, 10], [3, 4]]), blocked=np.array([[0, 0], [0, 1]]),
                                floor=np.array([[1, 10], [0, 1]]))
    assert outcomes.under(np.array([True, False])).tolist() == [[1, 10], [0, 1]]
