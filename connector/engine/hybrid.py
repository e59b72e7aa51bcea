"""Hybrid recall: the exact engine's answer, fused with text matching and meaning.

For a query, every eligible memory gets

    W_SEMANTIC x cosine(query, memory)          (multilingual sentence embeddings)
  + W_WORDS    x word BM25 / best               (stems, CJK bigrams, accents folded)
  + W_FUZZY    x BM25 of near spellings / best  (small typos, by character trigrams)
  + W_EXACT    x the exact engine's relevance   (recall.md, unchanged)

then the same trust / superseded / expired factors as the exact score. The exact
engine's first hit, when its relevance is at least STRONG_EXACT, is put first
whatever the fusion says: a query that names a memory's own words keeps finding it
first. The weights were chosen on the development quality set
(bench/recall_quality.py) among settings that score alike, preferring the simplest;
see docs/recall.md for the measurements.

Pure logic: vectors come from a `VectorSource` (the connector keeps them in a
content-hash cache, see connector/workcopy/vectors.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from connector.engine.brain import Brain
from connector.engine.embedding import Quantized, content_hash, cosines, embedded_text
from connector.engine.index import BrainIndex
from connector.engine.jsvalues import datetime_ms, round3
from connector.engine.recall import (
    _eligibility,
    _hit,
    _instant_ms,
    _newer_field_factors,
    _time_terms,
    recall,
)
from connector.engine.text import memory_body
from connector.engine.textmatch import TextIndex

__all__ = ["HybridIndex", "VectorSource", "hybrid_recall", "memory_texts", "MODES"]

MODES = ("exact", "hybrid")

W_SEMANTIC = 1.0
W_WORDS = 0.2
W_FUZZY = 0.05
W_EXACT = 0.1
STRONG_EXACT = 0.8
# Memories matching no word, no near spelling well and nothing exactly must be at least this
# close in meaning to be listed (the best matches of a query about nothing in the brain
# sit around 0.1-0.15 with this model, gold answers of the dev set mostly above 0.25):
# a query about nothing in the brain returns little rather than random memories.
SEMANTIC_FLOOR = 0.2
FUZZY_FLOOR = 0.5
# Exact hits taken into the fusion (their relevance and their fields).
EXACT_CANDIDATES = 20


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
    texts = []
    for record in index.memories:
        entry = record.entry
        path = entry.get("path")
        file_text = brain.read_text(path) if isinstance(path, str) else None
        title = entry.get("title")
        tags = entry.get("tags")
        texts.append(
            embedded_text(
                title if isinstance(title, str) else None,
                tags if isinstance(tags, (list, str)) else None,
                memory_body(file_text) if file_text is not None else "",
            )
        )
    return texts


@dataclass
class HybridIndex:
    """What hybrid recall needs beside the exact index, for one brain version."""

    ids: list[str]
    hashes: list[bytes]
    text: TextIndex
    vectors: Quantized
    newer: list[int]  # positions of the memories with trust / supersession / validity fields

    @classmethod
    def build(
        cls, brain: Brain, index: BrainIndex, source: VectorSource, previous: HybridIndex | None = None
    ) -> HybridIndex:
        """Text index and vectors of every memory (vectors come from ``source``'s cache when known).

        ``previous``: the index of an earlier version of the same brain. When the texts are
        unchanged (a pull that changed no memory's text: same content hashes, same order),
        its text index and vectors are reused: the text index is most of a build.
        """
        texts = memory_texts(brain, index)
        hashes = [content_hash(source.model_id, text) for text in texts]
        newer = [position for position, record in enumerate(index.memories) if record.has_newer_fields]
        ids = [record.id for record in index.memories]
        if previous is not None and previous.hashes == hashes:
            return cls(ids, hashes, previous.text, previous.vectors, newer)
        return cls(ids, hashes, TextIndex.build(texts), source.vectors(hashes, texts), newer)

    def vector_of(self, memory_id: str) -> np.ndarray | None:
        """The (dequantised) vector of one memory, or None when it is not in this version."""
        try:
            row = self.ids.index(memory_id)
        except ValueError:
            return None
        return self.vectors.codes[row].astype(np.float32) * self.vectors.scales[row]


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
) -> list[dict[str, Any]]:
    """Hybrid recall; hits have the exact engine's fields, ``score`` being the fused score.

    Context mode (no query) is the exact engine's: there is no text to match.
    """
    exact = recall(
        brain, query, top=max(top, EXACT_CANDIDATES) if top > 0 else top, project=project, task=task, topics=topics,
        context=context, now=now, as_of=as_of, as_known_of=as_known_of, index=index,
    )
    if context and not query or not query or top <= 0 or not index.memories:
        return exact[:top] if top > 0 else []
    if len(hybrid.ids) != len(index.memories) or hybrid.ids[-1] != index.memories[-1].id:
        raise ValueError("the hybrid index was built for another version of the brain")
    count = len(index.memories)
    now_ms = datetime_ms(now)
    as_of_ms = _instant_ms(as_of)
    as_known_ms = _instant_ms(as_known_of)

    exact_relevance = np.zeros(count, dtype=np.float32)
    exact_hits: dict[int, dict[str, Any]] = {}
    for hit in exact:
        position = index.positions[hit["id"]]
        exact_hits[position] = hit
        exact_relevance[position] = hit.get("relevance", 0.0)
    semantic = cosines(hybrid.vectors, embed_query(query))
    words = hybrid.text.word_scores(query)
    fuzzy = hybrid.text.fuzzy_scores(query)
    fused = W_SEMANTIC * semantic + W_WORDS * words + W_FUZZY * fuzzy + W_EXACT * exact_relevance
    np.maximum(fused, 0.0, out=fused)
    # The exact score's factors (origin trust; 0.25 when superseded or expired), on the few
    # memories that have those fields.
    expiry_ms = as_of_ms if as_of_ms is not None else now_ms
    for position in hybrid.newer:
        fused[position] = _newer_field_factors(index.memories[position], float(fused[position]), expiry_ms, as_of_ms is not None)
    listed = (semantic >= SEMANTIC_FLOOR) | (words > 0) | (fuzzy >= FUZZY_FLOOR) | (exact_relevance > 0)
    for position in exact_hits:
        listed[position] = True
    eligible = _eligibility(index, as_of_ms, as_known_ms)
    if eligible is not None:
        listed &= np.asarray(eligible, dtype=bool)

    candidates = np.flatnonzero(listed)
    # Enough of the best to fill ``top`` after the strong exact hit moves first.
    keep = min(len(candidates), top + 1)
    if keep < len(candidates):
        candidates = candidates[np.argpartition(-fused[candidates], keep - 1)[:keep]]
    ranked: list[tuple[float, str, int]] = []
    for position in candidates.tolist():
        score = float(fused[position])
        # Ranked on the unrounded score: rounding first would let ids decide near-ties.
        ranked.append((-score if math.isfinite(score) else -0.0, index.memories[position].id, position))
    ranked.sort()
    order = [position for _, _, position in ranked]
    if exact and exact[0].get("relevance", 0.0) >= STRONG_EXACT:
        first = index.positions[exact[0]["id"]]
        if first in order:
            order.remove(first)
        order.insert(0, first)
    scores = {position: round3(-negated) for negated, _, position in ranked}
    hits = []
    for position in order[:top]:
        hit = exact_hits.get(position)
        if hit is None:
            record = index.memories[position]
            decayed, _ = _time_terms(index.memories, [position], now_ms)[position]
            hit = _hit(record, 0.0, 0.0, decayed, 0.0, 0.0, now_ms)
        else:
            hit = dict(hit)
        hit["score"] = scores.get(position, hit["score"]) + 0.0
        hit["similarity"] = round3(float(semantic[position]))
        hits.append(hit)
    return hits


def recall_in_mode(
    brain: Brain,
    query: str | None,
    *,
    mode: str,
    source: VectorSource | None = None,
    index: BrainIndex | None = None,
    hybrid: HybridIndex | None = None,
    **options: Any,
) -> list[dict[str, Any]]:
    """Recall in ``mode`` (``exact`` or ``hybrid``) with the options `recall` takes.

    Hybrid mode needs a ``source`` of vectors unless ``hybrid`` is given prepared.
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
    embed = source.embed_query if source is not None else _no_query_embedder
    return hybrid_recall(brain, query, index=index, hybrid=hybrid, embed_query=embed, **options)


def _no_query_embedder(text: str) -> np.ndarray:
    raise ValueError("hybrid recall needs a vector source to embed the query")
