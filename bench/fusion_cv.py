#!/usr/bin/env python3
"""Other channel fusions beside the shipped one, each chosen by cross-validation across sets and folds.

The two development sets pull the fusion apart (LoCoMo conversations want words and
neighbours, recall-quality wants the models), so a candidate is only worth shipping when
what it learns on some sets carries to the others. Candidates (families, each a grid):

- ``clips``: the z-score clip of the channels (``clip``, which also scales the sparse
  channels, and e5's own ``clip_e5``), the shipped weights;
- ``weights``: fixed channel weights and the neighbours' share (the grid of
  ``bench/locomo.py --cv``), the shipped clips;
- ``adaptive``: query-adaptive weights from what each channel says about itself for this
  query (query-performance prediction, `ChannelFusion.for_query`): a model's weight times
  ``e ** a``, ``e`` the gap between its 1st and 10th best in z-scores; the word channels'
  (bm25, exact) times ``c ** b``, ``c`` the share of the query's words (idf-weighted) its best
  memory holds. Scale-free: no per-set constant (session 15 also tried the z-score of the best
  memory for ``e``: docs/recall.md);
- ``agreement``: a bonus per extra channel (bm25, USE, e5) holding the memory in its first
  ``k`` (CombMNZ's idea on top of the z-scores); ``rrf``: reciprocal-rank fusion added to
  the z-score fusion;
- ``e5 regime``: other clips and hit floors only once e5 votes (``clip_with_e5``,
  ``hit_floor_with_e5``; before that, the fixed fusion);
- ``adaptive e5 regime``: the weights, their adaptation and the e5 regime at once (session 17:
  what ships);
- ``follow``: the turns near the first 1, 2 or 3 listed memories, listed after them: the
  turn after only or the turn before too, up to 1 or 2 turns away (``ChannelFusion.follow``,
  ``follow_reach``, ``follow_before``);
- ``e5 best``: e5's best memory kept among the first 1, 2, 3 or 5 listed, or not kept
  (``ChannelFusion.e5_best_within``; session 18 ships 2, nine folds' choice).

Folds: each LoCoMo conversation held out together with one half of recall-quality (its
answerable and no-answer queries alternately): fit on the other four conversations and
the other half, score the held-out parts (10 folds; each conversation is scored twice,
each half five times; figures are the means over folds). The fit: among the grid, the
candidates that on the fitting part lose no figure of either set (LoCoMo recall@5 and @10,
recall-quality recall@5 and MRR@10) against a reference (``--reference``: the fusion before
session 15, the fixed fusion shipped before session 17's weights per query, or the shipped one), with e5
and without it (a brain whose e5 vectors are not computed yet), and list no more hits for
recall-quality's no-answer queries (at most 2); then the fewest queries lost against the
best single channel of each category (beyond one); then the best mean of the two sets'
values (LoCoMo (r@5 + r@10) / 2, recall-quality (r@5 + MRR@10) / 2), without e5 counted a
quarter. ``--free`` also fits without the first condition (the best value only);
``--strict`` asks for no more no-answer hits than before (not only at most 2).

Every ranking is the connector's own fusion (``channelfusion.fuse_zscores`` through
``bench/locomo.py``'s ``fusion_ranking``), floor and listing included; a candidate only
changes the weights it is given per query or adds offsets. Channels come from
``bench/locomo.py`` (``--keep`` pickles, ``--cache-dir`` vectors: nothing is embedded twice).
Results: docs/recall.md ("Query-adaptive weights and other fusions, by cross-validation", "Weights per
query and the e5 regime").

Usage::

    .venv/bin/python bench/fusion_cv.py --keep /tmp/locomo-keep            # every family, constrained fit
    .venv/bin/python bench/fusion_cv.py --keep /tmp/locomo-keep --free     # and the unconstrained fit
    .venv/bin/python bench/fusion_cv.py --keep /tmp/locomo-keep --reference fixed --strict   # session 17's fit
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import locomo  # noqa: E402

from connector.engine.recall.channelfusion import CHANNEL_FUSION, ChannelFusion  # noqa: E402

# The fixed fusion shipped before session 17's adaptation (its weights, clips and hit floor for every
# query; the listing, following and dates as shipped; e5's best not kept, as before session 18), and
# the one before session 15 (e5 clipped like the others): the reference a fit may not fall below.
FIXED = replace(CHANNEL_FUSION, exact=0.0, bm25=0.25, use=0.5, adapt_weights=None, adapt_models=0.0, adapt_words=0.0,
                clip_with_e5=None, hit_floor_with_e5=None, e5_best_within=None)
BEFORE = replace(FIXED, clip_e5=None)
SINGLES = ("exact", "bm25", "use", "e5")
NO_E5_SHARE = 0.25  # weight of the figures without e5 in a fit's value


@dataclass(frozen=True)
class Candidate:
    """A fusion to score: the channel fusion (its per-query adaptation and e5 regime included),
    and optionally offsets from agreement or reciprocal ranks."""

    family: str
    name: str
    fusion: ChannelFusion
    agree: float = 0.0  # bonus per extra channel holding the memory in its first ``agree_k``
    agree_k: int = 10
    rrf: float = 0.0  # weight of reciprocal-rank fusion (x 60: a channel's first memory adds ~1)


def _memo(case: locomo.Case, key: str, make: Callable[[], Any]) -> Any:
    found = case.__dict__.get(key)
    if found is None:
        found = case.__dict__[key] = make()
    return found


def channel_ranks(case: locomo.Case) -> dict[str, np.ndarray]:
    """Each channel's rank of every memory (0 first; a memory bm25 does not match: last)."""
    def make() -> dict[str, np.ndarray]:
        count = len(case.eligible)
        out = {}
        for name, values in (("bm25", case.bm25), ("use", case.signals.semantic), ("e5", case.e5)):
            if values is None:
                continue
            order = np.argsort(-np.where(case.eligible, values, -np.inf), kind="stable")
            ranks = np.empty(count, dtype=np.int64)
            ranks[order] = np.arange(count)
            if name == "bm25":
                ranks[values <= 0] = count
            out[name] = ranks
        return out
    return _memo(case, "_ranks", make)


