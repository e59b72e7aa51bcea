#!/usr/bin/env python3
"""Recall quality on a labelled set: recall@5 and MRR@10 per category, beside the reference.

A set is a directory holding ``brain/`` (a brain directory) and ``queries.jsonl``
(see shared/fixtures/recall-quality/README.md): each query has its category, its
gold ids, the clock to recall at and what the reference `brain recall` returned
(``reference_top10``). Every mode is run one query at a time, asking for 10 hits,
with no context, as the set's README prescribes.

Columns: the stored reference, ``exact`` and ``hybrid`` (the connector's recall, the
relevance floor on), and beside them ``embedding`` (the embedding model alone over the
same text: cosine ranking, nothing else) and ``hybrid-nofloor`` (the same fusion,
every memory listed). With no-answer queries (``--no-answer``, by default
bench/no_answer_queries.json for the development set; repeatable) it prints how often each mode
returns nothing and how many hits it returns on average. ``--cv`` fits the fusion and
the floor on one half of the queries (odd lines, then even) and scores the other half.

Usage::

    .venv/bin/python bench/recall_quality.py                       # the development set, with its no-answer queries
    .venv/bin/python bench/recall_quality.py --cv                  # and the cross-validation
    .venv/bin/python bench/recall_quality.py --mode hybrid PATH    # another set
    .venv/bin/python bench/recall_quality.py --json out.json --misses
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from connector.engine.format.archive import load_directory  # noqa: E402
from connector.engine.format.brain import Brain  # noqa: E402
from connector.engine.recall.hybrid import (  # noqa: E402
    DEFAULT_FUSION,
    EXACT_CANDIDATES,
    MODES,
    Fusion,
    HybridIndex,
    Signals,
    fuse,
    query_signals,
    ranked_positions,
    recall_in_mode,
)
from connector.engine.format.jsvalues import parse_iso_ms  # noqa: E402
from connector.engine.recall.exact import recall  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.workcopy.vectorcache import cached_stores  # noqa: E402
from connector.workcopy.vectors import VectorStore  # noqa: E402


DEFAULT_SET = REPO.parent / "shared" / "fixtures" / "recall-quality"
DEFAULT_NO_ANSWER = REPO / "bench" / "no_answer_queries.json"
TOP = 10
# Targets on no-answer queries the floor is fitted to (issue 28).
NO_ANSWER_EMPTY = 0.60
NO_ANSWER_MEAN_HITS = 2.0
# The grids --cv searches: the fusion first (no category below the embedding alone), then the floor.
FUSION_GRID = {"words": (0.1, 0.2, 0.3, 0.5), "fuzzy": (0.0, 0.05, 0.1), "exact": (0.0, 0.1)}
FLOOR_GRID = {
    "strength_words": (0.3,),
    "hubness": (0.0, 0.5),
    "strength_min": (0.0, 0.22),
    "hit_z": (None, 2.0, 2.5, 3.0),
    "window": (0.1, 0.12, 0.15, 0.2),
    "floor": tuple(round(-0.1 + 0.02 * step, 2) for step in range(28)),
}


def metrics(ranked: list[str], gold: list[str]) -> tuple[float, float]:
    """recall@5 (0 or 1) and reciprocal rank within the first 10 of one query."""
    wanted = set(gold)
    hit5 = float(any(memory_id in wanted for memory_id in ranked[:5]))
    rank = next((i + 1 for i, memory_id in enumerate(ranked[:10]) if memory_id in wanted), None)
    return hit5, (1.0 / rank if rank else 0.0)


def table(results: dict[str, list[tuple[float, float]]]) -> dict[str, dict[str, float]]:
    """Mean recall@5 and MRR@10 per category and overall."""
    out = {}
    for category, values in results.items():
        out[category] = {
            "queries": len(values),
            "recall@5": sum(v[0] for v in values) / len(values),
            "mrr@10": sum(v[1] for v in values) / len(values),
        }
    return out


@dataclass
class Case:
    """One query with its channels (for the fusion variants) and its labels."""

    query: dict[str, Any]
    signals: Signals

    @property
    def answerable(self) -> bool:
        return bool(self.query.get("gold"))


def load_queries(path: Path) -> list[dict[str, Any]]:
    """The queries of a set's queries.jsonl."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_no_answer(path: Path) -> list[dict[str, Any]]:
    """No-answer queries (bench/no_answer_queries.json's format) as queries with no gold."""
    data = json.loads(path.read_text(encoding="utf-8"))
    now = data.get("now", "2025-12-01T00:00:00.000Z")
    return [{**query, "category": "no-answer", "gold": [], "now": query.get("now", now)} for query in data["queries"]]


