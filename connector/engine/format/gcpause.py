"""Pause Python's cyclic garbage collector around bulk allocation.

Loading an archive or building an index allocates hundreds of thousands of
small objects (dicts, tuples, strings) that all stay alive, and none forms a
reference cycle worth collecting. The collector still triggers every few
hundred allocations and rescans the growing heap each time: about a third of
the CPU of a 10k-memory load + index build. Pausing it for the duration is safe
(reference counting still frees everything) and nests across threads: the
collector is re-enabled when the last pause ends, and only if it was enabled
before the first one began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the body with the cyclic garbage collector disabled (nestable, thread-safe)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
