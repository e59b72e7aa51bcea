"""Hybrid recall: the exact engine's answer, fused with text matching and meaning.

Since issue 34 the ranking is `channelfusion`'s z-score fusion over the channels this module
computes (`query_signals`: exact relevance, BM25, USE cosine, and the e5 cosine once the
brain version's e5 vectors are there), gated by `answer_decision`: the learned answer gate
(`answergate`) once e5 votes in a populated brain, the strength floor below (`matches_well`)
before that. The fused score below (`Fusion`, `fuse`) is the ranking before issue 34, still
scored by bench/recall_quality.py and bench/floor_signals.py; its strength and hubness make
the floor.

For a query, every eligible memory gets a fused score (`Fusion`)

    cosine(query, memory)                      (multilingual sentence embeddings)
  + words x word coverage                      (idf share of the query's stems / CJK bigrams held)
  + fuzzy x BM25 of near spellings / best      (small typos, by character trigrams)
  + exact x the exact engine's relevance       (recall.md, unchanged)

then the same trust / superseded / expired factors as the exact score. The meaning
channel is not scaled down: a memory that matches by meaning alone (a synonym, another
language) keeps its full cosine, and text matches can only add to it.

Relevance floor: a memory's *strength* is its cosine plus some of its word coverage
(near spellings counting by their closeness) and exact relevance; its *hubness* is its
mean cosine to its HUBNESS_NEIGHBOURS nearest memories (high in a dense part of the
brain, where any query about that part scores fairly high). The query matches well when
the best strength reaches `Fusion.strength_min` and one of the strongest few, lowered by
`Fusion.hubness` x its hubness, reaches `Fusion.floor`; then only the memories whose
strength is within `Fusion.window` of the best and `Fusion.hit_z` standard deviations
above the mean are listed. Otherwise nothing is listed, and callers
say "no memory matches well" rather than hand over the nearest strangers. The exact
engine's first hit, when its relevance is at least STRONG_EXACT, is put first and always
listed: a query that names a memory's own words keeps finding it first.

The parameters were chosen by cross-validation on the development quality set and on
no-answer queries written for it (bench/recall_quality.py --cv, docs/recall.md).

Pure logic: vectors come from a `VectorSource` (the connector keeps them in a
content-hash cache, see connector/workcopy/vectors.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from connector.engine.format.brain import Brain
from connector.engine.format.change import BrainChange
from connector.engine.format.jsvalues import datetime_ms, round3
from connector.engine.format.text import ascii_width, memory_body, tokenize
from connector.engine.recall import beside
from connector.engine.recall.answergate import (
    ANSWER_GATE,
    CASCADE,
    JUDGED_CASCADE,
    MIN_MEMORIES,
    alike_gap,
    gate_features,
    judge_candidates,
)
from connector.engine.recall.channelfusion import (
    CHANNEL_FUSION,
    Z_POPULATION,
    ChannelFusion,
    answers,
    channel_zscores,
    fuse_zscores,
    neighbours,
)
from connector.engine.recall.dates import Interval, date_offsets, query_dates
from connector.engine.recall.embedding import Quantized, content_hash, cosines, embedded_text
from connector.engine.recall.hubness import Neighbours, hubness_of
from connector.engine.recall.exact import recall
from connector.engine.recall.index import BrainIndex, MemoryRecord
from connector.engine.recall.judge import JudgeUnavailable, judge_reads
from connector.engine.recall.pipeline import eligibility, hit_of, instant_ms, newer_field_factors, time_terms
from connector.engine.recall.rows import GrowingRows, followed, kept_in_place
from connector.engine.recall.textmatch import TextIndex, has_cjk

__all__ = [
    "DEFAULT_FUSION", "EXACT_CANNOT_READ", "Fusion", "HybridIndex", "MODES", "NO_GOOD_MATCH", "Signals",
    "VectorSource", "Z_POPULATION", "answer_decision", "answer_features", "empty_recall_reason", "fuse",
    "fuse_with_dates", "hybrid_recall", "memory_texts", "query_signals", "ranked_positions", "start_e5_channel",
]

MODES = ("exact", "hybrid")

STRONG_EXACT = 0.8
# Exact hits taken into the fusion (their relevance and their fields).
EXACT_CANDIDATES = 50
# How many memories after the best one a query's best strength is compared with.
STANDOUT_NEIGHBOURS = 5
# The floor looks at the hubness of at most this many of the strongest memories.
HUBNESS_CANDIDATES = 3


@dataclass(frozen=True)
class Fusion:
    """How hybrid recall weighs its channels and where its relevance floor lies."""

    words: float = 0.3  # weight of word coverage in the score
    fuzzy: float = 0.05  # weight of near-spelling BM25 / best
    exact: float = 0.0  # weight of the exact engine's relevance
    strength_words: float = 0.3  # word coverage in a memory's strength
    strength_exact: float = 0.0  # exact relevance in a memory's strength
    standout: float = 0.0  # weight of (best strength - mean of the next STANDOUT_NEIGHBOURS)
    hubness: float = 0.5  # the floor compares strength - hubness x the memory's hubness
    strength_min: float = 0.22  # and the best strength must reach this too (a small brain has no hubs)
    floor: float | None = 0.08  # the query matches well from here; None lists every eligible memory
    window: float = 0.15  # listed: strength within this of the best (0.12: see docs/recall.md)
    hit_z: float | None = 2.5  # listed: strength at least this many standard deviations above the mean


DEFAULT_FUSION = Fusion()


@dataclass(frozen=True)
class Signals:
    """A query's channels, one value per memory (in the index's order)."""

    semantic: np.ndarray  # cosine
    words: np.ndarray  # word coverage 0..1 (the query's own terms)
    near_words: np.ndarray  # word coverage counting near spellings (typos) too, 0..1
    fuzzy: np.ndarray  # near-spelling BM25 / best 0..1
    exact: np.ndarray  # the exact engine's relevance 0..1 (0 beyond its first EXACT_CANDIDATES)
    strong: int | None  # position of the exact engine's first hit when its relevance >= STRONG_EXACT
    # Mean cosine of a memory to its HUBNESS_NEIGHBOURS nearest memories, for the strongest
    # few (NaN elsewhere; None: not computed).
    hubness: np.ndarray | None = None
    # The cosine of the query as written, when ``semantic`` also holds its spelt-out
    # abbreviations (None: the same as ``semantic``).
    written: np.ndarray | None = None
    # The second model's cosine (e5), when the brain version has its vectors (None: not yet).
    e5: np.ndarray | None = None
    # BM25 of the query's terms (stems, CJK bigrams), unscaled.
    bm25: np.ndarray | None = None


def fuse(signals: Signals, fusion: Fusion = DEFAULT_FUSION, eligible: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Fused score of every memory and which of them are listed (over the floor and eligible).

    Pure: the same signals and fusion always give the same answer (the bench fits on it).
    """
    fused = signals.semantic + fusion.words * signals.words + fusion.fuzzy * signals.fuzzy + fusion.exact * signals.exact
    np.maximum(fused, 0.0, out=fused)
    listed = np.ones(len(fused), dtype=bool) if eligible is None else eligible.copy()
    if fusion.floor is not None:
        strength = _strength(signals, fusion)
        candidates = strength[listed]
        if len(candidates) and _matches_well(signals, strength, listed, fusion):
            best = float(candidates.max())
            keep = strength >= best - fusion.window
            if fusion.hit_z is not None and len(candidates) >= Z_POPULATION and float(candidates.std()) > 0:
                # The best memory stays; the others must stand out of the brain as well.
                keep &= (strength - float(candidates.mean())) / float(candidates.std()) >= fusion.hit_z
                keep |= strength >= best
            listed &= keep
        else:
            listed[:] = False
    if signals.strong is not None and (eligible is None or eligible[signals.strong]):
        listed[signals.strong] = True
    return fused, listed


