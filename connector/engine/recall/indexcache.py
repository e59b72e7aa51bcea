"""The prepared recall indexes a process keeps, by archive checksum, and how they follow a write.

`IndexCache` holds them (a small LRU); after a write, `IndexCache.follow` derives the new
brain's index from the old one with `incremental.apply_change` instead of building it again.
`index_for` is the one way to get a brain's index: cached under a key, or built now.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from connector.engine.format.brain import Brain
from connector.engine.format.change import BrainChange
from connector.engine.recall.incremental import apply_change
from connector.engine.recall.index import BrainIndex

__all__ = ["DEFAULT_CACHE", "IndexCache", "index_for"]


class IndexCache:
    """A small LRU of prepared indexes keyed by a caller's key (an archive checksum)."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, BrainIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, brain: Brain) -> BrainIndex:
        """The index for ``key``, building it from ``brain`` on a miss."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        built = BrainIndex.build(brain)
        self.put(key, built)
        return built

    def put(self, key: str, index: BrainIndex) -> None:
        """Store an index built elsewhere (e.g. right after a write, for the new checksum)."""
        with self._lock:
            self._items[key] = index
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def peek(self, key: str) -> BrainIndex | None:
        """The index cached for ``key``, or None (never builds)."""
        with self._lock:
            return self._items.get(key)

    def follow(self, old_key: str, new_key: str, brain: Brain, change: BrainChange) -> BrainIndex | None:
        """After a write: the index of ``brain`` (the brain of ``old_key`` changed by
        ``change``, a `BrainChange`) under ``new_key``, derived from the cached index of
        ``old_key`` (which is dropped: the write's brain replaces that one). Nothing
        when ``old_key`` has no cached index (the next recall builds it).

        Raises what `BrainIndex.build` raises when the new brain cannot be recalled from."""
        old = self.peek(old_key)
        if old is None:
            return None
        followed = apply_change(old, brain, change)
        with self._lock:
            if old_key != new_key:
                self._items.pop(old_key, None)
            self._items[new_key] = followed
            self._items.move_to_end(new_key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return followed

    def rename(self, old_key: str, new_key: str) -> None:
        """The same content got a new key (e.g. its checksum once pushed)."""
        with self._lock:
            found = self._items.pop(old_key, None)
            if found is not None:
                self._items[new_key] = found

    def invalidate(self, key: str) -> None:
        """Forget the index for ``key`` (after a write changed that brain)."""
        with self._lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        """Forget every index."""
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


DEFAULT_CACHE = IndexCache()


def index_for(brain: Brain, key: str | None = None, cache: IndexCache = DEFAULT_CACHE) -> BrainIndex:
    """The prepared index of ``brain``: cached under ``key`` when given, else built now."""
    if key is None:
        return BrainIndex.build(brain)
    return cache.get(key, brain)
