"""The prepared form of a brain that recall scores against.

Built once per brain version (the connector keys it by archive checksum): the
`index.json` entries, an inverted index (postings per term), document lengths and
frequencies, and the association edges as adjacency lists. A query then touches
only its own terms' postings plus the memories it scores.

A process holds one index per user it serves, so the index is kept compact: each
entry as compact JSON bytes (decoded when a hit or a page needs it; a parsed entry
weighs three times as much), each document's terms as tuples, repeated strings and
numbers shared. bench/README.md ("Memory of a working copy and its index") has
the figures.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from connector.engine.format import jsonparts
from connector.engine.format.brain import DAMAGED_INDEX_ADVICE, Brain
from connector.engine.format.gcpause import gc_paused
from connector.engine.format.jsvalues import is_number, js_truthy, number_or_none, parse_iso_ms
from connector.engine.format.text import document_text, js_key_order, memory_body, term_counts
from connector.engine.recall.columns import Columns, DocTerms, Postings, doc_terms

K1 = 1.5
B = 0.75

# Recall trust per origin (brain-format.md); an unknown or absent origin counts 1.0.
ORIGIN_TRUST = {"user": 1.0, "agent-inferred": 0.95, "tool-output": 0.85, "external": 0.75}
LOW_TRUST_ORIGINS = frozenset({"tool-output", "external"})


def read_json(brain: Brain, path: str) -> Any | None:
    """Parse a JSON file of the brain as JavaScript's JSON.parse would; None if absent or invalid.

    msgspec is several times faster than the json module on large indexes; the
    json module is the fallback for what msgspec refuses but JavaScript accepts
    (lone surrogate escapes). NaN and Infinity are refused, as in JavaScript.
    """
    return _read_json(brain, path)[0]


def _read_json(brain: Brain, path: str) -> tuple[Any | None, bool]:
    """(`read_json`'s value, whether msgspec read it: then msgspec writes each part back
    as JSON that reads back equal, which `pack_entry` relies on)."""
    data = brain.read(path)
    if data is None:
        return None, False
    try:
        return msgspec.json.decode(data), True
    except msgspec.DecodeError:
        pass
    try:
        return json.loads(data, parse_constant=jsonparts.reject_constant), False
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, False


_ENTRY_ENCODER = msgspec.json.Encoder()
_ENTRY_DECODER = msgspec.json.Decoder()


class HitFields(msgspec.Struct):
    """The entry fields a recall hit shows; `msgspec.UNSET` where the entry has none.
    Decoding only these takes half the time of the whole entry (a recall decodes ten)."""

    title: Any = msgspec.UNSET
    path: Any = msgspec.UNSET
    type: Any = msgspec.UNSET
    confidence: Any = msgspec.UNSET
    tags: Any = msgspec.UNSET
    origin: Any = msgspec.UNSET
    superseded_by: Any = msgspec.UNSET
    valid_from: Any = msgspec.UNSET
    valid_until: Any = msgspec.UNSET


_HIT_DECODER = msgspec.json.Decoder(HitFields)


def pack_entry(entry: dict[str, Any], *, verify: bool = True) -> bytes | dict[str, Any]:
    """``entry`` as compact JSON bytes, or the dict itself when the bytes would not
    read back equal (what msgspec cannot write as it was: lone surrogates, infinities
    from the json-module fallback, tuples a writer put in). ``verify=False`` when
    ``entry`` comes from msgspec's own parse (it always reads back equal)."""
    try:
        packed = _ENTRY_ENCODER.encode(entry)
    except (TypeError, ValueError, OverflowError):  # UnicodeEncodeError is a ValueError
        return entry
    if verify:
        try:
            same = _ENTRY_DECODER.decode(packed) == entry
        except msgspec.DecodeError:
            same = False
        if not same:
            return entry
    return packed


class RecallError(ValueError):
    """The brain cannot be recalled from (message says why)."""


class BrainNotInitialized(RecallError):
    """The brain has no `index.json`."""

    def __init__(self) -> None:
        super().__init__("brain not initialized")


