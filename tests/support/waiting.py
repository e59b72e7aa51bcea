"""Waiting for something to become true, bounded by a deadline, instead of a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def seconds_until(check: Callable[[], bool], limit: float, every: float = 0.05, what: str = "") -> float:
    """Ask ``check`` every ``every`` seconds until it holds; how long that took. Fails after ``limit`` seconds."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < limit, f"not within {limit} s{': ' + what if what else ''}"
        time.sleep(every)
    return time.monotonic() - start