def _now(query: dict[str, Any]) -> datetime:
    return datetime.fromtimestamp(parse_iso_ms(query["now"]) / 1000, tz=UTC)


def ranked_ids(case: Case, ids: Sequence[str], fusion: Fusion | None) -> list[str]:
    """The top ids of one case under ``fusion`` (None: the embedding alone, by cosine)."""
    if fusion is None:
        # The model alone: the query as written (not with its abbreviations spelt out).
        semantic = case.signals.semantic if case.signals.written is None else case.signals.written
        order = sorted(range(len(ids)), key=lambda position: (-float(semantic[position]), ids[position]))[:TOP]
        return [ids[position] for position in order]
    fused, listed = fuse(case.signals, fusion)
    return [ids[position] for position in ranked_positions(fused, listed, case.signals.strong, TOP, ids)]


def score(cases: Iterable[Case], ids: Sequence[str], fusion: Fusion | None) -> dict[str, Any]:
    """Per-category figures of answerable cases, and the no-answer figures, under ``fusion``."""
    results: dict[str, list[tuple[float, float]]] = defaultdict(list)
    empty: dict[str, list[int]] = defaultdict(list)
    for case in cases:
        ranked = ranked_ids(case, ids, fusion)
        if case.answerable:
            value = metrics(ranked, case.query["gold"])
            results[case.query["category"]].append(value)
            results["overall"].append(value)
        else:
            for group in ("all", case.query.get("kind", "?"), case.query.get("lang", "?")):
                empty[group].append(len(ranked))
    report: dict[str, Any] = table(results)
    if empty:
        report["no-answer"] = _no_answer_figures(empty)
    return report


