#!/usr/bin/env python3
"""Fit the similar-memory check's two logistic regressions on a labelled set, with a half split.

The check (connector/engine/tending/similar.py) examines the few memories closest in meaning to
an incoming memory and describes each pair by a handful of features (FEATURES there).
This script computes those features for every item of a memory-governance set, then:

1. splits the items in two halves (alternating within each label and language), fits on
   one half and scores the other with the README's metrics, both ways round;
   and prints what each flag threshold would give on the other half; then the same over
   ``--repeats`` random stratified half splits (mean held-out figures per threshold:
   FLAG_THRESHOLD is chosen from those, where one split's few items move less);
2. fits on all items and prints the constants to paste into similar.py
   (FLAG_WEIGHTS, KIND_WEIGHTS), with the metrics of that fit on the whole set.

The flag model learns P(pair is a duplicate or an update of the incoming memory) from
every examined pair; the kind model learns P(update | flagged pair) from the target
pairs. Both are L2-regularised logistic regressions (Newton steps) on standardised
features, folded back to weights on the raw features.

Usage::

    .venv/bin/python bench/similar_fit.py              # the development set
    .venv/bin/python bench/similar_fit.py PATH
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from similar_bench import DEFAULT_SET, incoming_of, judge, load_set, print_table, slices  # noqa: E402

from connector.engine.format.archive import load_directory  # noqa: E402
from connector.engine.recall.hybrid import HybridIndex  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.engine.tending.similar import (  # noqa: E402
    FEATURES, FLAG_ONLY, FLAG_THRESHOLD, Candidate, Model, candidates, decide,
)
from connector.workcopy.vectors import VectorStore  # noqa: E402

THRESHOLDS = (0.4, 0.45, 0.5, 0.55, 0.6, 0.65)
THRESHOLD_COLUMNS = ("dup_flag_recall", "update_flag_recall", "right_relation", "false_flags_related",
                     "false_flags_unrelated")
L2 = 3.0  # ridge on the standardised weights: few features, ~80 items per half (1.0 and 0.3 score alike)


def logistic_fit(x: np.ndarray, y: np.ndarray, l2: float = L2) -> np.ndarray:
    """Intercept and weights on the raw features of an L2 logistic regression (standardised inside)."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(100):
        p = 1 / (1 + np.exp(-np.clip(z @ w, -60, 60)))
        gradient = z.T @ (p - y) + penalty * w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    raw = w[1:] / scale
    return np.concatenate([[w[0] - float(raw @ mean)], raw])


def examine(set_dir: Path) -> tuple[list[dict[str, Any]], list[list[Candidate]]]:
    """The items of a set and the candidates the check examines for each."""
    brain_dir, items = load_set(set_dir)
    brain = load_directory(brain_dir)
    index = BrainIndex.build(brain)
    store = VectorStore()
    hybrid = HybridIndex.build(brain, index, store)
    examined = [
        candidates(brain, incoming_of(item), index=index, hybrid=hybrid, embed=store.embed_query)
        for item in items
    ]
    return items, examined


def fit(items: list[dict[str, Any]], examined: list[list[Candidate]]) -> Model:
    """Both models fitted on these items."""
    flag_x, flag_y, kind_x, kind_y = [], [], [], []
    for item, found in zip(items, examined, strict=True):
        targets = set(item.get("target") or [])
        for candidate in found:
            on_target = candidate.id in targets
            flag_x.append(candidate.features)
            flag_y.append(1.0 if on_target else 0.0)
            if on_target:
                kind_x.append(candidate.features)
                kind_y.append(1.0 if item["label"] == "update" else 0.0)
    flag = logistic_fit(np.array(flag_x), np.array(flag_y))
    # The kind model leaves FLAG_ONLY out: its weights for them are 0.
    used = np.array([name not in FLAG_ONLY for name in FEATURES])
    kind = np.zeros(len(FEATURES) + 1)
    kind[np.concatenate([[True], used])] = logistic_fit(np.array(kind_x)[:, used], np.array(kind_y))
    return Model(tuple(flag.tolist()), tuple(kind.tolist()))


