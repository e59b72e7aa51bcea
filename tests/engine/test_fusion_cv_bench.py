"""bench/fusion_cv.py: its folds, figures and fit, and that its candidates rank through the
connector's own fusion (a query-adaptive candidate with every power 0 is the fusion itself)."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np

from connector.engine.recall.channelfusion import CHANNEL_FUSION, standout
from connector.engine.recall.hybrid import Signals
from tests.engine.conftest import REPO_ROOT, synthetic_channels

sys.path.insert(0, str(REPO_ROOT / "bench"))
import fusion_cv  # type: ignore[import-not-found]  # noqa: E402
import locomo  # type: ignore[import-not-found]  # noqa: E402

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def _tab() -> fusion_cv.Table:
    rows = [("locomo", "locomo-1", "single-hop", True), ("locomo", "locomo-1", "no-answer", False),
            ("locomo", "locomo-2", "single-hop", True), ("quality", "rq", "synonym", True),
            ("quality", "rq", "synonym", True), ("quality", "rq", "no-answer", False), ("quality", "rq", "no-answer", False)]
    half = np.array([0, 0, 1, 0, 1, 0, 1])  # answerable and no-answer queries alternate per set
    return fusion_cv.Table(*(np.array(column) for column in zip(*rows)), half=half)


def test_folds_hold_out_one_conversation_and_one_quality_half() -> None:
    tab = _tab()
    folds = fusion_cv.folds(tab)
    assert [name for name, _ in folds] == ["locomo-1 + quality half 0", "locomo-1 + quality half 1",
                                          "locomo-2 + quality half 0", "locomo-2 + quality half 1"]
    assert folds[0][1].tolist() == [True, True, False, True, False, True, False]
    assert folds[3][1].tolist() == [False, False, True, False, True, False, True]


def test_figures_count_recall_mrr_and_no_answer_hits() -> None:
    tab = _tab()
    # (rank of the first answer, 0: none; how many listed)
    result = np.array([[3, 10], [0, 4], [7, 10], [1, 5], [0, 10], [0, 0], [0, 2]])
    found = fusion_cv.figures(result, tab, np.ones(7, dtype=bool))
    assert found["locomo"]["r5"] == 0.5 and found["locomo"]["r10"] == 1.0 and found["locomo"]["hits"] == 4.0
    assert found["quality"]["r5"] == 0.5 and found["quality"]["mrr"] == 0.5
    assert found["quality"]["empty"] == 0.5 and found["quality"]["hits"] == 1.0
    assert found["quality"]["hits5"] == {"synonym": 1}
    # Losing one query to the best single channel of a category is allowed, the second is counted.
    single = {"quality": {"synonym": 3}, "locomo": {"single-hop": 1}}
    assert fusion_cv.lost({"quality": {"hits5": {"synonym": 1}}, "locomo": {"hits5": {"single-hop": 1}}},
                          {"e5": {g: {"hits5": v} for g, v in single.items()}}) == 1


def _prepared() -> locomo.Prepared:
    count = 60
    semantic, e5, words, bm25 = synthetic_channels(
        count, 3, model_tops={4: (0.42, 0.84), 9: (0.41, 0.92)}, word_hits={4: 0.5, 20: 0.5}, e5_spread=0.02)
    signals = Signals(semantic=semantic, words=words, near_words=words, fuzzy=np.zeros(count, np.float32),
                      exact=np.zeros(count, np.float32), strong=None, hubness=np.zeros(count, np.float32), e5=e5, bm25=bm25)
    query = locomo.Query("a question", NOW, "single-hop", ["m9"], "q1")
    case = locomo.Case(query=query, eligible=np.ones(count, dtype=bool), exact_rank=[], exact=signals.exact, bm25=bm25,
                       use=semantic, e5=e5, signals=signals)
    brainset = locomo.Brainset("locomo-x", "locomo", None, [query], "evidence")  # type: ignore[arg-type]
    return locomo.Prepared(brainset, [f"m{n}" for n in range(count)], [case], [f"s{n // 10}" for n in range(count)])


def test_candidates_rank_through_the_connectors_fusion() -> None:
    prepared = _prepared()
    case = prepared.cases[0]
    fixed = locomo.fusion_ranking(case, prepared, fusion_cv.FIXED)
    same = fusion_cv.Candidate("adaptive", "powers 0", replace(fusion_cv.FIXED, adapt_models=0.0, adapt_words=0.0))
    assert fusion_cv.ranking(case, prepared, same) == fixed and fixed[:2] == [9, 4]
    # Words weighed high: the memory holding the query's words leads. Weighing each model by its
    # own gap (1st to 10th best, z-scores) then lets e5, which sets memory 9 far apart, lead.
    heavy_words = fusion_cv.Candidate("weights", "words", replace(fusion_cv.FIXED, bm25=4.0))
    assert fusion_cv.ranking(case, prepared, heavy_words)[0] == 4
    assert standout(case.e5, case.eligible) > 2 * standout(case.signals.semantic, case.eligible)
    gap = fusion_cv.Candidate("adaptive", "gap", replace(fusion_cv.FIXED, bm25=4.0, adapt_models=2.0))
    assert fusion_cv.ranking(case, prepared, gap)[:2] == [9, 4]
    # The shipped fusion is one of the candidates of the families it was fitted in (its weights in
    # session 17's, keeping e5's best in session 18's).
    family = [c.fusion for c in fusion_cv.candidates() if c.family == "adaptive e5 regime"]
    assert replace(CHANNEL_FUSION, e5_best_within=None) in family
    assert CHANNEL_FUSION in [c.fusion for c in fusion_cv.candidates() if c.family == "e5 best"]


def test_the_follow_family_reaches_further_and_before_through_the_connectors_fusion() -> None:
    found = {c.name: c for c in fusion_cv.candidates()}
    assert len(found) == len(fusion_cv.candidates())  # results are keyed by name
    family = [c for c in found.values() if c.family == "follow"]
    assert {(c.fusion.follow, c.fusion.follow_reach, c.fusion.follow_before) for c in family} == {
        (follow, reach, before) for follow in (1, 2, 3) for reach in (1, 2) for before in (False, True)}
    prepared = _prepared()
    case = prepared.cases[0]

    def ranked(name: str) -> list[int]:  # the family's following, on the fixed weights (both 9 and 4 listed)
        fusion = found[name].fusion
        return fusion_cv.ranking(case, prepared, fusion_cv.Candidate("follow", name, replace(
            fusion_cv.FIXED, follow=fusion.follow, follow_reach=fusion.follow_reach, follow_before=fusion.follow_before)))

    # Memory 9 leads and is the last turn of its session (0-9): nothing after it, the two before it.
    assert ranked("follow 1 reach 1") == [9, 4]
    assert ranked("follow 1 reach 2 and before") == [9, 4, 8, 7]
    # The first two: the turns after at one (5, after 4), before at one (8 and 3, by score), after
    # at two (6), before at two (7 and 2).
    assert ranked("follow 2 reach 2 and before") == [9, 4, 5, 3, 8, 6, 7, 2]
    assert ranked("follow 2 reach 1") == [9, 4, 5]
