"""What changed between a snapshot of a brain and the brain now (pure, no I/O).

A memory is *added* when its id is in the brain now but not in the snapshot,
*removed* when the other way round (forgotten, rejected, or never synced back), and
*changed* when both have it but its file or its place differs (edited, pinned,
approved, superseded...). Memories are compared by the bytes of their files, so a
10,000-memory brain is compared in a few milliseconds once both are loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from connector.engine.format.brain import Brain
from connector.engine.format.titles import plain_title


@dataclass(frozen=True)
class Change:
    """One memory that differs."""

    id: str
    title: str


@dataclass
class BrainDiff:
    """Added, removed and changed memories, each sorted by title."""

    added: list[Change] = field(default_factory=list)
    removed: list[Change] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing differs."""
        return not (self.added or self.removed or self.changed)


class _Entry(msgspec.Struct):
    """The two fields of an index entry a diff needs (msgspec skips the rest unparsed)."""

    title: Any = None
    path: Any = None


class _Index(msgspec.Struct):
    memories: dict[str, _Entry] = {}


def _entries(brain: Brain | None) -> dict[str, dict[str, Any]]:
    """Id -> {title, path} of the brain's index; index.json is the slow part at 10,000 memories."""
    raw = brain.read("index.json") if brain is not None else None
    if raw is None:
        return {}
    try:
        index = msgspec.json.decode(raw, type=_Index)
        return {key: {"title": entry.title, "path": entry.path} for key, entry in index.memories.items()}
    except msgspec.DecodeError:
        # Not the usual shape (an entry that is not an object, ...): the tolerant slow path.
        loose = brain.read_json("index.json") if brain is not None else None
        memories = loose.get("memories") if isinstance(loose, dict) else None
        if not isinstance(memories, dict):
            return {}
        return {key: value for key, value in memories.items() if isinstance(value, dict)}


def _title(memory_id: str, entry: dict[str, Any]) -> str:
    title = entry.get("title")
    return plain_title(title) if isinstance(title, str) and title else memory_id


def diff_brains(then: Brain | None, now: Brain | None) -> BrainDiff:
    """The memories that differ between ``then`` (a snapshot) and ``now``."""
    before, after = _entries(then), _entries(now)
    result = BrainDiff()
    for memory_id, entry in after.items():
        old = before.get(memory_id)
        if old is None:
            result.added.append(Change(memory_id, _title(memory_id, entry)))
            continue
        old_path, new_path = old.get("path"), entry.get("path")
        old_file = then.read(old_path) if then is not None and isinstance(old_path, str) else None
        new_file = now.read(new_path) if now is not None and isinstance(new_path, str) else None
        if old_path != new_path or old_file != new_file:
            result.changed.append(Change(memory_id, _title(memory_id, entry)))
    for memory_id, entry in before.items():
        if memory_id not in after:
            result.removed.append(Change(memory_id, _title(memory_id, entry)))
    for changes in (result.added, result.removed, result.changed):
        changes.sort(key=lambda change: (change.title.lower(), change.id))
    return result
