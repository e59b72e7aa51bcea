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
"""

from __future__ import annotations

import argparse
import json
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

from connector.engine.archive import load_directory  # noqa: E402
from connector.engine.brain import Brain  # noqa: E402
from connector.engine.embedding import content_hash  # noqa: E402
from connector.engine.hybrid import (  # noqa: E402
    DEFAULT_FUSION,
    EXACT_CANDIDATES,
    Fusion,
    HybridIndex,
    Signals,
    fuse,
    memory_texts,
    query_signals,
    ranked_positions,
)
from connector.engine.index import BrainIndex  # noqa: E402
from connector.engine.jsvalues import parse_iso_ms  # noqa: E402
from connector.engine.ops import Memorize  # noqa: E402
from connector.engine.recall import _eligibility, recall  # noqa: E402
from connector.engine.textmatch import word_terms  # noqa: E402
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


def _locomo_date(text: str) -> str:
    return text


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


def locomo_sets(root: Path = LOCOMO) -> list[Brainset]:
    """The LoCoMo dev conversations as brains, one memory per turn (its README's mapping)."""
    questions = [json.loads(line) for line in (root / "queries.jsonl").read_text().splitlines() if line.strip()]
    adversarial = [json.loads(line) for line in (root / "noanswer.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for path in sorted((root / "conversations").glob("*.json")):
        conv = path.stem
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
    bm25: np.ndarray
    use: np.ndarray
    e5: np.ndarray | None
    signals: Signals  # today's hybrid channels (USE, word coverage, near spellings, exact relevance)


@dataclass
class Prepared:
    brainset: Brainset
    ids: list[str]
    cases: list[Case]


def prepare(brainset: Brainset, cache_dir: Path | None) -> Prepared:
    """Every query's channels (vectors from the cache, embedded once)."""
    use_store, e5_store = cached_stores(cache_dir)
    brain = brainset.brain
    index = BrainIndex.build(brain)
    started = time.perf_counter()
    hybrid = HybridIndex.build(brain, index, use_store)
    e5_vectors = None
    if e5_store is not None:
        texts = memory_texts(brain, index)
        e5_vectors = e5_store.vectors([content_hash(e5_store.model_id, text) for text in texts], texts)
    print(f"  {brainset.name}: {len(index.memories)} memories, vectors in {time.perf_counter() - started:.1f} s "
          f"(embedded: USE {use_store.embedded}, e5 {e5_store.embedded if e5_store else '-'})", file=sys.stderr)
    from connector.engine.embedding import cosines

    cases = []
    for query in brainset.queries:
        exact = recall(brain, query.text, top=EXACT_DEPTH, now=query.now, index=index)
        signals = query_signals(query.text, exact[:EXACT_CANDIDATES], index=index, hybrid=hybrid,
                                embed_query=use_store.embed_query)
        eligible = _eligibility(index, None, None)
        cases.append(Case(
            query=query,
            eligible=np.ones(len(index.memories), dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool),
            exact_rank=[index.positions[hit["id"]] for hit in exact],
            bm25=hybrid.text.words.scores(word_terms(query.text)).astype(np.float32),
            use=signals.semantic if signals.written is None else signals.written,
            e5=None if e5_vectors is None else cosines(e5_vectors, e5_store.embed_query(query.text)),
            signals=signals,
        ))
    return Prepared(brainset, hybrid.ids, cases)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=None, help="vector cache (default: the command line's)")
    parser.add_argument("--sets", default="locomo,quality", help="comma-separated: locomo, quality")
    parser.add_argument("--misses", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    wanted = args.sets.split(",")
    brainsets = (locomo_sets() if "locomo" in wanted else []) + ([quality_set()] if "quality" in wanted else [])
    prepared = [prepare(b, args.cache_dir) for b in brainsets]
    report = {}
    for group in dict.fromkeys(p.brainset.group for p in prepared):
        members = [p for p in prepared if p.brainset.group == group]
        columns = channel_columns(members, {})
        report[group] = columns
        print_set(group, columns, members[0].brainset.metric)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
