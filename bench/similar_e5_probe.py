#!/usr/bin/env python3
"""Would multilingual-e5-small help the similar check? Held-out figures with e5 pair features.

The check (connector/engine/tending/similar.py) describes each (incoming, existing) pair by
features of the USE embeddings and the texts. This script adds features of the second
model (connector/engine/recall/e5.py), both sides embedded as passages (so the incoming
memory's vector is the one the brain's next index keeps), and scores the same two
logistic regressions on random half splits (fit on one half, score the other, both ways;
``bench/similar_fit.py``'s splits), per flag threshold, beside the check's own features:

- ``e5``: the e5 cosine of the pair;
- ``e5_above_hub``: that cosine less the existing memory's e5 hubness (mean e5 cosine to
  its 10 nearest memories), as ``above_hub`` is for USE;
- ``e5_z``: the pair's e5 cosine as a z-score among the incoming memory's e5 cosines to
  every memory of the brain (e5's cosines sit in a narrow band, 0.75-0.99).

It also times what e5 would add to a write: embedding the incoming text (one call per
memory, as a passage and as a query). Vectors are kept in the command line's vector cache
(``--cache-dir``), so only the first run embeds the brain (~1 minute of CPU).

Usage::

    .venv/bin/python bench/similar_e5_probe.py [SET] [--repeats 12] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from similar_bench import DEFAULT_SET, incoming_of, judge, load_set, slices  # noqa: E402
from similar_fit import THRESHOLDS, examine, logistic_fit, random_halves  # noqa: E402

from connector.engine.format.archive import load_directory  # noqa: E402
from connector.engine.recall.embedding import content_hash, embedded_text  # noqa: E402
from connector.engine.recall.hybrid import HUBNESS_NEIGHBOURS, memory_texts  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.engine.tending.similar import FEATURES, FLAG_ONLY, Candidate  # noqa: E402
from connector.workcopy.vectorcache import cached_stores  # noqa: E402

E5_FEATURES = ("e5", "e5_above_hub", "e5_z")
VARIANTS: tuple[tuple[str, ...], ...] = ((), ("e5",), ("e5_above_hub",), ("e5_z",), ("e5", "e5_above_hub"),
                                          ("e5", "e5_above_hub", "e5_z"))


@dataclass(frozen=True)
class Pair:
    """One examined pair: the check's features, the e5 ones, and whether it is a target."""

    item: int
    candidate: Candidate
    e5: dict[str, float]


def e5_features(set_dir: Path, items: list[dict[str, Any]], examined: list[list[Candidate]],
                cache_dir: Path | None) -> list[list[dict[str, float]]]:
    """The e5 features of every examined pair."""
    _, store = cached_stores(cache_dir)
    if store is None:
        raise SystemExit("the e5 engine cannot load here")
    brain_dir, _ = load_set(set_dir)
    brain = load_directory(brain_dir)
    index = BrainIndex.build(brain)
    texts = memory_texts(brain, index)
    began = time.perf_counter()
    memories = store.vectors([content_hash(store.model_id, text) for text in texts], texts)
    brain_vectors = memories.codes.astype(np.float32) * memories.scales[:, None]
    print(f"e5 vectors of the brain's {len(texts)} memories: {time.perf_counter() - began:.1f} s (cached after the first run)",
          file=sys.stderr)
    incoming = [embedded_text(memory.title, list(memory.tags), memory.content)
                for memory in (incoming_of(item) for item in items)]
    found = store.vectors([content_hash(store.model_id, text) for text in incoming], incoming)
    incoming_vectors = found.codes.astype(np.float32) * found.scales[:, None]
    among = brain_vectors @ brain_vectors.T
    np.fill_diagonal(among, -np.inf)
    hubness = np.sort(among, axis=1)[:, -HUBNESS_NEIGHBOURS:].mean(axis=1)
    position = {record.id: number for number, record in enumerate(index.memories)}
    out = []
    for number, candidates in enumerate(examined):
        cosines = brain_vectors @ incoming_vectors[number]
        mean, spread = float(cosines.mean()), float(cosines.std()) or 1.0
        rows = []
        for candidate in candidates:
            cosine = float(cosines[position[candidate.id]])
            rows.append({"e5": cosine, "e5_above_hub": cosine - float(hubness[position[candidate.id]]),
                         "e5_z": (cosine - mean) / spread})
        out.append(rows)
    return out


