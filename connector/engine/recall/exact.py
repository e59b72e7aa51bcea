"""Recall exactly as the reference `brain recall` (recall.md).

`recall()` scores a brain's memories against a query (or a context) at a given
clock and returns the same hits, in the same order, with the same numbers as the
reference command line. The heavy lifting (parsing, postings) is done once in
`BrainIndex`; this module only does per-query work.
"""

from __future__ import annotations

import heapq
import math
from datetime import datetime
from typing import Any

import numpy as np

from connector.engine.format.brain import Brain
from connector.engine.format.jsvalues import datetime_ms, round3
from connector.engine.format.text import tokenize
from connector.engine.recall.columns import bm25_relevance
from connector.engine.recall.index import BrainIndex, BrainNotInitialized, MemoryRecord, RecallError
from connector.engine.recall.indexcache import DEFAULT_CACHE, IndexCache, index_for
from connector.engine.recall.pipeline import eligibility, hit_of, instant_ms, newer_field_factors, time_terms

__all__ = ["recall", "BrainIndex", "BrainNotInitialized", "RecallError", "context_query"]

FLOOR = 0.05
SOURCE_THRESHOLD = 0.3

W_RELEVANCE, W_DECAYED, W_RECENCY = 0.38, 0.18, 0.08
W_SPREADING, W_CONTEXT, W_SALIENCE = 0.14, 0.14, 0.08


def _weight_table() -> list[tuple[float, ...]]:
    """Normalised weights per (spreading, context, salience) presence, summed in spec
    order; indexed by spreading * 4 + context * 2 + salience."""
    table = []
    for spreading in (False, True):
        for context in (False, True):
            for salience in (False, True):
                weights = [W_RELEVANCE, W_DECAYED, W_RECENCY]
                if spreading:
                    weights.append(W_SPREADING)
                if context:
                    weights.append(W_CONTEXT)
                if salience:
                    weights.append(W_SALIENCE)
                total = 0.0
                for weight in weights:
                    total += weight
                table.append(tuple(weight / total for weight in weights))
    return table


_WEIGHTS = _weight_table()


def context_query(project: str | None, task: str | None, topics: str | None) -> str:
    """The query context mode uses: project, topics and task (those given), or ``*``."""
    parts = [part for part in (project, topics, task) if part]
    return " ".join(parts) if parts else "*"


def relevances(index: BrainIndex, query: str) -> dict[int, float]:
    """Normalised BM25 with query coverage: memory position -> relevance (> 0 only)."""
    terms = list(dict.fromkeys(tokenize(query)))
    if not terms or index.doc_count == 0:
        return {}
    prepared = [index.term_contributions(term) for term in terms]
    idf_total = 0.0
    for _, _, idf in prepared:
        idf_total += idf
    # Terms in query order, so each document's sum is accumulated in the
    # reference's order (floating-point addition is not associative). A document's
    # first contribution is stored as is: it already equals 0.0 + contribution.
    docs, contributions, idf = prepared[0]
    scores: dict[int, float] = dict(zip(docs, contributions))
    matched: dict[int, float] = dict.fromkeys(docs, 0.0 + idf)
    for docs, contributions, idf in prepared[1:]:
        score_of = scores.get
        for doc, contribution in zip(docs, contributions):
            known = score_of(doc)
            if known is None:
                scores[doc] = contribution
                matched[doc] = 0.0 + idf
            else:
                scores[doc] = known + contribution
                matched[doc] += idf
    max_score = 0.0
    for score in scores.values():
        if score > max_score:
            max_score = score
    if not max_score > 0:
        return {}
    result: dict[int, float] = {}
    doc_memory = index.doc_memory
    floor = math.floor
    for doc, score in scores.items():
        if not score > 0:
            continue
        position = doc_memory[doc]
        if position is None:
            continue
        coverage = matched[doc] / idf_total if idf_total else 0.0
        # round3, inlined (hot): Math.round(x * 1000) / 1000, halves toward +infinity
        scaled = (score / max_score) * coverage * 1000
        if scaled - scaled != 0:
            continue  # non-finite: counts as 0
        whole = floor(scaled)
        relevance = (whole + 1 if scaled - whole >= 0.5 else whole) / 1000
        if relevance:
            result[position] = relevance + 0.0
    return result