def ranking(case: locomo.Case, prepared: locomo.Prepared, candidate: Candidate) -> list[int]:
    """The candidate's first ten positions for one query."""
    fusion = candidate.fusion
    offsets = None
    if candidate.agree or candidate.rrf:
        ranks = {name: values for name, values in channel_ranks(case).items() if name != "e5" or case.e5 is not None}
        offsets = np.zeros(len(case.eligible), dtype=np.float32)
        if candidate.agree:
            holding = sum((values < candidate.agree_k).astype(np.float32) for values in ranks.values())
            offsets += candidate.agree * np.maximum(holding - 1.0, 0.0)
        if candidate.rrf:
            total = sum(fusion.weight(name) for name in ranks)
            offsets += candidate.rrf * 60.0 * sum(fusion.weight(name) / (60.0 + values) for name, values in ranks.items()) / total
    return locomo.fusion_ranking(case, prepared, fusion, offsets)


def candidates() -> list[Candidate]:
    out = [Candidate("reference", "before", BEFORE), Candidate("reference", "fixed", FIXED),
           Candidate("reference", "shipped", CHANNEL_FUSION)]
    for clip, clip_e5 in itertools.product((3.0, 4.0, 5.0), (None, 4.0, 5.0, 6.0, 8.0)):
        out.append(Candidate("clips", f"clip {clip} e5 {clip_e5}", replace(BEFORE, clip=clip, clip_e5=clip_e5)))
    weights = list(itertools.product((0.25, 0.5), (0.25, 0.5), (0.0, 0.25), (0.3, 0.45)))
    for bm25, use, exact, context in weights:
        fusion = replace(FIXED, bm25=bm25, use=use, exact=exact, context=context)
        name = f"bm25 {bm25} use {use} exact {exact} context {context}"
        out.append(Candidate("weights", name, fusion))
        for models, words in itertools.product((0.0, 0.5, 1.0, 2.0), (0.0, 0.5, 1.0)):
            if models or words:
                out.append(Candidate("adaptive", f"{name}; gap^{models}, words^{words}",
                                     replace(FIXED, context=context, adapt_weights=(exact, bm25, use, 1.0),
                                             adapt_models=models, adapt_words=words)))
    for agree, k in itertools.product((0.1, 0.25, 0.5), (5, 10)):
        out.append(Candidate("agreement", f"agree {agree} in first {k}", CHANNEL_FUSION, agree=agree, agree_k=k))
    for rrf in (0.5, 1.0, 2.0):
        out.append(Candidate("agreement", f"rrf {rrf}", CHANNEL_FUSION, rrf=rrf))
    for before, context in itertools.product((0.3, 0.45, 0.6, 0.75), (0.0, 0.15, 0.3)):
        out.append(Candidate("turn order", f"context before {before} after {context}",
                             replace(CHANNEL_FUSION, context_before=before, context=context)))
    for follow, reach, before in itertools.product((1, 2, 3), (1, 2), (False, True)):
        name = f"follow {follow} reach {reach}" + (" and before" if before else "")
        out.append(Candidate("follow", name, replace(CHANNEL_FUSION, follow=follow, follow_reach=reach, follow_before=before)))
    for clip, hit_floor in itertools.product((None, 4.0, 5.0), (1.6, 1.65, 1.7, 1.75, 1.8)):
        out.append(Candidate("e5 regime", f"with e5: clip {clip} hit floor {hit_floor}",
                             replace(FIXED, clip_with_e5=clip, hit_floor_with_e5=hit_floor)))
    for within in (None, 1, 2, 3, 5):
        out.append(Candidate("e5 best", f"e5's best within {within}", replace(CHANNEL_FUSION, e5_best_within=within)))
    # Both at once (session 17): the weights, their adaptation and the e5 regime.
    regimes = ((None, None), (5.0, 1.6), (5.0, 1.7), (5.0, 1.8))
    for (bm25, use, exact), (models, words), (clip, hit_floor) in itertools.product(
            itertools.product((0.25, 0.5), (0.25, 0.5), (0.0, 0.25)),
            itertools.product((0.0, 0.5, 1.0, 2.0), (0.0, 0.5, 1.0)), regimes):
        name = f"bm25 {bm25} use {use} exact {exact}; gap^{models}, words^{words}; " + (
            "fixed clips" if clip is None else f"with e5: clip {clip} hit floor {hit_floor}")
        out.append(Candidate("adaptive e5 regime", name, replace(
            FIXED, **({"adapt_weights": (exact, bm25, use, 1.0)} if models or words else {"bm25": bm25, "use": use, "exact": exact}),
            adapt_models=models, adapt_words=words, clip_with_e5=clip, hit_floor_with_e5=hit_floor)))
    return out


