"""Brain writes as operation objects: memorize, pin, unpin, forget, verify.

Each operation's ``apply(brain, now)`` changes the in-memory brain and returns a
JSON-able result, or raises `BrainError` leaving the brain untouched. Operations can
be applied again to a newer base (the connector replays pending writes after a
conflicting push): a `Memorize` keeps the memory ids it drew the first time, and
replaying a write that the base already holds does not duplicate it.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from connector.engine.format.brain import ARCHIVE_INDEX, PINNED, Brain
from connector.engine.format.rules import PROTECTED_SALIENCE
from connector.engine.format.text import memory_body, normalised_content
from connector.engine.writes.errors import ArchivedMemory, BrainError
from connector.engine.writes.memorize import (
    MemoryInput,
    add_memory,
    apply_supersession,
    connector_memory,
    parse_memorize_request,
    release_supersessions,
)
from connector.engine.writes.txn import WriteTxn

__all__ = [
    "BrainError",
    "Forget",
    "IdOperation",
    "Memorize",
    "MemoryInput",
    "Operation",
    "Pin",
    "Unpin",
    "Verify",
    "connector_memorize",
    "new_memory_id",
    "OPERATION_READERS",
    "operation_from_dict",
    "register_kind",
]


def new_memory_id(brain: Brain, now: datetime, reserved: Iterable[str] = ()) -> str:
    """A fresh ``mem_<YYYYMMDD>_<6 hex>`` from a secure source, never used in this brain.

    Ids in ``index.json``, ``_archived/index.json`` and ``reserved`` are avoided.
    """
    txn = WriteTxn(brain, now)
    return _draw_id(txn, set(reserved))


def _draw_id(txn: WriteTxn, reserved: set[str]) -> str:
    try:
        live: Mapping[str, Any] = txn.memories()
    except BrainError:
        live = {}
    archived = txn.archived_ids()
    day = (txn.now if txn.now.tzinfo is None else txn.now.astimezone(UTC)).strftime("%Y%m%d")
    for _ in range(1000):
        candidate = f"mem_{day}_{secrets.token_hex(3)}"
        if candidate not in live and candidate not in archived and candidate not in reserved:
            return candidate
    raise BrainError("could not draw a free memory id")


def _keyed_id(txn: WriteTxn, request_key: str, title: str, archived: Mapping[str, Any]) -> str:
    """The id a memorize with ``request_key`` writes: today's, unless yesterday's (a retry
    across midnight) already holds this title. Same key, same day, same id: a retry is
    found as already written (an id taken by another memory makes `apply` draw a new one)."""
    digest = hashlib.sha256(request_key.encode("utf-8")).hexdigest()[:6]
    today = txn.now if txn.now.tzinfo is None else txn.now.astimezone(UTC)
    candidates = [f"mem_{day.strftime('%Y%m%d')}_{digest}" for day in (today, today - timedelta(days=1))]
    for candidate in candidates:
        present = txn.entry(candidate) or archived.get(candidate)
        if isinstance(present, dict) and present.get("title") == title:
            return candidate
    return candidates[0]


def _entry_if_any(txn: WriteTxn, memory_id: str) -> dict[str, Any] | None:
    """The memory's index entry, or None. A brain nothing was saved in yet (no index.json: a new
    account's empty brain) holds no memory, so every id is unknown there, not a broken brain."""
    return txn.entry(memory_id) if txn.read("index.json") is not None else None


def _is_archived(txn: WriteTxn, memory_id: str) -> bool:
    """Whether ``memory_id`` is in the archive index (forgotten, restorable)."""
    archived = txn.json(ARCHIVE_INDEX)
    return isinstance(archived, dict) and isinstance(archived.get("memories"), dict) \
        and memory_id in archived["memories"]