def _evaluate(
    memories: list[MemoryRecord],
    positions: list[int],
    relevance_by_pos: dict[int, float],
    now_ms: int,
) -> tuple[dict[int, tuple[float, float]], list[tuple[str, float]]]:
    """Time terms and source strengths (0.55 relevance + 0.30 decayed + 0.15 recency)
    of the memories at ``positions``, in order."""
    terms = time_terms(memories, positions, now_ms)
    relevance_of = relevance_by_pos.get
    strengths = []
    for position in positions:
        decayed, recency = terms[position]
        strengths.append((memories[position].id, 0.55 * relevance_of(position, 0.0) + 0.30 * decayed + 0.15 * recency))
    return terms, strengths


def _spread(
    edges: dict[str, list[tuple[str, float]]],
    sources: list[tuple[str, float]],
) -> dict[str, float]:
    """Two-hop breadth-first activation from each source, in source order."""
    best: dict[str, float] = {}
    get = best.get
    for source, strength in sources:
        if not strength > SOURCE_THRESHOLD:
            continue
        visited = {source}
        frontier = [(source, strength)]
        # Hop 1 (damping 0.5): record and keep the next frontier.
        next_frontier = []
        for node, accumulated in frontier:
            for neighbour, weight in edges.get(node, ()):
                if neighbour in visited:
                    continue
                visited.add(neighbour)
                bonus = accumulated * weight * 0.5
                if bonus > get(neighbour, 0.0):
                    best[neighbour] = bonus
                next_frontier.append((neighbour, bonus))
        # Hop 2 (damping 0.25): record only; a node reached first by a weaker path
        # keeps that path (the reference's quirk).
        for node, accumulated in next_frontier:
            for neighbour, weight in edges.get(node, ()):
                if neighbour in visited:
                    continue
                visited.add(neighbour)
                bonus = accumulated * weight * 0.25
                if bonus > get(neighbour, 0.0):
                    best[neighbour] = bonus
    return best


def _group_match(
    group: tuple[str | None, str | None, frozenset[Any] | None],
    project: str | None,
    task: str | None,
    topic_set: frozenset[str] | None,
) -> float:
    """Context match of one encoding context:
    0.3 x same project + 0.4 x Jaccard(topics) + 0.3 x same task."""
    memory_project, memory_task, memory_topics = group
    project_term = 0.3 if (project and memory_project and project == memory_project) else 0.0
    jaccard = 0.0
    if topic_set is not None and memory_topics is not None:
        common = len(topic_set & memory_topics) if memory_topics else 0
        union = len(topic_set) + len(memory_topics) - common
        if union:
            jaccard = common / union
    task_term = 0.3 if (task and memory_task and task == memory_task) else 0.0
    return project_term + 0.4 * jaccard + task_term


def _topic_set(topics: str | None) -> frozenset[str] | None:
    # Recall topics: the string split on commas, untrimmed.
    return frozenset(topics.split(",")) if topics else None


def recall(
    brain: Brain | None,
    query: str | None = None,
    *,
    top: int = 10,
    project: str | None = None,
    task: str | None = None,
    topics: str | None = None,
    context: bool = False,
    now: datetime,
    as_of: datetime | str | None = None,
    as_known_of: datetime | str | None = None,
    index: BrainIndex | None = None,
    cache_key: str | None = None,
    cache: IndexCache = DEFAULT_CACHE,
    exhaustive: bool = False,
) -> list[dict[str, Any]]:
    """Recall from ``brain`` as `brain recall` does; returns the hits as dicts.

    ``index`` (a prepared `BrainIndex`) or ``cache_key`` (e.g. the archive
    checksum, looked up in ``cache``) avoid re-parsing the brain per query.
    ``exhaustive`` scores every memory the way the reference does instead of
    bounding scores first (same answer; for tests). Raises
    `BrainNotInitialized` when there is no ``index.json``.
    """
    if index is None:
        if brain is None:
            raise ValueError("recall needs a brain or a prepared index")
        index = index_for(brain, cache_key, cache)
    if not index.memories:
        return []
    now_ms = datetime_ms(now)
    as_of_ms = instant_ms(as_of)
    as_known_ms = instant_ms(as_known_of)
    if context and not query:
        query = context_query(project, task, topics)
    query = query or ""
    ranked = None
    if not exhaustive and top > 0 and index.columns is not None:
        ranked = _bounded(index, query, top, project, task, topics, context, now_ms, as_of_ms, as_known_ms)
    if ranked is None:
        ranked = _every(index, query, top, project, task, topics, context, now_ms, as_of_ms, as_known_ms)
    memories = index.memories
    return [hit_of(memories[row[2]], -row[0], *row[3:], now_ms) for row in ranked]