@dataclass(slots=True)
class MemoryRecord:
    """One memory's fields, parsed once, in the shape scoring needs; its whole
    index.json entry as `entry` (decoded on each access: a fresh dict)."""

    id: str
    packed: bytes | dict[str, Any]  # the entry (see `pack_entry`)
    path: str | None  # the entry's path when a string (rebuilt statistics read that file)
    strength: float | None
    decay_rate: float | None
    last_accessed_ms: int | None
    never_decays: bool
    salience: float | None
    has_context: bool
    ctx_project: str | None  # None also when not a string: never equal to a given project
    ctx_topics: frozenset[Any] | None
    ctx_task: str | None
    created_ms: int | None
    valid_from_ms: int | None
    valid_until_ms: int | None
    has_valid_until: bool
    superseded: bool
    trust: float | None
    quarantined: bool
    has_newer_fields: bool = False
    ctx_group: int = -1  # position in BrainIndex.ctx_groups; -1 without encoding_context

    def __post_init__(self) -> None:
        # Lets scoring skip the newer-field factors for older brains entirely.
        self.has_newer_fields = self.trust is not None or self.superseded or self.valid_until_ms is not None

    @property
    def entry(self) -> dict[str, Any]:
        """The index.json entry (a dict: an empty one when the stored entry is not an object)."""
        packed = self.packed
        return _ENTRY_DECODER.decode(packed) if packed.__class__ is bytes else packed  # type: ignore[return-value]

    def hit_fields(self) -> HitFields:
        """The fields of the entry a recall hit shows."""
        packed = self.packed
        if packed.__class__ is bytes:
            return _HIT_DECODER.decode(packed)  # type: ignore[arg-type]
        return HitFields(**{name: packed[name] for name in HitFields.__struct_fields__ if name in packed})