def matches_well(signals: Signals, eligible: np.ndarray, fusion: Fusion = DEFAULT_FUSION) -> bool:
    """The absolute half of the floor: the query's best eligible memory is strong enough
    (cosine and word coverage), once lowered by its hubness (see `_floor_margin`)."""
    return floor_margin(signals, eligible, fusion) >= 0.0


def floor_margin(signals: Signals, eligible: np.ndarray, fusion: Fusion = DEFAULT_FUSION) -> float:
    """How far the query's best eligible memory is over the strength floor (>= 0: `matches_well`;
    -inf when nothing is eligible)."""
    if not eligible.any():
        return -math.inf
    return _floor_margin(signals, _strength(signals, fusion), eligible, fusion)


def _strength(signals: Signals, fusion: Fusion) -> np.ndarray:
    """Each memory's strength: its cosine plus some of its word coverage (near spellings
    counting) and exact relevance."""
    return signals.semantic + fusion.strength_words * signals.near_words + fusion.strength_exact * signals.exact


def answer_decision(signals: Signals, eligible: np.ndarray, e5: np.ndarray | None, margin: float | None = None,
                    alike: Callable[[], np.ndarray | None] | None = None,
                    judge: Callable[[np.ndarray], float | None] | None = None, reads: bool = False) -> bool:
    """Whether hybrid recall answers the query at all (else it lists only a strong exact hit).

    Once e5 votes (``e5``: its cosines) in a brain of Z_POPULATION eligible memories or more,
    the learned answer gate decides (`answergate.ANSWER_GATE`, over what the channels say of the
    query's best memories); near its threshold a second gate that also reads ``alike()`` (e5's
    cosines of the query embedded as a passage, computed only then; None or returning None: the
    first gate decides alone). With a ``judge`` (the best judge cosine between the query and the
    memories at the positions given, None where it cannot say) that second gate is
    `answergate.JUDGED_CASCADE`'s, over a wider band, reading the judge's verdict on
    `answergate.judge_candidates` when it ``reads`` the query's script (`judge.judge_reads`);
    without one, `answergate.CASCADE`'s. Before e5 votes, or in a smaller brain, the strength
    floor (`matches_well`). ``margin``: the strength floor's (`floor_margin`), when already known."""
    if margin is None:
        margin = floor_margin(signals, eligible)
    if e5 is None or int(eligible.sum()) < max(Z_POPULATION, MIN_MEMORIES):
        return margin >= 0.0
    features = answer_features(signals, eligible, e5, margin)
    score = ANSWER_GATE.score(features)
    if alike is not None and judge is not None and JUDGED_CASCADE.asks(score):
        verdict = _judge_features(signals, eligible, e5, judge, reads)
        if verdict is not None and (values := alike()) is not None:
            return JUDGED_CASCADE.gate.answers(np.concatenate([features, [alike_gap(values, eligible)], verdict]))
    if alike is not None and CASCADE.asks(score) and (values := alike()) is not None:
        return CASCADE.gate.answers(np.append(features, alike_gap(values, eligible)))
    return score >= ANSWER_GATE.threshold


def _judge_features(signals: Signals, eligible: np.ndarray, e5: np.ndarray,
                    judge: Callable[[np.ndarray], float | None], reads: bool) -> np.ndarray | None:
    """JUDGE_FEATURES' last two (whether the judge reads the query, its best cosine over the
    candidates), or None when the judge could not say."""
    if not reads:
        return np.zeros(2)
    bm25 = signals.bm25 if signals.bm25 is not None else np.zeros(len(eligible), dtype=np.float32)
    best = judge(judge_candidates(e5, signals.semantic, bm25, eligible))
    return None if best is None else np.array([1.0, best])


def answer_features(signals: Signals, eligible: np.ndarray, e5: np.ndarray, margin: float | None = None) -> np.ndarray:
    """The answer gate's features of the query (`answergate.FEATURES`) over at least
    `answergate.MIN_MEMORIES` eligible memories (``margin``: the strength floor's, when known)."""
    if margin is None:
        margin = floor_margin(signals, eligible)
    bm25 = signals.bm25 if signals.bm25 is not None else np.zeros(len(eligible), dtype=np.float32)
    return gate_features(margin, _strength(signals, DEFAULT_FUSION), signals.semantic, e5, bm25, signals.words,
                         signals.near_words, eligible)