def _every(
    index: BrainIndex,
    query: str,
    top: int,
    project: str | None,
    task: str | None,
    topics: str | None,
    context: bool,
    now_ms: int,
    as_of_ms: int | None,
    as_known_ms: int | None,
) -> list[Ranked]:
    """The reference's way: score every memory that can appear, spreading forward from every source."""
    relevance_by_pos = relevances(index, query)
    memories = index.memories
    eligible = eligibility(index, as_of_ms, as_known_ms)
    # Sources: every eligible memory in context mode, else the relevant ones (the
    # floor drops the rest unless spreading reaches them, handled below).
    if context:
        count = len(memories)
        source_positions = list(range(count)) if eligible is None else [i for i in range(count) if eligible[i]]
    else:
        source_positions = sorted(
            position
            for position, relevance in relevance_by_pos.items()
            if relevance >= FLOOR and (eligible is None or eligible[position])
        )
    group_matches = None
    if project or task or topics:
        topic_set = _topic_set(topics)
        group_matches = [_group_match(group, project, task, topic_set) for group in index.ctx_groups]
    expiry_ms = as_of_ms if as_of_ms is not None else now_ms
    terms, strengths = _evaluate(memories, source_positions, relevance_by_pos, now_ms)
    spreading = _spread(index.edges, strengths) if strengths and index.edges is not None else {}
    if context:
        scored_positions = source_positions
    else:
        # Floor: keep memories with relevance or spreading at least 0.05.
        kept = set(source_positions)
        positions = index.positions
        for memory_id, bonus in spreading.items():
            if bonus >= FLOOR:
                position = positions.get(memory_id)
                if position is not None and (eligible is None or eligible[position]):
                    kept.add(position)
        scored_positions = sorted(kept)
        terms.update(time_terms(memories, [p for p in scored_positions if p not in terms], now_ms))
    scored = _scores(
        memories, scored_positions, relevance_by_pos, terms, spreading, group_matches, expiry_ms, as_of_ms is not None
    )
    return _top(scored, top, memories)


# Any score this far below the top-th best lower bound rounds strictly lower, so it
# cannot reach the result (one rounding step of 0.001, plus float slack).
_PRUNE_MARGIN = 0.0011 + 1e-9
# numpy.power and the bound arithmetic are within ~1e-15 (relative) of the exact
# values; bounds are widened by a million times that.
_SLACK = 1e-9
# Above this magnitude a value's bound is not trusted (overflow, huge decay): the
# whole recall is then scored the reference's way.
_SAFE_MAGNITUDE = 1e6
# More candidates than this: bounds do not separate the brain's scores; scoring
# everything forward is cheaper than one backward walk per candidate.
_MAX_CANDIDATES = 1500
_UNKNOWN = object()