@dataclass
class BrainIndex:
    """Everything recall needs from one brain version, ready to score."""

    memories: list[MemoryRecord]
    positions: dict[str, int]
    doc_count: int
    avgdl: float
    df: dict[str, float]
    postings: Postings  # term -> documents holding it, with their counts (flat arrays)
    doc_tfs: list[DocTerms]  # per document: its terms and their counts, as stored
    doc_norms: list[float]
    doc_memory: list[int | None]
    doc_memory_array: np.ndarray  # doc_memory as int64, -1 for None
    doc_ids: list[str]  # per document: the memory id it describes
    doc_lengths: list[float]  # per document: its length (dl)
    doc_positions: dict[str, int]  # memory id -> document
    edges: dict[str, list[tuple[str, float]]] | None
    quarantine_enforce: bool
    stats_rebuilt: bool
    ctx_groups: list[tuple[str | None, str | None, frozenset[Any] | None]] = field(default_factory=list)
    columns: Columns | None = None  # None: recall scores every memory the scalar way
    _idf_cache: dict[str, float] = field(default_factory=dict, repr=False)
    _term_cache: dict[str, tuple[list[int], list[float], list[float]]] = field(default_factory=dict, repr=False)
    _contrib_cache: dict[str, tuple[list[int], list[float], float]] = field(default_factory=dict, repr=False)
    _edge_maps: dict[str, dict[str, tuple[int, float]]] | None = field(default=None, repr=False)
    _in_edges: dict[str, list[str]] | None = field(default=None, repr=False)

    @classmethod
    def build(cls, brain: Brain) -> BrainIndex:
        """Parse ``brain`` into a ready index. Never modifies the brain."""
        with gc_paused():  # ~10^5 long-lived objects: collector passes are pure overhead
            return cls._build(brain)

    @classmethod
    def _build(cls, brain: Brain) -> BrainIndex:
        raw = brain.read("index.json")
        if raw is None:
            raise BrainNotInitialized()
        memories = _memory_records(brain, raw)
        positions = {record.id: i for i, record in enumerate(memories)}

        documents = _usable_search_index(brain, positions)
        stats_rebuilt = documents is None
        if documents is None:
            doc_count, doc_items, df = _rebuild_documents(brain, memories)
        else:
            doc_count, doc_items, df = documents
        doc_tfs = [tf for _, tf, _ in doc_items]
        lengths = [length for _, _, length in doc_items]
        avgdl, doc_norms = document_norms(lengths, doc_count)
        doc_ids, doc_memory, doc_positions = document_links([memory_id for memory_id, _, _ in doc_items], memories, positions)
        del doc_items
        # Counts are taken as stored; non-numbers and non-positive ones are skipped
        # when a query reads the postings.
        postings = Postings.build(doc_tfs, doc_norms)

        edges = _stored_edges(brain, memories)
        config = read_json(brain, "config.json")
        enforce = isinstance(config, dict) and config.get("quarantine_mode") == "enforce"
        ctx_groups = _context_groups(memories)
        try:
            columns: Columns | None = Columns.build(memories, positions, ctx_groups, edges)
        except (OverflowError, ValueError):
            columns = None  # values beyond int64/float64: recall takes the scalar path
        return cls(
            memories=memories,
            positions=positions,
            doc_count=doc_count,
            avgdl=avgdl,
            df=df,
            postings=postings,
            doc_tfs=doc_tfs,
            doc_norms=doc_norms,
            doc_memory=doc_memory,
            doc_memory_array=memory_array(doc_memory),
            doc_ids=doc_ids,
            doc_lengths=lengths,
            doc_positions=doc_positions,
            edges=edges,
            quarantine_enforce=enforce,
            stats_rebuilt=stats_rebuilt,
            ctx_groups=ctx_groups,
            columns=columns,
        )

    def spread_bonus(
        self,
        target: str,
        strength_of: Callable[[str], float | None],
        two_hop_bound: float = math.inf,
        maybe_source: list[bool] | None = None,
    ) -> float:
        """The spreading bonus of ``target`` (uncapped; 0.0 when none).

        ``strength_of(node)`` gives a source's strength, or None when that node is
        not a source with strength > 0.3 (the caller memoises it). Two-hop paths are
        not walked when ``two_hop_bound`` (an upper bound of any two-hop bonus)
        cannot beat the best direct one. ``maybe_source`` (per memory position, False
        where a memory surely is no source) lets the walk skip most nodes cheaply.

        Computed backwards from ``target``, exactly as the reference's forward
        walks record it: a source linking to ``target`` gives s x w1 x 0.5; any other
        source gives s x w1 x 0.5 x w2 x 0.25 through its *first* neighbour, in file
        order, that links to ``target`` (the breadth-first walk visits ``target``
        from there and never again). The best over the sources, as the walks keep it.
        """
        maps, incoming_of = self._reverse_maps()
        direct = incoming_of.get(target, ())
        best = 0.0
        for source in direct:
            if source != target:
                strength = strength_of(source)
                if strength is not None:
                    bonus = strength * maps[source][target][1] * 0.5
                    if bonus > best:
                        best = bonus
        if two_hop_bound <= best:
            return best
        # Two hops: for each source, the middle node earliest in its own order wins.
        earliest: dict[str, tuple[int, float, float]] = {}
        direct_set = set(direct)
        position_of = self.positions.get
        for middle in direct:
            second = maps[middle][target][1]
            for source in incoming_of.get(middle, ()):
                if maybe_source is not None:
                    position = position_of(source)
                    if position is None or not maybe_source[position]:
                        continue
                if source == target or source == middle or source in direct_set or strength_of(source) is None:
                    continue
                order, first = maps[source][middle]
                known = earliest.get(source)
                if known is None or order < known[0]:
                    earliest[source] = (order, first, second)
        for source, (_, first, second) in earliest.items():
            bonus = strength_of(source) * first * 0.5 * second * 0.25  # type: ignore[operator]
            if bonus > best:
                best = bonus
        return best

    def _reverse_maps(self) -> tuple[dict[str, dict[str, tuple[int, float]]], dict[str, list[str]]]:
        """Edge maps (node -> neighbour -> (position in file order, weight)) and
        incoming lists (node -> nodes linking to it), prepared on first use."""
        maps, incoming = self._edge_maps, self._in_edges
        if maps is None or incoming is None:
            edges = self.edges or {}
            # ~10^5 long-lived objects on a large heap: without the pause, the
            # collector's full passes cost ten times the work itself (10k memories).
            with gc_paused():
                maps = edge_maps(edges)
                incoming = {}
                for node, neighbours in edges.items():
                    for neighbour, _ in neighbours:
                        incoming.setdefault(neighbour, []).append(node)
            self._edge_maps, self._in_edges = maps, incoming
        return maps, incoming

    def term_postings(self, term: str) -> tuple[list[int], list[float], list[float]]:
        """A term's usable postings as (documents, f x (k1 + 1), f + k1 x (1 - b + b x dl / avgdl)).

        Counts that are not positive numbers are dropped here; the two factors are
        exactly the reference's sub-expressions, so the score stays bit-identical.
        Prepared on first use and cached.
        """
        cached = self._term_cache.get(term)
        if cached is None:
            docs: list[int] = []
            numerators: list[float] = []
            denominators: list[float] = []
            norms = self.doc_norms
            for doc, f in self.postings.term_counts(term):
                kind = f.__class__
                if (kind is int or kind is float) and f > 0:
                    docs.append(doc)
                    numerators.append(f * (K1 + 1))
                    denominators.append(f + norms[doc])
            cached = (docs, numerators, denominators)
            if len(self._term_cache) >= 50_000:
                self._term_cache.clear()
            self._term_cache[term] = cached
        return cached

    def term_contributions(self, term: str) -> tuple[list[int], list[float], float]:
        """A term's (documents, BM25 contributions, idf): each contribution is
        ``0.0 + idf x (f x (k1 + 1)) / (f + k1 x (...))``, the reference's expression
        with its operations in its order, so sums of them stay bit-identical.
        The idf depends only on the brain, so this is prepared once per term."""
        cached = self._contrib_cache.get(term)
        if cached is None:
            idf = self.idf(term)
            docs, numerators, denominators = self.term_postings(term)
            contributions = [0.0 + idf * numerator / denominator for numerator, denominator in zip(numerators, denominators)]
            cached = (docs, contributions, idf)
            if len(self._contrib_cache) >= 50_000:
                self._contrib_cache.clear()
            self._contrib_cache[term] = cached
        return cached

    def idf(self, term: str) -> float:
        """``max(0, ln(1 + (N - df + 0.5) / (df + 0.5)))``, df 0 when unknown."""
        cached = self._idf_cache.get(term)
        if cached is None:
            df = self.df.get(term, 0.0)
            n = self.doc_count
            try:
                cached = max(0.0, math.log(1 + (n - df + 0.5) / (df + 0.5)))
            except (ValueError, ZeroDivisionError):
                cached = 0.0
            if not math.isfinite(cached):
                cached = 0.0
            self._idf_cache[term] = cached
        return cached


