"""Columnar (numpy) form of a prepared brain, for recall's fast paths.

Two jobs, both prepared once per brain version (`BrainIndex.build`):

* `Postings`: every term's documents and counts as flat arrays, so a query's
  BM25 scores are a few array operations per term. Only
  IEEE-754 basic operations (+, -, *, /, floor, comparisons) are applied, element
  by element and in the reference's order: bit-identical to the scalar code.
* `Columns`: per-memory fields (strength, decay rate, last access, salience,
  context group, newer fields) and the association graph as edge arrays, so recall
  can *bound* every memory's score at once. Bounds use ``numpy.power``, which may
  differ from ``math.pow`` in the last bit: they only decide which memories get an
  exact score (computed by the scalar code), with a safety margin, and never reach
  the output.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

K1_PLUS_1 = 2.5  # k1 + 1 with k1 = 1.5, exactly as the scalar code computes it

# One document's terms and their counts as stored, in stored order: (terms, counts).
# Counts are bytes when all are ints 0-255 (the usual case: a byte each), else a
# tuple. A third of a {term: count} dict's memory.
DocTerms = tuple[tuple[str, ...], "bytes | tuple[Any, ...]"]


def doc_terms(tf: dict[str, Any], *, intern_terms: bool = True) -> DocTerms:
    """``tf`` (term -> count) as `DocTerms`; terms interned unless ``intern_terms`` is
    False (parsed JSON holds one string object per occurrence, 400,000 at 10,000
    memories; interned, the index holds one per term)."""
    terms = tuple(map(sys.intern, tf)) if intern_terms else tuple(tf)
    counts = tuple(tf.values())
    if set(map(type, counts)) <= {int}:  # not bools: they are no counts and must stay bools
        try:
            return terms, bytes(counts)
        except ValueError:
            pass  # beyond 0-255
    return terms, counts


class Postings:
    """Per-term postings as flat arrays (CSR): term ``t`` (``vocabulary[term]``) holds
    entries ``offsets[t]`` to ``offsets[t + 1]`` of ``docs`` (ascending) and ``counts``.

    Counts are as stored, read as JavaScript reads them: uint8 when every count is an
    int 0-255 (the usual case), else float64 with NaN for what is not a number (a
    query skips it, as it skips counts <= 0) and infinity for integers beyond float64.
    Five bytes per posting instead of a Python list's ~24; a term's arrays are views.
    """

    def __init__(
        self, vocabulary: dict[str, int], offsets: np.ndarray, docs: np.ndarray, counts: np.ndarray, norms: Any
    ) -> None:
        self.vocabulary = vocabulary  # term -> its number; never changed once built (followers copy it)
        self.offsets = offsets  # int64, one more than terms
        self.docs = docs  # int32
        self.counts = counts  # uint8 or float64
        self.norms = np.asarray(norms, dtype=np.float64)  # per document: k1 x (1 - b + b x dl / avgdl)

    @classmethod
    def build(cls, doc_tfs: list[DocTerms], norms: list[float]) -> Postings:
        """Postings of every term of ``doc_tfs`` (documents in order)."""
        lengths = np.fromiter((len(terms) for terms, _ in doc_tfs), dtype=np.int64, count=len(doc_tfs))
        every = [term for terms, _ in doc_tfs for term in terms]
        vocabulary = {term: number for number, term in enumerate(dict.fromkeys(every))}
        ids = np.fromiter(map(vocabulary.__getitem__, every), dtype=np.int64, count=len(every))
        # A stable sort by term keeps each term's documents ascending (terms are
        # unique within a document).
        order = np.argsort(ids, kind="stable")
        owners = np.repeat(np.arange(len(doc_tfs), dtype=np.int32), lengths)
        offsets = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(np.bincount(ids, minlength=len(vocabulary)), out=offsets[1:])
        counts = _count_array([counts for _, counts in doc_tfs])
        return cls(vocabulary, offsets, owners[order], counts[order], norms)

    def extended(self, doc_tfs: list[DocTerms], first_new: int, norms: list[float]) -> Postings:
        """These postings plus the documents ``first_new`` onwards of ``doc_tfs`` (the
        earlier ones unchanged), with new ``norms``: equal to `build` on all of them.
        This object (still serving recalls of the older brain) is never changed."""
        added = doc_tfs[first_new:]
        every = [term for terms, _ in added for term in terms]
        vocabulary = self.vocabulary
        if any(term not in vocabulary for term in every):
            vocabulary = dict(vocabulary)
            for term in every:
                vocabulary.setdefault(term, len(vocabulary))
        ids = np.fromiter(map(vocabulary.__getitem__, every), dtype=np.int64, count=len(every))
        order = np.argsort(ids, kind="stable")  # by term, then document
        ids = ids[order]
        lengths = np.fromiter((len(terms) for terms, _ in added), dtype=np.int64, count=len(added))
        new_docs = np.repeat(np.arange(first_new, len(doc_tfs), dtype=np.int32), lengths)[order]
        new_counts = _count_array([counts for _, counts in added])[order]
        known = len(self.offsets) - 1
        # Each new entry goes after its term's last one; a new term's after everything.
        at = np.full(len(ids), len(self.docs), dtype=np.int64)
        old_terms = ids < known
        at[old_terms] = self.offsets[ids[old_terms] + 1]
        sizes = np.zeros(len(vocabulary), dtype=np.int64)
        sizes[:known] = np.diff(self.offsets)
        sizes += np.bincount(ids, minlength=len(vocabulary))
        offsets = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        counts = self.counts
        if counts.dtype != new_counts.dtype:
            counts, new_counts = counts.astype(np.float64), new_counts.astype(np.float64)
        return Postings(vocabulary, offsets, np.insert(self.docs, at, new_docs), np.insert(counts, at, new_counts), norms)

    def _range(self, term: str) -> tuple[int, int]:
        number = self.vocabulary.get(term)
        if number is None:
            return 0, 0
        offsets = self.offsets
        return offsets.item(number), offsets.item(number + 1)

    def term_docs(self, term: str) -> list[int]:
        """Every document position listing ``term`` (whatever its stored count)."""
        start, end = self._range(term)
        return self.docs[start:end].tolist()  # type: ignore[no-any-return]

    def term_counts(self, term: str) -> zip[tuple[int, Any]]:
        """(document, count) of every document listing ``term``, documents ascending;
        counts as ints, or floats (NaN where not a number)."""
        start, end = self._range(term)
        return zip(self.docs[start:end].tolist(), self.counts[start:end].tolist())

    def arrays(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """(documents as intp, counts as float64 with NaN where not a number)."""
        start, end = self._range(term)
        # intp once here: every fancy index with int32 would convert again.
        return self.docs[start:end].astype(np.intp), self.counts[start:end].astype(np.float64, copy=False)

    def contributions(self, term: str, idf: float) -> tuple[np.ndarray, np.ndarray]:
        """(documents, ``0.0 + idf x (f x (k1 + 1)) / (f + norm)``) for counts f > 0.

        The scalar expression, operation by operation: bit-identical values.
        """
        docs, counts = self.arrays(term)
        usable = counts > 0  # NaN (not a number) compares False
        if not usable.all():
            counts, docs = counts[usable], docs[usable]
        return docs, (idf * (counts * K1_PLUS_1)) / (counts + self.norms[docs]) + 0.0


def _count_array(parts: list[bytes | tuple[Any, ...]]) -> np.ndarray:
    """Counts of `DocTerms` one after the other: uint8 when all are bytes, else float64."""
    if all(part.__class__ is bytes for part in parts):
        return np.frombuffer(b"".join(parts), dtype=np.uint8)  # type: ignore[arg-type]
    return np.concatenate([_counts(list(part)) for part in parts]) if parts else np.zeros(0)


def _counts(values: list[Any]) -> np.ndarray:
    """Term counts as float64; NaN for anything but an int or float (bools included)."""
    kinds = set(map(type, values))
    if kinds <= {int, float}:
        try:
            return np.array(values, dtype=np.float64)
        except OverflowError:
            pass
    converted = []
    for value in values:
        kind = value.__class__
        if kind is int or kind is float:
            try:
                converted.append(float(value))
            except OverflowError:
                converted.append(math.inf)  # as JavaScript reads a huge integer
        else:
            converted.append(math.nan)
    return np.array(converted, dtype=np.float64)


def _memory_arrays(memories: list[Any]) -> dict[str, np.ndarray]:
    """The per-memory columns of ``memories`` (MemoryRecord), by field name."""

    def floats(name: str) -> tuple[np.ndarray, np.ndarray]:
        raw = [getattr(record, name) for record in memories]
        return (
            np.array([0.0 if value is None else value for value in raw], dtype=np.float64),
            np.array([value is not None for value in raw], dtype=bool),
        )

    def times(name: str) -> tuple[np.ndarray, np.ndarray]:
        raw = [getattr(record, name) for record in memories]
        return (
            np.array([_INT64_NONE if value is None else value for value in raw], dtype=np.int64),
            np.array([value is not None for value in raw], dtype=bool),
        )

    def flags(name: str) -> np.ndarray:
        return np.array([bool(getattr(record, name)) for record in memories], dtype=bool)

    strength, has_strength = floats("strength")
    rate, has_rate = floats("decay_rate")
    salience, has_salience = floats("salience")
    accessed, has_accessed = times("last_accessed_ms")
    valid_until, has_valid_until = times("valid_until_ms")
    valid_from, has_valid_from = times("valid_from_ms")
    created, has_created = times("created_ms")
    return {
        "strength": strength,
        "has_strength": has_strength,
        "rate": rate,
        "has_rate": has_rate,
        "accessed": accessed,
        "has_accessed": has_accessed,
        "never_decays": flags("never_decays"),
        "salience": salience,
        "has_salience": has_salience,
        "ctx_group": np.array([record.ctx_group for record in memories], dtype=np.int64),
        "trust": np.array([1.0 if record.trust is None else record.trust for record in memories], dtype=np.float64),
        "superseded": flags("superseded"),
        "has_valid_until_key": flags("has_valid_until"),
        "valid_until": valid_until,
        "has_valid_until": has_valid_until,
        "valid_from": valid_from,
        "has_valid_from": has_valid_from,
        "created": created,
        "has_created": has_created,
        "quarantined": flags("quarantined"),
    }


_GROUP_FIELDS = ("group_project", "group_task", "project_codes", "task_codes", "group_topic_size", "topic_groups")
_EDGE_FIELDS = (
    "node_count", "out_start", "out_end", "edge_target", "edge_abs_weight", "edge_positive_weight", "two_hop_factor",
    "extra_nodes",
)


def _group_arrays(
    groups: list[tuple[str | None, str | None, frozenset[Any] | None]], base: Columns | None = None
) -> dict[str, Any]:
    """Codes of each encoding-context group's project and task, topic sizes and topic -> groups.

    With ``base``, columns built for the first of ``groups``, only the groups after those
    are encoded (a write adds a memory with a new context: one group more, not a pass over
    every group); codes and topics keep the order of first appearance, as a full build."""
    start = 0 if base is None else len(base.group_project)
    project_codes: dict[str, int] = {} if base is None else dict(base.project_codes)
    task_codes: dict[str, int] = {} if base is None else dict(base.task_codes)
    topic_lists: dict[str, list[int]] = {}
    group_project, group_task, group_topic_size = [], [], []
    for group in range(start, len(groups)):
        project, task, topics = groups[group]
        group_project.append(project_codes.setdefault(project, len(project_codes)) if project else -1)
        group_task.append(task_codes.setdefault(task, len(task_codes)) if task else -1)
        group_topic_size.append(-1 if topics is None else len(topics))
        for topic in topics or ():
            if topic.__class__ is str:
                topic_lists.setdefault(topic, []).append(group)
    topic_groups: dict[str, np.ndarray] = {} if base is None else dict(base.topic_groups)
    for topic, found in topic_lists.items():
        added = np.array(found, dtype=np.int64)
        known = topic_groups.get(topic)
        topic_groups[topic] = added if known is None else np.concatenate([known, added])

    def column(name: str, values: list[int]) -> np.ndarray:
        added = np.array(values, dtype=np.int64)
        return added if base is None else np.concatenate([getattr(base, name), added])

    return {
        "group_project": column("group_project", group_project),
        "group_task": column("group_task", group_task),
        "project_codes": project_codes,
        "task_codes": task_codes,
        "group_topic_size": column("group_topic_size", group_topic_size),
        "topic_groups": topic_groups,
    }


def _edge_arrays(positions: dict[str, int], edges: dict[str, list[tuple[str, float]]] | None, count: int) -> dict[str, Any]:
    """The association graph as edge arrays (see `Columns`), memories numbered by position."""
    node_ids = dict(positions)
    firsts: dict[int, int] = {}
    lasts: dict[int, int] = {}
    sources, targets, weights = [], [], []
    for node, neighbours in (edges or {}).items():
        source = node_ids.setdefault(node, len(node_ids))
        firsts[source] = len(targets)
        for neighbour, weight in neighbours:
            target = node_ids.setdefault(neighbour, len(node_ids))
            if target != source:  # a walk never records its own source
                sources.append(source)
                targets.append(target)
                weights.append(weight)
        lasts[source] = len(targets)
    node_count = len(node_ids)
    out_start = np.zeros(node_count, dtype=np.int64)
    out_end = np.zeros(node_count, dtype=np.int64)
    if firsts:
        out_start[list(firsts)] = list(firsts.values())
        out_end[list(lasts)] = list(lasts.values())
    weight_array = np.array(weights, dtype=np.float64)
    return _graph(
        node_count, out_start, out_end, np.array(sources, dtype=np.int64), np.array(targets, dtype=np.int64),
        np.abs(weight_array), np.where(weight_array > 0, weight_array, 0.0), count,
        {node: number for node, number in node_ids.items() if number >= count},
    )


def _graph(
    node_count: int,
    out_start: np.ndarray,
    out_end: np.ndarray,
    sources: np.ndarray,
    targets: np.ndarray,
    abs_weight: np.ndarray,
    positive_weight: np.ndarray,
    count: int,
    extra_nodes: dict[str, int],
) -> dict[str, Any]:
    """The edge fields of `Columns`, with each memory's best two-hop weight product."""
    # Strongest incoming |weight| per node, then per memory the best two-hop product.
    strongest_in = np.zeros(node_count)
    np.maximum.at(strongest_in, targets, abs_weight)
    two_hop = np.zeros(node_count)
    with np.errstate(all="ignore"):
        np.maximum.at(two_hop, targets, strongest_in[sources] * abs_weight * 0.125)
    return {
        "node_count": node_count,
        "out_start": out_start,
        "out_end": out_end,
        "edge_target": targets,
        "edge_abs_weight": abs_weight,
        "edge_positive_weight": positive_weight,
        "two_hop_factor": two_hop[:count],
        "extra_nodes": extra_nodes,
    }


