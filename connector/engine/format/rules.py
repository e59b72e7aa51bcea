"""The fixed rules of the brain format: types, strength and decay, origins, key order, times."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from connector.engine.format.jsvalues import datetime_ms
from connector.engine.format.jsvalues import iso_ms as js_iso_ms

MEMORY_TYPES: dict[str, tuple[float, float]] = {
    # type: (strength at creation, decay rate per day)
    "decision": (0.85, 0.995),
    "insight": (0.90, 0.997),
    "goal": (0.80, 0.993),
    "experience": (0.75, 0.985),
    "learning": (0.70, 0.990),
    "relationship": (0.70, 0.997),
    "preference": (0.60, 0.998),
    "observation": (0.40, 0.950),
}

COGNITIVE_TYPES: dict[str, tuple[float, float]] = {
    # cognitive type: (strength adjustment, decay multiplier)
    "episodic": (0.10, 0.995),
    "semantic": (0.0, 1.0),
    "procedural": (-0.10, 1.003),
}


@dataclass(frozen=True)
class OriginRule:
    """What an origin allows: caps, pinning, decay and recall trust."""

    max_salience: float
    max_confidence: float
    may_pin: bool
    decay_multiplier: float
    trust: float


ORIGINS: dict[str, OriginRule] = {
    "user": OriginRule(1.0, 1.0, True, 1.0, 1.0),
    "agent-inferred": OriginRule(0.6, 0.8, False, 1.0, 0.95),
    "tool-output": OriginRule(0.5, 0.6, False, 0.997, 0.85),
    "external": OriginRule(0.4, 0.4, False, 0.99, 0.75),
}
LOW_TRUST_ORIGINS = frozenset({"tool-output", "external"})

# Edge weights (associations.json).
MANUAL_EDGE_WEIGHT = 0.20
TAG_OVERLAP_EDGE_WEIGHT = 0.10
TAG_OVERLAP_MIN_SHARED = 2
REINFORCE_STEP = 0.10
# Forget refuses memories at or above this salience unless forced.
PROTECTED_SALIENCE = 0.7

# Index entry keys in the command line's order; other keys keep their place.
ENTRY_KEY_ORDER = (
    "title", "path", "type", "cognitive_type", "created", "last_accessed", "access_count",
    "strength", "decay_rate", "origin", "salience", "confidence", "tags", "related",
    "encoding_context", "token_estimate", "pinned", "pin_scope", "pin_priority", "stable",
    "quarantined", "quarantine_reasons", "quarantine_flagged", "supersedes",
    "supersede_pending", "valid_from", "valid_until", "superseded_by", "valid_until_auto",
    "vetted", "vetted_at",
)
_ENTRY_RANK = {key: rank for rank, key in enumerate(ENTRY_KEY_ORDER)}


def js_round(value: float, places: int) -> float:
    """JavaScript ``Math.round(value * 10**places) / 10**places`` (halves go up)."""
    scale = 10**places
    return math.floor(value * scale + 0.5) / scale


def initial_strength(memory_type: str, cognitive_type: str) -> float:
    """Strength at creation: the type's base plus the cognitive adjustment, clamped."""
    base = MEMORY_TYPES[memory_type][0] + COGNITIVE_TYPES[cognitive_type][0]
    return js_round(min(1.0, max(0.0, base)), 2)


def initial_decay_rate(memory_type: str, cognitive_type: str, origin: str | None) -> float:
    """Decay per day: type x cognitive multiplier x origin multiplier, at most 0.9999.

    Not rounded: the floating-point product is what the command line stores.
    """
    multiplier = ORIGINS[origin].decay_multiplier if origin else 1.0
    rate = MEMORY_TYPES[memory_type][1] * COGNITIVE_TYPES[cognitive_type][1] * multiplier
    return min(0.9999, rate)


def token_estimate(content: str) -> int:
    """ceil(length / 4), the length counted in UTF-16 code units as JavaScript does."""
    return math.ceil(len(content.encode("utf-16-le")) // 2 / 4)


def iso_ms(moment: datetime) -> str:
    """``2025-01-08T00:00:00.000Z``: UTC, milliseconds, ``Z`` (naive times are UTC); the year
    always has four digits, so a validity before the year 1000 reads back."""
    return js_iso_ms(datetime_ms(moment))


def parse_iso(text: str) -> datetime | None:
    """An ISO 8601 date or date-time (``Z`` or offset; none means UTC) a datetime can hold in UTC, else None."""
    if not isinstance(text, str) or not text.strip():
        return None
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        return None  # 0001-01-01T00:00:00+14:00, 9999-12-31T23:59:59-14:00: no UTC instant a datetime holds


# Shown wherever a date argument is refused, so a model sees what to send instead.
ISO_EXAMPLES = "such as 2025-03-01 or 2025-03-01T09:30:00Z"
_SHOWN_VALUE_CHARS = 100  # MAX_DATE_CHARS of the tools: what they take is shown whole


def not_an_instant(name: str, value: Any, *, within: str = "") -> str:
    """The one refusal of a date argument that is none (brain_recall's ``as_of``, brain_memorize's
    ``valid_from``, ...): its name, what it must be with examples, and the value as sent (cut,
    its line breaks and controls escaped by ``repr``). ``within``: a bound on the dates, said too."""
    shown = repr(value if not isinstance(value, str) or len(value) <= _SHOWN_VALUE_CHARS
                 else value[:_SHOWN_VALUE_CHARS] + "...")
    return f"'{name}' is not an ISO 8601 date or time{within} ({ISO_EXAMPLES}): {shown}"


def set_entry_fields(entry: dict[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``entry`` with ``updates`` applied, new keys placed in canonical order.

    Keys already present keep their position; a new known key goes right after the
    last present key that precedes it in `ENTRY_KEY_ORDER`; unknown keys stay where
    they are (a new unknown key goes last).
    """
    items = list(entry.items())
    keys = [key for key, _ in items]
    for key, value in updates.items():
        if key in keys:
            items[keys.index(key)] = (key, value)
            continue
        rank = _ENTRY_RANK.get(key)
        position = len(items)
        if rank is not None:
            position = 0
            for index, existing in enumerate(keys):
                existing_rank = _ENTRY_RANK.get(existing)
                if existing_rank is not None and existing_rank < rank:
                    position = index + 1
        items.insert(position, (key, value))
        keys.insert(position, key)
    return dict(items)


def without_keys(entry: dict[str, Any], *keys: str) -> dict[str, Any]:
    """A copy of ``entry`` without ``keys`` (order otherwise kept)."""
    return {key: value for key, value in entry.items() if key not in keys}