def _no_answer_figures(hit_counts: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Per group of no-answer queries: how many, the share returning nothing, the mean hits."""
    return {
        group: {"queries": len(counts), "empty": sum(1 for c in counts if c == 0) / len(counts),
                "mean_hits": sum(counts) / len(counts)}
        for group, counts in hit_counts.items()
    }


def prepare(brain: Brain, index: BrainIndex, queries: list[dict[str, Any]],
            store: VectorStore | None = None) -> tuple[list[Case], HybridIndex, VectorStore]:
    """Every query's channels over ``brain`` (vectors computed once, or taken from ``store``)."""
    store = store if store is not None else VectorStore()
    hybrid = HybridIndex.build(brain, index, store)
    cases = []
    for query in queries:
        exact = recall(brain, query["query"], top=EXACT_CANDIDATES, now=_now(query), index=index)
        cases.append(Case(query, query_signals(query["query"], exact, index=index, hybrid=hybrid, embed_query=store.embed_query)))
    return cases, hybrid, store


def fit(cases: list[Case], ids: Sequence[str]) -> Fusion:
    """The fusion, then the floor, that score best on ``cases`` (the fitting half).

    Fusion: best recall@5 + MRR@10 / 2 among the weights that leave no category below
    the embedding alone. Floor: among the floors that still leave no category below the
    embedding alone, the one that returns nothing for the most no-answer queries (then
    the fewest hits, then the best recall@5).
    """
    answerable = [case for case in cases if case.answerable]
    embedding = score(answerable, ids, None)

    def fusion_key(fusion: Fusion) -> tuple[bool, float]:
        report = score(answerable, ids, fusion)
        safe = all(report[c]["recall@5"] >= embedding[c]["recall@5"] - 1e-9 for c in embedding)
        return safe, report["overall"]["recall@5"] + report["overall"]["mrr@10"] / 2

    weights = [replace(DEFAULT_FUSION, floor=None, **dict(zip(FUSION_GRID, values)))
               for values in itertools.product(*FUSION_GRID.values())]
    best_fusion = max(weights, key=fusion_key)

    def floor_key(fusion: Fusion) -> tuple[bool, float, float, float]:
        report = score(cases, ids, fusion)
        safe = all(report[c]["recall@5"] >= embedding[c]["recall@5"] - 1e-9 for c in embedding)
        figures = report.get("no-answer", {}).get("all", {"empty": 0.0, "mean_hits": 0.0})
        return safe, figures["empty"], -figures["mean_hits"], report["overall"]["recall@5"]

    floors = [replace(best_fusion, **dict(zip(FLOOR_GRID, values))) for values in itertools.product(*FLOOR_GRID.values())]
    return max(floors, key=floor_key)


def cross_validate(cases: list[Case], ids: Sequence[str]) -> list[dict[str, Any]]:
    """Fit on the odd-numbered queries and score the even ones, then the reverse."""
    halves = ([case for n, case in enumerate(cases) if n % 2 == 0], [case for n, case in enumerate(cases) if n % 2 == 1])
    out = []
    for name, (fitting, scoring) in (("fit odd, score even", halves), ("fit even, score odd", halves[::-1])):
        fitted = fit(fitting, ids)
        out.append({
            "direction": name,
            "fitted": fitted.__dict__,
            "fitted_on_fit_half": score(fitting, ids, fitted),
            "fitted_on_other_half": score(scoring, ids, fitted),
            "shipped_on_other_half": score(scoring, ids, DEFAULT_FUSION),
            "embedding_on_other_half": score(scoring, ids, None),
        })
    return out


def run(set_dir: Path, modes: list[str], show_misses: bool, no_answer: Sequence[Path], cv: bool,
        store: VectorStore | None = None, e5: VectorStore | None = None,
        judge: VectorStore | None = None) -> dict[str, Any]:
    """Score each mode (and the stored reference) on the set at ``set_dir`` (``store``: a
    `VectorStore` to take known vectors from, e.g. the quality guard's shared one; ``e5``:
    the e5 channel's store, so hybrid scores as the connector does once a brain's e5 vectors
    are there; None scores hybrid without e5; ``judge``: the answer gate's judge's, as the
    connector once its judge is ready)."""
    queries = load_queries(set_dir / "queries.jsonl")
    extra = [query for path in no_answer for query in load_no_answer(path)]
    brain = load_directory(set_dir / "brain")
    index = BrainIndex.build(brain)
    reference: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for query in queries:
        value = metrics(query.get("reference_top10") or query.get("reference_top5") or [], query["gold"])
        reference[query["category"]].append(value)
        reference["overall"].append(value)
    report: dict[str, Any] = {"set": str(set_dir), "no_answer_sets": [str(path) for path in no_answer],
                              "reference": table(reference)}
    timings: dict[str, float] = {}
    hybrid: HybridIndex | None = None
    cases: list[Case] = []
    if "hybrid" in modes:
        started = time.perf_counter()
        cases, hybrid, store = prepare(brain, index, queries + extra, store)
        timings["hybrid_prepare_s"] = time.perf_counter() - started
    for mode in modes:
        started = time.perf_counter()
        results: dict[str, list[tuple[float, float]]] = defaultdict(list)
        empty_by_group: dict[str, list[int]] = defaultdict(list)
        for query in queries + (extra if mode == "hybrid" else []):
            hits = recall_in_mode(brain, query["query"], mode=mode, source=store, index=index, hybrid=hybrid, top=TOP,
                                  now=_now(query), e5_source=e5 if mode == "hybrid" else None,
                                  judge_source=judge if mode == "hybrid" else None)
            ranked = [hit["id"] for hit in hits]
            if not query["gold"]:
                for group in ("all", query.get("kind", "?"), query.get("lang", "?")):
                    empty_by_group[group].append(len(ranked))
                continue
            value = metrics(ranked, query["gold"])
            results[query["category"]].append(value)
            results["overall"].append(value)
            if show_misses and not value[0]:
                print(f"  miss [{mode}] {query['id']} {query['query']!r} gold={query['gold']} got={ranked[:5]}")
        timings[f"{mode}_per_query_ms"] = (time.perf_counter() - started) * 1000 / max(len(queries), 1)
        report[mode] = table(results)
        if empty_by_group:
            report[mode]["no-answer"] = _no_answer_figures(empty_by_group)
    if cases and hybrid is not None:
        ids = hybrid.ids
        report["embedding"] = score(cases, ids, None)
        report["hybrid-nofloor"] = score(cases, ids, replace(DEFAULT_FUSION, floor=None))
        # The same figures through fuse() as through hybrid_recall: the fitting below scores what ships.
        signals_path = score(cases, ids, DEFAULT_FUSION)
        if signals_path["overall"] != report["hybrid"]["overall"]:
            print(f"warning: fuse() scores {signals_path['overall']}, hybrid_recall {report['hybrid']['overall']}")
        if cv:
            report["cv"] = cross_validate(cases, ids)
    report["timings"] = timings
    return report


def _row(name: str, figures: dict[str, Any], columns: Sequence[str], category: str, n: int) -> str:
    cells = []
    for column in columns:
        value = figures.get(column, {}).get(category)
        cells.append(f"{value['recall@5']:>14.3f} {value['mrr@10']:>7.3f}" if value else f"{'-':>14} {'-':>7}")
    return f"{name:<16} {n:>4} " + " ".join(cells)


def print_table(figures: dict[str, Any], columns: Sequence[str], categories: Sequence[str]) -> None:
    """Category rows, one recall@5 / MRR@10 pair per column."""
    print(f"{'category':<16} {'n':>4} " + " ".join(f"{name + ' r@5':>14} {'mrr@10':>7}" for name in columns))
    for category in categories:
        n = next((figures[c][category]["queries"] for c in columns if category in figures.get(c, {})), 0)
        print(_row(category, figures, columns, category, n))


def print_no_answer(figures: dict[str, Any], columns: Sequence[str]) -> None:
    """Share of no-answer queries returning nothing, and mean hits, per column and group."""
    groups = next((list(figures[c]["no-answer"]) for c in columns if "no-answer" in figures.get(c, {})), [])
    if not groups:
        return
    print(f"no-answer queries (target: >= {NO_ANSWER_EMPTY:.0%} return nothing, <= {NO_ANSWER_MEAN_HITS:g} hits on average)")
    print(f"{'group':<16} {'n':>4} " + " ".join(f"{name + ' empty':>20} {'hits':>5}" for name in columns))
    for group in groups:
        n = next(figures[c]["no-answer"][group]["queries"] for c in columns if "no-answer" in figures.get(c, {}))
        cells = []
        for column in columns:
            value = figures.get(column, {}).get("no-answer", {}).get(group)
            cells.append(f"{value['empty']:>20.2f} {value['mean_hits']:>5.2f}" if value else f"{'-':>20} {'-':>5}")
        print(f"{group:<16} {n:>4} " + " ".join(cells))


def print_report(report: dict[str, Any], modes: list[str]) -> None:
    """Side-by-side tables: reference, each mode, the embedding alone; then no-answer and CV figures."""
    categories = [c for c in report["reference"] if c != "overall"] + ["overall"]
    columns = ["reference", *modes] + [c for c in ("embedding", "hybrid-nofloor") if c in report]
    print(f"set: {report['set']}")
    print_table(report, columns, categories)
    print_no_answer(report, [c for c in ("hybrid", "hybrid-nofloor", "embedding") if c in report])
    for fold in report.get("cv", []):
        fitted = {k: v for k, v in fold["fitted"].items()}
        print(f"\ncross-validation, {fold['direction']}: fitted {fitted}")
        view = {"embedding": fold["embedding_on_other_half"], "fitted": fold["fitted_on_other_half"],
                "shipped": fold["shipped_on_other_half"], "fitted (own half)": fold["fitted_on_fit_half"]}
        print_table(view, list(view), categories)
        print_no_answer(view, list(view))
    for name, value in report["timings"].items():
        print(f"{name}: {value:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", nargs="?", type=Path, default=DEFAULT_SET, help="the set's directory")
    parser.add_argument("--mode", choices=[*MODES, "all"], default="all")
    parser.add_argument("--no-answer", type=Path, action="append", help="no-answer queries; repeat to join files "
                        "(default: bench/no_answer_queries.json for the development set, none for another set)")
    parser.add_argument("--cv", action="store_true", help="fit on one half of the queries, score the other (both ways)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--misses", action="store_true", help="list queries whose gold is not in the top 5")
    parser.add_argument("--no-e5", action="store_true", help="hybrid without the e5 channel (as before a brain's e5 vectors are there)")
    parser.add_argument("--no-judge", action="store_true", help="hybrid without the judge (its channel and the answer gate's reading of it), as before it is ready")
    parser.add_argument("--cache-dir", type=Path, help="keep the vectors here between runs (default: the command line's cache)")
    args = parser.parse_args(argv)
    if not (args.set / "queries.jsonl").is_file():
        parser.error(f"no queries.jsonl in {args.set}")
    no_answer = args.no_answer or ([DEFAULT_NO_ANSWER] if args.set.resolve() == DEFAULT_SET.resolve() else [])
    for path in no_answer:
        if not path.is_file():
            parser.error(f"no such no-answer file: {path}")
    modes = list(MODES) if args.mode == "all" else [args.mode]
    if args.cv and "hybrid" not in modes:
        parser.error("--cv needs the hybrid mode")
    store, e5, judge = cached_stores(args.cache_dir, e5=not args.no_e5, judge=not args.no_judge)
    report = run(args.set, modes, args.misses, no_answer, args.cv, store, e5, judge)
    print(f"hybrid's e5 channel: {'on' if e5 is not None else 'off'}; the judge (a channel, read by the answer gate): "
          f"{'on' if judge is not None else 'off'}")
    print_report(report, modes)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
