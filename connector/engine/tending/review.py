"""The review queue of similar memories, kept in the brain itself (``pair-review.json``).

A write (or a pull of memories other devices wrote) may find that a new memory
duplicates or updates an existing one. Nothing is superseded or forgotten on that
guess: the pair waits here for a person, who decides one of four things:

- ``keep_new``: the old memory is superseded by the new one (``apply_supersession``);
- ``keep_old``: the new memory is forgotten (archived, restorable);
- ``merge``: one edited text becomes a new memory that supersedes both;
- ``dismiss``: "not the same", and the pair is never asked again.

The file lives at the brain's top level, beside the command line's own files. The
reference ``brain`` command line preserves it as an unknown file; it is *not* the
command line's ``review-queue.json`` (a spaced-repetition queue), which is never
touched here. Because it is in the brain, every device and every connector replica
sees one queue. Format (JSON, the command line's layout)::

    {
      "version": 1,
      "checked_until": "<created ISO of the newest memory all older ones are checked to>" | null,
      "checked": ["<ids newer than checked_until that were checked already>"],
      "pairs": [
        {"new": id, "old": id, "relation": "duplicate" | "update", "score": 0.93,
         "flagged_at": ISO, "via": "write" | "pull", "by": "who or what wrote the new memory",
         "status": "pending" | "kept_new" | "kept_old" | "merged" | "dismissed",
         ["decided_at": ISO, "decided_by": str], ["merged_into": id]}
      ]
    }

A pair is one unordered pair of ids: once recorded (in any status) it is never
added again, which is what makes "dismissed" final. Pending pairs are listed only
while both memories are live, neither is superseded, and the new one is not waiting
for verification.

The decisions are `Operation`s (``to_dict`` / ``from_dict``), so they replay on a
newer brain after a lost push (412) and survive in the held-write journal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from connector.engine.format.brain import Brain
from connector.engine.format.jsvalues import datetime_ms
from connector.engine.format.rules import parse_iso
from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import MemoryInput, add_memory, apply_supersession, is_memory_id
from connector.engine.writes.ops import (
    Memorize,
    Operation,
    _draw_id,
    archive_memory,
    operation_from_dict,
    pin_follows,
    register_kind,
)
from connector.engine.writes.txn import WriteTxn

REVIEW_FILE = "pair-review.json"
# Relations a person is asked about; "related" is only reported, never queued.
QUEUED_RELATIONS = ("duplicate", "update")
VIAS = ("write", "pull")
DECISIONS = ("keep_new", "keep_old", "merge", "dismiss")
PENDING = "pending"
STATUS_OF = {"keep_new": "kept_new", "keep_old": "kept_old", "merge": "merged", "dismiss": "dismissed"}
# A brain with no review file yet: only its newest memories count as unchecked, so a pull
# never trawls a long history written before the queue existed.
FIRST_CHECK = 20
MAX_BY = 200
ARCHIVED_REASON = "review_keep_old"
T = TypeVar("T")

__all__ = [
    "DECISIONS",
    "REVIEW_FILE",
    "Decide",
    "Flag",
    "FlagPairs",
    "MemorizeFlagged",
    "PendingPair",
    "add_flags",
    "mark_checked",
    "pending_count",
    "pending_pairs",
    "recorded",
    "review_document",
    "unchecked",
    "unchecked_ms",
]


@dataclass(frozen=True)
class Flag:
    """A pair found by the similarity check: ``new`` relates to the existing ``old``."""

    new: str
    old: str
    relation: str
    score: float
    via: str = "write"
    by: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form `from_dict` reads back."""
        return {"new": self.new, "old": self.old, "relation": self.relation, "score": self.score,
                "via": self.via, "by": self.by}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Flag:
        """From `to_dict`'s form; bad values -> `BrainError`."""
        try:
            flag = cls(str(value["new"]), str(value["old"]), str(value["relation"]), float(value["score"]),
                       str(value.get("via", "write")), str(value.get("by", "")))
        except (KeyError, TypeError, ValueError):
            raise BrainError("a flagged pair needs new, old, relation and score") from None
        if flag.via not in VIAS:
            raise BrainError(f"'via' must be one of {', '.join(VIAS)}")
        return flag