def _known_entry(txn: WriteTxn, memory_id: Any) -> dict[str, Any]:
    if not isinstance(memory_id, str) or not memory_id:
        raise BrainError("a memory id is required")
    entry = _entry_if_any(txn, memory_id)
    if entry is None:
        if _is_archived(txn, memory_id):
            # brain_read shows it as archived: "unknown" would contradict it. No tool restores one
            # ("restore it first" gave a model nothing to act on): the web app's memory page does.
            raise ArchivedMemory(memory_id)
        raise BrainError(f"unknown memory id {memory_id}")
    return entry


class Operation:
    """Base of the write operations (for typing and serialisation)."""

    kind: ClassVar[str] = ""

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass
class IdOperation(Operation):
    """An operation on one thing its id names (a memory, a mental model); a subclass that adds
    no fields needs no ``@dataclass`` of its own."""

    id: str

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.kind, "id": self.id}


@dataclass
class Memorize(Operation):
    """Write one or several memories.

    ``ids`` and ``created`` are filled by the first successful ``apply`` and reused by
    every later one, so a replay on a newer base writes the same memories.
    """

    memories: list[MemoryInput]
    ids: list[str] | None = None
    created: str | None = None
    # A client's retry key (already made per caller): the memory's id is derived from it, so a
    # retry (e.g. after a connection reset) finds the first write instead of writing again.
    request_key: str | None = None
    # The connector's writes (brain_memorize, the web app): a pinned memory a new one supersedes
    # hands its pin to the new one (`pin_follows`), or session start would serve the replaced
    # text. The command line leaves pins where they are, as the reference's `brain memorize` does.
    pins_follow: bool = False
    # An import's write: a memory whose content a live memory of the brain holds word for word
    # (`normalised_content`), written meanwhile by another import of the same file, another tab or
    # device, is not written again; it is reported with that memory's id (``duplicate``). Checked
    # at every apply, so a replay on a newer brain (after a lost race) skips it too.
    skip_held: bool = False
    kind: ClassVar[str] = "memorize"

    def __post_init__(self) -> None:
        self.memories = list(self.memories)
        if not self.memories:
            raise BrainError("no memories given")
        for memory in self.memories:
            if not isinstance(memory, MemoryInput):
                raise BrainError("memories must be MemoryInput values")
        if self.ids is not None and len(self.ids) != len(self.memories):
            raise BrainError("one id per memory is needed")

    @classmethod
    def from_request(cls, payload: Any) -> Memorize:
        """From the command line's memorize JSON (object, array or ``{"memories": [...]}``)."""
        return cls(parse_memorize_request(payload))

    def _key_ids(self, txn: WriteTxn, archived: Mapping[str, Any]) -> None:
        """With a retry key, the id is the key's (`_keyed_id`), drawn once."""
        if not self.ids and self.request_key is not None and len(self.memories) == 1:
            self.ids = [_keyed_id(txn, self.request_key, self.memories[0].title, archived)]

    def prepare(self, brain: Brain, now: datetime) -> list[str]:
        """Draw the memory ids now (without writing), e.g. to report them before a sync."""
        if self.ids is None:
            txn = WriteTxn(brain, now)
            self._key_ids(txn, txn.archive_index()["memories"] if txn.read(ARCHIVE_INDEX) is not None else {})
            if self.ids is None:
                drawn: list[str] = []
                for _ in self.memories:
                    drawn.append(_draw_id(txn, set(drawn)))
                self.ids = drawn
        return list(self.ids)

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        txn.index(create=True)
        created = self.created or txn.now_iso
        archived = txn.archive_index()["memories"] if txn.read(ARCHIVE_INDEX) is not None else {}
        self._key_ids(txn, archived)
        ids = list(self.ids) if self.ids else []
        reserved = set(ids)
        stored: list[dict[str, Any]] = []
        held = _held_contents(txn) if self.skip_held else {}
        for position, memory in enumerate(self.memories):
            memory_id = ids[position] if position < len(ids) else None
            if memory_id is not None:
                present = txn.entry(memory_id) or archived.get(memory_id)
                if isinstance(present, dict):
                    if present.get("title") == memory.title:
                        # Already written (a replay after a lost acknowledgement): keep it.
                        stored.append({"id": memory_id, "title": memory.title,
                                       "path": present.get("path"), "type": present.get("type"),
                                       "already_present": True})
                        continue
                    memory_id = None  # another memory took this id meanwhile
            content = normalised_content(memory.content) if self.skip_held else ""
            if content in held:
                other = held[content]
                entry = txn.entry(other) or {}
                stored.append({"id": other, "title": entry.get("title", memory.title), "path": entry.get("path"),
                               "type": entry.get("type"), "already_present": True, "duplicate": True})
                continue
            if memory_id is None:
                memory_id = _draw_id(txn, reserved)
                reserved.add(memory_id)
                if position < len(ids):
                    ids[position] = memory_id
                else:
                    ids.append(memory_id)
            try:
                stored.append(add_memory(txn, memory, memory_id, created))
            except BrainError as error:
                if len(self.memories) == 1:
                    raise
                raise BrainError(f"memory {position + 1}: {error}") from None
            if self.skip_held:
                held.setdefault(content, memory_id)
        if self.pins_follow:
            for memory, written in zip(self.memories, stored, strict=True):
                if memory.supersedes and not written.get("already_present"):
                    pin_follows(txn, memory.supersedes, str(written["id"]))
        result = {"stored": stored, "count": len(stored)}
        self.also(txn, result)
        txn.commit()
        self.ids, self.created = ids, created
        return result

    def also(self, txn: WriteTxn, result: dict[str, Any]) -> None:
        """More changes in the same write, before it commits (a subclass's, e.g. the review queue's)."""

    def to_dict(self) -> dict[str, Any]:
        value = {"op": self.kind, "memories": [memory.to_mapping() for memory in self.memories],
                 "ids": self.ids, "created": self.created}
        flags = {name: True for name in ("pins_follow", "skip_held") if getattr(self, name)}
        return {**value, **flags}


