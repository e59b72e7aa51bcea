#!/usr/bin/env python3
"""Every recall channel beside the fusion, per category, on the three development sets.

Sets (read from ../shared, never copied into the repository):

- ``locomo-dev``: five LoCoMo conversations, one memory per dialog turn as its README says
  (``"{speaker} on {date}: {text}"``), 200 questions with evidence turns (evidence
  recall@5 / @10) and 50 adversarial ones (the figures of no-answer queries);
- ``recall-quality``: the quality set's brain and 150 queries (recall@5, MRR@10), with the
  no-answer queries written for it (bench/no_answer_queries*.json);
- ``memory-governance``: the similar check's set, scored by bench/similar_fit.py
  (``--governance``; recall does not change what it measures).

Channels, each alone (ranked by its own score over the memories exact mode may list):
``exact`` (the reference's ranking), ``bm25`` (BM25 over stems and CJK bigrams), ``use``
and ``e5`` (cosine of each model); then ``hybrid`` (the connector's hybrid recall, its
floor on) and ``hybrid-nofloor``. ``--cv`` fits the fusion's weights and floor on some
sets and scores them on the others (each way), as docs/recall.md reports.

Vectors are kept between runs in the command line's cache (``--cache-dir``, default
$XDG_CACHE_HOME/brain-store): the first run embeds every memory with both models (minutes
of CPU for e5), later runs nothing.

Usage::

    .venv/bin/python bench/locomo.py                 # all sets, every channel beside the fusion
    .venv/bin/python bench/locomo.py --cv            # and the cross-validation across sets
    .venv/bin/python bench/locomo.py --misses        # list the LoCoMo questions hybrid misses at 10
    .venv/bin/python bench/locomo.py --cv-listing    # cross-validate what an answered query lists
"""

from __future__ import annotations

import argparse
import itertools
import json
import pickle
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from connector.engine.format.archive import load_directory  # noqa: E402
from connector.engine.format.brain import Brain  # noqa: E402
from connector.engine.recall.channelfusion import CHANNEL_FUSION, ChannelFusion, answers, channel_zscores, neighbours  # noqa: E402
from connector.engine.recall.dates import query_dates  # noqa: E402
from connector.engine.recall.embedding import content_hash  # noqa: E402
from connector.engine.recall.hybrid import (  # noqa: E402
    DEFAULT_FUSION,
    EXACT_CANDIDATES,
    Fusion,
    HybridIndex,
    Signals,
    answer_decision,
    fuse,
    fuse_with_dates,
    memory_texts,
    query_signals,
    ranked_positions,
)
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.engine.recall.judge import judge_embedder, judge_reads  # noqa: E402
from connector.engine.format.jsvalues import parse_iso_ms  # noqa: E402
from connector.engine.writes.ops import Memorize  # noqa: E402
from connector.engine.recall.exact import recall  # noqa: E402
from connector.engine.recall.pipeline import eligibility  # noqa: E402
from connector.workcopy.vectorcache import cached_stores  # noqa: E402

SHARED = REPO.parent / "shared" / "fixtures"
LOCOMO = SHARED / "locomo-dev"
QUALITY = SHARED / "recall-quality"
NO_ANSWER = [REPO / "bench" / "no_answer_queries.json", REPO / "bench" / "no_answer_queries_more.json"]
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
TOP = 10
# Exact hits asked for per query (its ranking as a channel).
EXACT_DEPTH = 50


def _instant(text: str) -> datetime:
    return datetime.fromtimestamp(parse_iso_ms(text) / 1000, tz=UTC)


@dataclass
class Query:
    """One query of a set: its text, clock, category and the memory ids that answer it (none: no-answer)."""

    text: str
    now: datetime
    category: str
    gold: list[str]
    label: str


@dataclass
class Brainset:
    """One brain with its queries."""

    name: str
    group: str  # the development set it belongs to (cross-validation folds are sets)
    brain: Brain
    queries: list[Query]
    metric: str  # "evidence" (recall@5/@10) or "quality" (recall@5, MRR@10)