# ----- outcomes and folds ---------------------------------------------------------


@dataclass
class Table:
    """Per query of every set (flat): its set, brain, category, whether it has an answer, its half."""

    group: np.ndarray
    brain: np.ndarray
    category: np.ndarray
    answerable: np.ndarray
    half: np.ndarray


def table(prepared: Sequence[locomo.Prepared]) -> Table:
    rows = [(item.brainset.group, item.brainset.name, case.query.category, bool(case.query.gold))
            for item in prepared for case in item.cases]
    half = np.zeros(len(rows), dtype=np.int64)
    seen: Counter[tuple[str, bool]] = Counter()
    for n, (group, _, _, answerable) in enumerate(rows):
        half[n] = seen[group, answerable] % 2
        seen[group, answerable] += 1
    return Table(*(np.array(column) for column in zip(*rows)), half=half)


def outcomes(prepared: Sequence[locomo.Prepared], rank: Callable[[locomo.Case, locomo.Prepared], list[int]]) -> np.ndarray:
    """Per query: the rank of its first answer in the first ten (0: none) and how many were listed."""
    rows = []
    for item in prepared:
        position = {memory_id: n for n, memory_id in enumerate(item.ids)}
        for case in item.cases:
            ranked = rank(case, item)
            gold = {position[memory_id] for memory_id in case.query.gold}
            rows.append((next((n + 1 for n, p in enumerate(ranked) if p in gold), 0), len(ranked)))
    return np.array(rows, dtype=np.int64)