def document_norms(lengths: list[float], doc_count: int) -> tuple[float, list[float]]:
    """(average document length, each document's k1 x (1 - b + b x dl / avgdl)).

    The lengths are summed one by one in document order, as the reference does
    (floating-point addition is not associative)."""
    total_length = 0.0
    for length in lengths:
        total_length += length
    avgdl = total_length / doc_count if doc_count else 0.0
    if avgdl == 0 or len(lengths) < _VECTOR_NORMS:
        return avgdl, [_norm(length, avgdl) for length in lengths]
    # The same operations in the same order, element by element (IEEE doubles either way):
    # bit for bit `_norm`'s values, without a Python call per document.
    return avgdl, (K1 * ((1 - B) + (B * np.asarray(lengths, dtype=np.float64)) / avgdl)).tolist()


def document_links(
    doc_ids: list[str], memories: list[MemoryRecord], positions: dict[str, int]
) -> tuple[list[str], list[int | None], dict[str, int]]:
    """(document ids, each document's memory position or None, memory id -> document).

    A document of a memory takes the record's id string (one object, not two); when
    the documents are the memories in order, the id -> document map is ``positions``
    itself."""
    doc_memory = [positions.get(memory_id) for memory_id in doc_ids]
    doc_ids = [memory_id if position is None else memories[position].id for memory_id, position in zip(doc_ids, doc_memory)]
    if len(doc_ids) == len(memories) and doc_memory == list(range(len(memories))):
        return doc_ids, doc_memory, positions
    return doc_ids, doc_memory, {memory_id: doc for doc, memory_id in enumerate(doc_ids)}


def memory_array(doc_memory: list[int | None]) -> np.ndarray:
    """Each document's memory position as int64, -1 for none."""
    return np.array([-1 if doc is None else doc for doc in doc_memory], dtype=np.int64)


# From this many documents the norms are computed as one array (see document_norms).
_VECTOR_NORMS = 64


def _norm(length: float, avgdl: float) -> float:
    # k1 * (1 - b + b * dl / avgdl), evaluated in the reference's order.
    if avgdl == 0:
        return math.inf if length else math.nan
    return K1 * (1 - B + B * length / avgdl)


def js_object_order(mapping: dict[str, Any]) -> dict[str, Any]:
    """Keys in JavaScript object order (integer-like keys first)."""
    return _js_object_order(mapping)


def _js_object_order(mapping: dict[str, Any]) -> dict[str, Any]:
    """Keys in JavaScript object order (integer-like keys first); cheap when none are."""
    # Integer-like keys are ASCII digits: none when the smallest key sorts after "9" (one
    # pass in C; memory ids and terms mostly do). Else the closer look.
    if mapping and min(mapping)[:1] > "9":
        return mapping
    if any(key[:1].isdigit() for key in mapping):
        return js_key_order(mapping)  # type: ignore[arg-type]
    return mapping