def locomo_sets(root: Path = LOCOMO, conversations: Sequence[str] | None = None) -> list[Brainset]:
    """The LoCoMo dev conversations as brains, one memory per turn (its README's mapping)."""
    questions = [json.loads(line) for line in (root / "queries.jsonl").read_text().splitlines() if line.strip()]
    adversarial = [json.loads(line) for line in (root / "noanswer.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for path in sorted((root / "conversations").glob("*.json")):
        conv = path.stem
        if conversations and conv not in conversations:
            continue
        data = json.loads(path.read_text())
        items, dia_ids = [], []
        session = 1
        while f"session_{session}" in data:
            date = data[f"session_{session}_date_time"]
            for turn in data[f"session_{session}"]:
                words = turn["text"].split()
                title = f"{turn['speaker']}: " + " ".join(words[:9]) + ("…" if len(words) > 9 else "")
                content = f"{turn['speaker']} on {date}: {turn['text']}"
                if turn.get("blip_caption"):
                    content += f" [shares a photo: {turn['blip_caption']}]"
                items.append({"title": title, "content": content, "type": "experience",
                              "path": f"conversations/session-{session}/", "tags": [turn["speaker"].lower()]})
                dia_ids.append(f"{conv}:{turn['dia_id']}")
            session += 1
        mine = [q for q in questions if q["conv"] == conv]
        now = _instant((mine or adversarial)[0]["now"])
        brain = Brain()
        stored = Memorize.from_request(items).apply(brain, now)["stored"]
        by_dia = {dia: entry["id"] for dia, entry in zip(dia_ids, stored)}
        queries = [Query(q["query"], _instant(q["now"]), LOCOMO_CATEGORIES[q["category"]],
                         [by_dia[e] for e in q["evidence"] if e in by_dia], q["query"]) for q in mine]
        queries += [Query(q["query"], _instant(q["now"]), "no-answer", [], q["query"])
                    for q in adversarial if q["conv"] == conv]
        out.append(Brainset(f"locomo-{conv}", "locomo", brain, queries, "evidence"))
    return out


def quality_set(root: Path = QUALITY, no_answer: Sequence[Path] = NO_ANSWER) -> Brainset:
    """The recall-quality dev brain, its queries and the no-answer queries written for it."""
    queries = []
    for line in (root / "queries.jsonl").read_text().splitlines():
        if line.strip():
            q = json.loads(line)
            queries.append(Query(q["query"], _instant(q["now"]), q["category"], q["gold"], q["id"]))
    for path in no_answer:
        data = json.loads(path.read_text())
        default_now = data.get("now", "2025-12-01T00:00:00.000Z")
        queries += [Query(q["query"], _instant(q.get("now", default_now)), "no-answer", [], q["query"])
                    for q in data["queries"]]
    return Brainset("recall-quality", "quality", load_directory(root / "brain"), queries, "quality")


@dataclass
class Case:
    """A query's channels over one brain (positions in the index's order)."""

    query: Query
    eligible: np.ndarray  # bool
    exact_rank: list[int]  # positions, exact mode's order
    exact: np.ndarray  # the exact engine's relevance of its first EXACT_DEPTH hits (0 elsewhere)
    bm25: np.ndarray
    use: np.ndarray
    e5: np.ndarray | None
    signals: Signals  # today's hybrid channels (USE, word coverage, near spellings, exact relevance)
    e5_alike: np.ndarray | None = None  # e5 cosines of the query embedded as a passage (the answer gate's cascade)
    judge: np.ndarray | None = None  # the judge's cosines (connector/engine/recall/judge.py; the judged cascade)


@dataclass
class Prepared:
    brainset: Brainset
    ids: list[str]
    cases: list[Case]
    folders: list[str]

    @property
    def texts(self) -> list[str]:
        """Each memory's text, as hybrid recall reads it (index order)."""
        self._memories()
        return self._texts

    @property
    def written_ms(self) -> list[int | None]:
        """When each memory was written, ms (index order)."""
        self._memories()
        return self._written_ms

    def _memories(self) -> None:
        if getattr(self, "_texts", None) is None:
            index = BrainIndex.build(self.brainset.brain)
            self._texts = memory_texts(self.brainset.brain, index)
            self._written_ms = [record.created_ms for record in index.memories]

    @property
    def adjacent(self) -> tuple[np.ndarray, np.ndarray]:
        found = getattr(self, "_adjacent", None)
        if found is None:
            found = neighbours(self.folders)
            self._adjacent = found
        return found


def prepare(brainset: Brainset, cache_dir: Path | None) -> Prepared:
    """Every query's channels (vectors from the cache, embedded once)."""
    use_store, e5_store, cached_judge = cached_stores(cache_dir, judge=True)
    brain = brainset.brain
    index = BrainIndex.build(brain)
    started = time.perf_counter()
    hybrid = HybridIndex.build(brain, index, use_store)
    texts = memory_texts(brain, index)
    e5_vectors = None
    if e5_store is not None:
        e5_vectors = e5_store.vectors([content_hash(e5_store.model_id, text) for text in texts], texts)
    # The judge where it loads here (else the runs score the fusion and the cascade without it).
    judge_store = cached_judge if judge_embedder() is not None else None
    judge_vectors = None
    if judge_store is not None:
        judge_vectors = judge_store.vectors([content_hash(judge_store.model_id, text) for text in texts], texts)
    print(f"  {brainset.name}: {len(index.memories)} memories, vectors in {time.perf_counter() - started:.1f} s "
          f"(embedded: USE {use_store.embedded}, e5 {e5_store.embedded if e5_store else '-'}, "
          f"judge {judge_store.embedded if judge_store else '-'})", file=sys.stderr)
    from connector.engine.recall.embedding import cosines

    cases = []
    for query in brainset.queries:
        exact = recall(brain, query.text, top=EXACT_DEPTH, now=query.now, index=index)
        signals = query_signals(query.text, exact[:EXACT_CANDIDATES], index=index, hybrid=hybrid,
                                embed_query=use_store.embed_query)
        eligible = eligibility(index, None, None)
        cases.append(Case(
            query=query,
            eligible=np.ones(len(index.memories), dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool),
            exact_rank=[index.positions[hit["id"]] for hit in exact],
            exact=_relevance(exact, index),
            bm25=signals.bm25,  # as hybrid recall fuses it (none for a query of stopwords alone)
            use=signals.semantic if signals.written is None else signals.written,
            e5=None if e5_vectors is None else cosines(e5_vectors, e5_store.embed_query(query.text)),
            signals=signals,
            e5_alike=None if e5_vectors is None else cosines(e5_vectors, e5_store.embed_query_as_passage(query.text)),
            judge=None if judge_vectors is None else cosines(judge_vectors, judge_store.embed_query(query.text)),
        ))
    folders = [str(record.entry.get("path") or "").rpartition("/")[0] for record in index.memories]
    return Prepared(brainset, hybrid.ids, cases, folders)


def _relevance(exact: list[dict[str, Any]], index: BrainIndex) -> np.ndarray:
    values = np.zeros(len(index.memories), dtype=np.float32)
    for hit in exact:
        values[index.positions[hit["id"]]] = hit.get("relevance", 0.0)
    return values


# ----- rankings -----------------------------------------------------------------


def by_score(values: np.ndarray, eligible: np.ndarray, ids: Sequence[str], top: int = TOP) -> list[int]:
    """The ``top`` eligible positions by descending value (ties by id)."""
    candidates = np.flatnonzero(eligible)
    keep = min(len(candidates), top * 3)
    if keep < len(candidates):
        candidates = candidates[np.argpartition(-values[candidates], keep - 1)[:keep]]
    return sorted(candidates.tolist(), key=lambda p: (-float(values[p]), ids[p]))[:top]


def channel_ranking(case: Case, ids: Sequence[str], channel: str) -> list[int]:
    """The ranking of one channel alone."""
    if channel == "exact":
        return case.exact_rank[:TOP]
    if channel == "bm25":
        values = case.bm25
        return [p for p in by_score(values, case.eligible & (values > 0), ids)]
    if channel == "use":
        return by_score(case.use, case.eligible, ids)
    if channel == "e5":
        return by_score(case.e5, case.eligible, ids) if case.e5 is not None else []
    raise ValueError(channel)


def hybrid_ranking(case: Case, ids: Sequence[str], fusion: Fusion) -> list[int]:
    """Today's hybrid ranking under ``fusion`` (its floor when it has one)."""
    fused, listed = fuse(case.signals, fusion, case.eligible)
    return ranked_positions(fused, listed, case.signals.strong, TOP, ids)


def fusion_ranking(case: Case, prepared: Prepared, fusion: ChannelFusion, offsets: np.ndarray | None = None,
                   gate: bool | None = None, dates: bool = True) -> list[int]:
    """The ranking of the channel fusion (connector/engine/recall/channelfusion.py), its floor included
    (``offsets``: added to the fused scores before anything is listed, as `fuse_zscores` takes them;
    ``gate``: another answer decision in place of hybrid recall's (`answer_decision`), bench/gate_cv.py; ``dates``:
    the date channel of hybrid recall, connector/engine/recall/dates.py)."""
    judged = getattr(case, "judge", None)
    reads = judge_reads(case.query.text)
    channels = {"exact": case.exact, "bm25": case.bm25, "use": case.signals.semantic, "e5": case.e5,
                "judge": judged if reads and case.e5 is not None else None}  # the judge's vectors go with e5's
    fusion = fusion.for_query(channels, case.eligible, case.signals.words)
    memo = case.__dict__.setdefault("_z", {})
    clips = (fusion.clip, fusion.clip_e5)
    normalised = memo.get(clips)
    if normalised is None:
        normalised = memo[clips] = channel_zscores(channels, case.eligible, fusion.clip, fusion.clips())
    if gate is None:
        gate = case.__dict__.get("_gate")
        if gate is None:
            gate = case.__dict__["_gate"] = answer_decision(
                case.signals, case.eligible, case.e5, alike=lambda: case.e5_alike,
                judge=None if judged is None else (lambda positions: float(judged[positions].max())), reads=reads)
    fused, listed = fuse_with_dates(normalised, fusion, case.eligible, prepared.adjacent,
                                    answers(case.e5, case.eligible, fusion, gate), offsets,
                                    query_dates(case.query.text, case.query.now) if dates else (),
                                    lambda p: prepared.texts[p], lambda p: prepared.written_ms[p])
    strong = case.signals.strong
    if strong is not None and case.eligible[strong]:
        listed[strong] = True
    order = by_score(np.where(listed, fused, -np.inf), listed, prepared.ids)
    if strong is not None and case.eligible[strong]:
        order = [strong] + [p for p in order if p != strong]
    return order[:TOP]


# ----- scores -------------------------------------------------------------------


def figures(prepared: Prepared, rank: Any) -> dict[str, dict[str, float]]:
    """Per category: recall@5, recall@10, MRR@10 (answerable) or share empty, mean hits (no-answer)."""
    rows: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    empty: list[int] = []
    for case in prepared.cases:
        ranked = [prepared.ids[p] for p in rank(case, prepared.ids)]
        if not case.query.gold:
            empty.append(len(ranked))
            continue
        gold = set(case.query.gold)
        first = next((i + 1 for i, memory_id in enumerate(ranked[:TOP]) if memory_id in gold), None)
        value = (float(first is not None and first <= 5), float(first is not None), 1.0 / first if first else 0.0)
        rows[case.query.category].append(value)
        rows["overall"].append(value)
    out = {category: {"n": len(values), "r@5": sum(v[0] for v in values) / len(values),
                      "r@10": sum(v[1] for v in values) / len(values), "mrr": sum(v[2] for v in values) / len(values),
                      "hits5": sum(v[0] for v in values)}
           for category, values in rows.items()}
    if empty:
        out["no-answer"] = {"n": len(empty), "empty": sum(1 for c in empty if c == 0) / len(empty),
                            "mean_hits": sum(empty) / len(empty)}
    return out


def merged(parts: Sequence[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Figures of several brains of one set, weighted by their query counts."""
    out: dict[str, dict[str, float]] = {}
    for category in dict.fromkeys(c for part in parts for c in part):
        present = [part[category] for part in parts if category in part]
        n = sum(p["n"] for p in present)
        out[category] = {"n": n, **{key: sum(p[key] * p["n"] for p in present) / n
                                    for key in present[0] if key not in ("n", "hits5")}}
        if "hits5" in present[0]:
            out[category]["hits5"] = sum(p["hits5"] for p in present)
    return out


def set_figures(prepared: Sequence[Prepared], rank: Any) -> dict[str, dict[str, float]]:
    return merged([figures(p, rank) for p in prepared])


def print_set(name: str, columns: dict[str, dict[str, dict[str, float]]], metric: str) -> None:
    """One set's table: a row per category, one column per channel / fusion."""
    keys = ("r@5", "r@10") if metric == "evidence" else ("r@5", "mrr")
    print(f"\n{name}: " + " / ".join(keys) + " per category; no-answer: share empty / mean hits")
    print(f"{'category':<14} {'n':>4} " + " ".join(f"{column:>15}" for column in columns))
    first = next(iter(columns.values()))
    categories = [c for c in first if c not in ("overall", "no-answer")] + ["overall", "no-answer"]
    for category in categories:
        if category not in first:
            continue
        cells = []
        for figures_ in columns.values():
            value = figures_.get(category)
            if value is None:
                cells.append(f"{'-':>15}")
            elif category == "no-answer":
                cells.append(f"{value['empty']:>8.2f} {value['mean_hits']:>6.2f}")
            else:
                cells.append(f"{value[keys[0]]:>8.3f} {value[keys[1]]:>6.3f}")
        print(f"{category:<14} {int(first[category]['n']):>4} " + " ".join(cells))


def channel_columns(prepared: Sequence[Prepared], fusions: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    columns = {}
    for channel in ("exact", "bm25", "use", "e5"):
        columns[channel] = set_figures(prepared, lambda case, ids, c=channel: channel_ranking(case, ids, c))
    columns["hybrid(old)"] = set_figures(prepared, lambda case, ids: hybrid_ranking(case, ids, DEFAULT_FUSION))
    columns["old-nofloor"] = set_figures(prepared, lambda case, ids: hybrid_ranking(case, ids, replace(DEFAULT_FUSION, floor=None)))
    for name, rank in fusions.items():
        columns[name] = set_figures(prepared, rank)
    return columns


# ----- fitting ------------------------------------------------------------------

WEIGHT_GRID = {
    "exact": (0.0, 0.25, 0.5),
    "bm25": (0.0, 0.25, 0.5),
    "use": (0.25, 0.5),
    "e5": (1.0,),
    "clip": (3.0,),
    "context": (0.0, 0.15, 0.3),
}
FLOOR_GRID = {
    "gate": (True,),
    "e5_floor": (None, 0.8),
    "window": (None, 1.0, 1.5, 2.0),
    "hit_floor": (None, 1.5, 2.0),
}
CHANNEL_NAMES = ("exact", "bm25", "use", "e5")


def _groups(prepared: Sequence[Prepared]) -> dict[str, list[Prepared]]:
    out: dict[str, list[Prepared]] = defaultdict(list)
    for item in prepared:
        out[item.brainset.group].append(item)
    return out


def _rank_of(fusion: ChannelFusion) -> Any:
    return lambda case, ids, prepared: fusion_ranking(case, prepared, fusion)


def group_figures(members: Sequence[Prepared], fusion: ChannelFusion | str) -> dict[str, dict[str, float]]:
    """A set's figures under a fusion, or one channel alone (its name)."""
    parts = []
    for item in members:
        if isinstance(fusion, str):
            parts.append(figures(item, lambda case, ids, c=fusion: channel_ranking(case, ids, c)))
        else:
            parts.append(figures(item, lambda case, ids, item=item: fusion_ranking(case, item, fusion)))
    return merged(parts)


def set_value(metric: str, figures_: dict[str, dict[str, float]]) -> float:
    overall = figures_["overall"]
    return (overall["r@5"] + overall["r@10"]) / 2 if metric == "evidence" else (overall["r@5"] + overall["mrr"]) / 2


def below_best(figures_: dict[str, dict[str, float]], singles: dict[str, dict[str, dict[str, float]]]) -> int:
    """Queries lost beyond one per category against the best single channel of that category (recall@5)."""
    lost = 0
    for category, value in figures_.items():
        if category in ("overall", "no-answer"):
            continue
        best = max(single[category]["hits5"] for single in singles.values() if category in single)
        lost += max(0, int(best - value["hits5"]) - 1)
    return lost


def evaluate(prepared: Sequence[Prepared], fusion: ChannelFusion, singles: dict[str, Any]) -> tuple[int, float, dict[str, Any]]:
    """Queries lost against the best single channels (beyond one per category), the mean set value, the figures."""
    lost, values, report = 0, [], {}
    for group, members in _groups(prepared).items():
        found = group_figures(members, fusion)
        report[group] = found
        lost += below_best(found, singles[group])
        values.append(set_value(members[0].brainset.metric, found))
    return lost, sum(values) / len(values), report


def fit(prepared: Sequence[Prepared], no_answer_target: tuple[float, float] = (0.6, 2.0)) -> ChannelFusion:
    """Weights (no floor) with the fewest queries lost to a single channel, then the best value; then the
    floor returning nothing for the most no-answer queries among those losing no more (recall@5)."""
    singles = {group: {c: group_figures(members, c) for c in CHANNEL_NAMES} for group, members in _groups(prepared).items()}
    best_key, best = None, ChannelFusion()
    for values in itertools.product(*WEIGHT_GRID.values()):
        fusion = ChannelFusion(**dict(zip(WEIGHT_GRID, values)))
        lost, value, _ = evaluate(prepared, fusion, singles)
        key = (-lost, value)
        if best_key is None or key > best_key:
            best_key, best = key, fusion
    base_lost, base_value, base = evaluate(prepared, best, singles)
    floor_key, chosen = None, best
    for values in itertools.product(*FLOOR_GRID.values()):
        fusion = replace(best, **dict(zip(FLOOR_GRID, values)))
        lost, value, report = evaluate(prepared, fusion, singles)
        answers = [r["no-answer"] for g, r in report.items() if "no-answer" in r and (g == "quality" or "quality" not in report)]
        empty = sum(a["empty"] for a in answers) / max(len(answers), 1)
        hits = sum(a["mean_hits"] for a in answers) / max(len(answers), 1)
        r10 = [r["overall"]["r@10"] for r in report.values()]
        # Never more queries lost than without a floor, recall@10 kept within a point; then the most empty.
        ok = lost <= base_lost and all(a >= b["overall"]["r@10"] - 0.01 for a, b in zip(r10, base.values()))
        key = (ok, empty >= no_answer_target[0] and hits <= no_answer_target[1], empty - hits / 10, value)
        if floor_key is None or key > floor_key:
            floor_key, chosen = key, fusion
    return chosen


def cross_validate(prepared: Sequence[Prepared], loo: bool = False) -> None:
    """Fit on some sets, score on the others: LoCoMo -> quality, quality -> LoCoMo, and each brain held out."""
    groups = _groups(prepared)
    folds = []
    if len(groups) > 1:
        for held in groups:
            folds.append((f"fit on {'+'.join(g for g in groups if g != held)}, score {held}",
                          [p for g, m in groups.items() if g != held for p in m], groups[held]))
    if loo and len(prepared) > 2:
        for item in prepared:
            folds.append((f"fit on all but {item.brainset.name}, score it", [p for p in prepared if p is not item], [item]))
    for name, fitting, scoring in folds:
        fusion = fit(fitting)
        print(f"\n{name}: fitted {fusion}")
        for group, members in _groups(scoring).items():
            columns = {c: group_figures(members, c) for c in CHANNEL_NAMES}
            columns["fitted"] = group_figures(members, fusion)
            columns["shipped"] = group_figures(members, SHIPPED)
            print_set(f"  {group} ({len(members)} brains)", columns, members[0].brainset.metric)


SHIPPED = CHANNEL_FUSION

# --cv-listing: what is listed once a query is answered (the gate unchanged), against the
# listing before the lookalike cut (window 1.5, hit floor 1.5).
LISTING_GRID = {
    "lookalike_words": (0.0, 0.25),
    "lookalike": (2.75, 3.0),
    "lookalike_use_alone": (2.5, 2.75, 3.0),
    "window": (1.5, 1.25),
    "hit_floor": (1.5, 1.6, 1.75),
}
LISTING_BEFORE = replace(CHANNEL_FUSION, window=1.5, hit_floor=1.5, lookalike=None, lookalike_words=0.0)


def halves(item: Prepared) -> tuple[Prepared, Prepared]:
    """A brain's queries in two halves (answerable and no-answer ones alternately)."""
    answerable = [case for case in item.cases if case.query.gold]
    no_answer = [case for case in item.cases if not case.query.gold]
    parts = tuple([case for n, case in enumerate(answerable) if n % 2 == side]
                  + [case for n, case in enumerate(no_answer) if n % 2 == side] for side in (0, 1))
    return Prepared(item.brainset, item.ids, parts[0], item.folders), Prepared(item.brainset, item.ids, parts[1], item.folders)


def fit_listing(prepared: Sequence[Prepared]) -> ChannelFusion:
    """The listing that loses no recall@5 or recall@10 on any set against the listing before (MRR@10
    within half a point), then lists the fewest hits for the no-answer queries of recall-quality
    (with and without e5)."""
    groups = _groups(prepared)
    before = {group: group_figures(members, LISTING_BEFORE) for group, members in groups.items()}
    best_key, chosen = None, LISTING_BEFORE
    for values in itertools.product(*LISTING_GRID.values()):
        fusion = replace(SHIPPED, **dict(zip(LISTING_GRID, values)))
        found = {group: group_figures(members, fusion) for group, members in groups.items()}
        ok = all(found[g]["overall"][key] >= before[g]["overall"][key] - 1e-9 for g in found for key in ("r@5", "r@10"))
        ok = ok and all(found[g]["overall"]["mrr"] >= before[g]["overall"]["mrr"] - 0.005 for g in found)
        # The no-answer queries of recall-quality, with e5 and without (both states weigh alike).
        hits = sum(f["no-answer"]["mean_hits"] for g, f in found.items() if g.startswith("quality") and "no-answer" in f)
        value = sum(f["overall"]["r@5"] + f["overall"]["r@10"] for f in found.values())
        key = (ok, -hits, value)
        if best_key is None or key > best_key:
            best_key, chosen = key, fusion
    return chosen


def without_e5(item: Prepared) -> Prepared:
    """The same brain and queries as recall sees them before the brain's e5 vectors are there."""
    cases = [replace(case, e5=None) for case in item.cases]
    return Prepared(replace(item.brainset, group=f"{item.brainset.group} without e5"), item.ids, cases, item.folders)


def cross_validate_listing(prepared: Sequence[Prepared]) -> None:
    """Fit the listing on LoCoMo and half the recall-quality queries, score the other half; fit on
    recall-quality and all conversations but one, score that one. Each set counts twice, with and
    without e5 (a brain whose e5 vectors are not computed yet): neither may lose recall."""
    prepared = [*prepared, *(without_e5(item) for item in prepared)]
    quality = [p for p in prepared if p.brainset.group.startswith("quality")]
    locomo = [p for p in prepared if p.brainset.group.startswith("locomo")]
    folds = []
    for side in (0, 1):
        split = [halves(item) for item in quality]
        folds.append((f"fit LoCoMo + recall-quality half {1 - side}, score half {side}",
                      locomo + [pair[1 - side] for pair in split], [pair[side] for pair in split]))
    for name in dict.fromkeys(item.brainset.name for item in locomo):
        folds.append((f"fit recall-quality + LoCoMo but {name}, score it",
                      quality + [p for p in locomo if p.brainset.name != name], [p for p in locomo if p.brainset.name == name]))
    names = tuple(LISTING_GRID)
    for name, fitting, scoring in folds:
        fusion = fit_listing(fitting)
        print(f"\n{name}: fitted " + ", ".join(f"{key} {getattr(fusion, key)}" for key in names))
        for group, members in _groups(scoring).items():
            columns = {"before": group_figures(members, LISTING_BEFORE), "fitted": group_figures(members, fusion),
                       "shipped": group_figures(members, SHIPPED)}
            print_set(f"  {group}", columns, members[0].brainset.metric)


def print_misses(prepared: Sequence[Prepared], fusion: ChannelFusion, limit: int) -> None:
    """The questions ``fusion`` misses at 10 per category: the question, an evidence turn and the first hit."""
    misses: dict[str, list[str]] = defaultdict(list)
    for item in prepared:
        if item.brainset.metric != "evidence":
            continue
        texts = memory_texts(item.brainset.brain, BrainIndex.build(item.brainset.brain))
        position = {memory_id: n for n, memory_id in enumerate(item.ids)}
        for case in item.cases:
            if not case.query.gold:
                continue
            ranked = fusion_ranking(case, item, fusion)
            gold = [position[memory_id] for memory_id in case.query.gold]
            if any(p in gold for p in ranked):
                continue
            flat = [" ".join(texts[p].split("\n")[2:]) or texts[p] for p in (gold[0], *ranked[:1])]  # the body (title, tags first)
            first = flat[1] if ranked else "(nothing listed)"
            misses[case.query.category].append(
                f"  [{item.brainset.name}] {case.query.text}\n      evidence: {flat[0][:160]}\n      first hit: {first[:160]}")
    for category, lines in sorted(misses.items()):
        print(f"\nmissed at 10, {category}: {len(lines)}")
        print("\n".join(lines[:limit]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=None, help="vector cache (default: the command line's)")
    parser.add_argument("--sets", default="locomo,quality", help="comma-separated: locomo, quality")
    parser.add_argument("--misses", action="store_true", help="print the LoCoMo questions the shipped fusion misses at 10")
    parser.add_argument("--misses-shown", type=int, default=10, help="with --misses: at most this many per category")
    parser.add_argument("--conversations", default="", help="comma-separated LoCoMo conversations (default: all)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--cv", action="store_true", help="fit on some sets, score on the others")
    parser.add_argument("--fit", action="store_true", help="fit on every set and print the fitted fusion")
    parser.add_argument("--cv-listing", action="store_true", help="cross-validate what is listed (lookalike cut, window, hit floor)")
    parser.add_argument("--loo", action="store_true", help="with --cv: also fit on all brains but one, score that one")
    parser.add_argument("--keep", type=Path, help="keep each set's channels here (pickles) and read them back")
    args = parser.parse_args(argv)
    wanted = args.sets.split(",")
    brainsets = (locomo_sets(conversations=[c for c in args.conversations.split(",") if c]) if "locomo" in wanted else []) + ([quality_set()] if "quality" in wanted else [])
    prepared = []
    for brainset in brainsets:
        kept = args.keep / f"{brainset.name}.pickle" if args.keep else None
        if kept is not None and kept.is_file():
            prepared.append(pickle.loads(kept.read_bytes()))
            continue
        prepared.append(prepare(brainset, args.cache_dir))
        if kept is not None:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(pickle.dumps(prepared[-1]))
    report = {}
    for group in dict.fromkeys(p.brainset.group for p in prepared):
        members = [p for p in prepared if p.brainset.group == group]
        columns = channel_columns(members, {"fusion": lambda case, ids, members=members: fusion_ranking(
            case, next(p for p in members if p.ids is ids), SHIPPED)})
        report[group] = columns
        print_set(group, columns, members[0].brainset.metric)
    if args.misses:
        print_misses(prepared, SHIPPED, args.misses_shown)
    if args.fit:
        print(f"\nfitted on every set: {fit(prepared)}")
    if args.cv:
        cross_validate(prepared, args.loo)
    if args.cv_listing:
        cross_validate_listing(prepared)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