def _held_contents(txn: WriteTxn) -> dict[str, str]:
    """The id of the live memory holding each content (`normalised_content`) in the brain."""
    held: dict[str, str] = {}
    for memory_id, entry in txn.memories().items():
        path = entry.get("path") if isinstance(entry, dict) else None
        text = txn.read_text(path) if isinstance(path, str) else None
        if text is not None:
            held.setdefault(normalised_content(memory_body(text)), memory_id)
    return held


def connector_memorize(content: str, *, request_key: str | None = None, **fields: Any) -> Memorize:
    """The operation behind the connector's `brain_memorize` tool (connector.md section 6).

    Writes `connector_memory` of ``content`` and ``fields`` (the tool's own arguments: title,
    type, tags, origin, validity, supersedes, agent, project, task, writer, source). Title:
    given, else the content's first line (80 characters at most), else "Captured note"; file
    ``captured/<slug>.md`` (a free name when taken); episodic; salience 0.5 and confidence
    0.8, capped by the origin; context ``project`` and ``task`` (task type, default
    "capturing"); ``writer`` names the user in ``source``; bad input -> `BrainError`;
    ``request_key``: the caller's retry key (see `Memorize`). A pinned memory it supersedes hands
    its pin to it (`Memorize.pins_follow`).
    """
    return Memorize([connector_memory(content, **fields)], request_key=request_key, pins_follow=True)


def pin_memory(txn: WriteTxn, memory_id: str, scope: str, priority: int) -> None:
    """Pin a live memory: its index entry, its file's front matter and ``pinned.json``."""
    entry = txn.entry(memory_id)
    assert entry is not None
    fields = {"pinned": True, "pin_scope": scope, "pin_priority": priority}
    txn.update_entry(memory_id, fields)
    txn.edit_memory_file(memory_id, fields)
    txn.set_pin(memory_id, scope, priority, entry.get("token_estimate", 0))


def unpin_memory(txn: WriteTxn, memory_id: str, *, listed: bool = True) -> None:
    """Unpin a live memory (entry, file, and ``pinned.json`` when ``listed`` there)."""
    entry = txn.entry(memory_id)
    if entry is not None and entry.get("pinned"):
        txn.update_entry(memory_id, {"pinned": False})
        txn.edit_memory_file(memory_id, {"pinned": False})
    if listed:
        txn.drop_pin(memory_id)
        txn.touch_index()


