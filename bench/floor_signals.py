#!/usr/bin/env python3
"""Candidate signals for hybrid recall's relevance floor, each chosen by cross-validation.

The floor decides per query whether anything matches well (then the memories within
its window are listed) or nothing does. This bench scores other decision signals and
other ways of cutting the listed tail beside the shipped one (strength minus half the
memory's hubness, connector/engine/recall/hybrid.py), on the same set and the same no-answer
queries as bench/recall_quality.py and with the same fitting: for each candidate, the
floor (and the candidate's own coefficient, the window, the z-score cut and the
absolute minimum) is fitted on the odd-numbered queries and scored on the even ones,
then the reverse; the fit keeps every category at least at the embedding alone's
recall@5 on the fitting half and then returns nothing for the most no-answer queries
(then the fewest hits, then the best recall@5). The fusion stays the shipped one.
"in-sample" fits and scores on all queries: the best a candidate could do on this set.

What is listed when the floor passes, and what is returned when it does not (only a
strong exact hit), comes from `fuse` itself; only the decision value and the tail cuts
are computed here. Results: docs/recall.md ("Signals tried for the floor").

Usage::

    .venv/bin/python bench/floor_signals.py
    .venv/bin/python bench/floor_signals.py --no-answer bench/no_answer_queries.json --no-answer bench/no_answer_queries_more.json
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import recall_quality as rq  # noqa: E402

from connector.engine.format.archive import load_directory  # noqa: E402
from connector.engine.recall.hybrid import (  # noqa: E402
    DEFAULT_FUSION,
    HUBNESS_CANDIDATES,
    Fusion,
    HybridIndex,
    fuse,
    memory_texts,
    ranked_positions,
)
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.engine.recall.textmatch import _CJK, TextIndex, has_cjk  # noqa: E402
from connector.workcopy.vectors import VectorStore  # noqa: E402

FLOORS = tuple(round(-0.1 + 0.02 * step, 2) for step in range(28))
LISTING_GRID = {"window": (0.1, 0.12, 0.15, 0.2), "hit_z": (None, 2.0, 2.5, 3.0), "strength_min": (0.0, 0.22)}
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_SCRIPT_PART = re.compile(f"[{_CJK}]+|[^{_CJK}]+")  # a word's CJK runs and the rest


@dataclass
class Query:
    """One query's figures: the channels, and the features the candidate signals read."""

    case: rq.Case
    strength: np.ndarray
    hubness: dict[int, float]  # of the strongest HUBNESS_CANDIDATES memories
    median_gap: float  # best cosine - median cosine over the brain
    bulk_gap: float  # best cosine - mean of the 50th-100th best cosines (of the lower half under 50)
    centroid: float  # cosine of the query to the brain's mean vector
    top10: float  # mean of the query's 10 best cosines
    title: np.ndarray  # word coverage of each memory's title
    agree: float  # 1 when the best memory by meaning is among the 3 best by words
    other_script: np.ndarray  # per memory: CJK in the memory but not the query, or the reverse
    leave_out: float  # largest rise of the best memory's cosine when one word of the query is left out


def leave_one_out(query: str) -> list[str]:
    """The query with one word, or one CJK character bigram, left out (each in turn); a word
    mixing scripts ("Kafka消息") is cut into its CJK runs and the rest."""
    variants = []
    for word in _WORD.finditer(query):
        for part in _SCRIPT_PART.finditer(word.group(0)):
            start, end = word.start() + part.start(), word.start() + part.end()
            if not has_cjk(part.group(0)):
                variants.append(query[:start] + query[end:])
                continue
            for i in range(start, max(start + 1, end - 1)):
                variants.append(query[:i] + query[min(i + 2, end) :])
    return [" ".join(v.split()) for v in variants if v.strip()]