def per_write_cost(store_texts: list[str]) -> None:
    """Median ms of e5 embedding one incoming memory, as a passage and as a query."""
    from connector.engine.recall.e5 import e5_embedder

    model = e5_embedder()
    if model is None:
        return
    model.embed(["warm up"])
    for name, embed in (("passage", lambda text: model.embed([text])), ("query", model.embed_query)):
        samples = []
        for text in store_texts:
            began = time.perf_counter()
            embed(text)
            samples.append(time.perf_counter() - began)
        print(f"e5 embedding of one incoming memory as a {name}: p50 {statistics.median(samples) * 1000:.1f} ms "
              f"(wall, {len(samples)} memories)")


KIND_COLUMNS = [number for number, name in enumerate(FEATURES) if name not in FLAG_ONLY]


def design(candidate: Candidate, extra: dict[str, float], variant: tuple[str, ...]) -> np.ndarray:
    return np.concatenate([candidate.features, [extra[name] for name in variant]])


def held_out(items: list[dict[str, Any]], examined: list[list[Candidate]], extras: list[list[dict[str, float]]],
             variant: tuple[str, ...], repeats: int) -> dict[float, np.ndarray]:
    """Mean held-out (dup, update, right relation, false flags) per threshold."""
    sums = {threshold: np.zeros(4) for threshold in THRESHOLDS}
    negatives = [item["label"] in ("related", "unrelated") for item in items]
    for seed in range(repeats):
        first, second = random_halves(items, seed)
        scored: list[tuple[list[int], np.ndarray, np.ndarray]] = []
        for train, test in ((first, second), (second, first)):
            flag_x, flag_y, kind_x, kind_y = [], [], [], []
            for i in train:
                targets = set(items[i].get("target") or [])
                for candidate, extra in zip(examined[i], extras[i], strict=True):
                    flag_x.append(design(candidate, extra, variant))
                    flag_y.append(1.0 if candidate.id in targets else 0.0)
                    if candidate.id in targets:
                        kind_x.append(candidate.features[KIND_COLUMNS])
                        kind_y.append(1.0 if items[i]["label"] == "update" else 0.0)
            scored.append((test, logistic_fit(np.array(flag_x), np.array(flag_y)),
                           logistic_fit(np.array(kind_x), np.array(kind_y))))
        for threshold in THRESHOLDS:
            outcomes: list[dict[str, Any]] = [{}] * len(items)
            for test, flag, kind in scored:
                for i in test:
                    entries = []
                    for candidate, extra in zip(examined[i], extras[i], strict=True):
                        p_flag = 1 / (1 + np.exp(-(flag[0] + design(candidate, extra, variant) @ flag[1:])))
                        if candidate.exact or p_flag >= threshold:
                            p_update = 1 / (1 + np.exp(-(kind[0] + candidate.features[KIND_COLUMNS] @ kind[1:])))
                            relation = "duplicate" if candidate.exact or p_update < 0.5 else "update"
                            entries.append({"id": candidate.id, "relation": relation, "score": float(p_flag)})
                    outcomes[i] = judge(items[i], entries)
            row = slices(items, outcomes)["overall"]
            false_flags = sum(o["any_flag"] for o, negative in zip(outcomes, negatives, strict=True) if negative)
            sums[threshold] += [row["dup_flag_recall"], row["update_flag_recall"], row["right_relation"],
                                false_flags / sum(negatives)]
    return {threshold: total / repeats for threshold, total in sums.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("set", nargs="?", type=Path, default=DEFAULT_SET)
    parser.add_argument("--repeats", type=int, default=12, help="random half splits, each scored both ways")
    parser.add_argument("--cache-dir", type=Path, default=None, help="the command line's vector cache (default: its default)")
    args = parser.parse_args()
    items, examined = examine(args.set)
    extras = e5_features(args.set, items, examined, args.cache_dir)
    print(f"## {args.repeats} random half splits, both ways: mean held-out dup / update / right relation / "
          "false flags (related + unrelated)")
    print("| features beside the check's | " + " | ".join(f"{threshold:.2f}" for threshold in THRESHOLDS) + " |")
    print("|---|" + "---|" * len(THRESHOLDS))
    for variant in VARIANTS:
        figures = held_out(items, examined, extras, variant, args.repeats)
        print(f"| {' + '.join(variant) or '(none: the check as it is)'} | "
              + " | ".join("/".join(f"{value:.3f}" for value in figures[threshold]) for threshold in THRESHOLDS) + " |",
              flush=True)
    per_write_cost([f"{item['title']}\n{item['content']}" for item in items[:40]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