def pin_follows(txn: WriteTxn, replaced: Sequence[str], kept: str) -> None:
    """The pin follows a supersession: the memories ``replaced`` that were pinned lose their pin
    (a superseded text is not served at session start) and ``kept`` is pinned in their place,
    with the highest priority among them, unless it is pinned already. Nothing moves while
    ``kept`` waits for verification: the replaced memories are not superseded until then."""
    target = txn.entry(kept)
    if target is None or target.get("quarantined"):
        return
    pinned = {memory_id: entry for memory_id in replaced
              if (entry := txn.entry(memory_id)) is not None and entry.get("pinned") is True}
    if not pinned:
        return
    best = max(pinned.values(), key=lambda entry: _priority(entry.get("pin_priority")))
    scope, priority = best.get("pin_scope"), _priority(best.get("pin_priority"))
    for memory_id in pinned:
        unpin_memory(txn, memory_id)
    if target.get("pinned") is not True:
        pin_memory(txn, kept, scope if isinstance(scope, str) and scope.strip() else "global", priority)


def _priority(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _pinned_as(txn: WriteTxn, entry: dict[str, Any], memory_id: str, scope: str, priority: int) -> bool:
    """Whether the memory is pinned exactly so already: its index entry and its ``pinned.json`` item."""
    if entry.get("pinned") is not True or entry.get("pin_scope") != scope or entry.get("pin_priority") != priority:
        return False
    if txn.read(PINNED) is None:
        return False
    wanted = {"id": memory_id, "scope": scope, "priority": priority, "token_estimate": entry.get("token_estimate", 0)}
    return any(isinstance(pin, dict) and pin == wanted for pin in txn.pins())


@dataclass
class Pin(Operation):
    """Pin a memory into the always-present tier (it stops decaying)."""

    id: str
    scope: str = "global"
    priority: int = 0
    kind: ClassVar[str] = "pin"

    def __post_init__(self) -> None:
        if not isinstance(self.scope, str) or not self.scope.strip():
            raise BrainError("'scope' must be a non-empty string")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise BrainError("'priority' must be an integer")

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        entry = _known_entry(txn, self.id)
        if entry.get("quarantined"):
            raise BrainError(f"{self.id} is pending verification; approve it first")
        newer = entry.get("superseded_by")
        if isinstance(newer, str) and newer:
            # Session start would serve an outdated text; the current version is the one to pin.
            raise BrainError(f"{self.id} is an old version (superseded by {newer}); pin the current version")
        result = {"id": self.id, "title": entry.get("title"), "pinned": True,
                  "scope": self.scope, "priority": self.priority}
        if _pinned_as(txn, entry, self.id, self.scope, self.priority):
            # Nothing to change: committing would still stamp index.json and push a new archive
            # (a store snapshot pushed out) for a host retrying an idempotent call.
            return {**result, "already_pinned": True, "note": "the memory was already pinned"}
        pin_memory(txn, self.id, self.scope, self.priority)
        txn.commit()
        return result

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.kind, "id": self.id, "scope": self.scope, "priority": self.priority}


class Unpin(IdOperation):
    """Return a pinned memory to normal recall and decay."""

    kind: ClassVar[str] = "unpin"

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        entry = _known_entry(txn, self.id)
        listed = any(isinstance(pin, dict) and pin.get("id") == self.id for pin in txn.pins()) \
            if txn.read("pinned.json") is not None else False
        was_pinned = bool(entry.get("pinned"))
        unpin_memory(txn, self.id, listed=listed)
        txn.commit()
        result = {"id": self.id, "title": entry.get("title"), "pinned": False, "was_pinned": was_pinned}
        if not was_pinned:
            result["note"] = "the memory was not pinned"
        return result