def figures(result: np.ndarray, tab: Table, mask: np.ndarray) -> dict[str, dict[str, Any]]:
    first, listed = result[:, 0], result[:, 1]
    out = {}
    for group in ("locomo", "quality"):
        answered = mask & (tab.group == group) & tab.answerable
        unanswerable = mask & (tab.group == group) & ~tab.answerable
        if not answered.any():
            continue
        f = first[answered]
        categories = sorted(set(tab.category[answered]))
        out[group] = {
            "r5": float(np.mean((f > 0) & (f <= 5))), "r10": float(np.mean(f > 0)),
            "mrr": float(np.mean(np.where(f > 0, 1.0 / np.maximum(f, 1), 0.0))),
            "empty": float(np.mean(listed[unanswerable] == 0)) if unanswerable.any() else float("nan"),
            "hits": float(np.mean(listed[unanswerable])) if unanswerable.any() else float("nan"),
            "hits5": {c: int(np.sum((first[answered & (tab.category == c)] > 0) & (first[answered & (tab.category == c)] <= 5)))
                      for c in categories},
        }
    return out


def set_value(found: dict[str, dict[str, Any]]) -> float:
    return float(np.mean([(found["locomo"]["r5"] + found["locomo"]["r10"]) / 2,
                          (found["quality"]["r5"] + found["quality"]["mrr"]) / 2]))


def lost(found: dict[str, dict[str, Any]], singles: dict[str, dict[str, dict[str, Any]]]) -> int:
    """Queries lost beyond one per category against the best single channel there (recall@5)."""
    total = 0
    for group, values in found.items():
        for category, hits in values["hits5"].items():
            best = max(single[group]["hits5"][category] for single in singles.values())
            total += max(0, best - hits - 1)
    return total


METRICS = (("locomo", "r5"), ("locomo", "r10"), ("quality", "r5"), ("quality", "mrr"))


def choose(names: Sequence[str], results: dict[str, dict[str, np.ndarray]], singles: dict[str, np.ndarray], tab: Table,
           mask: np.ndarray, free: bool, strict: bool = False, reference_name: str = "before") -> str:
    """The fit on ``mask`` (see the module's docstring)."""
    single_figures = {name: figures(values, tab, mask) for name, values in singles.items()}
    reference = {state: figures(results[reference_name][state], tab, mask) for state in ("e5", "no e5")}
    best_key, chosen = None, names[0]
    for name in names:
        found = {state: figures(results[name][state], tab, mask) for state in ("e5", "no e5")}
        keeps = all(found[s][g][m] >= reference[s][g][m] - 1e-9 for s in found for g, m in METRICS)
        most = reference["e5"]["quality"]["hits"] if strict else max(reference["e5"]["quality"]["hits"], 2.0)
        keeps = keeps and found["e5"]["quality"]["hits"] <= most + 1e-9
        value = set_value(found["e5"]) + NO_E5_SHARE * set_value(found["no e5"])
        key = (keeps or free, -lost(found["e5"], single_figures), value)
        if best_key is None or key > best_key:
            best_key, chosen = key, name
    return chosen


def folds(tab: Table) -> list[tuple[str, np.ndarray]]:
    """(name, held-out mask): each LoCoMo conversation with one half of recall-quality."""
    out = []
    for brain in sorted(set(tab.brain[tab.group == "locomo"])):
        for side in (0, 1):
            out.append((f"{brain} + quality half {side}", (tab.brain == brain) | ((tab.group == "quality") & (tab.half == side))))
    return out


