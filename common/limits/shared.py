"""Token buckets shared by every worker process on one host (a small mmap'd file).

:class:`~common.limits.rate.TokenBucketLimiter` lives in one process, so with
``--workers N`` each worker would grant the full budget and a client could get N
times its limit. This limiter keeps the buckets in a fixed-size file that every
worker maps, so the budget is per host, whatever the number of workers.

Same interface and semantics as the in-process limiter (``hit``/``peek``). Memory
and disk are fixed: ``slots`` buckets of 24 bytes in an open-addressed table keyed
by a 64-bit BLAKE2 hash of the key; when the few slots a key may use are all taken,
the bucket that has refilled (idle) or, failing that, the least recently used one
is reused. Updates happen under an exclusive ``flock`` (between processes) and a
thread lock (within one). Time is ``time.monotonic()``, which is the same clock in
every process of the host.
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from common.limits.bucket import BucketRule

__all__ = ["SharedTokenBucketLimiter"]

_MAGIC = b"BSTRATE1"
_HEAD = struct.Struct("<8sI4x")  # magic, slots
_SLOT = struct.Struct("<Qdd")  # key hash (0 = empty), tokens, time of last update
_PROBES = 8


class SharedTokenBucketLimiter:
    """Per-key token buckets in ``path``, shared by all processes using the same path.

    ``hit(key)`` is None when allowed, else seconds until a request would pass;
    ``peek(key)`` answers the same without taking a token. The file is created
    (mode 0600) if needed; one file per kind of limit.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        rate_per_min: float,
        burst: float | None = None,
        *,
        slots: int = 65_536,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rule = BucketRule(rate_per_min, burst)
        if slots < _PROBES:
            raise ValueError(f"slots must be at least {_PROBES}")
        self._slots = slots
        self._clock = clock
        self._size = _HEAD.size + slots * _SLOT.size
        self._thread_lock = threading.Lock()
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                self._prepare(fd)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(fd, self._size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _prepare(self, fd: int) -> None:
        """Create or reset the table when the file is new, damaged or of another size (under the lock)."""
        size = os.fstat(fd).st_size
        if size == self._size:
            head = os.pread(fd, _HEAD.size, 0)
            if _HEAD.unpack(head) == (_MAGIC, self._slots):
                return
        os.ftruncate(fd, 0)
        os.ftruncate(fd, self._size)  # zero-filled: every slot empty
        os.pwrite(fd, _HEAD.pack(_MAGIC, self._slots), 0)

    def close(self) -> None:
        """Unmap and close the file (the buckets stay for the other processes)."""
        with self._thread_lock:
            if self._fd >= 0:
                self._map.close()
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> SharedTokenBucketLimiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def hit(self, key: str, now: float | None = None) -> float | None:
        """Take one token for ``key``: None if allowed, else seconds until a request would pass."""
        return self._update(key, now, take=True)

    def peek(self, key: str, now: float | None = None) -> float | None:
        """Like :meth:`hit` but takes nothing."""
        return self._update(key, now, take=False)

    def _update(self, key: str, now: float | None, *, take: bool) -> float | None:
        if now is None:
            now = self._clock()
        wanted = int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little") or 1
        with self._thread_lock:
            if self._fd < 0:
                raise ValueError("limiter is closed")
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                offset, tokens, at = self._find(wanted, now)
                tokens, at = self._rule.refill(tokens, at, now)
                wait = self._rule.wait(tokens)
                if take:
                    _SLOT.pack_into(self._map, offset, wanted, tokens - 1.0 if wait is None else tokens, at)
                return wait
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _find(self, wanted: int, now: float) -> tuple[int, float, float]:
        """(slot offset, tokens, time) of ``wanted``'s bucket, or of the slot it would take
        (a full bucket; written only if a token is taken)."""
        start = wanted % self._slots
        victim = -1
        victim_at = float("inf")
        for probe in range(_PROBES):
            offset = _HEAD.size + ((start + probe) % self._slots) * _SLOT.size
            owner, tokens, at = _SLOT.unpack_from(self._map, offset)
            if owner == wanted:
                return offset, tokens, at
            if owner == 0 or now - at >= self._rule.full_after:
                # Empty, or refilled: reusing it loses nothing.
                if victim_at > -1.0:
                    victim, victim_at = offset, -1.0
            elif at < victim_at:
                victim, victim_at = offset, at
        return victim, self._rule.burst, now