def _strongest(strength: np.ndarray, positions: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` positions of ``positions`` with the highest strength, strongest first
    (ties by position), without sorting them all."""
    if len(positions) > count:
        positions = positions[np.argpartition(-strength[positions], count - 1)[:count]]
    return positions[np.lexsort((positions, -strength[positions]))]


def _matches_well(signals: Signals, strength: np.ndarray, listed: np.ndarray, fusion: Fusion) -> bool:
    """Whether the query's best eligible memory reaches the floor (see `_floor_margin`)."""
    return _floor_margin(signals, strength, listed, fusion) >= 0.0


def _floor_margin(signals: Signals, strength: np.ndarray, listed: np.ndarray, fusion: Fusion) -> float:
    """How far the query's best eligible memory is over the floor (>= 0: it reaches it): the
    smaller of its strength over ``fusion.strength_min`` and the floor test's value over ``fusion.floor``.

    With ``fusion.hubness``, each of the strongest few memories is first lowered by its
    hubness (how close it sits to its own nearest neighbours): a memory in a dense part of
    the brain scores fairly high against any query about that part, so its strength says
    less (the hubness correction of cross-domain similarity local scaling, CSLS).
    """
    floor = fusion.floor if fusion.floor is not None else -math.inf
    positions = np.flatnonzero(listed)
    ordered = _strongest(strength, positions, max(HUBNESS_CANDIDATES, 1 + STANDOUT_NEIGHBOURS))
    best = float(strength[ordered[0]])
    over_minimum = best - fusion.strength_min
    if fusion.hubness and signals.hubness is not None:
        near = ordered[:HUBNESS_CANDIDATES]
        near = near[strength[near] >= best - fusion.window]
        # A memory whose hubness was not computed counts as fully hub-like (cosine 1).
        hub = np.nan_to_num(signals.hubness[near], nan=1.0)
        return min(over_minimum, float(np.max(strength[near] - fusion.hubness * hub)) - floor)
    neighbours = strength[ordered[1 : 1 + STANDOUT_NEIGHBOURS]]
    standout = best - float(neighbours.mean()) if len(neighbours) else 0.0
    return min(over_minimum, best + fusion.standout * standout - floor)


def ranked_positions(
    fused: np.ndarray, listed: np.ndarray, strong: int | None, top: int, ids: Sequence[str]
) -> list[int]:
    """The listed positions, best fused score first (ties by id), the strong exact hit first."""
    candidates = np.flatnonzero(listed)
    keep = min(len(candidates), top + 1)  # enough to fill ``top`` after the strong exact hit moves first
    if keep < len(candidates):
        candidates = candidates[np.argpartition(-fused[candidates], keep - 1)[:keep]]
    # Ranked on the unrounded score: rounding first would let ids decide near-ties.
    order = sorted(candidates.tolist(), key=lambda position: (-float(fused[position]), ids[position]))
    if strong is not None and listed[strong]:
        if strong in order:
            order.remove(strong)
        order.insert(0, strong)
    return order[:top]


class VectorSource(Protocol):
    """Vectors by content hash, computing (and keeping) the missing ones."""

    model_id: str

    def vectors(self, hashes: Sequence[bytes], texts: Sequence[str]) -> Quantized:
        """Quantised vectors of ``texts`` (keyed by ``hashes``), one row each, in order."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """The unit float32 vector of a query (never cached on disk)."""
        ...


def memory_texts(brain: Brain, index: BrainIndex) -> list[str]:
    """The text embedded and matched for each memory, in the index's order."""
    return [memory_text(brain, record.entry) for record in index.memories]


def memory_text(brain: Brain, entry: dict[str, Any]) -> str:
    """The text embedded and matched for one memory (its index entry): title, tags, body."""
    path = entry.get("path")
    file_text = brain.read_text(path) if isinstance(path, str) else None
    title = entry.get("title")
    tags = entry.get("tags")
    return embedded_text(
        title if isinstance(title, str) else None,
        tags if isinstance(tags, (list, str)) else None,
        memory_body(file_text) if file_text is not None else "",
    )


@dataclass
class HybridIndex:
    """What hybrid recall needs beside the exact index, for one brain version."""

    ids: list[str]
    hashes: list[bytes]
    text: TextIndex
    vectors: Quantized
    newer: list[int]  # positions of the memories with trust / supersession / validity fields
    # Hubness of the memories asked about so far, by position (see `hubness`), while ``neighbours`` is None.
    hubness_known: dict[int, float] = field(default_factory=dict)
    # The second model's vectors (e5, connector/engine/recall/e5.py) in the same order, once every
    # memory has one: computed in the background (connector/workcopy/backfill.py), None until then.
    e5: Quantized | None = None
    # Memories whose e5 vector is not in ``e5`` yet (zero rows there), by position, with their
    # text: a write's new memories, until the background fills them (`with_e5`). Recall uses
    # ``e5`` only when this is empty.
    e5_pending: dict[int, str] = field(default_factory=dict)
    # The judge's vectors (judge.py) in the same order, computed with e5's and pending with them
    # (their rows zero until `with_e5`): recall fuses them in once nothing is pending. None until
    # the background has read every memory with the judge (or where it does not run).
    judge: Quantized | None = None
    _adjacent: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    # The buffers ``vectors``, ``e5`` and ``judge`` are views of, when a follow made them
    # (`rows`): the next version that only adds memories grows in them instead of copying.
    rows: dict[str, GrowingRows] = field(default_factory=dict, repr=False)
    # Every memory's nearest cosines (`hubness.Neighbours`): computed in the background
    # (`fill_neighbours`), or grown on first use from ``grows_from``, an earlier version's whose
    # memories are this one's first, unchanged (a write that only added memories).
    neighbours: Neighbours | None = field(default=None, repr=False)
    grows_from: Neighbours | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls, brain: Brain, index: BrainIndex, source: VectorSource, previous: HybridIndex | None = None
    ) -> HybridIndex:
        """Text index and vectors of every memory (vectors come from ``source``'s cache when known).

        ``previous``: the index of an earlier version of the same brain. When the texts are
        unchanged (a pull that changed no memory's text: same content hashes, same order),
        its text index and vectors are reused: the text index is most of a build. When some
        changed, only those are indexed and merged in (`changed`), if the memories kept
        their order.
        """
        texts = memory_texts(brain, index)
        hashes = [content_hash(source.model_id, text) for text in texts]
        newer = [position for position, record in enumerate(index.memories) if record.has_newer_fields]
        ids = [record.id for record in index.memories]
        if previous is not None and previous.hashes == hashes:
            return cls(ids, hashes, previous.text, previous.vectors, newer, previous.hubness_known, *previous.e5_state(),
                       judge=previous.judge, rows=previous.rows, grows_from=previous._followers_neighbours())
        if previous is not None:
            # Another version of the brain (a pull, a write made elsewhere): index what differs.
            old_positions = {memory_id: position for position, memory_id in enumerate(previous.ids)}
            keep = np.full(len(previous.ids), -1, dtype=np.int64)
            added_at = []
            for position, (memory_id, digest) in enumerate(zip(ids, hashes, strict=True)):
                old = old_positions.get(memory_id)
                if old is not None and previous.hashes[old] == digest:
                    keep[old] = position
                else:
                    added_at.append(position)
            merged = previous._merged(ids, hashes, keep, added_at, [texts[at] for at in added_at], newer,
                                      texts.__getitem__, source)
            if merged is not None:
                return merged
        return cls(ids, hashes, TextIndex.build(texts), source.vectors(hashes, texts), newer)

    def changed(self, brain: Brain, index: BrainIndex, source: VectorSource, change: BrainChange) -> HybridIndex | None:
        """The index of ``brain`` (exact index ``index``): this one's brain changed by ``change``.

        Only what the change touched is read, embedded and indexed: the memories it added,
        changed or removed (when ``change`` does not name them, every memory's text is read
        and compared by hash). The answer is the index `build` makes from scratch, up to how
        terms and words are numbered: every recall answers the same
        (tests/engine/test_hybrid_follow.py). None when the memories changed order or this
        index cannot follow (read from an older cache file): `build` the new one then.
        """
        records = index.memories
        ids = [record.id for record in records]
        named = change.memories
        count = len(self.ids)
        if named is not None and ids[:count] == self.ids:
            hashes, keep, looked, added_at, texts = self._appended(brain, index, source, change, named)
        else:
            hashes, keep, looked, added_at, texts = self._compared(brain, records, source, change)
        # The memories with newer fields: as before for those whose entry is unchanged.
        checked = set(looked)
        newer = sorted([int(keep[old]) for old in self.newer if keep[old] >= 0 and int(keep[old]) not in checked]
                       + [position for position in looked if records[position].has_newer_fields])
        return self._merged(ids, hashes, keep, added_at, texts, newer,
                            lambda at: memory_text(brain, records[at].entry), source)

    def _compared(
        self, brain: Brain, records: Sequence[MemoryRecord], source: VectorSource, change: BrainChange
    ) -> tuple[list[bytes], np.ndarray, list[int], list[int], list[str]]:
        """`changed`'s view of the memories, each compared with this version's by id (and, where
        ``change`` does not rule it out, by content): (their hashes, ``keep`` as in `_merged`,
        the positions whose text was read, the positions and texts of the new or changed ones)."""
        old_positions = {memory_id: position for position, memory_id in enumerate(self.ids)}
        named, paths = change.memories, change.paths
        hashes: list[bytes] = []
        added_at: list[int] = []
        texts: list[str] = []
        keep = np.full(len(self.ids), -1, dtype=np.int64)
        looked: list[int] = []
        for position, record in enumerate(records):
            old = old_positions.get(record.id)
            if old is not None and named is not None and record.id not in named and record.path not in paths:
                hashes.append(self.hashes[old])  # neither its entry nor its file changed: same text
                keep[old] = position
                continue
            looked.append(position)
            text = memory_text(brain, record.entry)
            digest = content_hash(source.model_id, text)
            hashes.append(digest)
            if old is not None and self.hashes[old] == digest:
                keep[old] = position
            else:
                added_at.append(position)
                texts.append(text)
        return hashes, keep, looked, added_at, texts

    def _appended(
        self, brain: Brain, index: BrainIndex, source: VectorSource, change: BrainChange, named: set[str]
    ) -> tuple[list[bytes], np.ndarray, list[int], list[int], list[str]]:
        """`_compared` when this version's memories are the first of the new one, in order (a
        write that added memories or changed some in place): only the memories ``change``
        names or whose file it wrote, and the added ones, are read (a memorize at 10,000
        memories need not walk all of them in Python)."""
        records = index.memories
        count = len(self.ids)
        paths = change.paths
        looked = {index.positions[memory_id] for memory_id in named if memory_id in index.positions}
        looked.update(range(count, len(records)))
        if paths:
            looked.update(position for position, record in enumerate(records) if record.path in paths)
        hashes = [*self.hashes, *([b""] * (len(records) - count))]
        keep = np.arange(count, dtype=np.int64)
        added_at: list[int] = []
        texts: list[str] = []
        for position in sorted(looked):
            text = memory_text(brain, records[position].entry)
            digest = content_hash(source.model_id, text)
            hashes[position] = digest
            if position >= count or self.hashes[position] != digest:
                if position < count:
                    keep[position] = -1
                added_at.append(position)
                texts.append(text)
        return hashes, keep, sorted(looked), added_at, texts

    def _merged(
        self, ids: list[str], hashes: list[bytes], keep: np.ndarray, added_at: list[int], texts: list[str],
        newer: list[int], text_at: Callable[[int], str], source: VectorSource,
    ) -> HybridIndex | None:
        """The index of a newer version: ``keep`` maps each memory here to its new position
        (-1: gone or its text changed), ``texts`` are the other memories' (at ``added_at``)."""
        kept = keep[keep >= 0]
        if not added_at and len(kept) == len(self.ids) and np.all(kept == np.arange(len(kept))):
            # No text changed: the e5 vectors (and those still to come) stay where they were.
            return HybridIndex(ids, hashes, self.text, self.vectors, newer, self.hubness_known, *self.e5_state(),
                               judge=self.judge, rows=self.rows, grows_from=self._followers_neighbours())
        if np.any(np.diff(kept) <= 0):
            return None
        positions = np.asarray(added_at, dtype=np.int64)
        text = self.text.changed(keep, texts, positions, text_at)
        if text is None:
            return None
        fresh = source.vectors([hashes[at] for at in added_at], texts)
        rows: dict[str, GrowingRows] = {}
        vectors = self._followed("use", self.vectors, keep, len(ids), rows)
        vectors.codes[positions], vectors.scales[positions] = fresh.codes, fresh.scales
        e5, pending = self._e5_followed(len(ids), keep, added_at, texts, rows)
        judge = self.judge  # after the pending ones were read: `with_e5` fills it before it drops them
        if judge is not None:
            judge = None if e5 is None else self._followed("judge", judge, keep, len(ids), rows)
        # Hubness depends on every other memory's vector: grown from this version's neighbours when
        # the new one kept these where they were (and only added memories after them), else
        # computed again (on demand, and whole in the background).
        return HybridIndex(ids, hashes, text, vectors, newer, e5=e5, e5_pending=pending, judge=judge, rows=rows,
                           grows_from=self._followers_neighbours() if kept_in_place(keep) else None)

    def _followed(self, name: str, vectors: Quantized, keep: np.ndarray, count: int,
                  rows: dict[str, GrowingRows]) -> Quantized:
        """``vectors`` (this version's of channel ``name``) for a newer version (`rows.followed`:
        grown in place where it only adds memories), its buffer noted in ``rows``."""
        moved, rows[name] = followed(vectors, keep, count, self.rows.get(name))
        return moved

    def _e5_followed(
        self, count: int, keep: np.ndarray, added_at: list[int], texts: list[str], rows: dict[str, GrowingRows]
    ) -> tuple[Quantized | None, dict[int, str]]:
        """The e5 vectors of a newer version (``count`` memories, ``keep`` as in `_merged`): the
        kept memories' rows moved, the new ones pending (their rows zero until `with_e5`). None
        when this version has no e5 vectors yet (the background computes the newer one's whole)."""
        # The pending ones first: `with_e5` (another thread) fills the rows before it drops them.
        e5, before = self.e5_state()
        if e5 is None:
            return None, {}
        pending = {int(keep[old]): text for old, text in before.items() if keep[old] >= 0}
        pending.update(zip(added_at, texts, strict=True))
        return self._followed("e5", e5, keep, count, rows), pending

    def e5_state(self) -> tuple[Quantized | None, dict[int, str]]:
        """The e5 vectors and a copy of the pending ones, read consistently with `with_e5`
        on another thread (pending first: it fills the rows before it drops them)."""
        pending = dict(self.e5_pending)
        return self.e5, pending

    def with_e5(self, positions: Sequence[int], vectors: Quantized, judge: Quantized | None = None) -> None:
        """Fill the pending e5 rows at ``positions`` with ``vectors`` (one row each, in order), and
        the judge's with ``judge`` (without them the judge's vectors are dropped: the background
        reads the whole brain with the judge again).

        Recall on another thread sees the old state or the whole new one: the filled vectors
        are in place before the pending ones are dropped (recall reads ``e5`` and ``judge``
        only while nothing is pending). The rows are filled in place: pending rows are zero in
        every version holding them (`rows`).
        """
        assert self.e5 is not None
        rows = np.asarray(positions, dtype=np.int64)
        if self.judge is not None:
            if judge is None:
                self.judge = None
            else:
                self.judge.codes[rows], self.judge.scales[rows] = judge.codes, judge.scales
        self.e5.codes[rows], self.e5.scales[rows] = vectors.codes, vectors.scales
        filled = set(positions)
        self.e5_pending = {position: text for position, text in self.e5_pending.items() if position not in filled}

    def judge_vectors(self) -> Quantized | None:
        """The judge's vectors when every memory has one (nothing pending), else None."""
        if self.e5_pending:  # pending first: `with_e5` fills the judge's rows before it drops them
            return None
        return self.judge

    def hubness(self, positions: Sequence[int]) -> dict[int, float]:
        """Mean cosine of each memory at ``positions`` to its HUBNESS_NEIGHBOURS nearest other
        memories (`hubness`): read from ``neighbours`` when this version has them (or can grow
        them from ``grows_from``), else computed once per memory of this version, on demand."""
        table = self._neighbours()
        if table is not None:
            return {position: float(table.means[position]) for position in positions}
        missing = [position for position in dict.fromkeys(positions) if position not in self.hubness_known]
        if missing:
            self.hubness_known.update(hubness_of(self.vectors, missing))
        return {position: self.hubness_known[position] for position in positions}

    # Another thread may be growing the neighbours: it sets ``neighbours``, then clears
    # ``grows_from``; so readers read ``grows_from`` first, then ``neighbours``.

    def _neighbours(self) -> Neighbours | None:
        """This version's neighbours: grown now from ``grows_from`` when only that is there (one
        pass over the vectors; two threads growing at once make the same table)."""
        base = self.grows_from
        table = self.neighbours
        if table is None and base is not None:
            table = self.neighbours = base.grown(self.vectors)
            self.grows_from = None
        return table

    @property
    def needs_neighbours(self) -> bool:
        """Whether this version's neighbours are still to compute whole (`fill_neighbours`)."""
        base = self.grows_from
        return base is None and self.neighbours is None

    def fill_neighbours(self, stop: Callable[[], bool] | None = None) -> bool:
        """Compute every memory's neighbours (~1.2 s of CPU at 10,000 memories: a background
        job's); False when ``stop`` ended it first."""
        if not self.needs_neighbours:
            return True
        table = Neighbours.of(self.vectors, stop)
        if table is None:
            return False
        if self.neighbours is None:
            self.neighbours = table
        return True

    def _followers_neighbours(self) -> Neighbours | None:
        """What a newer version holding this one's memories first, unchanged, grows its neighbours
        from (one with the same memories takes them as they are: `Neighbours.grown`)."""
        base = self.grows_from
        table = self.neighbours
        return table if table is not None else base

    def adjacent(self, index: BrainIndex) -> tuple[np.ndarray, np.ndarray]:
        """Each memory's neighbours in write order within its folder (`channelfusion.neighbours`), once per version."""
        if self._adjacent is None:
            self._adjacent = neighbours([_path_of(record).rpartition("/")[0] for record in index.memories])
        return self._adjacent

    def vector_of(self, memory_id: str) -> np.ndarray | None:
        """The (dequantised) vector of one memory, or None when it is not in this version."""
        try:
            row = self.ids.index(memory_id)
        except ValueError:
            return None
        return self.vectors.codes[row].astype(np.float32) * self.vectors.scales[row]


def _path_of(record: MemoryRecord) -> str:
    """A memory's path as its index entry gives it (a path that is not a string as its text): read
    from the record when it is a string, so the entry is decoded only for the odd one (the first
    recall of each version reads every memory's, ~10 ms of CPU at 10,000 memories when decoded)."""
    return record.path if record.path is not None else str(record.entry.get("path") or "")


def query_signals(
    query: str,
    exact: list[dict[str, Any]],
    *,
    index: BrainIndex,
    hybrid: HybridIndex,
    embed_query: Callable[[str], np.ndarray],
    e5: Quantized | None = None,
    embed_e5_query: Callable[[str], np.ndarray] | None = None,
) -> Signals:
    """The channels of ``query`` for every memory, given the exact engine's hits for it
    (the e5 channel too when ``e5`` holds the version's e5 vectors)."""
    if len(hybrid.ids) != len(index.memories) or (hybrid.ids and hybrid.ids[-1] != index.memories[-1].id):
        raise ValueError("the hybrid index was built for another version of the brain")
    exact_relevance = np.zeros(len(index.memories), dtype=np.float32)
    for hit in exact:
        exact_relevance[index.positions[hit["id"]]] = hit.get("relevance", 0.0)
    strong = index.positions[exact[0]["id"]] if exact and exact[0].get("relevance", 0.0) >= STRONG_EXACT else None
    written = cosines(hybrid.vectors, embed_query(query))
    semantic = written
    reworded = hybrid.text.reworded(query)
    if reworded is not None:
        # An abbreviation the brain writes out ("DDIA"), or one the query writes out that the
        # brain abbreviates ("time to live", "TTL"): the model may not know the one for the
        # other, so the query is embedded once more reworded, and each memory keeps the closer.
        semantic = np.maximum(written, cosines(hybrid.vectors, embed_query(reworded)))
    content = has_content_word(query)
    # A query of stopwords alone ("the of and", "what is it") matches any memory holding those
    # words in full: word coverage is a share of the query's idf, 1.0 however small that is. Such
    # a query says nothing by its words; only what its meaning finds may answer it.
    near_words = hybrid.text.word_coverage(query) if content else np.zeros(len(semantic), dtype=np.float32)
    # Hubness of the memories the floor looks at (the strongest few within the window of the
    # best, by the default strength): each costs a pass over the brain's vectors, once.
    strength = semantic + DEFAULT_FUSION.strength_words * near_words
    strongest = _strongest(strength, np.arange(len(strength)), HUBNESS_CANDIDATES)
    if len(strongest):
        strongest = strongest[strength[strongest] >= strength[strongest[0]] - DEFAULT_FUSION.window]
    strongest = strongest.tolist()
    hubness = np.full(len(semantic), np.nan, dtype=np.float32)
    for position, value in hybrid.hubness(strongest).items():
        hubness[position] = value
    nothing = np.zeros(len(semantic), dtype=np.float32)
    return Signals(
        semantic=semantic,
        words=hybrid.text.word_coverage(query, near=False) if content else nothing,
        near_words=near_words,
        fuzzy=hybrid.text.fuzzy_scores(query) if content else nothing,
        exact=exact_relevance,
        strong=strong,
        hubness=hubness,
        written=None if reworded is None else written,
        e5=_e5_job(query, e5, embed_e5_query) if e5 is not None and embed_e5_query is not None else None,
        bm25=hybrid.text.bm25(query).astype(np.float32) if content else nothing,
    )


def has_content_word(query: str) -> bool:
    """Whether ``query`` holds a word that says what it is about: a token of the exact engine's
    (two characters or more, no stopword: "k8s", "TTL"), or a letter or digit outside ASCII
    (Chinese, Japanese, Cyrillic..., which no stopword list here covers: "猫"). "the of and" and
    "what is it" hold none."""
    text = ascii_width(query)
    return bool(tokenize(text)) or any(not char.isascii() and char.isalnum() for char in text)


def start_e5_channel(
    query: str, e5: Quantized | None, embed_e5_query: Callable[[str], np.ndarray] | None
) -> beside.Job[np.ndarray] | None:
    """The e5 cosines of ``query`` started on a worker thread beside the other channels (`beside`:
    when the host has had a core to spare); None without e5 or when it runs inline."""
    if e5 is None or embed_e5_query is None:
        return None
    return beside.start(_e5_job, query, e5, embed_e5_query)


def _e5_job(query: str, e5: Quantized, embed_e5_query: Callable[[str], np.ndarray]) -> np.ndarray:
    return cosines(e5, embed_e5_query(query))


def _e5_cosines(
    query: str, e5: Quantized | None, embed_e5_query: Callable[[str], np.ndarray] | None,
    started: beside.Job[np.ndarray] | None,
) -> np.ndarray | None:
    """The e5 channel: the started job's answer, or computed here (not started, or still queued)."""
    if e5 is None or embed_e5_query is None:
        return None
    return beside.finish(started, _e5_job, query, e5, embed_e5_query)


def hybrid_recall(
    brain: Brain | None,
    query: str | None,
    *,
    index: BrainIndex,
    hybrid: HybridIndex,
    embed_query: Callable[[str], np.ndarray],
    top: int = 10,
    project: str | None = None,
    task: str | None = None,
    topics: str | None = None,
    context: bool = False,
    now: datetime,
    as_of: datetime | str | None = None,
    as_known_of: datetime | str | None = None,
    fusion: ChannelFusion = CHANNEL_FUSION,
    e5: Quantized | None = None,
    embed_e5_query: Callable[[str], np.ndarray] | None = None,
    embed_e5_alike: Callable[[str], np.ndarray] | None = None,
    judge_source: VectorSource | None = None,
    judge: Quantized | None = None,
    embed_judge_query: Callable[[str], np.ndarray] | None = None,
) -> list[dict[str, Any]]:
    """Hybrid recall; hits have the exact engine's fields, ``score`` being the fused score.

    ``embed_e5_alike``: e5's vector of a query embedded as a passage, asked only for the few
    queries the answer gate's cascade decides (`answer_decision`). ``judge``: the judge's vectors
    of every memory (connector/engine/recall/judge.py), a channel of its own for a query in a
    script it reads, which the gate's cascade reads too; without them, ``judge_source`` gives the
    gate the judge's vectors of the handful of memories it asks about.

    The channels (exact relevance, BM25, USE, e5 when ``e5`` holds the version's vectors, and
    the judge) are fused by `channelfusion` (weights per query, `fuse_zscores`), memories of a date
    the query names raised (`dates`). An empty answer to a query means no
    memory matches well (the relevance floor). Context mode (no query) is the exact
    engine's: there is no text to match.
    """
    scored = query if query and top > 0 and index.memories else None  # the query the channels score
    # Started first and joined last: it runs beside everything up to the fusion.
    e5_channel = start_e5_channel(scored, e5, embed_e5_query) if scored else None
    try:
        # Its exact channel reads a query typed in full-width mode (ＲＥＤＩＳ) as the ASCII words it
        # shows; exact mode itself stays the reference's, which reads ASCII only and finds nothing.
        exact = recall(
            brain, ascii_width(query) if query else query, top=max(top, EXACT_CANDIDATES) if top > 0 else top, project=project, task=task,
            topics=topics, context=context, now=now, as_of=as_of, as_known_of=as_known_of, index=index,
        )
    except BaseException:
        if e5_channel is not None:
            e5_channel.drop()
        raise
    if not scored:
        return exact[:top] if top > 0 else []
    now_ms = datetime_ms(now)
    as_of_ms = instant_ms(as_of)
    as_known_ms = instant_ms(as_known_of)
    signals = query_signals(scored, exact, index=index, hybrid=hybrid, embed_query=embed_query)  # e5: below
    eligible = eligibility(index, as_of_ms, as_known_ms)
    allowed = np.ones(len(index.memories), dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    # The exact score's factors (origin trust; 0.25 when superseded or expired), on the few
    # memories that have those fields: on the fused z-scale a factor is a shift (0.25 costs
    # ~1.4 standard deviations), applied before the floor lists anything.
    expiry_ms = as_of_ms if as_of_ms is not None else now_ms
    offsets = np.zeros(len(index.memories), dtype=np.float32)
    for position in hybrid.newer:
        factor = newer_field_factors(index.memories[position], 1.0, expiry_ms, as_of_ms is not None)
        offsets[position] = math.log(factor) if factor > 0 else -1e9
    margin = floor_margin(signals, allowed)  # while the e5 query may still be on its worker
    # The judge reads Latin script only (its script check only where there is a judge to ask). Its
    # query runs here while e5's may still be on its worker (on a third thread, after e5's on the
    # worker, or before e5's starts, on two cores, it cost as much or more: bench/README.md).
    channel = judge is not None and embed_judge_query is not None
    reads = (channel or judge_source is not None) and judge_reads(scored)
    # As the exact channel, it reads a query typed in full-width mode (ＲＥＤＩＳ) as the ASCII it shows:
    # its WordPiece vocabulary has no full-width letters.
    shown = ascii_width(scored)
    read = _judge_cosines(shown, judge, embed_judge_query) if reads and channel else None
    channels = {"exact": signals.exact, "bm25": signals.bm25, "use": signals.semantic,
                "e5": _e5_cosines(scored, e5, embed_e5_query, e5_channel), "judge": read}
    alike = None
    if e5 is not None and embed_e5_alike is not None:
        alike = lambda: cosines(e5, embed_e5_alike(scored))  # noqa: E731 - asked near the threshold only
    asked = None  # the gate's judge: the channel's cosines, else the source's (asked near the threshold only)
    if read is not None or (channel and judge_source is None):
        asked = lambda positions: float(read[positions].max()) if read is not None and len(positions) else None  # noqa: E731
    elif judge_source is not None and brain is not None:
        asked = lambda positions: _judged(  # noqa: E731
            judge_source, shown, [memory_text(brain, index.memories[p].entry) for p in positions])
    well = answer_decision(signals, allowed, channels["e5"], margin, alike, asked, reads)
    adjacent = hybrid.adjacent(index)
    fusion = fusion.for_query(channels, allowed, signals.words)
    normalised = channel_zscores(channels, allowed, fusion.clip, fusion.clips())
    answered = answers(channels["e5"], allowed, fusion, well)
    records = index.memories
    fused, listed = fuse_with_dates(
        normalised, fusion, allowed, adjacent, answered, offsets if hybrid.newer else None,
        query_dates(scored, now) if brain is not None else (),
        lambda position: memory_text(brain, records[position].entry), lambda position: records[position].created_ms,
    )
    if signals.strong is not None and allowed[signals.strong]:
        listed[signals.strong] = True  # a strong exact hit is always listed (and first)
    exact_hits = {index.positions[hit["id"]]: hit for hit in exact}
    hits = []
    for position in ranked_positions(fused, listed, signals.strong, top, hybrid.ids):
        hit = exact_hits.get(position)
        if hit is None:
            record = index.memories[position]
            decayed, _ = time_terms(index.memories, [position], now_ms)[position]
            hit = hit_of(record, 0.0, 0.0, decayed, 0.0, 0.0, now_ms)
        else:
            hit = dict(hit)
        score = float(fused[position])
        hit["score"] = round3(score if math.isfinite(score) else 0.0) + 0.0
        hit["similarity"] = round3(float(signals.semantic[position]))
        hits.append(hit)
    return hits


def _judge_cosines(query: str, judge: Quantized | None, embed: Callable[[str], np.ndarray] | None) -> np.ndarray | None:
    """The judge's channel: its cosine of ``query`` with every memory (None without its vectors,
    or while its model is not ready to embed the query)."""
    if judge is None or embed is None:
        return None
    try:
        return cosines(judge, embed(query))
    except JudgeUnavailable:
        return None


def _judged(source: VectorSource, query: str, texts: Sequence[str]) -> float | None:
    """The judge's best cosine between ``query`` and ``texts`` (None without texts); a memory
    it has not read yet is embedded now (at most 15, ~6 ms each; none once read)."""
    if not texts:
        return None
    try:
        vectors = source.vectors([content_hash(source.model_id, text) for text in texts], texts)
        return float(cosines(vectors, source.embed_query(query)).max())
    except JudgeUnavailable:  # logged where it failed; the gate decides without the judge
        return None


def fuse_with_dates(
    normalised: dict[str, np.ndarray],
    fusion: ChannelFusion,
    eligible: np.ndarray,
    adjacent: tuple[np.ndarray, np.ndarray] | None,
    answered: bool,
    offsets: np.ndarray | None,
    named: Sequence[Interval],
    text_of: Callable[[int], str],
    written_of: Callable[[int], int | None],
) -> tuple[np.ndarray, np.ndarray]:
    """`fuse_zscores`, then, for a query naming dates (``named``: `dates.query_dates`), fused
    again from the same z-scores with the memories of those dates among the first candidates
    raised (`dates.date_offsets`; ``text_of`` and ``written_of`` give a memory's text and creation
    ms by position)."""
    fused, listed = fuse_zscores(normalised, fusion, eligible, adjacent, answered, offsets)
    raised = date_offsets(named, fused, eligible, text_of, written_of) if named else None
    if raised is None:
        return fused, listed
    return fuse_zscores(normalised, fusion, eligible, adjacent, answered, raised if offsets is None else offsets + raised)


NO_GOOD_MATCH = "no_good_match"
EXACT_CANNOT_READ = "exact_cannot_read"


def empty_recall_reason(mode: str, query: str | None) -> str | None:
    """Why recall in ``mode`` found nothing for ``query``, when there is something to say.

    NO_GOOD_MATCH: hybrid recall's floor (no memory matches well). EXACT_CANNOT_READ: an
    exact query in Chinese or Japanese, which the exact engine (the reference's ASCII-only
    words) cannot search but hybrid mode can. None otherwise.
    """
    if not query or not query.strip():
        return None
    if mode == "hybrid":
        return NO_GOOD_MATCH
    if has_cjk(query):
        return EXACT_CANNOT_READ
    return None


def recall_in_mode(
    brain: Brain,
    query: str | None,
    *,
    mode: str,
    source: VectorSource | None = None,
    index: BrainIndex | None = None,
    hybrid: HybridIndex | None = None,
    e5_source: VectorSource | None = None,
    judge_source: VectorSource | None = None,
    **options: Any,
) -> list[dict[str, Any]]:
    """Recall in ``mode`` (``exact`` or ``hybrid``) with the options `recall` takes.

    Hybrid mode needs a ``source`` of vectors unless ``hybrid`` is given prepared; with an
    ``e5_source`` it also fuses in the e5 channel (embedding what that source lacks, here), and
    with a ``judge_source`` beside it the judge's channel too (read likewise; where the judge
    cannot load, recall runs without it).
    """
    if mode not in MODES:
        raise ValueError(f"unknown recall mode {mode!r} (exact or hybrid)")
    if index is None:
        index = BrainIndex.build(brain)
    if mode == "exact":
        return recall(brain, query, index=index, **options)
    if hybrid is None:
        if source is None:
            raise ValueError("hybrid recall needs a vector source")
        hybrid = HybridIndex.build(brain, index, source)
    if e5_source is not None and query:
        if hybrid.e5 is None:
            texts = memory_texts(brain, index)
            hybrid.e5 = e5_source.vectors([content_hash(e5_source.model_id, text) for text in texts], texts)
        elif hybrid.e5_pending:
            positions, texts = list(hybrid.e5_pending), list(hybrid.e5_pending.values())
            hybrid.with_e5(positions, e5_source.vectors([content_hash(e5_source.model_id, text) for text in texts], texts))
    if judge_source is not None and query and hybrid.e5 is not None and hybrid.judge is None:
        texts = memory_texts(brain, index)  # the judge's vectors go with e5's, kept on the index as they are
        try:
            hybrid.judge = judge_source.vectors([content_hash(judge_source.model_id, text) for text in texts], texts)
        except JudgeUnavailable:  # logged where it failed: recall runs without the judge
            judge_source = None
    judge = hybrid.judge_vectors() if judge_source is not None else None
    embed = source.embed_query if source is not None else _no_query_embedder
    return hybrid_recall(brain, query, index=index, hybrid=hybrid, embed_query=embed, e5=hybrid.e5,
                         embed_e5_query=e5_source.embed_query if e5_source is not None else None,
                         embed_e5_alike=getattr(e5_source, "embed_query_as_passage", None), judge_source=judge_source,
                         judge=judge, embed_judge_query=judge_source.embed_query if judge is not None else None,
                         **options)


def _no_query_embedder(text: str) -> np.ndarray:
    raise ValueError("hybrid recall needs a vector source to embed the query")