def cross_validate(family: str, names: Sequence[str], results: dict[str, dict[str, np.ndarray]], singles: dict[str, np.ndarray],
                   tab: Table, free: bool, verbose: bool, strict: bool = False, reference_name: str = "before") -> dict[str, Any]:
    """Fit and score on every fold; the held-out figures, averaged over folds, with e5 and without."""
    scored: dict[str, list[dict[str, dict[str, Any]]]] = {"e5": [], "no e5": []}
    chosen = []
    per_query = {state: np.zeros((len(tab.group), 3)) for state in scored}  # hit@5, hit@10, 1/rank summed over folds
    times = np.zeros(len(tab.group))
    for fold, held in folds(tab):
        name = names[0] if len(names) == 1 else choose(names, results, singles, tab, ~held, free, strict, reference_name)
        chosen.append(name)
        if verbose:
            print(f"    {fold}: {name}")
        for state in scored:
            scored[state].append(figures(results[name][state], tab, held))
            first = results[name][state][:, 0]
            per_query[state][held] += np.stack([(first[held] > 0) & (first[held] <= 5), first[held] > 0,
                                                np.where(first[held] > 0, 1.0 / np.maximum(first[held], 1), 0.0)], axis=1)
        times[held] += 1
    out: dict[str, Any] = {"chosen": Counter(chosen)}
    for state, values in scored.items():
        out[state] = {group: {metric: float(np.mean([v[group][metric] for v in values]))
                              for metric in ("r5", "r10", "mrr", "empty", "hits")} for group in ("locomo", "quality")}
        out[f"{state} per query"] = per_query[state] / np.maximum(times, 1)[:, None]
    return out


def line(label: str, found: dict[str, Any]) -> str:
    cells = []
    for state in ("e5", "no e5"):
        lo, qu = found[state]["locomo"], found[state]["quality"]
        cells.append(f"{state:>5}: LoCoMo {lo['r5']:.3f} / {lo['r10']:.3f}, adversarial {lo['hits']:.2f} hits; "
                     f"quality {qu['r5']:.3f} / {qu['mrr']:.3f}, no-answer {qu['empty']:.0%} empty, {qu['hits']:.2f} hits")
    return f"{label:<22} " + f"\n{'':<22} ".join(cells)


def category_table(label: str, columns: dict[str, np.ndarray], tab: Table) -> None:
    """Per category: each column's held-out (or single channel's) r@5 / r@10 (LoCoMo) or r@5 / MRR@10."""
    for group, keys in (("locomo", (0, 1)), ("quality", (0, 2))):
        print(f"\n{label}, {group}: " + ("r@5 / r@10" if group == "locomo" else "r@5 / MRR@10") + " per category")
        print(f"{'category':<16} {'n':>4} " + " ".join(f"{name:>15}" for name in columns))
        answered = (tab.group == group) & tab.answerable
        for category in [*sorted(set(tab.category[answered])), "overall"]:
            rows = answered if category == "overall" else answered & (tab.category == category)
            cells = [f"{values[rows, keys[0]].mean():>8.3f} {values[rows, keys[1]].mean():>6.3f}" for values in columns.values()]
            print(f"{category:<16} {int(rows.sum()):>4} " + " ".join(cells))


def per_query(result: np.ndarray) -> np.ndarray:
    first = result[:, 0]
    return np.stack([(first > 0) & (first <= 5), first > 0, np.where(first > 0, 1.0 / np.maximum(first, 1), 0.0)], axis=1).astype(float)