def _bounded(
    index: BrainIndex,
    query: str,
    top: int,
    project: str | None,
    task: str | None,
    topics: str | None,
    context: bool,
    now_ms: int,
    as_of_ms: int | None,
    as_known_ms: int | None,
) -> list[Ranked] | None:
    """The exact top ``top``, scoring exactly only the memories that can reach it.

    Every memory's score is bounded at once on arrays (`Columns`): BM25
    relevance (bit-identical to the scalar loop: basic IEEE operations in the same
    order), approximate decayed strength (``numpy.power``), and per-memory bounds
    of the spreading bonus from the association graph. Memories whose upper bound
    falls a rounding step below the ``top``-th best lower bound cannot appear; the
    others get their exact terms from the scalar code (``math.pow``) and their
    exact bonus from the walks that reach them (`BrainIndex.spread_bonus`).
    Returns None when the bounds cannot be trusted or do not separate the
    scores: the caller then scores everything.
    """
    columns = index.columns
    assert columns is not None
    terms = list(dict.fromkeys(tokenize(query)))
    prepared = [(term, index.idf(term)) for term in terms] if terms and index.doc_count else []
    relevance = bm25_relevance(index.postings, index.doc_memory_array, columns.count, prepared)
    eligible = columns.eligible(as_of_ms, as_known_ms, index.quarantine_enforce)
    decayed, recency = columns.time_terms(now_ms)
    salience = columns.salience
    with np.errstate(all="ignore"):
        unsafe = (
            ~np.isfinite(decayed)
            | (np.abs(decayed) > _SAFE_MAGNITUDE)
            | (np.abs(columns.strength) > _SAFE_MAGNITUDE)
            | (np.abs(salience) > _SAFE_MAGNITUDE)
        )
    if eligible is not None:
        unsafe &= eligible
    if unsafe.any():
        return None
    base = (eligible if eligible is not None else np.ones(columns.count, dtype=bool)) if context else relevance >= FLOOR
    if not context and eligible is not None:
        base &= eligible
    context_given = bool(project or task or topics)
    topic_set = _topic_set(topics)
    match = columns.context_matches(project, task, topic_set) if context_given else np.zeros(columns.count)
    # Ineligible memories may hold NaN here; they are never listed nor sources.
    with np.errstate(all="ignore"):
        slack = _SLACK * (1 + np.abs(decayed) + np.abs(salience))

        weighted = W_RELEVANCE * relevance + W_DECAYED * decayed + W_RECENCY * recency
        total = np.full(columns.count, W_RELEVANCE + W_DECAYED + W_RECENCY)
        has_match = match > 0
        weighted += np.where(has_match, W_CONTEXT * match, 0.0)
        total += np.where(has_match, W_CONTEXT, 0.0)
        weighted += np.where(columns.has_salience, W_SALIENCE * salience, 0.0)
        total += np.where(columns.has_salience, W_SALIENCE, 0.0)

        spreads = index.edges is not None and len(columns.edge_target) > 0
        if spreads:
            strength = 0.55 * relevance + 0.30 * decayed + 0.15 * recency
            strength_slack = _SLACK * (1 + np.abs(decayed))
            maybe = base & (strength + strength_slack > SOURCE_THRESHOLD)
            sure = base & (strength - strength_slack > SOURCE_THRESHOLD)
            bonus_high, bonus_low, two_hop = columns.spreading_bounds(
                np.where(maybe, strength + strength_slack, 0.0), np.where(sure, strength - strength_slack, 0.0)
            )
            bonus_high = np.where(bonus_high > 0, np.minimum(bonus_high * (1 + _SLACK) + 1e-12, 1.0), 0.0)
            bonus_low = np.where(bonus_low > _SLACK, bonus_low * (1 - _SLACK) - 1e-12, 0.0)
            two_hop = np.where(two_hop > 0, two_hop * (1 + _SLACK) + 1e-12, 0.0)
        else:
            bonus_high = bonus_low = two_hop = np.zeros(columns.count)
            maybe = np.zeros(columns.count, dtype=bool)

        plain = weighted / total
        spread_total = total + W_SPREADING
        may_spread = bonus_high > 0
        high = np.where(may_spread, np.maximum(plain, (weighted + W_SPREADING * bonus_high) / spread_total), plain)
        low = np.where(
            bonus_low > 0,
            (weighted + W_SPREADING * bonus_low) / spread_total,
            np.where(may_spread, np.minimum(plain, weighted / spread_total), plain),
        )
        factor = columns.factors(as_of_ms if as_of_ms is not None else now_ms, as_of_ms is not None)
        high = high * factor + slack
        low = low * factor - slack

    # Memories sure to be listed (context mode: all eligible; query mode: relevant
    # ones) set the bar; others enter query mode only through spreading >= 0.05.
    listed = np.flatnonzero(base)
    if len(listed) > top:
        lows = low[listed]
        cut = float(np.partition(lows, len(lows) - top)[len(lows) - top]) - _PRUNE_MARGIN
    else:
        cut = -math.inf
    if math.isnan(cut):
        return None
    reachable = base if context else base | (may_spread & (bonus_high >= FLOOR) & (eligible if eligible is not None else True))
    candidates = np.flatnonzero(reachable & (high >= cut)).tolist()
    if len(candidates) > _MAX_CANDIDATES:
        return None
    return _score_candidates(
        index, candidates, top, relevance, base, maybe, bonus_high, two_hop, spreads, context, project, task, topic_set, now_ms,
        as_of_ms,
    )


