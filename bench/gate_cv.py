#!/usr/bin/env python3
"""The learned answer decision of hybrid recall with e5, by cross-validation (shipped in session 18).

Whether a query is answered at all (hybrid recall lists nothing but a strong exact hit
otherwise) limits recall-quality's recall@5 and the no-answer queries' emptiness at once.
The strength floor (`hybrid.matches_well`, USE's cosine, word coverage and hubness) decided
alone until session 18, and still does before e5 votes. This script fits a small logistic
model over what the channels say about the query's best memories
(`connector/engine/recall/answergate.py`'s `FEATURES`: the floor's own margin, each model's
best cosine and how far it stands out of the brain, the words the best memories hold,
whether the channels agree; every feature read from this brain for this query) in its place
once e5 votes, scores it held out beside the strength floor alone, and ``--fit`` prints the
model fitted on every set (what `answergate.ANSWER_GATE` ships, and whether it still is):

- positives: the answered queries of every set whose answer the fusion lists in its first
  ten without any gate; negatives: recall-quality's no-answer queries. LoCoMo's adversarial
  questions are scored, not fitted: they ask about the conversation's own topics (a fact
  of the other speaker), which no decision by topic can tell from a real question;
- the model: features standardised on the fitting part, L2-regularised logistic regression
  (``--l2``); the threshold (log-odds of "answered") chosen on the fitting part among
  `THRESHOLDS`: the most no-answer queries returning nothing there while keeping every
  figure of the strength floor alone there and at most 2 hits (``--threshold``: fixed);
- folds (as bench/fusion_cv.py): each LoCoMo conversation held out with one half of
  recall-quality (answerable and no-answer queries alternately), fitted on the rest: ten
  folds, each figure the mean over folds, beside the strength floor alone on the same
  held-out queries. Every ranking is the connector's own (bench/locomo.py's
  ``fusion_ranking``: the shipped fusion and listing, only the answer decision differs).

``--cascade BAND`` scores the cascade instead (`answergate.CASCADE`): a second gate over
PASSAGE_FEATURES (the fourteen and the query embedded as a passage), fitted on the same part,
decides the queries the first scores within BAND of its threshold; with ``--fit`` it fits that
second gate (`answergate.PASSAGE_GATE`).

``--fit`` also fits on every set (coefficients and in-sample figures); ``--grid`` scores each
fixed threshold (held out: a choice among them made by looking would be fitted on the
held-out parts, so they are reported, not chosen); ``--features`` fits on a subset.
Results: docs/recall.md ("A learned answer decision, by cross-validation").

Usage::

    .venv/bin/python bench/locomo.py --keep /tmp/chan              # the sets' channels, kept
    .venv/bin/python bench/gate_cv.py --keep /tmp/chan --verbose   # ten folds, each fold's figures
    .venv/bin/python bench/gate_cv.py --keep /tmp/chan --grid      # and each fixed threshold
    .venv/bin/python bench/gate_cv.py --keep /tmp/chan --fit       # and the model fitted on every set
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import fusion_cv  # noqa: E402
import locomo  # noqa: E402

from connector.engine.recall.answergate import (  # noqa: E402
    ANSWER_GATE,
    CASCADE,
    FEATURES,
    JUDGE_FEATURES,
    JUDGED_CASCADE,
    PASSAGE_FEATURES,
    AnswerGate,
    alike_gap,
    judge_candidates,
)
from connector.engine.recall.channelfusion import CHANNEL_FUSION  # noqa: E402
from connector.engine.recall.hybrid import answer_features, matches_well  # noqa: E402
from connector.engine.recall.judge import judge_reads  # noqa: E402

UNGATED = replace(CHANNEL_FUSION, gate=False)

@dataclass
class Rows:
    """Per query of every set (flat, e5 present): features, labels and where it belongs."""

    features: np.ndarray  # (queries, len(FEATURES))
    group: np.ndarray
    brain: np.ndarray
    category: np.ndarray
    answerable: np.ndarray
    found: np.ndarray  # answerable and listed in the first ten by the ungated fusion
    half: np.ndarray
    cases: list[tuple[locomo.Prepared, locomo.Case]]
    alike: np.ndarray  # PASSAGE_FEATURES' last: the query as a passage (nan where the pickles lack it)
    judged: np.ndarray  # JUDGE_FEATURES' last two: (queries, 2), nan where the pickles lack the judge

    def with_alike(self) -> Rows:
        """The same queries over PASSAGE_FEATURES (the cascade's second gate)."""
        if np.isnan(self.alike).any():
            raise SystemExit("these channels lack the query embedded as a passage: run bench/locomo.py --keep anew")
        return replace(self, features=np.column_stack([self.features, self.alike]))

    def with_judge(self) -> Rows:
        """The same queries over JUDGE_FEATURES (the judged cascade's second gate)."""
        if np.isnan(self.judged).any():
            raise SystemExit("these channels lack the judge's cosines: run bench/locomo.py --keep anew")
        alike = self.with_alike()
        return replace(alike, features=np.column_stack([alike.features, self.judged]))


def features_of(case: locomo.Case) -> np.ndarray:
    """The gate's features of a query, as hybrid recall reads them (`hybrid.answer_features`)."""
    return answer_features(case.signals, case.eligible, case.e5)


def first_answer(case: locomo.Case, item: locomo.Prepared, ranked: Sequence[int]) -> int:
    position = {memory_id: n for n, memory_id in enumerate(item.ids)}
    gold = {position[memory_id] for memory_id in case.query.gold}
    return next((n + 1 for n, p in enumerate(ranked) if p in gold), 0)


def rows(prepared: Sequence[locomo.Prepared]) -> Rows:
    cases = [(item, case) for item in prepared for case in item.cases if case.e5 is not None]
    found = [bool(case.query.gold) and first_answer(case, item, locomo.fusion_ranking(case, item, UNGATED)) > 0
             for item, case in cases]
    tab = fusion_cv.table([locomo.Prepared(item.brainset, item.ids, [case], item.folders) for item, case in cases])
    alike = [alike_gap(case.e5_alike, case.eligible) if getattr(case, "e5_alike", None) is not None else np.nan
             for _, case in cases]
    return Rows(np.array([features_of(case) for _, case in cases]), tab.group, tab.brain, tab.category, tab.answerable,
                np.array(found), tab.half, cases, np.array(alike), np.array([judged_of(case) for _, case in cases]))


def judged_of(case: locomo.Case) -> np.ndarray:
    """JUDGE_FEATURES' last two, as `hybrid.answer_decision` reads them (nan without the judge's cosines)."""
    cosines = getattr(case, "judge", None)
    if cosines is None:
        return np.full(2, np.nan)
    if not judge_reads(case.query.text):
        return np.zeros(2)
    signals = case.signals
    bm25 = signals.bm25 if signals.bm25 is not None else np.zeros(len(case.eligible), dtype=np.float32)
    return np.array([1.0, float(cosines[judge_candidates(case.e5, signals.semantic, bm25, case.eligible)].max())])


def logistic(x: np.ndarray, y: np.ndarray, l2: float, steps: int = 3000, rate: float = 0.1) -> tuple[np.ndarray, float]:
    """Weights and intercept of an L2-regularised logistic regression (gradient descent; x standardised)."""
    weights, intercept = np.zeros(x.shape[1]), 0.0
    for _ in range(steps):
        error = 1.0 / (1.0 + np.exp(-(x @ weights + intercept))) - y
        weights -= rate * (x.T @ error / len(y) + l2 * weights / len(y))
        intercept -= rate * float(error.mean())
    return weights, intercept


def fit(data: Rows, mask: np.ndarray, l2: float, threshold: float | None, outcomes: Outcomes) -> AnswerGate:
    """The gate fitted on the queries of ``mask`` (see the module's docstring); ``threshold`` None:
    chosen on ``mask`` too (`choose_threshold`)."""
    means = data.features[mask].mean(axis=0)
    scales = data.features[mask].std(axis=0)
    scales = np.where(scales > 1e-9, scales, 1.0)
    used = mask & (data.found | (~data.answerable & (data.group == "quality")))
    standard = (data.features - means) / scales
    weights, intercept = logistic(standard[used], data.found[used].astype(float), l2)
    gate = AnswerGate(tuple(float(v) for v in means), tuple(float(v) for v in scales),
                      tuple(float(v) for v in weights), float(intercept), 0.0)
    if threshold is None:
        threshold = choose_threshold(data, mask, standard @ weights + intercept, outcomes)
    return replace(gate, threshold=threshold)


# Thresholds (on the logistic score, the log-odds of "answered") a fit chooses among.
THRESHOLDS = (-0.5, -0.75, -1.0, -1.25, -1.5, -2.0, -2.5, -3.0)


def choose_threshold(data: Rows, mask: np.ndarray, scores: np.ndarray, outcomes: Outcomes) -> float:
    """The threshold returning nothing for the most no-answer queries of ``mask`` while keeping
    every figure of the strength floor alone there (LoCoMo recall@5 and @10, recall-quality
    recall@5 and MRR@10) and listing at most 2 hits for a no-answer query; the lowest (most
    permissive) when none does."""
    floor = figures(data, mask, outcomes.floor)
    best_key, chosen = None, THRESHOLDS[-1]
    for threshold in THRESHOLDS:
        found = figures(data, mask, outcomes.under(scores >= threshold))
        keeps = all(found[g][m] >= floor[g][m] - 1e-9 for g, m in (("locomo", "r5"), ("locomo", "r10"), ("quality", "r5"), ("quality", "mrr")))
        ok = keeps and found["quality"]["hits"] <= 2.0
        key = (ok, found["quality"]["empty"] if ok else 0.0, threshold if ok else -threshold)
        if best_key is None or key > best_key:
            best_key, chosen = key, threshold
    return chosen


@dataclass
class Outcomes:
    """Per query: its first answer in the first ten (0: none) and how many hits, when answered and when
    not (only a strong exact hit), and under the strength floor alone."""

    passed: np.ndarray  # (queries, 2)
    blocked: np.ndarray
    floor: np.ndarray

    def under(self, decisions: np.ndarray) -> np.ndarray:
        return np.where(decisions[:, None], self.passed, self.blocked)


def outcomes_of(data: Rows) -> Outcomes:
    def run(decide: Any) -> np.ndarray:
        return np.array([outcome(data, n, decide(case)) for n, (_, case) in enumerate(data.cases)], dtype=np.int64)
    return Outcomes(run(lambda case: True), run(lambda case: False), run(lambda case: matches_well(case.signals, case.eligible)))


def outcome(data: Rows, index: int, decision: bool) -> tuple[int, int]:
    """The query's first answer in the first ten (0: none) and how many hits, under ``decision``."""
    item, case = data.cases[index]
    ranked = locomo.fusion_ranking(case, item, CHANNEL_FUSION, gate=decision)
    return first_answer(case, item, ranked), len(ranked)


def figures(data: Rows, held: np.ndarray, results: np.ndarray) -> dict[str, dict[str, float]]:
    first, listed = results[:, 0], results[:, 1]
    out = {}
    for group in ("locomo", "quality"):
        answered = held & (data.group == group) & data.answerable
        unanswerable = held & (data.group == group) & ~data.answerable
        f = first[answered]
        out[group] = {"r5": float(np.mean((f > 0) & (f <= 5))), "r10": float(np.mean(f > 0)),
                      "mrr": float(np.mean(np.where(f > 0, 1.0 / np.maximum(f, 1), 0.0))),
                      "empty": float(np.mean(listed[unanswerable] == 0)), "hits": float(np.mean(listed[unanswerable]))}
    return out


def describe(found: dict[str, dict[str, float]]) -> str:
    lo, qu = found["locomo"], found["quality"]
    return (f"LoCoMo {lo['r5']:.3f} / {lo['r10']:.3f}, adversarial {lo['empty']:.0%} empty {lo['hits']:.2f} hits; "
            f"quality {qu['r5']:.3f} / {qu['mrr']:.3f}, no-answer {qu['empty']:.0%} empty {qu['hits']:.2f} hits")


def mean_figures(parts: Sequence[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {group: {key: float(np.mean([part[group][key] for part in parts])) for key in parts[0][group]} for group in parts[0]}


def cascade_decisions(data: Rows, first: AnswerGate, second: AnswerGate | None, band: float) -> np.ndarray:
    """Per query: ``first`` decides, except within ``band`` of its threshold, where ``second``
    (over PASSAGE_FEATURES) does, as `hybrid.answer_decision` with `answergate.CASCADE`."""
    width = len(FEATURES)
    decisions = []
    for row in data.features:
        score = first.score(row[:width])
        asked = second is not None and first.threshold - band <= score < first.threshold + band
        decisions.append(second.answers(row) if asked else score >= first.threshold)
    return np.array(decisions)


def cross_validate(data: Rows, outcomes: Outcomes, l2: float, threshold: float | None,
                   verbose: bool, band: float | None = None) -> tuple[dict, dict, np.ndarray, list[float]]:
    """Held-out figures of the fitted gate and of the strength floor alone, mean over folds; per
    query the held-out hit@5, times held out and 1/rank of the gate, summed over folds; each fold's
    threshold. ``band``: the cascade (``data`` over PASSAGE_FEATURES), a second gate fitted on
    the same part deciding within ``band`` of the first's threshold."""
    gated, alone, thresholds = [], [], []
    per_query = np.zeros((len(data.group), 3))
    tab = fusion_cv.Table(data.group, data.brain, data.category, data.answerable, data.half)
    first_rows = replace(data, features=data.features[:, : len(FEATURES)])
    for name, held in fusion_cv.folds(tab):
        gate = fit(first_rows, ~held, l2, threshold, outcomes)
        second = fit(data, ~held, l2, threshold, outcomes) if band is not None else None
        thresholds.append(gate.threshold)
        results = outcomes.under(cascade_decisions(data, gate, second, band or 0.0))
        first = results[held, 0]
        per_query[held] += np.stack([(first > 0) & (first <= 5), np.ones(len(first)),
                                     np.where(first > 0, 1.0 / np.maximum(first, 1), 0.0)], axis=1)
        gated.append(figures(data, held, results))
        alone.append(figures(data, held, outcomes.floor))
        if verbose:
            print(f"  {name} (threshold {gate.threshold}):\n    gate  {describe(gated[-1])}\n    floor {describe(alone[-1])}")
    return mean_figures(gated), mean_figures(alone), per_query, thresholds


def category_table(data: Rows, outcomes: Outcomes, per_query: np.ndarray) -> None:
    """recall-quality per category: the gate held out (mean over folds) beside the strength floor and e5 alone."""
    floor = outcomes.floor
    singles = {name: np.array([first_answer(case, item, locomo.channel_ranking(case, item.ids, name)) for item, case in data.cases])
               for name in ("use", "e5")}
    print("\nrecall-quality per category, r@5 / MRR@10 (gate: held out, mean over folds)")
    print(f"{'category':<16} {'n':>4} {'use':>14} {'e5':>14} {'floor alone':>14} {'gate':>14}")
    answered = (data.group == "quality") & data.answerable
    for category in [*sorted(set(data.category[answered])), "overall"]:
        rows_ = answered if category == "overall" else answered & (data.category == category)
        cells = []
        for first in (singles["use"], singles["e5"], floor[:, 0]):
            f = first[rows_]
            cells.append(f"{np.mean((f > 0) & (f <= 5)):>7.3f} {np.mean(np.where(f > 0, 1.0 / np.maximum(f, 1), 0.0)):>6.3f}")
        times = np.maximum(per_query[rows_, 1], 1)
        cells.append(f"{np.mean(per_query[rows_, 0] / times):>7.3f} {np.mean(per_query[rows_, 2] / times):>6.3f}")
        print(f"{category:<16} {int(rows_.sum()):>4} " + " ".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fusion_cv.channel_arguments(parser)
    parser.add_argument("--threshold", type=float, default=None, help="a fixed threshold (log-odds) instead of the fit's choice")
    parser.add_argument("--l2", type=float, default=0.1, help="L2 regularisation of the logistic regression")
    parser.add_argument("--grid", action="store_true", help="also score each fixed threshold and l2 1.0 (held out)")
    parser.add_argument("--fit", action="store_true", help="fit on every set and print the AnswerGate")
    parser.add_argument("--features", default="", help="comma-separated: fit on these features only (default: all)")
    parser.add_argument("--cascade", type=float, default=None, metavar="BAND",
                        help="a second gate over PASSAGE_FEATURES deciding within BAND of the first's threshold "
                             "(the shipped CASCADE: 0.5); --fit then fits that gate")
    parser.add_argument("--judge", action="store_true",
                        help="with --cascade: the judged cascade's second gate, over JUDGE_FEATURES (the shipped "
                             "JUDGED_CASCADE: --cascade 3 --threshold -2.0); --fit then fits that gate")
    args = parser.parse_args(argv)
    if args.judge and args.cascade is None:
        parser.error("--judge needs --cascade BAND")
    data = rows(fusion_cv.load(args.keep, args.cache_dir))
    if args.judge:
        data = data.with_judge()
    elif args.cascade is not None:
        data = data.with_alike()
    if args.features:
        # The other features held constant: standardised to 0, they do not vote.
        unused = [n for n, name in enumerate(FEATURES) if name not in args.features.split(",")]
        data.features[:, unused] = 0.0
    outcomes = outcomes_of(data)
    print(f"{len(data.group)} queries with e5: {int(data.found.sum())} answered within ten without a gate, "
          f"{int((~data.answerable & (data.group == 'quality')).sum())} no-answer (recall-quality), "
          f"{int((~data.answerable & (data.group == 'locomo')).sum())} adversarial (LoCoMo, scored only)")
    gated, alone, per_query, thresholds = cross_validate(data, outcomes, args.l2, args.threshold, args.verbose,
                                                         args.cascade)
    chosen = "fixed" if args.threshold is not None else "chosen per fold: " + ", ".join(f"{t:g}" for t in thresholds)
    print(f"\nten folds, held out (l2 {args.l2}; threshold {chosen}):\n  gate         {describe(gated)}\n"
          f"  floor alone  {describe(alone)}")
    category_table(data, outcomes, per_query)
    if args.grid:
        print("\nfixed thresholds, held out (mean over the ten folds):")
        for l2 in (args.l2, 1.0):
            for threshold in THRESHOLDS:
                found = cross_validate(data, outcomes, l2, threshold, False, args.cascade)[0]
                print(f"  threshold {threshold:<5} l2 {l2:<4} {describe(found)}")
    everything = np.ones(len(data.group), dtype=bool)
    if args.fit:
        gate = fit(data, everything, args.l2, args.threshold, outcomes)
        print("\nfitted on every set:")
        print("AnswerGate(")
        for name in ("means", "scales", "weights"):
            values = ", ".join(f"{v:.6g}" for v in getattr(gate, name))
            print(f"    {name}=({values}),")
        print(f"    intercept={gate.intercept:.6g},\n    threshold={gate.threshold:g},\n)")
        if args.cascade is None:
            shipped, names, decisions = ANSWER_GATE, FEATURES, np.array([gate.answers(row) for row in data.features])
        elif args.judge:  # the shipped first gate, centred on this one's threshold, this one within the band
            shipped, names = JUDGED_CASCADE.gate, JUDGE_FEATURES
            decisions = cascade_decisions(data, replace(ANSWER_GATE, threshold=gate.threshold), gate, args.cascade)
        else:  # the shipped first gate, this one within the band
            shipped, names = CASCADE.gate, PASSAGE_FEATURES
            decisions = cascade_decisions(data, ANSWER_GATE, gate, args.cascade)
        print(f"in sample: {describe(figures(data, everything, outcomes.under(decisions)))}")
        same = all(np.allclose(getattr(gate, name), getattr(shipped, name), rtol=1e-4) for name in
                   ("means", "scales", "weights", "intercept", "threshold"))
        label = "ANSWER_GATE" if args.cascade is None else "JUDGED_CASCADE.gate" if args.judge else "CASCADE.gate"
        print(f"the shipped {label} (answergate.py): " + ("the same" if same else "DIFFERENT: refit it"))
        print("features: " + ", ".join(f"{name} {weight:+.2f}" for name, weight in zip(names, gate.weights)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