# An index.json that is no brain index: recall cannot read the brain.
DAMAGED_INDEX = ("index.json is not a valid brain index (damaged), so nothing can be recalled. "
                 + DAMAGED_INDEX_ADVICE)


def _memory_records(brain: Brain, data: bytes) -> list[MemoryRecord]:
    """The records of index.json's entries in JavaScript object order, each entry
    parsed, packed and dropped before the next (see `connector/engine/format/jsonparts.py`).
    Raises `RecallError` when index.json is no brain index."""
    shared: dict[float, float] = {}
    parts = jsonparts.members(data)
    if parts is None:  # what msgspec cannot scan: parsed whole
        index, trusted = _read_json(brain, "index.json")
        if not isinstance(index, dict):
            raise RecallError(DAMAGED_INDEX)
        entries = index.get("memories")
        entries = _js_object_order(entries) if isinstance(entries, dict) else {}
        return [_record(memory_id, entry, not trusted, shared) for memory_id, entry in entries.items()]
    try:
        for key, part in parts.items():
            if key != "memories":
                jsonparts.value(part)  # invalid anywhere: the whole document is
        listed = parts.get("memories")
        members = jsonparts.members(listed) if listed is not None else {}
        if members is None:
            jsonparts.value(listed)  # type: ignore[arg-type]  # valid but not an object: no memories
            members = {}
        records = []
        for memory_id, part in _js_object_order(members).items():
            entry, trusted = jsonparts.value(part)
            records.append(_record(memory_id, entry, not trusted, shared))
        return records
    except jsonparts.InvalidJson:
        raise RecallError(DAMAGED_INDEX) from None


def record(memory_id: str, entry: Any) -> MemoryRecord:
    """One index.json entry's fields, parsed for scoring (``ctx_group`` not yet set)."""
    return _record(memory_id, entry, True, None)


def _record(memory_id: str, entry: Any, verify: bool, shared: dict[float, float] | None) -> MemoryRecord:
    """``verify``: see `pack_entry`; ``shared``: equal floats of this build become one object."""
    if not isinstance(entry, dict):
        entry = {}
    context = entry.get("encoding_context")
    has_context = js_truthy(context)
    ctx = context if isinstance(context, dict) else {}
    topics = ctx.get("topics")
    ctx_topics: frozenset[Any] | None = None
    if isinstance(topics, list):
        ctx_topics = frozenset(topic if isinstance(topic, (str, int, float)) else object() for topic in topics)
    origin = entry.get("origin")
    valid_until = entry.get("valid_until")
    path = entry.get("path")
    strength = number_or_none(entry.get("strength"))
    decay_rate = number_or_none(entry.get("decay_rate"))
    salience = number_or_none(entry.get("salience"))
    if shared is not None:
        # Zero is left alone: -0.0 == 0.0 would swap one for the other.
        strength = shared.setdefault(strength, strength) if strength else strength
        decay_rate = shared.setdefault(decay_rate, decay_rate) if decay_rate else decay_rate
        salience = shared.setdefault(salience, salience) if salience else salience
    return MemoryRecord(
        id=memory_id,
        packed=pack_entry(entry, verify=verify),
        path=path if isinstance(path, str) else None,
        strength=strength,
        decay_rate=decay_rate,
        last_accessed_ms=_time_ms(entry.get("last_accessed")),
        never_decays=js_truthy(entry.get("pinned")) or js_truthy(entry.get("stable")),
        salience=salience,
        has_context=has_context,
        ctx_project=_string_or_none(ctx.get("project")),
        ctx_topics=ctx_topics,
        ctx_task=_string_or_none(ctx.get("task_type")),
        created_ms=_time_ms(entry.get("created")),
        valid_from_ms=_time_ms(entry.get("valid_from")),
        valid_until_ms=_time_ms(valid_until),
        has_valid_until=valid_until is not None,
        superseded=js_truthy(entry.get("superseded_by")),
        # An origin that is no string (a list, an object) is none of the known ones (it used to raise).
        trust=(ORIGIN_TRUST.get(origin, 1.0) if origin.__class__ is str else 1.0) if "origin" in entry else None,
        quarantined=js_truthy(entry.get("quarantined")),
    )


