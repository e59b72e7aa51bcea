"""Working copies and indexes are kept out of the cyclic collector's walks; drops give back what it froze."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from connector.workcopy.longlived import LongLivedObjects


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_loaded_freezes_and_settle_is_rate_limited() -> None:
    clock = [100.0]
    objects = LongLivedObjects(settle_every_s=60.0, monotonic=lambda: clock[0])
    kept = [{"memory": number} for number in range(10_000)]  # a copy's long-lived objects
    objects.loaded()
    assert gc.get_freeze_count() >= len(kept)
    assert not objects.maybe_settle()  # nothing dropped: nothing to do
    objects.dropped()
    assert objects.maybe_settle()
    objects.dropped()
    clock[0] += 30.0
    assert not objects.maybe_settle()  # within the interval: later
    clock[0] += 31.0
    assert objects.maybe_settle()


def test_a_cycle_frozen_by_accident_is_collected_after_a_drop() -> None:
    objects = LongLivedObjects(settle_every_s=0.0)

    class Node:
        pass

    cycle = Node()
    cycle.self = cycle  # type: ignore[attr-defined]
    alive = weakref.ref(cycle)
    objects.loaded()
    del cycle
    gc.collect()
    assert alive() is not None  # frozen: ordinary collections leave it
    objects.dropped()
    assert objects.maybe_settle()
    assert alive() is None