def features(cases: list[rq.Case], hybrid: HybridIndex, store: VectorStore, titles: Sequence[str],
             texts: Sequence[str]) -> list[Query]:
    """Every case's features (one pass; the hubness of the strongest memories from the index)."""
    vectors = hybrid.vectors.codes.astype(np.float32) * hybrid.vectors.scales[:, None]
    centroid = vectors.mean(axis=0)
    centroid /= np.linalg.norm(centroid)
    title_index = TextIndex.build(list(titles))
    memory_cjk = np.array([has_cjk(text) for text in texts])
    out = []
    for case in cases:
        signals, text = case.signals, case.query["query"]
        strength = signals.semantic + DEFAULT_FUSION.strength_words * signals.near_words
        strongest = np.argsort(-strength, kind="stable")[:HUBNESS_CANDIDATES].tolist()
        ranked = np.sort(signals.semantic)[::-1]
        bulk = ranked[49:100] if len(ranked) > 49 else ranked[len(ranked) // 2 :]  # a small brain: its lower half
        by_words = set(np.argsort(-signals.words, kind="stable")[:3].tolist())
        best_meaning = int(np.argmax(signals.semantic))
        vector = store.embed_query(text)
        variants = leave_one_out(text)
        best = strongest[0]
        rise = max((float(store.embed_query(v) @ vectors[best]) for v in variants), default=0.0) - float(vector @ vectors[best])
        out.append(Query(
            case=case, strength=strength, hubness=hybrid.hubness(strongest),
            median_gap=float(ranked[0] - np.median(ranked)), bulk_gap=float(ranked[0] - bulk.mean()),
            centroid=float(vector @ centroid), top10=float(ranked[:10].mean()),
            title=title_index.word_coverage(text), agree=float(best_meaning in by_words and signals.words[best_meaning] > 0),
            other_script=memory_cjk != has_cjk(text), leave_out=rise,
        ))
    return out


Signal = Callable[[Query, list[int]], float]


def hub_signal(hubness: float = 0.5, *, title: float = 0.0, script: float = 0.0, median_gap: float = 0.0,
               bulk_gap: float = 0.0, centroid: float = 0.0, top10: float = 0.0, agree: float = 0.0,
               leave_out: float = 0.0) -> Signal:
    """The shipped decision value (the best of the strongest few, each lowered by ``hubness`` x
    its hubness) plus the given multiples of the candidate features."""
    def value(q: Query, near: list[int]) -> float:
        per_memory = max(float(q.strength[p]) - hubness * q.hubness[p] + title * float(q.title[p])
                         + script * float(q.other_script[p]) for p in near)
        return (per_memory + median_gap * q.median_gap + bulk_gap * q.bulk_gap - centroid * q.centroid
                - top10 * q.top10 + agree * q.agree - leave_out * q.leave_out)
    return value


def cut_tail(listed: np.ndarray, strength: np.ndarray, strong: int | None, *, gap: float = 0.0, most: int = 0,
             ratio: float = 0.0) -> np.ndarray:
    """The listed memories with their weak tail cut: at the largest strength gap when it is at
    least ``gap``, after the ``most`` strongest, below ``ratio`` x the best (0: no cut)."""
    keep = listed.copy()
    if strong is not None:
        keep[strong] = False
    values = np.sort(strength[keep])[::-1]
    if len(values) > 1 and gap:
        gaps = values[:-1] - values[1:]
        if gaps.max() >= gap:
            keep &= strength >= values[int(np.argmax(gaps))]
    if len(values) and most:
        keep &= strength >= values[: most].min()
    if len(values) and ratio:
        keep &= strength >= ratio * values[0]
    if strong is not None and listed[strong]:
        keep[strong] = True
    return keep


@dataclass(frozen=True)
class Candidate:
    """A family of floors: decision signals (one per coefficient tried) and tail cuts."""

    name: str
    signals: tuple[Signal, ...]
    cuts: tuple[dict[str, float], ...] = ({},)


_LISTED: dict[tuple[Any, ...], np.ndarray] = {}


def _listed_outcomes(queries: list[Query], ids: Sequence[str], fusion: Fusion, cut: dict[str, float]) -> np.ndarray:
    """Per query: top-5 hit and hits returned with ``fusion``'s listing, its tail cut (memoised)."""
    key = (id(queries), repr(fusion), tuple(sorted(cut.items())))
    if key not in _LISTED:
        rows = []
        for q in queries:
            fused, listed = fuse(q.case.signals, fusion)
            listed = cut_tail(listed, q.strength, q.case.signals.strong, **cut)
            ranked = [ids[p] for p in ranked_positions(fused, listed, q.case.signals.strong, rq.TOP, ids)]
            rows.append([rq.metrics(ranked, q.case.query["gold"])[0] if q.case.answerable else 0.0, len(ranked)])
        _LISTED[key] = np.array(rows)
    return _LISTED[key]


def outcomes(queries: list[Query], ids: Sequence[str], signal: Signal, listing: dict[str, Any],
             cut: dict[str, float]) -> np.ndarray:
    """Per query: decision value, then (top-5 hit, hits returned) when the floor passes and when not."""
    on_fusion = replace(DEFAULT_FUSION, floor=-math.inf, strength_min=-math.inf, window=listing["window"], hit_z=listing["hit_z"])
    values = []
    for q in queries:
        best = float(q.strength.max())
        near = [p for p in q.hubness if q.strength[p] >= best - listing["window"]]
        values.append(signal(q, near) if best >= listing["strength_min"] else -math.inf)
    passing = _listed_outcomes(queries, ids, on_fusion, cut)
    failing = _listed_outcomes(queries, ids, replace(DEFAULT_FUSION, floor=math.inf), {})
    return np.column_stack([np.array(values), passing, failing])


def figures(queries: list[Query], table: np.ndarray, floor: float, embedding: dict[str, float]) -> dict[str, Any]:
    """recall@5 overall, the categories below the embedding alone, the no-answer figures."""
    passes = table[:, 0] >= floor
    hit = np.where(passes, table[:, 1], table[:, 3])
    count = np.where(passes, table[:, 2], table[:, 4])
    answerable = np.array([q.case.answerable for q in queries])
    categories = np.array([q.case.query["category"] for q in queries])
    below = sorted(c for c in embedding if c != "overall" and hit[answerable & (categories == c)].mean() < embedding[c] - 1e-9)
    return {"recall@5": float(hit[answerable].mean()), "below": below,
            "empty": float((count[~answerable] == 0).mean()), "hits": float(count[~answerable].mean())}


def embedding_recall(queries: list[Query], ids: Sequence[str]) -> dict[str, float]:
    """recall@5 of the embedding alone per category (the bar no category may fall under)."""
    report = rq.score([q.case for q in queries if q.case.answerable], ids, None)
    return {category: values["recall@5"] for category, values in report.items()}


def fit_and_score(candidate: Candidate, queries: list[Query], ids: Sequence[str], fitting: list[int],
                  scoring: list[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The candidate's best floor on ``fitting`` (bench/recall_quality.py's criteria), and its
    figures on ``scoring``."""
    fit_queries, score_queries = [queries[i] for i in fitting], [queries[i] for i in scoring]
    fit_bar, score_bar = embedding_recall(fit_queries, ids), embedding_recall(score_queries, ids)
    best_key, best = None, None
    for signal, cut, values in itertools.product(candidate.signals, candidate.cuts, itertools.product(*LISTING_GRID.values())):
        listing = dict(zip(LISTING_GRID, values))
        table = outcomes(queries, ids, signal, listing, cut)
        for floor in FLOORS:
            own = figures(fit_queries, table[fitting], floor, fit_bar)
            key = (not own["below"], own["empty"], -own["hits"], own["recall@5"])
            if best_key is None or key > best_key:
                best_key, best = key, (own, figures(score_queries, table[scoring], floor, score_bar))
    assert best is not None
    return best


def candidates() -> list[Candidate]:
    """The shipped floor and the candidates of docs/recall.md's table, with their coefficient grids."""
    def family(name: str, field: str, grid: Sequence[float], **base: float) -> Candidate:
        return Candidate(name, tuple(hub_signal(**{**base, field: value}) for value in grid))
    shipped = hub_signal()
    return [
        Candidate("shipped: strength - 0.5 x hubness", (shipped,)),
        family("+ g x (best cosine - median cosine of the query over the brain)", "median_gap", (0, 0.25, 0.5, 1)),
        family("+ g x (best cosine - mean of its 50th-100th best cosines)", "bulk_gap", (0, 0.25, 0.5, 1)),
        family("no hubness, + g x (best cosine - median cosine)", "median_gap", (0.25, 0.5, 1), hubness=0.0),
        family("- c x cosine(query, brain centroid) (the query's hubness)", "centroid", (0, 0.1, 0.25, 0.5)),
        family("- c x mean of the query's 10 best cosines", "top10", (0, 0.25, 0.5)),
        family("+ t x word coverage of the memory's title", "title", (0, 0.05, 0.1, 0.2)),
        family("+ a when the best by meaning is among the 3 best by words", "agree", (0, 0.02, 0.05, 0.1)),
        family("+ x when the memory is in another script than the query", "script", (0, 0.03, 0.05, 0.08, 0.1)),
        family("- d x rise of the best cosine when one query word is left out", "leave_out", (0, 0.25, 0.5, 1)),
        Candidate("listing: cut at the largest strength gap >= g", (shipped,),
                  tuple({"gap": g} for g in (0, 0.02, 0.04, 0.06, 0.08))),
        Candidate("listing: at most n memories", (shipped,), tuple({"most": n} for n in (0, 1, 2, 3, 5))),
        Candidate("listing: strength >= r x the best", (shipped,), tuple({"ratio": r} for r in (0, 0.7, 0.8, 0.85, 0.9))),
    ]


def _cell(result: dict[str, Any]) -> str:
    below = ", ".join(result["below"]) or "none"
    return f"{result['recall@5']:.3f} / {result['empty']:.0%} / {result['hits']:.2f} / {below}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", nargs="?", type=Path, default=rq.DEFAULT_SET, help="the set's directory")
    parser.add_argument("--no-answer", type=Path, action="append", help="no-answer queries; repeat to join files "
                        "(default: bench/no_answer_queries.json)")
    parser.add_argument("--only", help="only the candidates whose name contains this")
    args = parser.parse_args(argv)
    no_answer = args.no_answer or [rq.DEFAULT_NO_ANSWER]
    queries_in = rq.load_queries(args.set / "queries.jsonl") + [q for path in no_answer for q in rq.load_no_answer(path)]
    brain = load_directory(args.set / "brain")
    index = BrainIndex.build(brain)
    cases, hybrid, store = rq.prepare(brain, index, queries_in)
    titles = [str(record.entry.get("title") or "") for record in index.memories]
    queries = features(cases, hybrid, store, titles, memory_texts(brain, index))
    ids = hybrid.ids
    odd, even = list(range(0, len(queries), 2)), list(range(1, len(queries), 2))
    print(f"set {args.set}; no-answer: {', '.join(map(str, no_answer))}")
    print("cells: recall@5 / no-answer returning nothing / mean hits / categories below the embedding alone")
    print("| candidate | fit odd, score even | fit even, score odd | in-sample (fit and score all) |")
    print("|---|---|---|---|")
    for candidate in candidates():
        if args.only and args.only not in candidate.name:
            continue
        cells = [_cell(fit_and_score(candidate, queries, ids, fitting, scoring)[1])
                 for fitting, scoring in ((odd, even), (even, odd))]
        everything = list(range(len(queries)))
        cells.append(_cell(fit_and_score(candidate, queries, ids, everything, everything)[1]))
        print(f"| {candidate.name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