def _safe_relative(path: Any) -> bool:
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def _free_archive_path(txn: WriteTxn, wanted: str) -> str:
    """``wanted``, or ``name-2.md`` etc. when an earlier archive already sits there."""
    if not txn.exists(wanted):
        return wanted
    stem, dot, extension = wanted.rpartition(".")
    if not dot or "/" in extension:
        stem, extension = wanted, ""
    number = 2
    while True:
        candidate = f"{stem}-{number}" + (f".{extension}" if extension else "")
        if not txn.exists(candidate):
            return candidate
        number += 1


def archive_memory(txn: WriteTxn, memory_id: str, reason: str) -> dict[str, Any]:
    """The forget primitive: move to ``_archived/``, unlink everything, release supersessions."""
    entry = txn.entry(memory_id)
    assert entry is not None
    path = entry.get("path") if _safe_relative(entry.get("path")) else ""
    archived_path = None
    data = txn.read(path) if path else None
    if path:
        archived_path = _free_archive_path(txn, f"_archived/{path}")
    if data is not None and archived_path:
        txn.write(archived_path, data)
        txn.remove(path)
    archive = txn.archive_index()
    archive["memories"][memory_id] = {
        "path": entry.get("path"),
        "archived_path": archived_path,
        "title": entry.get("title"),
        "type": entry.get("type"),
        "cognitive_type": entry.get("cognitive_type"),
        "strength": entry.get("strength"),
        "salience": entry.get("salience"),
        "confidence": entry.get("confidence"),
        "tags": entry.get("tags", []),
        "archived_date": txn.now_iso,
        "archived_reason": reason,
    }
    archive["archived_count"] = len(archive["memories"])
    txn.note_numbers(ARCHIVE_INDEX, entry.get("strength"), entry.get("salience"), entry.get("confidence"))
    txn.mark(ARCHIVE_INDEX)
    txn.remove_entry(memory_id)
    txn.unlink_all(memory_id)
    txn.drop_review_items(memory_id)
    txn.unindex_document(memory_id)
    txn.drop_pin(memory_id)
    released = release_supersessions(txn, memory_id)
    result: dict[str, Any] = {"id": memory_id, "title": entry.get("title"), "archived": True,
                              "archived_path": archived_path}
    if released:
        result["released_supersessions"] = released
    return result


def _salience(entry: Mapping[str, Any]) -> float:
    value = entry.get("salience")
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


@dataclass
class Forget(Operation):
    """Archive a memory (recoverable). Salience >= 0.7 needs ``force``."""

    id: str
    force: bool = False
    kind: ClassVar[str] = "forget"

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        if isinstance(self.id, str) and _entry_if_any(txn, self.id) is None and _is_archived(txn, self.id):
            # Already archived (e.g. a replay): nothing more to do.
            return {"id": self.id, "archived": True, "already_archived": True}
        entry = _known_entry(txn, self.id)
        if _salience(entry) >= PROTECTED_SALIENCE and not self.force:
            # Not "force it anyway": that reads as the next step, and force needs the user's confirmation.
            raise BrainError(
                f"{self.id} has salience {_salience(entry)} (>= {PROTECTED_SALIENCE}) and is protected; nothing was "
                "changed. Forget it with force only once the user confirms they want this memory gone"
            )
        result = archive_memory(txn, self.id, "forget")
        txn.commit()
        return result

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.kind, "id": self.id, "force": self.force}


VERIFY_ACTIONS = ("list", "approve", "reject")


