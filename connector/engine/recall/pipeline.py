"""The steps of one recall that exact recall (`exact.py`) and hybrid recall (`hybrid.py`) share.

Each step is a function over the prepared `BrainIndex` and its `MemoryRecord`s, exactly as
the reference `brain recall` computes it (recall.md): the instant a recall is made at, which
memories may appear at all, their decayed strength and recency, the trust and supersession
factors applied to a score, and the hit a ranked memory becomes. Exact recall scores with
them; hybrid recall composes them around its own fusion.
"""

from __future__ import annotations

import math
import posixpath
from datetime import datetime
from typing import Any

from msgspec import UNSET

from connector.engine.format.jsvalues import datetime_ms, parse_iso_ms, round3
from connector.engine.recall.index import LOW_TRUST_ORIGINS, BrainIndex, MemoryRecord, RecallError

__all__ = [
    "MS_PER_DAY", "SUPERSEDED_FACTOR", "eligibility", "hit_of", "instant_ms", "newer_field_factors", "outdated",
    "time_terms",
]

MS_PER_DAY = 86_400_000
SUPERSEDED_FACTOR = 0.25


def instant_ms(value: datetime | str | None) -> int | None:
    """``value`` as epoch milliseconds (None stays None); `RecallError` if it is no ISO 8601 instant."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return datetime_ms(value)
    parsed = parse_iso_ms(value)
    if parsed is None:
        raise RecallError(f"not an ISO 8601 instant: {value!r}")
    return parsed


def eligibility(index: BrainIndex, as_of_ms: int | None, as_known_ms: int | None) -> list[bool] | None:
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


def time_terms(memories: list[MemoryRecord], positions: list[int], now_ms: int) -> dict[int, tuple[float, float]]:
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


def outdated(record: MemoryRecord, expiry_ms: int, with_as_of: bool = False) -> bool:
    """Whether the memory is superseded (with ``as_of``: only without a validity of its own) or
    its validity ended by ``expiry_ms``: recall ranks it down, and it holds no current fact."""
    superseded = record.superseded and (not with_as_of or not record.has_valid_until)
    return superseded or (record.valid_until_ms is not None and record.valid_until_ms <= expiry_ms)


def newer_field_factors(record: MemoryRecord, score: float, expiry_ms: int, with_as_of: bool) -> float:
    """Origin trust, then one 0.25 factor for superseded or expired memories."""
    if record.trust is not None:
        score *= record.trust
    if outdated(record, expiry_ms, with_as_of):
        score *= SUPERSEDED_FACTOR
    return score


def hit_of(
    record: MemoryRecord,
    score: float,
    relevance: float,
    decayed: float,
    spreading: float,
    match: float,
    now_ms: int,
) -> dict[str, Any]:
    """The hit a ranked memory becomes, its fields as the reference prints them."""
    entry = record.hit_fields()  # UNSET: not in the entry
    hit: dict[str, Any] = {"id": record.id}
    title = entry.title
    has_title = title is not UNSET
    if not has_title:
        title = None
    if not title:
        path = entry.path
        title = posixpath.basename(path).removesuffix(".md") if isinstance(path, str) else title
    if title is not None or has_title:
        hit["title"] = title
    if entry.path is not UNSET:
        hit["path"] = entry.path
    if entry.type is not UNSET:
        hit["type"] = entry.type
    hit["score"] = score + 0.0  # never -0
    hit["relevance"] = round3(relevance)
    hit["decayed_strength"] = round3(decayed)
    hit["context_match"] = round3(match)
    hit["spreading_bonus"] = round3(spreading)
    if entry.confidence is not UNSET:
        hit["confidence"] = entry.confidence
    if entry.tags is not UNSET:
        hit["tags"] = entry.tags
    origin = entry.origin
    if origin is not UNSET:
        hit["origin"] = origin
        if origin.__class__ is str and origin in LOW_TRUST_ORIGINS:
            hit["low_trust"] = True
    if record.quarantined:
        hit["quarantine_pending"] = True
    if entry.superseded_by is not UNSET:
        hit["superseded_by"] = entry.superseded_by
    if entry.valid_from is not UNSET:
        hit["valid_from"] = entry.valid_from
    if entry.valid_until is not UNSET:
        hit["valid_until"] = entry.valid_until
    if record.valid_until_ms is not None and record.valid_until_ms <= now_ms:
        hit["expired"] = True
    return hit
