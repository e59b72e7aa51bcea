"""Token buckets kept in a shared document store, so every replica grants one budget between them.

:class:`~common.limits.shared.SharedTokenBucketLimiter` shares buckets between the
worker processes of one host (a mapped file); replicas on several hosts (or in
containers) share nothing but the state or the bucket. This limiter keeps its
buckets in a `DocumentStore` (a directory or S3), so behind N replicas a client
gets the single-process budget, not N times it.

Every ``hit`` is one read-modify-write of a small document with a condition
(`DocumentStore.update`: create-if-absent or replace-if-unchanged, retried on a
conflict): on S3 a GET and a conditional PUT, a few milliseconds. Use it for what
is rare by nature and worth it: sign-in attempts, failed logins. Keys are spread
over ``shards`` documents (by a 64-bit BLAKE2 hash of the key, which is all that is
stored of it); a document keeps at most ``per_shard`` buckets, drops buckets that
have refilled (they carry nothing) whenever it is written, and the least recently
used past the cap, so the space is bounded whatever an attacker sends. Time is the
wall clock (``time.time``), the one clock replicas share: keep them in sync (NTP).

``peek`` asks nothing of the store: it answers from what this process learned at
its own refused ``hit``s ("blocked until"). A block reached through other replicas
is therefore learned here at this replica's next ``hit`` for the key, so a caller
that peeks before credential work and hits only on failure (the store's failed
logins) gets at most one more attempt per other replica past the shared budget.

When the store cannot be reached the limiter falls back to an in-process bucket
(logged): the budget is then per replica until the store is back, never unlimited.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from common.docstore import DocumentStore, DocumentStoreError
from common.limits.bucket import BucketRule
from common.limits.rate import TokenBucketLimiter

__all__ = ["StoredTokenBucketLimiter"]

log = logging.getLogger("common.limits.stored")

_VERSION = 1
_MAX_BLOCKED = 100_000


class StoredTokenBucketLimiter:
    """Per-key token buckets in documents under ``prefix`` of ``store``, shared by every process using them.

    ``hit(key)`` is None when allowed, else seconds until a request would pass (one
    conditional read-modify-write; blocking: ``blocking`` is True so async callers run it
    in a thread). ``peek(key)`` answers from this process's memory only.
    """

    blocking = True

    def __init__(
        self,
        store: DocumentStore,
        prefix: str,
        rate_per_min: float,
        burst: float | None = None,
        *,
        shards: int = 64,
        per_shard: int = 1024,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._rule = BucketRule(rate_per_min, burst)
        if shards < 1 or per_shard < 1:
            raise ValueError("shards and per_shard must be at least 1")
        self.store = store
        self._prefix = prefix.strip("/")
        self._shards = shards
        self._per_shard = per_shard
        self._clock = clock
        self._fallback = TokenBucketLimiter(rate_per_min, burst, clock=clock)
        self._blocked: OrderedDict[str, float] = OrderedDict()  # key -> refused until (wall clock)
        self._lock = threading.Lock()
        self._failing = False

    def _where(self, key: str) -> tuple[str, str]:
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        number = int.from_bytes(digest, "little")
        return f"{self._prefix}/{number % self._shards:04x}", digest.hex()

    def hit(self, key: str, now: float | None = None) -> float | None:
        """Take one token for ``key`` from the shared bucket: None if allowed, else seconds to wait."""
        clock = self._clock if now is None else (lambda: now)
        document, field = self._where(key)
        outcome: list[float | None] = []

        def change(before: bytes | None) -> bytes | None:
            at_now = clock()
            buckets = self._buckets(before)
            tokens, at = self._rule.refill(*buckets.pop(field, (self._rule.burst, at_now)), at_now)
            wait = self._rule.wait(tokens)
            outcome[:] = [wait]
            # A refused request takes nothing: hammering does not extend the wait.
            buckets[field] = (tokens - 1.0 if wait is None else tokens, at)
            if wait is not None and before is not None:
                return None  # nothing to write
            return self._encode(buckets, at_now)

        try:
            self.store.update(document, change)
        except (DocumentStoreError, OSError, ValueError) as exc:
            if not self._failing:
                log.error("the shared limits cannot be reached; counting in this process until they can",
                          extra={"where": getattr(self.store, "where", "?"), "error": str(exc)})
                self._failing = True
            return self._fallback.hit(key, None if now is None else now)
        if self._failing:
            log.warning("the shared limits are reachable again", extra={"where": getattr(self.store, "where", "?")})
            self._failing = False
        wait = outcome[0] if outcome else None
        if wait is not None:
            self._remember_block(key, clock() + wait)
        return wait

    def take_many(self, counts: dict[str, int], now: float | None = None) -> dict[str, float]:
        """Take ``counts[key]`` tokens for each key, allowed or not (requests another process already
        let through); one read-modify-write per shard document. Returns each key's tokens left
        afterwards (below one: spent; below zero: overspent, paid back before more passes).
        Raises DocumentStoreError."""
        clock = self._clock if now is None else (lambda: now)
        by_document: dict[str, list[tuple[str, str, int]]] = {}
        for key, count in counts.items():
            document, field = self._where(key)
            by_document.setdefault(document, []).append((key, field, count))
        levels: dict[str, float] = {}
        for document, entries in by_document.items():
            outcome: dict[str, float] = {}

            def change(before: bytes | None, entries: list[tuple[str, str, int]] = entries,
                       outcome: dict[str, float] = outcome) -> bytes | None:
                at_now = clock()
                buckets = self._buckets(before)
                outcome.clear()
                for key, field, count in entries:
                    tokens, at = self._rule.refill(*buckets.pop(field, (self._rule.burst, at_now)), at_now)
                    # Spent past zero (down to one burst): the overshoot is paid back before more passes.
                    tokens = max(tokens - count, -self._rule.burst)
                    buckets[field] = (tokens, at)
                    outcome[key] = tokens
                return self._encode(buckets, at_now)

            self.store.update(document, change)
            levels.update(outcome)
        return levels

    def peek(self, key: str, now: float | None = None) -> float | None:
        """None if this process knows of no block on ``key``, else the seconds left (no I/O)."""
        at = self._clock() if now is None else now
        with self._lock:
            until = self._blocked.get(key)
            if until is not None and until <= at:
                del self._blocked[key]
                until = None
        if until is None:
            return self._fallback.peek(key, now) if self._failing else None
        return until - at

    def _remember_block(self, key: str, until: float) -> None:
        with self._lock:
            self._blocked[key] = until
            self._blocked.move_to_end(key)
            while len(self._blocked) > _MAX_BLOCKED:
                self._blocked.popitem(last=False)

    def _buckets(self, data: bytes | None) -> dict[str, tuple[float, float]]:
        """The buckets of a shard document (a damaged one counts as empty: it is rewritten)."""
        if data is None:
            return {}
        try:
            document: Any = json.loads(data)
            if document.get("v") != _VERSION:
                return {}
            return {str(name): (float(value[0]), float(value[1])) for name, value in document["b"].items()}
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return {}

    def _encode(self, buckets: dict[str, tuple[float, float]], now: float) -> bytes:
        full_after = self._rule.full_after
        kept = {name: value for name, value in buckets.items() if now - value[1] < full_after}
        if len(kept) > self._per_shard:
            newest = sorted(kept.items(), key=lambda item: item[1][1])[-self._per_shard :]
            kept = dict(newest)
        compact = {name: [round(tokens, 4), round(at, 3)] for name, (tokens, at) in kept.items()}
        return json.dumps({"v": _VERSION, "b": compact}, separators=(",", ":")).encode()