class _Unpickler(pickle.Unpickler):
    """bench/locomo.py --keep pickles name its classes ``__main__``."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class("locomo" if module == "__main__" else module, name)


def load(keep: Path | None, cache_dir: Path | None) -> list[locomo.Prepared]:
    out = []
    for brainset in [*locomo.locomo_sets(), locomo.quality_set()]:
        kept = keep / f"{brainset.name}.pickle" if keep else None
        if kept is not None and kept.is_file():
            with kept.open("rb") as handle:
                out.append(_Unpickler(handle).load())
            continue
        out.append(locomo.prepare(brainset, cache_dir))
        if kept is not None:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(pickle.dumps(out[-1]))
    return out


def channel_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a cross-validation over bench/locomo.py's channels (this script's, gate_cv.py's)."""
    parser.add_argument("--cache-dir", type=Path, default=None, help="vector cache (default: the command line's)")
    parser.add_argument("--keep", type=Path, help="bench/locomo.py's kept channels (pickles), read or written here")
    parser.add_argument("--verbose", action="store_true", help="print each fold's figures and choice")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    channel_arguments(parser)
    parser.add_argument("--free", action="store_true", help="also fit without keeping every figure of the fusion before")
    parser.add_argument("--strict", action="store_true", help="a fit lists no more no-answer hits than the fusion before")
    parser.add_argument("--reference", choices=("before", "fixed", "shipped"), default="before",
                        help="the fusion whose figures a fit keeps (default: the fusion before session 15; fixed: the fixed "
                             "weights shipped before session 17's adaptation)")
    args = parser.parse_args(argv)
    prepared = load(args.keep, args.cache_dir)
    without = [locomo.without_e5(item) for item in prepared]
    tab = table(prepared)
    started = time.perf_counter()
    results: dict[str, dict[str, np.ndarray]] = {}
    family_of: dict[str, list[str]] = {}
    for candidate in candidates():
        rank = lambda case, item, c=candidate: ranking(case, item, c)  # noqa: E731
        results[candidate.name] = {"e5": outcomes(prepared, rank), "no e5": outcomes(without, rank)}
        family_of.setdefault(candidate.family, []).append(candidate.name)
    singles = {name: outcomes(prepared, lambda case, item, n=name: locomo.channel_ranking(case, item.ids, n)) for name in SINGLES}
    print(f"{len(results)} candidates scored in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    families = {
        "before": ["before"],
        "fixed": ["fixed"],
        "shipped": ["shipped"],
        "clips": ["before", *family_of["clips"]],
        "weights": ["before", "shipped", *family_of["weights"]],
        "adaptive": ["before", "shipped", *family_of["weights"], *family_of["adaptive"]],
        "agreement / rrf": ["before", "shipped", *family_of["agreement"]],
        "e5 regime": ["before", "shipped", *family_of["e5 regime"]],
        "adaptive e5 regime": ["before", "fixed", "shipped", *family_of["adaptive e5 regime"]],
        "turn order": ["before", "shipped", *family_of["turn order"]],
        "follow": ["before", "shipped", *family_of["follow"]],
        "e5 best": family_of["e5 best"],
    }
    everything = np.ones(len(tab.group), dtype=bool)
    reference = {"before": "the fusion before's", "fixed": "the fixed fusion's", "shipped": "the shipped fusion's"}[args.reference]
    rule = f"fit keeping {reference} figures" + (", no more no-answer hits" if args.strict else "")
    rules = [(rule, False)] + ([("fit on value alone", True)] if args.free else [])
    held: dict[str, np.ndarray] = {}
    for rule, free in rules:
        print(f"\n== cross-validated ({rule}; 10 folds: one conversation + one recall-quality half held out)")
        for family, names in families.items():
            found = cross_validate(family, names, results, singles, tab, free, args.verbose, args.strict, args.reference)
            print(line(family, found))
            if len(names) > 1:
                print(f"{'':<22} chosen: " + "; ".join(f"{name} ({count})" for name, count in found["chosen"].most_common(3)))
                fitted = choose(names, results, singles, tab, everything, free, args.strict, args.reference)
                print(f"{'':<22} fitted on every set: {fitted}")
            if not free:
                held[family] = found["e5 per query"]
    columns = {name: per_query(values) for name, values in singles.items()}
    columns.update({"before": held["before"], "fixed": held["fixed"], "shipped": held["shipped"],
                    "adaptive (cv)": held["adaptive"], "adaptive e5 regime (cv)": held["adaptive e5 regime"]})
    category_table("single channels beside the fusions (fitted ones: held-out, mean over folds)", columns, tab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
