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


def repeated(items: list[dict[str, Any]], examined: list[list[Candidate]], repeats: int) -> None:
    """Mean held-out figures over ``repeats`` random half splits, both ways round (each item
    scored once per split by the model fitted on the other half), per flag threshold."""
    sums: dict[float, np.ndarray] = {threshold: np.zeros(4) for threshold in THRESHOLDS}
    for seed in range(repeats):
        first, second = random_halves(items, seed)
        models = [(fit([items[i] for i in train], [examined[i] for i in train]), test)
                  for train, test in ((first, second), (second, first))]
        for threshold in THRESHOLDS:
            outcomes: list[dict[str, Any] | None] = [None] * len(items)
            for model, test in models:
                for i in test:
                    found = decide(examined[i], model=replace(model, threshold=threshold))
                    outcomes[i] = judge(items[i], [s.to_json() for s in found])
            row = slices(items, outcomes)["overall"]  # type: ignore[arg-type]
            negatives = [item["label"] in ("related", "unrelated") for item in items]
            false_flags = sum(o["any_flag"] for o, negative in zip(outcomes, negatives) if negative and o) / sum(negatives)
            sums[threshold] += [row["dup_flag_recall"], row["update_flag_recall"], row["right_relation"], false_flags]
    print(f"\n## {repeats} random half splits, both ways: mean held-out figures by flag threshold "
          f"(FLAG_THRESHOLD {FLAG_THRESHOLD})")
    print("| threshold | dup flag recall | update flag recall | right relation | false flags related + unrelated |")
    print("|---|---:|---:|---:|---:|")
    for threshold, total in sums.items():
        print(f"| {threshold:.2f} | " + " | ".join(f"{value / repeats:.3f}" for value in total) + " |")


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
    args = parser.parse_args()
    items, examined = examine(args.set)
    if args.repeats > 0:
        repeated(items, examined, args.repeats)
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
