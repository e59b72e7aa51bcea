"""Per-key request rates decided in this process at once, and counted across replicas in the background.

Counting every request in a shared document would put a conditional write (on S3 a
GET and a PUT, milliseconds) in front of every request. This limiter decides each
request from this process's own token bucket (a dictionary lookup) and remembers
how many it let through per key; every ``interval_s`` a background thread takes
those from the shared buckets (`StoredTokenBucketLimiter.take_many`: one
read-modify-write per shard document touched, at most 64 whatever the traffic) and
brings this process's bucket of each such key down to the shared level: what the
replicas spent together is then spent here too, and refills here at the shared rate.

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

from common.docstore import DocumentStore, DocumentStoreError
from common.limits.rate import TokenBucketLimiter
from common.limits.stored import StoredTokenBucketLimiter

__all__ = ["SyncedTokenBucketLimiter", "request_limiter"]

log = logging.getLogger("common.limits.synced")

class SyncedTokenBucketLimiter:
    """``hit``/``peek`` like `TokenBucketLimiter`, with the budget shared through ``shared`` every ``interval_s``."""

    def __init__(self, shared: StoredTokenBucketLimiter, rate_per_min: float, burst: float | None = None, *,
                 interval_s: float = 1.0, clock: Callable[[], float] = time.time, start: bool = True) -> None:
        self._local = TokenBucketLimiter(rate_per_min, burst, clock=clock)
        self._shared = shared
        self._clock = clock
        self.interval_s = interval_s
        self._pending: dict[str, int] = {}
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
            wait = self._local.hit(key, at)
            if wait is None:
                self._pending[key] = self._pending.get(key, 0) + 1
            return wait

    def peek(self, key: str, now: float | None = None) -> float | None:
        """Like :meth:`hit` but takes nothing."""
        return self._local.peek(key, self._clock() if now is None else now)

    def sync(self) -> None:
        """Count what this process let through in the shared buckets, and spend here what was spent there."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            levels = self._shared.take_many(pending)
        except (DocumentStoreError, OSError, ValueError) as exc:
            log.warning("the shared request limits cannot be reached; counting in this process",
                        extra={"error": str(exc)})
            return
        now = self._clock()
        with self._lock:
            for key, level in levels.items():
                # What passed here while the shared buckets were written is not in ``level`` yet.
                self._local.lower(key, level - self._pending.get(key, 0), now)

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


def request_limiter(rate_per_min: float, state: DocumentStore | None, prefix: str, *,
                    interval_s: float = 1.0) -> TokenBucketLimiter | SyncedTokenBucketLimiter:
    """Per-key request rates: counted across the replicas sharing ``state`` (under ``prefix``,
    synced every ``interval_s``) when there is one, else in this process only."""
    if state is None:
        return TokenBucketLimiter(rate_per_min)
    shared = StoredTokenBucketLimiter(state, prefix, rate_per_min, rate_per_min)
    return SyncedTokenBucketLimiter(shared, rate_per_min, rate_per_min, interval_s=interval_s)
