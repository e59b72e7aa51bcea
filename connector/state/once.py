"""What may happen only once, on every replica: a sign-in finished.

``OnceMarkers.claim(value)`` is True for the first caller only. With a
state directory the claim is a marker file created with ``O_CREAT | O_EXCL``
in ``<state dir>/once/``: the file system lets exactly one process create it,
so replicas sharing the directory (local disk, or NFSv4) agree without a lock.
The file is named by the SHA-256 of what was claimed (never the value itself),
holds nothing, and is removed once older than ``keep_s`` (which must outlast
whatever the claim protects: a pending sign-in lives 10 minutes). Without a
directory the claims live in a bounded dict; when it is full of live claims a new
claim is refused (fail closed: the caller starts again), never granted twice.

``OnceDocs`` does the same in a ``DocumentStore`` (the state in a bucket): the claim is a
create-if-absent (``If-None-Match: *`` on S3), which exactly one replica wins; the marker
holds when it was made, and a background pass removes markers older than ``keep_s``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from common.docstore import DocumentStore

log = logging.getLogger("connector.state.once")

MAX_MEMORY_CLAIMS = 100_000
KEEP_S = 600.0
_PRUNE_EVERY_S = 30.0


def _name(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


class OnceMarkers:
    """First-claim-wins markers, shared through ``directory`` when given."""

    def __init__(self, directory: Path | None, *, keep_s: float = KEEP_S,
                 clock: Callable[[], float] = time.time, capacity: int = MAX_MEMORY_CLAIMS) -> None:
        self._dir = directory
        self._keep_s = keep_s
        self._clock = clock
        self._capacity = capacity
        self._memory: OrderedDict[str, float] = OrderedDict()  # name -> claimed at
        self._lock = threading.Lock()
        self._pruned_at = 0.0
        if directory is not None:
            directory.mkdir(mode=0o700, exist_ok=True)

    def claim(self, value: str) -> bool:
        """True when ``value`` had not been claimed (within ``keep_s``) by anyone; it is now."""
        name = _name(value)
        now = self._clock()
        if self._dir is None:
            return self._claim_in_memory(name, now)
        self._prune(now)
        try:
            fd = os.open(self._dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def _claim_in_memory(self, name: str, now: float) -> bool:
        with self._lock:
            while self._memory and next(iter(self._memory.values())) <= now - self._keep_s:
                self._memory.popitem(last=False)
            if name in self._memory or len(self._memory) >= self._capacity:
                return False
            self._memory[name] = now
            return True

    def _prune(self, now: float) -> None:
        """Remove markers older than ``keep_s`` (at most every 30 s; any replica may do it)."""
        assert self._dir is not None
        if now - self._pruned_at < _PRUNE_EVERY_S:
            return
        self._pruned_at = now
        cutoff = now - self._keep_s
        try:
            with os.scandir(self._dir) as entries:
                for entry in entries:
                    try:
                        if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                            os.unlink(entry.path)
                    except FileNotFoundError:
                        continue  # another replica pruned it first
        except OSError as exc:
            log.warning("could not prune %s: %s", self._dir, exc)


class OnceDocs:
    """First-claim-wins markers in ``docs`` under ``prefix``: ``OnceMarkers`` on a bucket."""

    def __init__(self, docs: DocumentStore, prefix: str, *, keep_s: float = KEEP_S,
                 clock: Callable[[], float] = time.time, prune_every_s: float = 300.0) -> None:
        self._docs = docs
        self._prefix = prefix.rstrip("/") + "/"
        self._keep_s = keep_s
        self._clock = clock
        self._prune_every_s = prune_every_s
        self._lock = threading.Lock()
        self._pruned_at = 0.0
        self._pruning = False

    def claim(self, value: str) -> bool:
        """True when ``value`` had not been claimed by anyone; it is now."""
        now = self._clock()
        created = self._docs.create(self._prefix + _name(value), json.dumps({"t": now}).encode("ascii"))
        self._maybe_prune(now)
        return created is not None

    def _maybe_prune(self, now: float) -> None:
        with self._lock:
            if self._pruning or now - self._pruned_at < self._prune_every_s:
                return
            self._pruned_at, self._pruning = now, True
        threading.Thread(target=self._prune, name="prune-once", daemon=True).start()

    def _prune(self) -> None:
        """Remove markers older than ``keep_s`` (what they protect has expired by then)."""
        try:
            cutoff = self._clock() - self._keep_s
            for key in self._docs.list(self._prefix):
                document = self._docs.get(key)
                try:
                    made = float(json.loads(document.data)["t"]) if document is not None else None
                except (ValueError, KeyError, TypeError):
                    made = float("-inf")  # not ours: unreadable markers go too
                if made is not None and made < cutoff:
                    self._docs.delete(key)
        except Exception as exc:  # noqa: BLE001 - a failed pass is retried by the next
            log.warning("could not prune %s: %s", self._prefix, exc)
        finally:
            with self._lock:
                self._pruning = False