def score(items: list[dict[str, Any]], examined: list[list[Candidate]], model: Model) -> dict[str, dict[str, Any]]:
    """The README's metrics of ``model`` on these items."""
    outcomes = [judge(item, [s.to_json() for s in decide(found, model=model)]) for item, found in zip(items, examined, strict=True)]
    return slices(items, outcomes)


def halves(items: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Item positions of two halves, alternating within each (label, language)."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    first, second = [], []
    for position, item in enumerate(items):
        key = (item["label"], item["lang"])
        (first if seen[key] % 2 == 0 else second).append(position)
        seen[key] += 1
    return first, second


def random_halves(items: list[dict[str, Any]], seed: int) -> tuple[list[int], list[int]]:
    """Item positions of two random halves, stratified by (label, language) (odd groups
    give their extra item to either half at random)."""
    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for position, item in enumerate(items):
        groups[(item["label"], item["lang"])].append(position)
    first, second = [], []
    for members in groups.values():
        rng.shuffle(members)
        cut = len(members) // 2 + (len(members) % 2 if rng.random() < 0.5 else 0)
        first += members[:cut]
        second += members[cut:]
    return first, second


REPEATED_COLUMNS = ("dup flag recall", "update flag recall", "right relation", "false flags related + unrelated",
                    "cross-lingual dup flag recall")


def held_out_figures(items: list[dict[str, Any]], outcomes: list[dict[str, Any]]) -> np.ndarray:
    """REPEATED_COLUMNS of some scored items."""
    row = slices(items, outcomes)["overall"]
    negatives = [o for item, o in zip(items, outcomes, strict=True) if item["label"] in ("related", "unrelated")]
    crossed = [o for item, o in zip(items, outcomes, strict=True)
               if item["label"] == "duplicate" and item.get("target_lang") not in (None, item["lang"])]
    return np.array([row["dup_flag_recall"], row["update_flag_recall"], row["right_relation"],
                     sum(o["any_flag"] for o in negatives) / len(negatives) if negatives else np.nan,
                     sum(o["hit"] for o in crossed) / len(crossed) if crossed else np.nan], dtype=float)


def repeated(items: list[dict[str, Any]], examined: list[list[Candidate]], repeats: int,
             show_misses: bool = False) -> None:
    """Held-out figures over ``repeats`` random half splits, both ways round, per flag threshold:
    the mean over the splits (each item scored once per split, by the model fitted on the other
    half) and the standard deviation over the 2 x ``repeats`` held-out halves; how many halves
    flag more than 0.10 of their related and unrelated items. ``show_misses``: the items missed
    (or flagged, for related and unrelated ones) on the held-out halves at FLAG_THRESHOLD, with
    how often."""
    pooled: dict[float, list[np.ndarray]] = {threshold: [] for threshold in THRESHOLDS}
    halves_of: dict[float, list[np.ndarray]] = {threshold: [] for threshold in THRESHOLDS}
    missed: dict[int, int] = defaultdict(int)
    for seed in range(repeats):
        first, second = random_halves(items, seed)
        models = [(fit([items[i] for i in train], [examined[i] for i in train]), test)
                  for train, test in ((first, second), (second, first))]
        for threshold in THRESHOLDS:
            outcomes: list[dict[str, Any]] = [{}] * len(items)
            for model, test in models:
                for i in test:
                    found = decide(examined[i], model=replace(model, threshold=threshold))
                    outcomes[i] = judge(items[i], [s.to_json() for s in found])
                    if threshold == FLAG_THRESHOLD and show_misses and (
                            outcomes[i]["any_flag"] if items[i]["label"] in ("related", "unrelated")
                            else not outcomes[i]["right"]):
                        missed[i] += 1
                halves_of[threshold].append(held_out_figures([items[i] for i in test], [outcomes[i] for i in test]))
            pooled[threshold].append(held_out_figures(items, outcomes))
    print(f"\n## {repeats} random half splits, both ways: held-out figures by flag threshold, mean over the "
          f"splits (standard deviation over the {2 * repeats} halves) (FLAG_THRESHOLD {FLAG_THRESHOLD})")
    print("| threshold | " + " | ".join(REPEATED_COLUMNS) + " | halves with false flags > 0.10 |")
    print("|---|" + "---:|" * (len(REPEATED_COLUMNS) + 1))
    for threshold in THRESHOLDS:
        mean = np.nanmean(np.array(pooled[threshold]), axis=0)
        spread = np.nanstd(np.array(halves_of[threshold]), axis=0)
        over = sum(figures[3] > 0.10 + 1e-9 for figures in halves_of[threshold])
        print(f"| {threshold:.2f} | " + " | ".join(f"{m:.3f} ({s:.3f})" for m, s in zip(mean, spread, strict=True))
              + f" | {over} of {len(halves_of[threshold])} |")
    if show_misses:
        whole = fit(items, examined)
        print(f"\n## held out at {FLAG_THRESHOLD}: items missed (duplicate / update: target not flagged with its "
              f"label) or flagged (related / unrelated), in how many of {repeats} splits")
        for i, count in sorted(missed.items(), key=lambda pair: (-pair[1], items[pair[0]]["id"])):
            item = items[i]
            targets = set(item.get("target") or [])
            found = decide(examined[i], model=replace(whole, threshold=FLAG_THRESHOLD))
            shown = ", ".join(f"{'*' if s.id in targets else ''}{s.relation} {s.score:.2f}" for s in found[:3])
            print(f"{count:2d} {item['id']} {item['kind']} {item['lang']}->{item.get('target_lang') or '-'}: "
                  f"{item['content'][:80]!r} [whole-set model: {shown}]")


def constants(model: Model) -> str:
    """The lines to paste into similar.py."""
    def fmt(values: tuple[float, ...]) -> str:
        return "(" + ", ".join(f"{value:.3f}" for value in values) + ")"
    return f"FLAG_WEIGHTS = {fmt(tuple(model.flag))}\nKIND_WEIGHTS = {fmt(tuple(model.kind))}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("set", nargs="?", type=Path, default=DEFAULT_SET)
    parser.add_argument("--repeats", type=int, default=12,
                        help="random half splits for the mean held-out figures (0: none)")
    parser.add_argument("--misses", action="store_true",
                        help="print the items the random half splits' held-out models get wrong")
    args = parser.parse_args()
    items, examined = examine(args.set)
    if args.repeats > 0:
        repeated(items, examined, args.repeats, args.misses)
    first, second = halves(items)
    for name, train, test in (("A", first, second), ("B", second, first)):
        model = fit([items[i] for i in train], [examined[i] for i in train])
        print(f"\n## fitted on half {name} ({len(train)} items): on the training half")
        print_table({k: v for k, v in score([items[i] for i in train], [examined[i] for i in train], model).items()
                     if not k.startswith("kind:")})
        print(f"\n## fitted on half {name}: on the other half ({len(test)} items)")
        print_table({k: v for k, v in score([items[i] for i in test], [examined[i] for i in test], model).items()
                     if not k.startswith("kind:")})
        print(constants(model))
        print(f"flag threshold on the other half (FLAG_THRESHOLD {FLAG_THRESHOLD}):")
        for threshold in THRESHOLDS:
            figures = score([items[i] for i in test], [examined[i] for i in test],
                            replace(model, threshold=threshold))["overall"]
            print(f"  {threshold:.2f}: " + ", ".join(f"{name} {figures[name]:.3f}" for name in THRESHOLD_COLUMNS))
    model = fit(items, examined)
    print(f"\n## fitted on all {len(items)} items (features: {', '.join(FEATURES)})")
    print_table(score(items, examined, model))
    print("\n" + constants(model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
