"""Keep the cyclic garbage collector off the working copies.

A working copy of 10,000 memories and its recall index are hundreds of thousands
of long-lived objects; every full collection walks all of them, and with several
copies loaded a collection pauses the event loop for hundreds of milliseconds,
often enough to cost ~2 ms per call at one 10,000-memory copy. They hold no
reference cycles, so after a copy or index is loaded its objects are moved out of
the collector's sight (``gc.freeze``): reference counting still frees them when a
copy is dropped. Whatever else was frozen with them (a rare cycle) is given back
(``gc.unfreeze`` and one full collection) after copies are dropped, at most once
per ``settle_every_s``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("connector.workcopy")


class LongLivedObjects:
    """Freezes after loads; re-examines (unfreeze, collect, freeze) after drops, rate limited."""

    def __init__(self, settle_every_s: float = 60.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.settle_every_s = settle_every_s
        self._mono = monotonic
        self._settled_at = -1e18
        self._dropped = False

    def loaded(self) -> None:
        """A copy or an index was just built: take its objects out of future collections."""
        gc.collect(1)  # young garbage first, so little of it is frozen along
        gc.freeze()

    def dropped(self) -> None:
        """Copies were dropped; their frozen objects are freed by reference counting already."""
        self._dropped = True

    def maybe_settle(self) -> bool:
        """After drops, at most once per interval: collect what the frozen set kept (cycles)."""
        if not self._dropped or self._mono() - self._settled_at < self.settle_every_s:
            return False
        began = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        give_back_memory()
        self._dropped = False
        self._settled_at = self._mono()
        log.info("garbage collected after dropping copies", extra={"ms": round((time.perf_counter() - began) * 1000)})
        return True


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc: its allocator gives memory back by itself or not at all
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def give_back_memory() -> None:
    """Hand freed heap memory back to the system (glibc ``malloc_trim``).

    Unpacking a brain frees megabytes in many pieces; glibc keeps them for reuse, so
    without this the connector's resident size stays at its peak after copies go or
    a load is refused. Takes milliseconds; does nothing on other C libraries.
    """
    if _TRIM is not None:
        _TRIM(0)