def _score_candidates(
    index: BrainIndex,
    candidates: list[int],
    top: int,
    relevance: np.ndarray,
    base: np.ndarray,
    maybe_source: np.ndarray,
    bonus_high: np.ndarray,
    two_hop: np.ndarray,
    spreads: bool,
    context: bool,
    project: str | None,
    task: str | None,
    topic_set: frozenset[str] | None,
    now_ms: int,
    as_of_ms: int | None,
) -> list[Ranked]:
    """Exact scores of ``candidates`` with the scalar code, then the top ones."""
    memories = index.memories
    relevance_by_pos = {position: value for position, value in zip(candidates, relevance[candidates].tolist()) if value}
    terms = time_terms(memories, candidates, now_ms)
    spreading: dict[str, float] = {}
    if spreads:
        positions = index.positions
        maybe = maybe_source.tolist()
        strengths: dict[str, float | None] = {}

        def source_strength(memory_id: str) -> float | None:
            # The exact strength of a source (as `_evaluate` computes it) when > 0.3.
            known = strengths.get(memory_id, _UNKNOWN)
            if known is not _UNKNOWN:
                return known  # type: ignore[return-value]
            position = positions.get(memory_id)
            value = None
            if position is not None and maybe[position]:
                decayed, recency = time_terms(memories, [position], now_ms)[position]
                strength = 0.55 * float(relevance[position]) + 0.30 * decayed + 0.15 * recency
                value = strength if strength > SOURCE_THRESHOLD else None
            strengths[memory_id] = value
            return value

        reachable = bonus_high[candidates].tolist()
        two_hop_bounds = two_hop[candidates].tolist()
        for position, may_spread, two_hop_bound in zip(candidates, reachable, two_hop_bounds):
            if may_spread:
                memory_id = memories[position].id
                best = index.spread_bonus(memory_id, source_strength, two_hop_bound, maybe)
                if best > 0:
                    spreading[memory_id] = best
    if not context:
        # Floor: memories below the relevance floor stay only with spreading >= 0.05.
        listed = base[candidates].tolist()
        candidates = [
            position
            for position, sure in zip(candidates, listed)
            if sure or spreading.get(memories[position].id, 0.0) >= FLOOR
        ]
    group_matches = None
    if project or task or topic_set is not None:
        groups = index.ctx_groups
        group_matches = {}
        for position in candidates:
            group = memories[position].ctx_group
            if group >= 0 and group not in group_matches:
                group_matches[group] = _group_match(groups[group], project, task, topic_set)
    expiry_ms = as_of_ms if as_of_ms is not None else now_ms
    scored = _scores(memories, candidates, relevance_by_pos, terms, spreading, group_matches, expiry_ms, as_of_ms is not None)
    return _top(scored, top, memories)


Scored = tuple[float, int, float, float, float, float]  # score, position, relevance, decayed, bonus, match


def _scores(
    memories: list[MemoryRecord],
    positions: list[int],
    relevance_by_pos: dict[int, float],
    terms: dict[int, tuple[float, float]],
    spreading: dict[str, float],
    group_matches: list[float] | dict[int, float] | None,  # by context group
    expiry_ms: int,
    with_as_of: bool,
) -> list[Scored]:
    """Raw (unrounded) scores, weights normalised over the terms present."""
    weight_table = _WEIGHTS
    relevance_of = relevance_by_pos.get
    bonus_of = spreading.get
    isfinite = math.isfinite
    scored: list[Scored] = []
    for position in positions:
        record = memories[position]
        relevance = relevance_of(position, 0.0)
        decayed, recency = terms[position]
        bonus = bonus_of(record.id, 0.0) if spreading else 0.0
        if bonus > 1.0:
            bonus = 1.0
        group = record.ctx_group
        match = group_matches[group] if group_matches is not None and group >= 0 else 0.0
        salience = record.salience
        weights = weight_table[(bonus > 0) * 4 + (match > 0) * 2 + (salience is not None)]
        score = weights[0] * relevance + weights[1] * decayed + weights[2] * recency
        slot = 3
        if bonus > 0:
            score += weights[slot] * bonus
            slot += 1
        if match > 0:
            score += weights[slot] * match
            slot += 1
        if salience is not None:
            score += weights[slot] * salience
        if record.has_newer_fields:
            score = newer_field_factors(record, score, expiry_ms, with_as_of)
        if not isfinite(score) or abs(score) > 1e300:
            score = 0.0  # rounds to 0 in the reference
        scored.append((score, position, relevance, decayed, bonus, match))
    return scored


Ranked = tuple[float, str, int, float, float, float, float]  # -rounded score, id, position, values


def _top(scored: list[Scored], top: int, memories: list[MemoryRecord]) -> list[Ranked]:
    """The first ``top`` by rounded score descending, then id; JavaScript slice semantics.

    Rounding is monotone, so only scores within one rounding step of the
    ``top``-th best raw score can reach the result: only those get rounded.
    """
    if top > 0 and len(scored) > top:
        threshold = heapq.nlargest(top, [row[0] for row in scored])[-1] - 0.0011
        scored = [row for row in scored if row[0] >= threshold]
    ranked = [
        (-round3(score), memories[position].id, position, relevance, decayed, bonus, match)
        for score, position, relevance, decayed, bonus, match in scored
    ]
    return heapq.nsmallest(top, ranked) if top > 0 else sorted(ranked)[:top]
