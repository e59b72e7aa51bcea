"""Recall exactly as the reference `brain recall` (recall.md).

`recall()` scores a brain's memories against a query (or a context) at a given
clock and returns the same hits, in the same order, with the same numbers as the
reference command line. The heavy lifting (parsing, postings) is done once in
`BrainIndex`; this module only does per-query work.
"""

from __future__ import annotations

import heapq
import math
import posixpath
from datetime import datetime
from typing import Any

from connector.engine.brain import Brain
from connector.engine.index import (
    LOW_TRUST_ORIGINS,
    BrainIndex,
    BrainNotInitialized,
    IndexCache,
    MemoryRecord,
    RecallError,
    index_for,
    DEFAULT_CACHE,
)
from connector.engine.jsvalues import datetime_ms, parse_iso_ms, round3
from connector.engine.text import tokenize

__all__ = ["recall", "BrainIndex", "BrainNotInitialized", "RecallError", "context_query"]

MS_PER_DAY = 86_400_000
FLOOR = 0.05
SOURCE_THRESHOLD = 0.3
SUPERSEDED_FACTOR = 0.25

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


def _instant_ms(value: datetime | str | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return datetime_ms(value)
    parsed = parse_iso_ms(value)
    if parsed is None:
        raise RecallError(f"not an ISO 8601 instant: {value!r}")
    return parsed


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


def _time_terms(memories: list[MemoryRecord], positions: list[int], now_ms: int) -> dict[int, tuple[float, float]]:
    """Decayed strength and recency of the memories at ``positions`` (one tight loop)."""
    terms: dict[int, tuple[float, float]] = {}
    pow_, isfinite = math.pow, math.isfinite
    for position in positions:
        record = memories[position]
        strength = record.strength
        accessed = record.last_accessed_ms
        if accessed is None:
            # Unparseable or missing time: every time-derived term is 0.
            terms[position] = (strength if (record.never_decays and strength is not None) else 0.0, 0.0)
            continue
        days = (now_ms - accessed) / MS_PER_DAY
        if strength is None:
            decayed = 0.0
        elif record.never_decays:
            decayed = strength
        elif record.decay_rate is None:
            decayed = 0.0
        else:
            try:
                decayed = strength * pow_(record.decay_rate, days)
            except (ValueError, OverflowError):
                decayed = 0.0  # NaN or infinity in JavaScript
            if not isfinite(decayed):
                decayed = 0.0
        recency = 1 - days / 365
        terms[position] = (decayed, 0.0 if recency < 0 else (1.0 if recency > 1 else recency))
    return terms


def _evaluate(
    memories: list[MemoryRecord],
    positions: list[int],
    relevance_by_pos: dict[int, float],
    now_ms: int,
    group_matches: list[float] | None,
    expiry_ms: int,
    with_as_of: bool,
    *,
    with_strengths: bool,
    with_bounds: bool,
) -> tuple[dict[int, tuple[float, float]], list[tuple[str, float]], list[tuple[float, float, float]]]:
    """One pass over the base memories: time terms, source strengths, and the
    (weighted sum, total weight, factor) of each score without spreading."""
    if not (with_strengths or with_bounds):
        return _time_terms(memories, positions, now_ms), [], []
    terms: dict[int, tuple[float, float]] = {}
    strengths: list[tuple[str, float]] = []
    parts: list[tuple[float, float, float]] = []
    relevance_of = relevance_by_pos.get
    base_total = W_RELEVANCE + W_DECAYED + W_RECENCY
    pow_, isfinite = math.pow, math.isfinite
    for position in positions:
        record = memories[position]
        # Time terms, as in `_time_terms` (inlined: this loop is the hot path).
        strength = record.strength
        accessed = record.last_accessed_ms
        if accessed is None:
            decayed = strength if (record.never_decays and strength is not None) else 0.0
            recency = 0.0
        else:
            days = (now_ms - accessed) / MS_PER_DAY
            if strength is None:
                decayed = 0.0
            elif record.never_decays:
                decayed = strength
            elif record.decay_rate is None:
                decayed = 0.0
            else:
                try:
                    decayed = strength * pow_(record.decay_rate, days)
                except (ValueError, OverflowError):
                    decayed = 0.0
                if not isfinite(decayed):
                    decayed = 0.0
            recency = 1 - days / 365
            recency = 0.0 if recency < 0 else (1.0 if recency > 1 else recency)
        terms[position] = (decayed, recency)
        relevance = relevance_of(position, 0.0)
        if with_strengths:
            strengths.append((record.id, 0.55 * relevance + 0.30 * decayed + 0.15 * recency))
        if with_bounds:
            total = base_total
            weighted = W_RELEVANCE * relevance + W_DECAYED * decayed + W_RECENCY * recency
            group = record.ctx_group
            if group_matches is not None and group >= 0:
                match = group_matches[group]
                if match > 0:
                    total += W_CONTEXT
                    weighted += W_CONTEXT * match
            if record.salience is not None:
                total += W_SALIENCE
                weighted += W_SALIENCE * record.salience
            parts.append((weighted, total, _factor(record, expiry_ms, with_as_of) if record.has_newer_fields else 1.0))
    return terms, strengths, parts


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


def _group_matches(
    groups: list[tuple[str | None, str | None, frozenset[Any] | None]],
    project: str | None,
    task: str | None,
    topic_set: frozenset[str] | None,
) -> list[float]:
    """Context match of each distinct encoding context:
    0.3 x same project + 0.4 x Jaccard(topics) + 0.3 x same task."""
    matches = []
    for memory_project, memory_task, memory_topics in groups:
        project_term = 0.3 if (project and memory_project and project == memory_project) else 0.0
        jaccard = 0.0
        if topic_set is not None and memory_topics is not None:
            common = len(topic_set & memory_topics) if memory_topics else 0
            union = len(topic_set) + len(memory_topics) - common
            if union:
                jaccard = common / union
        task_term = 0.3 if (task and memory_task and task == memory_task) else 0.0
        matches.append(project_term + 0.4 * jaccard + task_term)
    return matches


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
    pruning by score bounds (same answer; for tests). Raises
    `BrainNotInitialized` when there is no ``index.json``.
    """
    if index is None:
        if brain is None:
            raise ValueError("recall needs a brain or a prepared index")
        index = index_for(brain, cache_key, cache)
    if not index.memories:
        return []
    now_ms = datetime_ms(now)
    as_of_ms = _instant_ms(as_of)
    as_known_ms = _instant_ms(as_known_of)
    if context and not query:
        query = context_query(project, task, topics)
    relevance_by_pos = relevances(index, query or "")

    memories = index.memories
    eligible = _eligibility(index, as_of_ms, as_known_ms)

    # Time terms only for memories that can matter: every eligible one in context
    # mode, else the relevant ones (the floor drops the rest unless spreading
    # reaches them, handled below).
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
        topic_set = frozenset(topics.split(",")) if topics else None
        group_matches = _group_matches(index.ctx_groups, project, task, topic_set)
    expiry_ms = as_of_ms if as_of_ms is not None else now_ms
    with_as_of = as_of_ms is not None
    may_prune = not exhaustive and 0 < top and 4 * top < len(source_positions)
    terms, strengths, parts = _evaluate(
        memories, source_positions, relevance_by_pos, now_ms, group_matches, expiry_ms, with_as_of,
        with_strengths=index.edges is not None, with_bounds=may_prune,
    )
    if may_prune:
        pruned = _pruned(
            index, source_positions, relevance_by_pos, terms, strengths, parts, group_matches,
            expiry_ms, with_as_of, top, context, now_ms, bool(project or task or topics),
        )
        if pruned is not None:
            return [_hit(memories[row[2]], -row[0], *row[3:], now_ms) for row in pruned]

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
        terms.update(_time_terms(memories, [p for p in scored_positions if p not in terms], now_ms))

    scored = _scores(
        memories, scored_positions, relevance_by_pos, terms, spreading, group_matches, expiry_ms, with_as_of
    )
    return [_hit(memories[row[2]], -row[0], *row[3:], now_ms) for row in _top(scored, top, memories)]


# Any score this far below the top-th best lower bound rounds strictly lower, so it
# cannot reach the result (one rounding step of 0.001, plus float slack).
_PRUNE_MARGIN = 0.0011 + 1e-9


def _pruned(
    index: BrainIndex,
    base_positions: list[int],
    relevance_by_pos: dict[int, float],
    terms: dict[int, tuple[float, float]],
    strengths: list[tuple[str, float]],
    parts: list[tuple[float, float, float]],
    group_matches: list[float] | None,
    expiry_ms: int,
    with_as_of: bool,
    top: int,
    context: bool,
    now_ms: int,
    context_given: bool,
) -> list[Ranked] | None:
    """The exact top ``top`` without spreading activation over the whole brain.

    Spreading can only add 0.14 x bonus (bonus <= ``b_max``) to a memory's
    weighted average, so every memory's score lies in a known interval. Memories
    whose upper bound falls a rounding step below the ``top``-th best lower bound
    cannot appear; only the others get their exact bonus, computed backwards from
    the few walks that reach them (`BrainIndex.reverse_paths`), and their exact
    score. Returns None when the bounds do not apply (unusual brains): the caller
    then scores everything, as the reference does.
    """
    bounds = index.bounds
    if bounds is None:
        return None
    source_strength = {memory_id: value for memory_id, value in strengths if value > SOURCE_THRESHOLD}
    s_max = max(source_strength.values(), default=0.0)
    w_max = bounds.max_edge_weight
    b_max = min(1.0, s_max * max(w_max * 0.5, w_max * w_max * 0.125)) if source_strength else 0.0
    spread_weight = W_SPREADING * b_max
    # Lower bound: a bonus just above 0 adds the term's weight and nearly nothing else.
    lows = [min(weighted / total, weighted / (total + W_SPREADING)) * factor for weighted, total, factor in parts]
    cut = heapq.nlargest(top, lows)[-1] - _PRUNE_MARGIN
    if not math.isfinite(cut):
        return None
    if not context and b_max >= FLOOR:
        # Memories outside the base set enter only through spreading >= 0.05.
        outside = _outside_bound(bounds, now_ms, b_max, context_given)
        if outside is None or outside >= cut:
            return None
    candidates = []
    for position, (weighted, total, factor) in zip(base_positions, parts):
        plain = weighted / total
        with_bonus = (weighted + spread_weight) / (total + W_SPREADING)
        if (plain if plain > with_bonus else with_bonus) * factor >= cut:
            candidates.append(position)
    spreading: dict[str, float] = {}
    if source_strength:
        memories = index.memories
        sources = list(source_strength.items())
        for position in candidates:
            memory_id = memories[position].id
            paths = index.reverse_paths(memory_id)
            best = 0.0
            # Walk whichever is shorter: the walks reaching this memory, or the sources.
            if len(paths) <= len(sources):
                pairs = [(source_strength.get(source), path) for source, path in paths.items()]
            else:
                pairs = [(strength, paths.get(source)) for source, strength in sources]
            for strength, path in pairs:
                if strength is None or path is None:
                    continue
                first, second = path
                bonus = strength * first * 0.5
                if second is not None:
                    bonus = bonus * second * 0.25
                if bonus > best:
                    best = bonus
            if best > 0:
                spreading[memory_id] = best
    scored = _scores(
        index.memories, candidates, relevance_by_pos, terms, spreading, group_matches, expiry_ms, with_as_of
    )
    return _top(scored, top, index.memories)


def _outside_bound(bounds: Any, now_ms: int, b_max: float, context_given: bool) -> float | None:
    """Upper bound of the score of a memory below the relevance floor; None if unknown."""
    if bounds.max_abs_rate > 1 or (bounds.max_last_accessed_ms is not None and now_ms < bounds.max_last_accessed_ms):
        return None  # decayed strength could exceed strength: no cheap bound
    values = [(W_RELEVANCE, FLOOR), (W_DECAYED, bounds.max_abs_strength), (W_RECENCY, 1.0), (W_SPREADING, b_max)]
    best = -math.inf
    for with_context in (False, True) if context_given else (False,):
        for with_salience in (False, True) if bounds.max_salience is not None else (False,):
            present = values + [(W_CONTEXT, 1.0)] * with_context + [(W_SALIENCE, bounds.max_salience)] * with_salience
            best = max(best, sum(w * v for w, v in present) / sum(w for w, _ in present))
    return max(best, 0.0) + 1e-9


Scored = tuple[float, int, float, float, float, float]  # score, position, relevance, decayed, bonus, match


def _scores(
    memories: list[MemoryRecord],
    positions: list[int],
    relevance_by_pos: dict[int, float],
    terms: dict[int, tuple[float, float]],
    spreading: dict[str, float],
    group_matches: list[float] | None,
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
            score = _newer_field_factors(record, score, expiry_ms, with_as_of)
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


def _eligibility(index: BrainIndex, as_of_ms: int | None, as_known_ms: int | None) -> list[bool] | None:
    """Which memories may appear at all (validity window, knowledge time, quarantine)."""
    enforce = index.quarantine_enforce
    if as_of_ms is None and as_known_ms is None and not enforce:
        return None
    flags = []
    for record in index.memories:
        keep = True
        if enforce and record.quarantined:
            keep = False
        if keep and as_of_ms is not None:
            if record.valid_from_ms is not None and record.valid_from_ms > as_of_ms:
                keep = False
            elif record.valid_until_ms is not None and record.valid_until_ms <= as_of_ms:
                keep = False
        if keep and as_known_ms is not None:
            keep = record.created_ms is not None and record.created_ms <= as_known_ms
        flags.append(keep)
    return flags


def _newer_field_factors(record: MemoryRecord, score: float, expiry_ms: int, with_as_of: bool) -> float:
    """Origin trust, then one 0.25 factor for superseded or expired memories."""
    if record.trust is not None:
        score *= record.trust
    superseded = record.superseded and (not with_as_of or not record.has_valid_until)
    expired = record.valid_until_ms is not None and record.valid_until_ms <= expiry_ms
    if superseded or expired:
        score *= SUPERSEDED_FACTOR
    return score


def _factor(record: MemoryRecord, expiry_ms: int, with_as_of: bool) -> float:
    """The newer fields' multiplier of a memory's score (1.0 for older brains)."""
    return _newer_field_factors(record, 1.0, expiry_ms, with_as_of) if record.has_newer_fields else 1.0


def _hit(
    record: MemoryRecord,
    score: float,
    relevance: float,
    decayed: float,
    spreading: float,
    match: float,
    now_ms: int,
) -> dict[str, Any]:
    entry = record.entry
    hit: dict[str, Any] = {"id": record.id}
    title = entry.get("title")
    if not title:
        path = entry.get("path")
        title = posixpath.basename(path).removesuffix(".md") if isinstance(path, str) else title
    if title is not None or "title" in entry:
        hit["title"] = title
    for key in ("path", "type"):
        if key in entry:
            hit[key] = entry[key]
    hit["score"] = score + 0.0  # never -0
    hit["relevance"] = round3(relevance)
    hit["decayed_strength"] = round3(decayed)
    hit["context_match"] = round3(match)
    hit["spreading_bonus"] = round3(spreading)
    if "confidence" in entry:
        hit["confidence"] = entry["confidence"]
    if "tags" in entry:
        hit["tags"] = entry["tags"]
    origin = entry.get("origin")
    if "origin" in entry:
        hit["origin"] = origin
        if origin in LOW_TRUST_ORIGINS:
            hit["low_trust"] = True
    if record.quarantined:
        hit["quarantine_pending"] = True
    for key in ("superseded_by", "valid_from", "valid_until"):
        if key in entry:
            hit[key] = entry[key]
    if record.valid_until_ms is not None and record.valid_until_ms <= now_ms:
        hit["expired"] = True
    return hit
