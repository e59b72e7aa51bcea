"""Hybrid indexes follow each write, so the recall right after a write does not rebuild one.

A write gives its brain a new content key. Without this, the first hybrid recall of the new
version rebuilt the text index of every memory (~0.4-0.6 s of CPU at 10,000 memories) and
read every memory's text again. `HybridFollower` is one of the working-copy manager's
index followers (`IndexFollower`): right after a write, in the write's worker thread and
after the exact index has followed, it derives the new version's hybrid index from the
old one with `HybridIndex.changed` (only the memories the write added, changed or removed
are read, embedded and indexed) and caches it under the new key. It also renames cached
indexes when a version gets its store checksum, and then has it saved to the disk cache
as a built index would be.

Only writes are followed (their journal names the memories they changed). A pull or a
replay (memories not named) is left to the next recall, which reuses the previous index
when no text changed and otherwise builds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from connector.engine.format.brain import Brain
from connector.engine.format.change import BrainChange
from connector.engine.recall.hybrid import HybridIndex
from connector.engine.recall.index import BrainIndex
from connector.engine.recall.indexcache import IndexCache
from connector.workcopy.indexdisk import IndexDisk
from connector.workcopy.vectors import HybridCache, VectorStore

log = logging.getLogger(__name__)

# Where the brain id sits in a write's local content key (`WorkingCopyManager._write_once`):
# "local:<subject>:<brain id>:<copy>:<time>".
_LOCAL = "local:"


@dataclass(eq=False)
class HybridFollower:
    """Keeps the hybrid indexes of `HybridCache` current across writes (an `IndexFollower`).

    Cache keys are a brain's prefix (``prefix_of(brain_id)``, ending in a newline) and a
    content key. Vectors are per brain (issue 24), so an index is only followed within the
    brain whose write it is: the brain id is the one the write's local key names.
    ``followed``: called with the brain id, brain, exact index and hybrid index of each
    version a write gave (the e5 backfill starts on the new memories' vectors there).
    """

    cache: HybridCache
    indexes: IndexCache
    vectors: Callable[[], VectorStore]
    prefix_of: Callable[[str | None], str]
    disk: IndexDisk | None = None
    is_checksum: Callable[[str], bool] = lambda key: False
    followed: Callable[[str, Brain, BrainIndex, HybridIndex], object] | None = None

    def _brain_of(self, old_key: str, new_key: str) -> str | None:
        """The id of the brain a write from ``old_key`` to ``new_key`` changed, when an index of
        ``old_key`` is cached for it (exactly one brain: two brains may hold equal archives)."""
        if not new_key.startswith(_LOCAL):
            return None
        found = [key[: -len(old_key) - 1] for key in self.cache.keys() if key.endswith("\n" + old_key)]
        mine = [brain_id for brain_id in found if brain_id and f":{brain_id}:" in new_key]
        return mine[0] if len(mine) == 1 else None

    def follow(self, old_key: str, new_key: str, brain: Brain, change: BrainChange) -> object:
        """After a write: the hybrid index of ``new_key`` from the cached one of ``old_key``."""
        if change.memories is None or old_key == new_key:
            return None
        brain_id = self._brain_of(old_key, new_key)
        index = self.indexes.peek(new_key)
        if brain_id is None or index is None:
            return None
        prefix = self.prefix_of(brain_id)
        old = self.cache.peek(prefix + old_key)
        if old is None:
            return None
        followed = old.changed(brain, index, self.vectors().for_brain(brain_id), change)
        if followed is not None:  # else the next recall (or the build after the write) makes it
            self.cache.put(prefix + new_key, followed)
            if self.followed is not None:
                self.followed(brain_id, brain, index, followed)
        return followed

    def rename(self, old_key: str, new_key: str) -> None:
        """The content of ``old_key`` is now known as ``new_key`` (pushed: its checksum)."""
        for key in self.cache.keys():
            if not key.endswith("\n" + old_key):
                continue
            prefix = key[: -len(old_key)]
            renamed = self.cache.rename(key, prefix + new_key)
            if renamed is not None and self.disk is not None and self.is_checksum(new_key):
                # As a build of this version would: kept on disk once the brain goes quiet.
                self.disk.save_later(prefix, prefix + new_key, renamed, self.vectors().model_id)