@dataclass
class Verify(Operation):
    """List memories pending verification, or approve / reject some by id."""

    action: str = "list"
    ids: list[str] = field(default_factory=list)
    kind: ClassVar[str] = "verify"

    def __post_init__(self) -> None:
        if self.action not in VERIFY_ACTIONS:
            raise BrainError(f"'action' must be one of {', '.join(VERIFY_ACTIONS)}")
        if isinstance(self.ids, str):
            self.ids = [self.ids]
        self.ids = list(dict.fromkeys(self.ids or []))
        if self.action != "list" and not self.ids:
            raise BrainError(f"{self.action} needs at least one memory id")
        if any(not isinstance(memory_id, str) for memory_id in self.ids):
            raise BrainError("'ids' must be strings")

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        if self.action == "list":
            return self._list(txn)
        results: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for memory_id in self.ids:
            entry = _entry_if_any(txn, memory_id)
            if entry is None:
                errors.append({"id": memory_id, "error": "unknown memory id"})
            elif not entry.get("quarantined"):
                errors.append({"id": memory_id, "error": "not pending verification"})
            elif self.action == "approve":
                results.append(self._approve(txn, memory_id, entry))
            else:
                outcome = archive_memory(txn, memory_id, "verify_reject")
                results.append({**outcome, "rejected": True})
        if results:
            txn.commit()
        return {"action": self.action, "results": results, "errors": errors}

    @staticmethod
    def _list(txn: WriteTxn) -> dict[str, Any]:
        try:
            memories = txn.memories()
        except BrainError:
            memories = {}
        pending = [
            {
                "id": memory_id,
                "title": entry.get("title"),
                "path": entry.get("path"),
                "type": entry.get("type"),
                "origin": entry.get("origin"),
                "reasons": entry.get("quarantine_reasons", []),
                "flagged": entry.get("quarantine_flagged"),
                "tags": entry.get("tags", []),
            }
            for memory_id, entry in memories.items()
            if isinstance(entry, dict) and entry.get("quarantined")
        ]
        return {"pending": pending, "total": len(pending)}

    @staticmethod
    def _approve(txn: WriteTxn, memory_id: str, entry: dict[str, Any]) -> dict[str, Any]:
        dropped = ("quarantined", "quarantine_reasons", "quarantine_flagged")
        vetted = {"vetted": True, "vetted_at": txn.now_iso}
        held = entry.get("supersede_pending")
        txn.update_entry(memory_id, vetted, remove=(*dropped, "supersede_pending"))
        txn.edit_memory_file(memory_id, vetted, remove=dropped)
        result: dict[str, Any] = {"id": memory_id, "title": entry.get("title"), "approved": True}
        if isinstance(held, list) and held:
            boundary = entry.get("valid_from") or entry.get("created") or txn.now_iso
            targets = [target for target in held if isinstance(target, str)]
            superseded = apply_supersession(txn, memory_id, targets, boundary)
            if superseded:
                result["superseded"] = superseded
        return result

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.kind, "action": self.action, "ids": list(self.ids)}


# Operation kind -> how one is read back from its `to_dict` form. Every module that defines
# kinds registers them (this one below; writes/restore.py, tending/review.py and
# tending/mental.py theirs), so this module needs none of the modules that build on it.
# connector/engine/kinds.py imports them all: read kept operations through it.
OPERATION_READERS: dict[str, Callable[[Mapping[str, Any]], Operation]] = {}


def register_kind(kind: str, reader: Callable[[Mapping[str, Any]], Operation]) -> None:
    """Make ``operation_from_dict`` read operations of ``kind`` with ``reader``."""
    OPERATION_READERS[kind] = reader


def operation_from_dict(value: Mapping[str, Any]) -> Operation:
    """Rebuild an operation from its `to_dict` form (pending writes kept elsewhere)."""
    kind = value.get("op")
    reader = OPERATION_READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        raise BrainError(f"unknown operation {kind!r}")
    return reader(value)


register_kind(
    Memorize.kind,
    lambda value: Memorize(
        [MemoryInput.from_mapping(item) for item in value.get("memories", [])],
        ids=value.get("ids"),
        created=value.get("created"),
        pins_follow=value.get("pins_follow") is True,
        skip_held=value.get("skip_held") is True,
    ),
)
register_kind(Pin.kind, lambda value: Pin(value["id"], value.get("scope", "global"), value.get("priority", 0)))
register_kind(Unpin.kind, lambda value: Unpin(value["id"]))
register_kind(Forget.kind, lambda value: Forget(value["id"], bool(value.get("force", False))))
register_kind(Verify.kind, lambda value: Verify(value.get("action", "list"), list(value.get("ids", []))))
