"""What a write changed in a brain, so that indexes can follow it instead of rebuilding.

A `BrainChange` names the files written or removed and, when the writer knows
them, the memory ids whose ``index.json`` entry, association edges or
``search-index.json`` document changed, plus the JSON documents it committed in
parsed form (so an index need not parse 8 MB of JSON again). Writes record their
changes in the brain's journal (`Brain.journal`, see `WriteTxn.commit`); for a
brain obtained some other way (a pull, a replay on a newer base), `between`
compares two brains file by file and leaves the finer sets unknown; `since` does the
same against `file_digests` of the older brain, so a pull need not hold both.

Indexes take a change through ``apply_change(index, brain, change)`` and return an
index of the new brain that is identical in what it answers to one built from
scratch (`connector.engine.recall.incremental.apply_change` is the exact recall index's).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from connector.engine.format.brain import Brain

_ABSENT = object()


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def file_digests(brain: Brain) -> dict[str, bytes]:
    """A short digest of every file of ``brain``: enough to tell later which files changed."""
    return {path: _digest(data) for path, data in brain.files.items()}


@dataclass
class BrainChange:
    """The difference between the brain an index was built for and a newer one.

    ``paths`` is complete: every file whose bytes differ (written or removed). The
    id sets are hints relative to the same older brain; None means "not known",
    and an index must then compare that part in full.
    """

    paths: set[str] = field(default_factory=set)
    memories: set[str] | None = field(default_factory=set)  # index.json entries added, replaced or removed
    edge_nodes: set[str] | None = field(default_factory=set)  # nodes whose out-edges changed
    documents: set[str] | None = field(default_factory=set)  # search-index.json documents changed
    # Committed JSON documents in parsed form: path -> (the exact bytes object, value).
    # Read-only: the next write of the brain may take and change these values, so
    # an index must copy what it keeps (or keep only what writes replace, never mutate).
    parsed: dict[str, tuple[bytes, Any]] = field(default_factory=dict)

    def then(self, later: BrainChange) -> BrainChange:
        """This change followed by ``later`` (both relative to successive brains)."""
        return BrainChange(
            paths=self.paths | later.paths,
            memories=_union(self.memories, later.memories),
            edge_nodes=_union(self.edge_nodes, later.edge_nodes),
            documents=_union(self.documents, later.documents),
            parsed={**self.parsed, **later.parsed},
        )

    @classmethod
    def of_journal(cls, journal: Iterable[BrainChange]) -> BrainChange:
        """Every change of a journal, in order, as one."""
        merged = cls()
        for change in journal:
            merged = merged.then(change)
        return merged

    @classmethod
    def between(cls, before: Brain, after: Brain, parsed: dict[str, tuple[bytes, Any]] | None = None) -> BrainChange:
        """The files that differ between two brains (same bytes object, or equal bytes, count
        as unchanged); finer sets unknown. ``parsed`` offers parsed documents (kept when
        their bytes are exactly ``after``'s)."""
        old, new = before.files, after.files
        paths = set()
        for path, data in new.items():
            previous = old.get(path)
            if previous is not data and previous != data:
                paths.add(path)
        paths.update(old.keys() - new.keys())
        kept = {path: held for path, held in (parsed or {}).items() if new.get(path) is held[0]}
        return cls(paths=paths, memories=None, edge_nodes=None, documents=None, parsed=kept)

    @classmethod
    def since(cls, digests: dict[str, bytes], after: Brain) -> BrainChange:
        """The files that differ between a brain known by its `file_digests` and ``after``."""
        new = after.files
        paths = {path for path, data in new.items() if digests.get(path) != _digest(data)}
        paths.update(digests.keys() - new.keys())
        return cls(paths=paths, memories=None, edge_nodes=None, documents=None)

    def document(self, brain: Brain, path: str) -> Any:
        """The committed parsed value of ``path`` when it is exactly the brain's current file, else `ABSENT`."""
        held = self.parsed.get(path)
        if held is not None and brain.files.get(path) is held[0]:
            return held[1]
        return _ABSENT


ABSENT = _ABSENT


def _union(first: set[str] | None, second: set[str] | None) -> set[str] | None:
    return None if first is None or second is None else first | second