def _followed_graph(
    old: Columns,
    old_positions: dict[str, int],
    positions: dict[str, int],
    edges: dict[str, list[tuple[str, float]]],
    changed: set[str],
) -> dict[str, Any] | None:
    """The edge fields for a graph where only the out-edges of ``changed`` nodes
    changed: the others' edges are renumbered and kept with array operations, the
    changed nodes' are read from ``edges``. Equal to `_edge_arrays` up to the
    numbering of non-memory nodes and the order of edge ranges, which no bound
    depends on. None when a kept edge would point at a memory that is gone."""
    count = len(positions)
    extra_nodes: dict[str, int] = {}

    def number(node: str) -> int:
        position = positions.get(node)
        if position is None:
            position = extra_nodes.get(node)
            if position is None:
                position = extra_nodes[node] = count + len(extra_nodes)
        return position

    remap = np.full(old.node_count, -1, dtype=np.int64)
    get = positions.get
    remap[: old.count] = [get(memory_id, -1) for memory_id in old_positions]
    for node, old_number in old.extra_nodes.items():
        remap[old_number] = number(node)
    keep = remap >= 0
    for node in changed:
        old_number = old_positions.get(node, old.extra_nodes.get(node))
        if old_number is not None:
            keep[old_number] = False
    kept_nodes = np.flatnonzero(keep)
    starts = old.out_start[kept_nodes]
    lengths = old.out_end[kept_nodes] - starts
    total = int(lengths.sum())
    firsts = np.cumsum(lengths) - lengths
    kept_edges = np.repeat(starts - firsts, lengths) + np.arange(total)
    targets = remap[old.edge_target[kept_edges]]
    if len(targets) and int(targets.min()) < 0:
        return None
    new_sources: list[int] = []
    new_targets: list[int] = []
    new_weights: list[float] = []
    ranges: list[tuple[int, int, int]] = []
    for node in changed:
        neighbours = edges.get(node)
        if neighbours is None:
            continue
        source = number(node)
        first = total + len(new_targets)
        for neighbour, weight in neighbours:
            target = number(neighbour)
            if target != source:  # a walk never records its own source
                new_sources.append(source)
                new_targets.append(target)
                new_weights.append(weight)
        ranges.append((source, first, total + len(new_targets)))
    node_count = count + len(extra_nodes)
    out_start = np.zeros(node_count, dtype=np.int64)
    out_end = np.zeros(node_count, dtype=np.int64)
    moved_nodes = remap[kept_nodes]
    out_start[moved_nodes] = firsts
    out_end[moved_nodes] = firsts + lengths
    for source, first, last in ranges:
        out_start[source], out_end[source] = first, last
    weight_array = np.array(new_weights, dtype=np.float64)
    return _graph(
        node_count,
        out_start,
        out_end,
        np.concatenate([np.repeat(moved_nodes, lengths), np.array(new_sources, dtype=np.int64)]),
        np.concatenate([targets, np.array(new_targets, dtype=np.int64)]),
        np.concatenate([old.edge_abs_weight[kept_edges], np.abs(weight_array)]),
        np.concatenate([old.edge_positive_weight[kept_edges], np.where(weight_array > 0, weight_array, 0.0)]),
        count,
        extra_nodes,
    )


