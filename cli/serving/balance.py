"""Keep-alive connections spread evenly over the worker processes of ``serve --workers N``.

Every worker listens on its own SO_REUSEPORT socket and the kernel places each new
connection by a hash of its addresses. That is even on average, but a handful of
long-lived keep-alive clients (a connector's pool, a sync script) often land unevenly,
and one process then does most of the work for as long as the connections live (8
uploading clients were seen split 2 / 6; over six runs the slowest rose from 109 to 119
uploads/s with this module, the median from 120 to 126).

So each worker counts its open connections in a table shared by all of them (an
anonymous shared memory map, made before the fork). A worker holding more than its
share answers the next request on one of its connections with ``Connection: close``;
the client reconnects, and the kernel places the new connection afresh. Nothing is
cut mid-request, and a client that speaks HTTP/1.1 handles this on its own. Only an
imbalance that lasts (``SHED_AFTER``) is acted on: connections opened in a burst (a
client filling its pool) are placed one at a time and pass through uneven counts for a
moment. Without the wait, a 304 load from 32 wrk connections shed ~18 connections per
3-second run and cost ~10% more server CPU per request (125 against 111 us, medians of
six runs); with it, 3-4 per run and the same CPU as no balancing at all (116 against 115).
"""

from __future__ import annotations

import asyncio
import math
import mmap
import os
import struct
import time

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from common.workers import pid_alive

_SLOT = struct.Struct("=qq")  # (pid, open connections) of one worker; pid 0: slot unused
# Seconds a worker must have been over its share before it sheds a connection.
SHED_AFTER = 1.0


class ConnectionTable:
    """Open connections per worker, in memory shared by every worker process.

    Each slot is written only by its own worker (one event loop thread), so plain
    8-byte stores are enough; readers may see a count a moment old, which only
    delays a rebalancing by a request.
    """

    def __init__(self, workers: int, shed_after: float = SHED_AFTER) -> None:
        self.workers = workers
        self.shed_after = shed_after
        self._over_since: float | None = None  # when this worker went over its share
        self._memory = mmap.mmap(-1, _SLOT.size * workers)  # MAP_SHARED | MAP_ANONYMOUS
        self._all = struct.Struct("=" + "qq" * workers)  # every slot in one read
        self.slot = 0
        self._pid = 0

    def join(self, slot: int) -> None:
        """Make this process the owner of ``slot`` (call once in each worker, after the fork)."""
        self.slot = slot
        self._pid = os.getpid()  # kept: getpid is a system call, and this is asked per request
        _SLOT.pack_into(self._memory, slot * _SLOT.size, self._pid, 0)

    def leave(self) -> None:
        """Mark this worker's slot unused (it stops serving)."""
        _SLOT.pack_into(self._memory, self.slot * _SLOT.size, 0, 0)

    def add(self, delta: int) -> None:
        """Change this worker's count of open connections by ``delta``."""
        offset = self.slot * _SLOT.size
        pid, count = _SLOT.unpack_from(self._memory, offset)
        _SLOT.pack_into(self._memory, offset, pid, count + delta)

    def counts(self) -> list[tuple[int, int]]:
        """``(pid, open connections)`` of every slot in use."""
        values = self._all.unpack_from(self._memory)
        return [(pid, count) for pid, count in zip(values[0::2], values[1::2]) if pid]

    def over_share(self) -> bool:
        """True if this worker holds more than its share and a live worker holds less (asked per request)."""
        values = self._all.unpack_from(self._memory)
        counts = values[1::2]
        mine = counts[self.slot]
        if mine * self.workers <= sum(counts) + self.workers - 1:
            return False  # the usual answer: not above the share even if every slot were in use
        others = [(pid, count) for pid, count in zip(values[0::2], counts) if pid and pid != self._pid]
        if not should_shed(mine, [count for _, count in others]):
            return False
        # a worker killed outright never cleared its slot: only live ones count
        return should_shed(mine, [count for pid, count in others if pid_alive(pid)])

    def shed_now(self, now: float) -> bool:
        """True if this worker has been over its share for ``shed_after`` seconds up to ``now``."""
        if not self.over_share():
            self._over_since = None
            return False
        if self._over_since is None:
            self._over_since = now
        return now - self._over_since >= self.shed_after


def should_shed(mine: int, others: list[int]) -> bool:
    """Whether a worker with ``mine`` connections should close one, given the other live workers'.

    Its share is the total divided evenly, rounded up; it sheds only above that and only
    while some other worker is below it, so two workers never pass a connection back and forth.
    """
    if not others:
        return False
    share = math.ceil((mine + sum(others)) / (len(others) + 1))
    return mine > share and min(others) < share


def balanced_protocol(table: ConnectionTable, base: type[HttpToolsProtocol] = HttpToolsProtocol) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP protocol (or ``base``), counting its connections in ``table`` and shedding a lasting excess."""

    class BalancedHttpToolsProtocol(base):  # type: ignore[misc, valid-type]
        _counted = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            # TCP only: a unix socket's connections come from the sibling workers (connector/affinity.py)
            if isinstance(transport.get_extra_info("peername"), tuple):
                self._counted = True
                table.add(1)

        def connection_lost(self, exc: Exception | None) -> None:
            self._uncount()
            super().connection_lost(exc)

        def on_headers_complete(self) -> None:
            before = self.cycle
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not before and self._counted and cycle.keep_alive and table.shed_now(time.monotonic()):
                # answered with "Connection: close" and closed after the response; counted
                # as gone at once so that a burst of requests sheds one connection, not all
                cycle.keep_alive = False
                self._uncount()

        def _uncount(self) -> None:
            if self._counted:
                self._counted = False
                table.add(-1)

    return BalancedHttpToolsProtocol