@functools.lru_cache(maxsize=1 << 16)
def _parse_time_string(value: str) -> int | None:
    return parse_iso_ms(value)


def _time_ms(value: Any) -> int | None:
    """`parse_iso_ms`, memoised: memories written together share their timestamps."""
    return _parse_time_string(value) if value.__class__ is str else None


def _string_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _context_groups(memories: list[MemoryRecord]) -> list[tuple[str | None, str | None, frozenset[Any] | None]]:
    """Distinct encoding contexts; each record learns its group, so a recall
    computes each distinct context's match once, not once per memory."""
    groups: dict[tuple[str | None, str | None, frozenset[Any] | None], int] = {}
    for record in memories:
        if record.has_context:
            key = (record.ctx_project, record.ctx_task, record.ctx_topics)
            group = groups.get(key)
            if group is None:
                group = groups[key] = len(groups)
            else:
                share_context(record, key)
            record.ctx_group = group
    return list(groups)


def share_context(record: MemoryRecord, group: tuple[str | None, str | None, frozenset[Any] | None]) -> None:
    """Give ``record`` its (equal) context group's project, task and topics objects: one copy per group."""
    record.ctx_project, record.ctx_task, record.ctx_topics = group


DocItems = list[tuple[str, DocTerms, float]]


def _usable_search_index(
    brain: Brain, positions: dict[str, int]
) -> tuple[int, DocItems, dict[str, float]] | None:
    """The stored statistics when recall.md says they are usable, else None.

    Read member by member (see `connector/engine/format/jsonparts.py`), df first: its terms
    become the interned ones, so the documents' copies all die young."""
    data = brain.read("search-index.json")
    if data is None:
        return None
    parts = jsonparts.members(data)
    if parts is None:  # what msgspec cannot scan: parsed whole
        stored = read_json(brain, "search-index.json")
        count = usable_count(stored, positions)
        if count is None:
            return None
        df = stored_df(stored.get("df"))
        items = [stored_document(memory_id, document) for memory_id, document in _js_object_order(stored["documents"]).items()]
        return count, items, df
    try:
        listed = parts.get("documents")
        documents = jsonparts.members(listed) if listed is not None else None
        outline: dict[str, Any] = {"documents": documents}
        if "doc_count" in parts:
            outline["doc_count"] = jsonparts.value(parts["doc_count"])[0]
        count = usable_count(outline, positions)
        if count is None:
            return None  # whether the rest is valid or not
        for key, part in parts.items():
            if key not in ("documents", "doc_count", "df"):
                jsonparts.value(part)  # invalid anywhere: the whole document is
        df = stored_df(jsonparts.value(parts["df"])[0]) if "df" in parts else {}
        items = [
            stored_document(memory_id, jsonparts.value(part)[0])
            for memory_id, part in _js_object_order(documents).items()  # type: ignore[arg-type]
        ]
        return count, items, df
    except jsonparts.InvalidJson:
        return None


def usable_count(stored: Any, positions: dict[str, int]) -> int | None:
    """The document count of a stored search index when recall.md says it is usable
    for the memories at ``positions``, else None."""
    if not isinstance(stored, dict):
        return None
    documents = stored.get("documents")
    if not isinstance(documents, dict) or not js_truthy(documents):
        return None
    doc_count = stored.get("doc_count")
    count = doc_count if is_number(doc_count) else len(documents)
    if count != len(positions) or not positions.keys() <= documents.keys():
        return None
    return int(count)


def stored_document(memory_id: str, document: Any, *, intern_terms: bool = True) -> tuple[str, DocTerms, float]:
    """(id, terms and counts as stored, length) of one stored search-index document
    (``intern_terms``: terms interned, for keeping; without, for comparing)."""
    doc = document if isinstance(document, dict) else {}
    tf = doc.get("tf")
    length = number_or_none(doc.get("length"))
    if not isinstance(tf, dict):
        tf = {}
    return memory_id, doc_terms(tf, intern_terms=intern_terms), length or 0.0


def stored_df(raw_df: Any) -> dict[str, float]:
    """Document frequencies as stored (numbers only); terms interned (the postings'
    strings), equal frequencies one float object."""
    if not isinstance(raw_df, dict):
        return {}
    intern = sys.intern
    shared: dict[float, float] = {}
    df: dict[str, float] = {}
    for term, value in raw_df.items():
        if is_number(value):
            number = float(value)
            # Keys of parsed JSON are always str; zero is left alone (-0.0 == 0.0).
            df[intern(term)] = shared.setdefault(number, number) if number else number
    return df