def bm25_relevance(
    postings: Postings, doc_memory: np.ndarray, memory_count: int, prepared: list[tuple[str, float]]
) -> np.ndarray:
    """Relevance of every memory (0 where none) for the query terms ``prepared``
    ([(term, idf)] in query order): the scalar `relevances` on whole arrays.

    Each document's score and matched idf are accumulated term by term in query
    order, starting from 0.0, exactly as the scalar loop adds them.
    """
    relevance = np.zeros(memory_count, dtype=np.float64)
    if not prepared:
        return relevance
    doc_total = len(postings.norms)
    scores = np.zeros(doc_total, dtype=np.float64)
    matched = np.zeros(doc_total, dtype=np.float64)
    idf_total = 0.0
    for term, idf in prepared:
        idf_total += idf
        docs, contributions = postings.contributions(term, idf)
        if len(docs):
            scores[docs] += contributions  # documents are distinct within a term
            matched[docs] += idf
    positive = scores > 0
    if not positive.any():
        return relevance
    max_score = float(scores[positive].max())
    docs = np.flatnonzero(positive & (doc_memory >= 0))
    score = scores[docs]
    coverage = matched[docs] / idf_total if idf_total else np.zeros(len(docs))
    with np.errstate(all="ignore"):
        scaled = (score / max_score) * coverage * 1000
        whole = np.floor(scaled)
        rounded = np.where(scaled - whole >= 0.5, whole + 1, whole) / 1000
    keep = np.isfinite(scaled) & (rounded != 0)
    relevance[doc_memory[docs[keep]]] = rounded[keep] + 0.0
    return relevance