@dataclass(frozen=True)
class PendingPair:
    """One pair waiting for a decision, with both index entries."""

    new: str
    old: str
    relation: str
    score: float
    flagged_at: str
    via: str
    by: str
    new_entry: Mapping[str, Any]
    old_entry: Mapping[str, Any]


def _empty() -> dict[str, Any]:
    return {"version": 1, "checked_until": None, "checked": [], "pairs": []}


def _valid(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("pairs", []), list) \
        and isinstance(value.get("checked", []), list)


def review_document(brain: Brain) -> dict[str, Any]:
    """The brain's review file, parsed (an empty one when missing or unreadable)."""
    value = brain.read_json(REVIEW_FILE)
    if not _valid(value):
        return _empty()
    value.setdefault("pairs", [])
    value.setdefault("checked", [])
    value.setdefault("checked_until", None)
    return value


def _txn_document(txn: WriteTxn) -> dict[str, Any]:
    doc = txn.json(REVIEW_FILE, _empty, valid=_valid)
    doc.setdefault("pairs", [])
    doc.setdefault("checked", [])
    doc.setdefault("checked_until", None)
    return doc


def _key(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


def _records(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [pair for pair in doc.get("pairs", []) if isinstance(pair, dict)
            and isinstance(pair.get("new"), str) and isinstance(pair.get("old"), str)]


def _open(entry: Any) -> bool:
    """A memory a pair may still be decided about: live, not superseded."""
    return isinstance(entry, Mapping) and not entry.get("superseded_by")


def pending_pairs(doc: Mapping[str, Any], entry: Callable[[str], Mapping[str, Any] | None],
                  limit: int | None = None) -> list[PendingPair]:
    """Pairs waiting for a person, oldest flag first (at most ``limit``).

    ``entry`` looks up a live memory's index entry (None when gone). Pairs whose
    memories are gone (forgotten), superseded, or whose new memory waits for
    verification are left out (they come back if a restore makes them open again).
    """
    found: list[PendingPair] = []
    for pair in _records(doc):
        if pair.get("status") != PENDING:
            continue
        new_entry, old_entry = entry(pair["new"]), entry(pair["old"])
        if not (_open(new_entry) and _open(old_entry)) or new_entry.get("quarantined"):  # type: ignore[union-attr]
            continue
        score = pair.get("score")
        found.append(PendingPair(
            new=pair["new"], old=pair["old"], relation=str(pair.get("relation", "")),
            score=float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else 0.0,
            flagged_at=str(pair.get("flagged_at", "")), via=str(pair.get("via", "")), by=str(pair.get("by", "")),
            new_entry=new_entry, old_entry=old_entry,  # type: ignore[arg-type]
        ))
        if limit is not None and len(found) >= limit:
            break
    return found


def pending_count(brain: Brain, entries: Mapping[str, Any] | None = None) -> int:
    """How many pairs wait (``entries``: index.json's memories, parsed when not given)."""
    if REVIEW_FILE not in brain:
        return 0
    doc = review_document(brain)
    if entries is None:
        index = brain.read_json("index.json")
        entries = index.get("memories") if isinstance(index, dict) and isinstance(index.get("memories"), dict) else {}
    return len(pending_pairs(doc, lambda memory_id: _as_entry(entries.get(memory_id))))


def recorded(brain: Brain) -> set[frozenset[str]]:
    """Every pair the brain's queue holds (unordered, any status): a flag for one is not news."""
    return {_key(pair["new"], pair["old"]) for pair in _records(review_document(brain))}


def _as_entry(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


# ----- which memories still need a check (pull) ------------------------------------------

def _created(entry: Any) -> str:
    created = entry.get("created") if isinstance(entry, Mapping) else None
    return created if isinstance(created, str) else ""


def _until(doc: Mapping[str, Any], created: Iterable[T], exists: bool, convert: Callable[[str], T], floor: T) -> T:
    """``checked_until`` (as ``convert`` reads it); for a brain without a review file, the creation
    time below its newest `FIRST_CHECK` memories; ``floor`` when everything is unchecked."""
    if exists:
        until = doc.get("checked_until")
        return convert(until) if isinstance(until, str) else floor
    times = sorted(created, reverse=True)  # type: ignore[type-var]
    return times[FIRST_CHECK] if len(times) > FIRST_CHECK else floor


def _watermark(doc: Mapping[str, Any], entries: Mapping[str, Any], exists: bool) -> str:
    return _until(doc, (_created(entry) for entry in entries.values()), exists, str, "")


def _pick(doc: Mapping[str, Any], until: T, created: Mapping[str, T], limit: int | None) -> list[str]:
    """Ids created after ``until`` and not in ``checked``, oldest first (at most ``limit``)."""
    checked = {item for item in doc.get("checked", []) if isinstance(item, str)}
    waiting = sorted((time, memory_id) for memory_id, time in created.items()  # type: ignore[type-var]
                     if time > until and memory_id not in checked)  # type: ignore[operator]
    chosen = [memory_id for _, memory_id in waiting]
    return chosen if limit is None else chosen[:limit]


def unchecked(brain: Brain, entries: Mapping[str, Any], limit: int) -> list[str]:
    """Live memories no similarity check has looked at yet, oldest first (at most ``limit``).

    Those created after ``checked_until`` and not in ``checked``. A brain without a review
    file counts only its newest `FIRST_CHECK` memories as unchecked.
    """
    return _unchecked(review_document(brain), entries, REVIEW_FILE in brain, limit)


def unchecked_ms(brain: Brain, created_ms: Mapping[str, int | None], limit: int) -> list[str]:
    """`unchecked` from creation times in milliseconds (the recall index's), without index.json."""
    doc = review_document(brain)
    times = {memory_id: -1 if ms is None else ms for memory_id, ms in created_ms.items()}
    until = _until(doc, times.values(), REVIEW_FILE in brain, _ms, -1)
    return _pick(doc, until, times, limit)


def _ms(text: str) -> int:
    moment = parse_iso(text)
    return -1 if moment is None else datetime_ms(moment)


def _unchecked(doc: Mapping[str, Any], entries: Mapping[str, Any], exists: bool, limit: int | None) -> list[str]:
    created = {memory_id: _created(entry) for memory_id, entry in entries.items() if isinstance(entry, Mapping)}
    return _pick(doc, _watermark(doc, entries, exists), created, limit)


def mark_checked(txn: WriteTxn, ids: Iterable[str]) -> bool:
    """Record that ``ids`` were checked, moving ``checked_until`` as far as it can go; True if changed."""
    ids = [memory_id for memory_id in dict.fromkeys(ids) if isinstance(memory_id, str)]
    if not ids:
        return False
    exists = txn.read(REVIEW_FILE) is not None
    doc = _txn_document(txn)
    entries = txn.memories()
    until = _watermark(doc, entries, exists)
    checked = [item for item in doc["checked"] if isinstance(item, str)]
    checked += [memory_id for memory_id in ids if memory_id not in checked]
    remaining = _unchecked({"checked_until": until, "checked": checked}, entries, True, None)
    first_open = min((_created(entries[memory_id]) for memory_id in remaining), default=None)
    # Everything created before the oldest memory still unchecked is checked: the mark moves there.
    done = [_created(entries.get(memory_id)) for memory_id in checked if memory_id in entries]
    below = [created for created in done if first_open is None or created < first_open]
    new_until = max([until, *below]) if below else until
    doc["checked_until"] = new_until or None
    doc["checked"] = [memory_id for memory_id in checked
                      if memory_id in entries and _created(entries[memory_id]) > new_until]
    txn.mark(REVIEW_FILE)
    return True


# ----- recording flags -------------------------------------------------------------------

def add_flags(txn: WriteTxn, flags: Iterable[Flag]) -> list[dict[str, Any]]:
    """Queue the flagged pairs inside a write; returns the records added.

    Skipped: relations other than duplicate/update, a memory paired with itself,
    unknown ids, and any pair (either order) recorded before, whatever its status.
    """
    flags = [flag for flag in flags if flag.relation in QUEUED_RELATIONS and flag.new != flag.old]
    if not flags:
        return []
    entries = txn.memories()
    exists = txn.read(REVIEW_FILE) is not None
    doc = _txn_document(txn)
    if not exists:
        # The first record also fixes where pull checks start (see `_watermark`).
        doc["checked_until"] = _watermark(doc, entries, False) or None
    seen = {_key(pair["new"], pair["old"]) for pair in _records(doc)}
    added: list[dict[str, Any]] = []
    for flag in flags:
        key = _key(flag.new, flag.old)
        if key in seen or flag.new not in entries or flag.old not in entries:
            continue
        seen.add(key)
        record = {"new": flag.new, "old": flag.old, "relation": flag.relation,
                  "score": round(float(flag.score), 3), "flagged_at": txn.now_iso, "via": flag.via,
                  "by": flag.by[:MAX_BY], "status": PENDING}
        txn.note_numbers(REVIEW_FILE, record["score"])
        doc["pairs"].append(record)
        added.append(record)
    if added:
        txn.mark(REVIEW_FILE)
    return added


@dataclass
class FlagPairs(Operation):
    """Queue flagged pairs (and note which memories were checked) as one brain write.

    Used for the pairs found among memories a pull brought; replaying it on a newer
    brain queues again only what is still new there.
    """

    flags: list[Flag]
    checked: list[str]
    kind: ClassVar[str] = "review-flag"

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        txn.index()
        added = add_flags(txn, self.flags)
        marked = mark_checked(txn, self.checked)
        if added or marked:
            txn.commit()
        return {"added": [{"new": item["new"], "old": item["old"], "relation": item["relation"]} for item in added],
                "count": len(added)}

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.kind, "flags": [flag.to_dict() for flag in self.flags], "checked": list(self.checked)}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> FlagPairs:
        """From `to_dict`'s form."""
        return cls([Flag.from_dict(item) for item in value.get("flags", [])],
                   [str(item) for item in value.get("checked", [])])


@dataclass
class MemorizeFlagged(Memorize):
    """A memorize whose similarity check flagged existing memories: the pairs are queued in the same write.

    ``similar`` holds ``{"id", "relation", "score"}`` per existing memory a new memory was
    found to duplicate or update before the write, with ``"of"``: the new memory's position
    in a write of several (0 when absent); ``by`` says who wrote it. A replay writes the
    memories with their ids again (or finds them there) and queues only what the newer
    brain does not hold yet.
    """

    similar: list[dict[str, Any]] = field(default_factory=list)
    by: str = ""
    kind: ClassVar[str] = "memorize-flagged"

    @classmethod
    def of(cls, base: Memorize, similar: list[dict[str, Any]], by: str = "") -> MemorizeFlagged:
        """``base`` (every field it has) with the flags to queue."""
        kept = {item.name: getattr(base, item.name) for item in fields(Memorize)}
        return cls(**kept, similar=similar, by=by)

    def also(self, txn: WriteTxn, result: dict[str, Any]) -> None:
        stored = result["stored"]
        flags = []
        for item in self.similar:
            position = item.get("of", 0)
            # A memory not written because the brain held it already (`Memorize.skip_held`) has no pair.
            if isinstance(position, int) and 0 <= position < len(stored) and not stored[position].get("duplicate"):
                flags.append(Flag(str(stored[position]["id"]), str(item["id"]), str(item["relation"]),
                                  float(item["score"]), "write", self.by))
        added = add_flags(txn, flags) if flags else []
        if added:
            result["review_queued"] = [item["old"] for item in added]

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "op": self.kind, "similar": list(self.similar), "by": self.by}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> MemorizeFlagged:
        """From `to_dict`'s form (the memorize read as `operation_from_dict` reads one)."""
        base = operation_from_dict({**value, "op": Memorize.kind})
        assert isinstance(base, Memorize)
        similar = [dict(item) for item in value.get("similar", []) if isinstance(item, Mapping)]
        return cls.of(base, similar, str(value.get("by", "")))


# ----- decisions ---------------------------------------------------------------------------

@dataclass
class Decide(Operation):
    """A person's decision about one pending pair (see the module's docstring).

    ``merged`` (for ``merge``) is the memory the person edited; its id and creation
    time are drawn by the first successful apply and reused by replays.
    """

    new: str
    old: str
    decision: str
    by: str = ""
    merged: MemoryInput | None = None
    merged_id: str | None = None
    created: str | None = None
    kind: ClassVar[str] = "review-decide"

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise BrainError(f"'decision' must be one of {', '.join(DECISIONS)}")
        if not (is_memory_id(self.new) and is_memory_id(self.old)):
            raise BrainError("a pair is two memory ids")
        if self.decision == "merge" and not isinstance(self.merged, MemoryInput):
            raise BrainError("a merge needs the merged memory's text")
        if self.decision != "merge":
            self.merged = None

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        txn.index()
        doc = _txn_document(txn) if txn.read(REVIEW_FILE) is not None else None
        record = next((pair for pair in _records(doc) if pair["new"] == self.new and pair["old"] == self.old),
                      None) if doc is not None else None
        if record is None:
            raise BrainError("no such pair is waiting for review")
        status = STATUS_OF[self.decision]
        if record.get("status") == status:
            # Already decided so (a replay after a lost acknowledgement): nothing more to do.
            return {"new": self.new, "old": self.old, "decision": self.decision, "already_decided": True,
                    **({"merged_into": record["merged_into"]} if record.get("merged_into") else {})}
        if record.get("status") != PENDING:
            raise BrainError(f"this pair was already decided ({record.get('status')})")
        new_entry, old_entry = txn.entry(self.new), txn.entry(self.old)
        if new_entry is None or old_entry is None:
            raise BrainError("one of the two memories is no longer in the brain; nothing was changed")
        if new_entry.get("superseded_by") or old_entry.get("superseded_by"):
            raise BrainError("one of the two memories was superseded meanwhile; nothing was changed")
        result: dict[str, Any] = {"new": self.new, "old": self.old, "decision": self.decision}
        if self.decision == "keep_new":
            self._keep_new(txn, new_entry)
            result["superseded"] = [self.old]
            pin_follows(txn, [self.old], self.new)
        elif self.decision == "keep_old":
            if new_entry.get("pinned"):
                raise BrainError("the new memory is pinned; unpin it first")
            archive_memory(txn, self.new, ARCHIVED_REASON)
            result["archived"] = [self.new]
        elif self.decision == "merge":
            result["merged_into"] = record["merged_into"] = merged_id = self._merge(txn)
            result["superseded"] = [self.new, self.old]
            pin_follows(txn, [self.new, self.old], merged_id)
        record.update(status=status, decided_at=txn.now_iso, decided_by=self.by[:MAX_BY])
        txn.mark(REVIEW_FILE)
        txn.commit()
        return result

    def _keep_new(self, txn: WriteTxn, new_entry: Mapping[str, Any]) -> None:
        boundary = new_entry.get("valid_from") or new_entry.get("created") or txn.now_iso
        apply_supersession(txn, self.new, [self.old], str(boundary))
        # The new memory names what it supersedes, as a memorize with `supersedes` would
        # (a restore of it then supersedes the old one again).
        listed = new_entry.get("supersedes")
        supersedes = [item for item in listed if isinstance(item, str)] if isinstance(listed, list) else []
        if self.old not in supersedes:
            supersedes.append(self.old)
            txn.update_entry(self.new, {"supersedes": supersedes})
            txn.edit_memory_file(self.new, {"supersedes": supersedes})

    def _merge(self, txn: WriteTxn) -> str:
        assert self.merged is not None
        live, archived = txn.memories(), txn.archived_ids()
        memory_id = self.merged_id
        if memory_id is None or memory_id in live or memory_id in archived:
            memory_id = _draw_id(txn, set())
        created = self.created or txn.now_iso
        merged = MemoryInput.from_mapping({**self.merged.to_mapping(), "supersedes": [self.new, self.old]})
        # Text that needs verification is saved waiting for it; it supersedes both once approved.
        add_memory(txn, merged, memory_id, created)
        self.merged_id, self.created = memory_id, created
        return memory_id

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.kind, "new": self.new, "old": self.old, "decision": self.decision, "by": self.by,
                "merged": self.merged.to_mapping() if self.merged is not None else None,
                "merged_id": self.merged_id, "created": self.created}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Decide:
        """From `to_dict`'s form."""
        merged = value.get("merged")
        return cls(str(value.get("new", "")), str(value.get("old", "")), str(value.get("decision", "")),
                   str(value.get("by", "")), MemoryInput.from_mapping(merged) if merged is not None else None,
                   value.get("merged_id"), value.get("created"))


register_kind(FlagPairs.kind, FlagPairs.from_dict)
register_kind(Decide.kind, Decide.from_dict)
register_kind(MemorizeFlagged.kind, MemorizeFlagged.from_dict)