def _rebuild_documents(brain: Brain, memories: list[MemoryRecord]) -> tuple[int, DocItems, dict[str, float]]:
    """Statistics computed from the memory files, as the reference rebuilds them."""
    items: DocItems = []
    df: dict[str, float] = {}
    for record in memories:
        item = memory_document(brain, record)
        items.append(item)
        for term in item[1][0]:
            df[term] = df.get(term, 0.0) + 1
    return len(memories), items, df


def memory_document(brain: Brain, record: MemoryRecord) -> tuple[str, DocTerms, float]:
    """(id, terms and counts, length) of a memory computed from its file, as the reference rebuilds it."""
    entry = record.entry
    path = record.path
    text = brain.read_text(path) if path is not None else None
    body = memory_body(text) if text is not None else ""
    title = entry.get("title")
    tags = entry.get("tags")
    text = document_text(title if isinstance(title, str) else None, tags if isinstance(tags, (list, str)) else None, body)
    tf, length = term_counts(text)
    return record.id, doc_terms(tf), float(length)


def edge_lists(associations: Any) -> dict[str, list[tuple[str, float]]] | None:
    """Adjacency lists in file order; None when spreading must be skipped."""
    if not isinstance(associations, dict):
        return None
    edges = associations.get("edges")
    if not isinstance(edges, dict):
        return None
    return {
        node: neighbour_list(neighbours)
        for node, neighbours in _js_object_order(edges).items()
        if isinstance(neighbours, dict)
    }


def _stored_edges(brain: Brain, memories: list[MemoryRecord]) -> dict[str, list[tuple[str, float]]] | None:
    """`edge_lists` of associations.json, read member by member (one node's edges at a
    time, see `connector/engine/format/jsonparts.py`); node ids are the records' id strings
    and equal weights one float object."""
    data = brain.read("associations.json")
    parts = jsonparts.members(data) if data is not None else None
    if parts is None:  # absent, or what msgspec cannot scan: parsed whole
        return edge_lists(read_json(brain, "associations.json"))
    same: dict[str, str] = {record.id: record.id for record in memories}
    shared: dict[float, float] = {}
    try:
        for key, part in parts.items():
            if key != "edges":
                jsonparts.value(part)  # invalid anywhere: the whole document is
        listed = parts.get("edges")
        nodes = jsonparts.members(listed) if listed is not None else None
        if nodes is None:
            if listed is not None:
                jsonparts.value(listed)
            return None  # no edges object: spreading is skipped
        edges: dict[str, list[tuple[str, float]]] = {}
        for node, part in _js_object_order(nodes).items():
            neighbours = jsonparts.value(part)[0]
            if isinstance(neighbours, dict):
                edges[same.get(node, node)] = neighbour_list(neighbours, same, shared)
        return edges
    except jsonparts.InvalidJson:
        return None


def neighbour_list(
    neighbours: dict[str, Any], same: dict[str, str] | None = None, shared: dict[float, float] | None = None
) -> list[tuple[str, float]]:
    """One node's out-edges as (neighbour, weight) in file order (``same``: the id string
    to keep for an equal one; ``shared``: equal weights become one float object)."""
    listed = []
    for neighbour, edge in _js_object_order(neighbours).items():
        weight = number_or_none(edge.get("weight")) if isinstance(edge, dict) else None
        # A non-numeric weight gives NaN bonuses in the reference: never recorded,
        # exactly like a zero weight, which is what we use.
        weight = weight if weight is not None and math.isfinite(weight) else 0.0
        if shared is not None and weight:  # zero left alone: -0.0 == 0.0
            weight = shared.setdefault(weight, weight)
        listed.append((same.get(neighbour, neighbour) if same is not None else neighbour, weight))
    return listed


def edge_maps(edges: dict[str, list[tuple[str, float]]]) -> dict[str, dict[str, tuple[int, float]]]:
    """Per node: neighbour -> (position in file order, weight)."""
    return {node: neighbour_map(neighbours) for node, neighbours in edges.items()}


def neighbour_map(neighbours: list[tuple[str, float]]) -> dict[str, tuple[int, float]]:
    """One node's neighbour -> (position in file order, weight)."""
    return {neighbour: (i, weight) for i, (neighbour, weight) in enumerate(neighbours)}
