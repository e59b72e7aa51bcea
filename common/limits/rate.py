"""Token-bucket rate limiting per key (user id, client address), with bounded memory.

Each key owns a bucket of ``burst`` tokens refilled continuously at
``rate_per_min / 60`` tokens per second; a request takes one token or is refused
with the time until one is available. Unlike fixed windows there is no window
edge, so no client ever gets two bursts back to back: over any interval of ``t``
seconds at most ``burst + rate * t`` requests pass.

Memory is bounded: a bucket that has refilled completely carries no information
(a fresh one is identical) and is dropped as soon as it reaches the front of the
least-recently-used order; past ``max_keys`` the least recently used bucket goes.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from common.limits.bucket import BucketRule

__all__ = ["TokenBucketLimiter", "retry_after_header"]


class TokenBucketLimiter:
    """Per-key token buckets: ``hit(key)`` is None when allowed, else seconds to wait.

    ``rate_per_min`` tokens are added per minute up to ``burst`` (default: one
    minute's worth). Thread-safe; ``now`` (monotonic seconds) is for tests.
    """

    def __init__(
        self,
        rate_per_min: float,
        burst: float | None = None,
        *,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rule = BucketRule(rate_per_min, burst)
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self._max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Number of keys currently remembered."""
        return len(self._buckets)

    def hit(self, key: str, now: float | None = None) -> float | None:
        """Take one token for ``key``: None if allowed, else seconds until a request would pass."""
        if now is None:
            now = self._clock()
        with self._lock:
            buckets = self._buckets
            state = buckets.get(key)
            if state is None:
                self._make_room(now)
                tokens = self._rule.burst
                at = now
            else:
                tokens, at = self._rule.refill(*state, now)
                buckets.move_to_end(key)
            wait = self._rule.wait(tokens)
            # A refused request takes nothing: hammering does not extend the wait.
            buckets[key] = (tokens - 1.0 if wait is None else tokens, at)
            return wait

    def peek(self, key: str, now: float | None = None) -> float | None:
        """Like :meth:`hit` but takes nothing: None if a request would pass now, else the wait.

        For "refuse a blocked client before any credential work": ``peek`` the address
        first, and ``hit`` it only when the credentials turn out to be wrong.
        """
        if now is None:
            now = self._clock()
        with self._lock:
            state = self._buckets.get(key)
        if state is None:
            return None
        tokens, _ = self._rule.refill(*state, now)
        return self._rule.wait(tokens)

    def lower(self, key: str, tokens: float, now: float | None = None) -> None:
        """Bring ``key``'s bucket down to ``tokens`` if it holds more (never up).

        ``tokens`` may be below zero: a debt paid back by the refill before the next
        request passes. For a budget counted elsewhere too (`SyncedTokenBucketLimiter`).
        """
        if now is None:
            now = self._clock()
        with self._lock:
            state = self._buckets.get(key)
            if state is None:
                if tokens >= self._rule.burst:
                    return
                self._make_room(now)
                current = self._rule.burst
            else:
                current, _ = self._rule.refill(*state, now)
            if tokens < current:
                self._buckets[key] = (tokens, now)
                self._buckets.move_to_end(key)

    def _make_room(self, now: float) -> None:
        buckets = self._buckets
        # Drop a couple of full (idle) buckets from the cold end on every insert, so
        # memory follows the number of recently active keys, not all keys ever seen.
        for _ in range(2):
            if not buckets:
                return
            oldest_key, (_, at) = next(iter(buckets.items()))
            if now - at < self._rule.full_after:
                break
            del buckets[oldest_key]
        while len(buckets) >= self._max_keys:
            buckets.popitem(last=False)


def retry_after_header(seconds: float) -> str:
    """A ``Retry-After`` value (whole seconds, at least 1) for a wait of ``seconds``."""
    return str(max(1, math.ceil(seconds)))
