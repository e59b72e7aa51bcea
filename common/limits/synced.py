"""Per-key request rates decided in this process at once, and counted across replicas in the background.

Counting every request in a shared document would put a conditional write (on S3 a
GET and a PUT, milliseconds) in front of every request. This limiter decides each
request from this process's own token bucket (a dictionary lookup) and remembers
how many it let through per key; every ``interval_s`` a background thread takes
those from the shared buckets (`StoredTokenBucketLimiter.take_many`: one
read-modify-write per shard document touched, at most 64 whatever the traffic) and
learns which keys the replicas have spent together: those are refused here until
the shared bucket has refilled.

So N replicas give a key about one budget between them, late by at most one
interval: within ``interval_s`` (plus the sync's own time) each replica can still
let through what its own bucket holds. What the replicas let through beyond the
budget is paid back (the shared bucket goes below zero, down to minus one burst)
before the key passes again. When the shared state cannot be reached each replica
keeps its own bucket, as without sharing (logged).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from common.docstore import DocumentStoreError
from common.limits.rate import TokenBucketLimiter
from common.limits.stored import StoredTokenBucketLimiter

__all__ = ["SyncedTokenBucketLimiter"]

log = logging.getLogger("common.limits.synced")

_MAX_BLOCKED = 100_000


class SyncedTokenBucketLimiter:
    """``hit``/``peek`` like `TokenBucketLimiter`, with the budget shared through ``shared`` every ``interval_s``."""

    def __init__(self, shared: StoredTokenBucketLimiter, rate_per_min: float, burst: float | None = None, *,
                 interval_s: float = 1.0, clock: Callable[[], float] = time.time, start: bool = True) -> None:
        self._local = TokenBucketLimiter(rate_per_min, burst, clock=clock)
        self._shared = shared
        self._clock = clock
        self.interval_s = interval_s
        self._pending: dict[str, int] = {}
        self._blocked: dict[str, float] = {}  # key -> refused until (wall clock)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="limits-sync", daemon=True)
            self._thread.start()

    def hit(self, key: str, now: float | None = None) -> float | None:
        """Take one token for ``key``: None if allowed, else seconds until a request would pass (no I/O)."""
        at = self._clock() if now is None else now
        with self._lock:
            until = self._blocked.get(key)
            if until is not None:
                if until > at:
                    return until - at
                del self._blocked[key]
            wait = self._local.hit(key, at)
            if wait is None:
                self._pending[key] = self._pending.get(key, 0) + 1
            return wait

    def peek(self, key: str, now: float | None = None) -> float | None:
        """Like :meth:`hit` but takes nothing."""
        at = self._clock() if now is None else now
        with self._lock:
            until = self._blocked.get(key)
        if until is not None and until > at:
            return until - at
        return self._local.peek(key, at)

    def sync(self) -> None:
        """Count what this process let through in the shared buckets, and learn the keys spent there."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            waits = self._shared.take_many(pending)
        except (DocumentStoreError, OSError, ValueError) as exc:
            log.warning("the shared request limits cannot be reached; counting in this process",
                        extra={"error": str(exc)})
            return
        now = self._clock()
        with self._lock:
            for key, wait in waits.items():
                self._blocked[key] = now + wait
            if len(self._blocked) > _MAX_BLOCKED:
                for key in [key for key, until in self._blocked.items() if until <= now]:
                    del self._blocked[key]

    def close(self) -> None:
        """Stop the background sync (what is pending is synced once more)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sync()
            except Exception:  # never let the thread die: the next interval tries again
                log.exception("syncing the shared request limits failed")
        self.sync()