_INT64_NONE = 0  # placeholder where a time is missing; read only through its mask


@dataclass(frozen=True)
class Columns:
    """Per-memory fields as arrays (memory position order), plus the edge arrays."""

    count: int
    strength: np.ndarray
    has_strength: np.ndarray
    rate: np.ndarray
    has_rate: np.ndarray
    accessed: np.ndarray  # int64 ms
    has_accessed: np.ndarray
    never_decays: np.ndarray
    salience: np.ndarray
    has_salience: np.ndarray
    ctx_group: np.ndarray  # int64, -1 without an encoding context
    trust: np.ndarray  # 1.0 without an origin
    superseded: np.ndarray
    has_valid_until_key: np.ndarray  # `valid_until` present (even unparseable)
    valid_until: np.ndarray
    has_valid_until: np.ndarray
    valid_from: np.ndarray
    has_valid_from: np.ndarray
    created: np.ndarray
    has_created: np.ndarray
    quarantined: np.ndarray
    # Encoding-context groups (BrainIndex.ctx_groups), for context-match bounds.
    group_project: np.ndarray  # int64 code per group, -1 when absent or empty
    group_task: np.ndarray
    project_codes: dict[str, int]
    task_codes: dict[str, int]
    group_topic_size: np.ndarray  # len(topics) per group, -1 when topics is not a list
    topic_groups: dict[str, np.ndarray]  # string topic -> groups holding it
    # Association edges (self-loops dropped), each node's out-edges contiguous in
    # file order. Nodes 0..count-1 are the memories; other node ids follow.
    node_count: int
    out_start: np.ndarray  # per node: first out-edge
    out_end: np.ndarray  # per node: one past its last out-edge
    edge_target: np.ndarray
    edge_abs_weight: np.ndarray
    edge_positive_weight: np.ndarray  # weight where > 0, else 0
    two_hop_factor: np.ndarray  # per memory: max over m -> t of |w(m, t)| x max |w(u, m)| x 0.125
    extra_nodes: dict[str, int]  # graph nodes that are not memories -> their number (from count on)

    @classmethod
    def build(
        cls,
        memories: list[Any],
        positions: dict[str, int],
        groups: list[tuple[str | None, str | None, frozenset[Any] | None]],
        edges: dict[str, list[tuple[str, float]]] | None,
    ) -> Columns:
        """Arrays of ``memories`` (MemoryRecord), their context groups and the edges."""
        return cls(
            count=len(memories),
            **_memory_arrays(memories),
            **_group_arrays(groups),
            **_edge_arrays(positions, edges, len(memories)),
        )

    def updated(
        self,
        memories: list[Any],
        source: np.ndarray,
        positions: dict[str, int],
        groups: list[tuple[str | None, str | None, frozenset[Any] | None]],
        groups_changed: bool,
        edges: dict[str, list[tuple[str, float]]] | None,
        edges_changed: bool,
        positions_moved: bool,
        old_positions: dict[str, int] | None = None,
        changed_nodes: set[str] | None = None,
        old_groups: list[tuple[str | None, str | None, frozenset[Any] | None]] | None = None,
    ) -> Columns:
        """These columns for a changed brain, equal to `build` on it: ``source[i]`` is
        the position memory ``i`` had here when its record is unchanged, -1 when new
        or changed. Unchanged rows are gathered, the others computed afresh; the
        group and edge arrays are rebuilt only when they changed (edges also when
        memories moved: memories are the graph's first nodes, by position). With
        ``old_positions`` (memory id -> position here) and ``changed_nodes`` (the
        nodes whose out-edges changed), only those nodes' edges are read again. With
        ``old_groups`` (the groups these columns were built for) and ``groups`` extending
        them, only the added groups are encoded."""
        fresh_rows = np.flatnonzero(source < 0)
        kept = np.where(source < 0, 0, source)
        values: dict[str, Any] = {}
        fresh = _memory_arrays([memories[row] for row in fresh_rows.tolist()])
        for name, column in fresh.items():
            gathered = getattr(self, name)[kept] if self.count else np.zeros(len(memories), dtype=column.dtype)
            gathered[fresh_rows] = column
            values[name] = gathered
        if groups_changed:
            appended = (
                old_groups is not None and len(old_groups) == len(self.group_project) <= len(groups)
                and groups[: len(old_groups)] == old_groups
            )
            values.update(_group_arrays(groups, self if appended else None))
        else:
            values.update({name: getattr(self, name) for name in _GROUP_FIELDS})
        if edges_changed or positions_moved:
            graph = None
            if changed_nodes is not None and edges is not None and old_positions is not None:
                graph = _followed_graph(self, old_positions, positions, edges, changed_nodes)
            values.update(graph if graph is not None else _edge_arrays(positions, edges, len(memories)))
        else:
            values.update({name: getattr(self, name) for name in _EDGE_FIELDS})
        return Columns(count=len(memories), **values)

    def eligible(self, as_of_ms: int | None, as_known_ms: int | None, enforce: bool) -> np.ndarray | None:
        """Which memories may appear (validity window, knowledge time, quarantine); None = all."""
        if as_of_ms is None and as_known_ms is None and not enforce:
            return None
        keep = np.ones(self.count, dtype=bool)
        if enforce:
            keep &= ~self.quarantined
        if as_of_ms is not None:
            keep &= ~(self.has_valid_from & (self.valid_from > as_of_ms))
            keep &= ~(self.has_valid_until & (self.valid_until <= as_of_ms))
        if as_known_ms is not None:
            keep &= self.has_created & (self.created <= as_known_ms)
        return keep

    def time_terms(self, now_ms: int) -> tuple[np.ndarray, np.ndarray]:
        """Approximate decayed strength (numpy.power) and recency of every memory."""
        days = (now_ms - self.accessed) / 86_400_000
        with np.errstate(all="ignore"):
            decaying = self.has_accessed & self.has_strength & self.has_rate & ~self.never_decays
            decayed = np.where(decaying, self.strength * np.power(self.rate, np.where(decaying, days, 0.0)), 0.0)
            decayed = np.where(self.never_decays & self.has_strength, self.strength, decayed)
            recency = np.where(self.has_accessed, np.clip(1 - days / 365, 0.0, 1.0), 0.0)
        return decayed, recency

    def factors(self, expiry_ms: int, with_as_of: bool) -> np.ndarray:
        """The newer fields' score multiplier of every memory (origin trust, 0.25 penalty)."""
        superseded = self.superseded & ~self.has_valid_until_key if with_as_of else self.superseded
        expired = self.has_valid_until & (self.valid_until <= expiry_ms)
        return self.trust * np.where(superseded | expired, 0.25, 1.0)

    def context_matches(self, project: str | None, task: str | None, topic_set: frozenset[str] | None) -> np.ndarray:
        """Context match of every memory (0 without an encoding context)."""
        group_total = len(self.group_project)
        project_term = np.zeros(group_total)
        if project and project in self.project_codes:
            project_term = np.where(self.group_project == self.project_codes[project], 0.3, 0.0)
        task_term = np.zeros(group_total)
        if task and task in self.task_codes:
            task_term = np.where(self.group_task == self.task_codes[task], 0.3, 0.0)
        jaccard = np.zeros(group_total)
        if topic_set is not None:
            common = np.zeros(group_total)
            for topic in topic_set:
                found = self.topic_groups.get(topic)
                if found is not None:
                    common[found] += 1
            union = len(topic_set) + self.group_topic_size - common
            usable = (self.group_topic_size >= 0) & (union > 0)
            with np.errstate(all="ignore"):
                jaccard = np.where(usable, common / np.where(usable, union, 1), 0.0)
        per_group = np.append(project_term + 0.4 * jaccard + task_term, 0.0)
        return per_group[self.ctx_group]  # group -1 reads the appended 0.0

    def spreading_bounds(
        self, source_high: np.ndarray, source_low: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(upper, lower, two-hop upper) bounds of every memory's spreading bonus;
        the first two capped at 1, the last uncapped.

        ``source_high`` / ``source_low``: per memory, an upper / lower bound of its
        source strength where it may / surely be a source (strength > 0.3), else 0.
        Upper: the best direct product from a possible source with |weight|, or the
        strongest source times the memory's best two-hop weight product. Lower: the
        best direct edge with a positive weight from a sure source (a walk always
        records its source's direct neighbours). Only the sources' out-edges are read.
        """
        zero = np.zeros(self.count)
        sources = np.flatnonzero(source_high > 0)
        if not len(self.edge_target) or not len(sources):
            return zero, zero, zero
        starts = self.out_start[sources]
        lengths = self.out_end[sources] - starts
        edge_total = int(lengths.sum())
        if not edge_total:
            return zero, zero, zero
        # Indices of every out-edge of the sources, without a Python loop.
        firsts = np.cumsum(lengths) - lengths
        edges = np.repeat(starts - firsts, lengths) + np.arange(edge_total)
        targets = self.edge_target[edges]
        with np.errstate(all="ignore"):
            direct = np.zeros(self.node_count)
            np.maximum.at(direct, targets, np.repeat(source_high[sources], lengths) * self.edge_abs_weight[edges] * 0.5)
            sure = np.zeros(self.node_count)
            np.maximum.at(sure, targets, np.repeat(source_low[sources], lengths) * self.edge_positive_weight[edges] * 0.5)
            two = float(source_high.max()) * self.two_hop_factor
            high = np.minimum(np.maximum(direct[: self.count], two), 1.0)
            low = np.minimum(sure[: self.count], 1.0)
        return high, low, two
