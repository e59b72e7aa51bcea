"""Versions of an index's vectors in one growing buffer (connector/engine/recall/rows.py)."""

from __future__ import annotations

import numpy as np

from connector.engine.recall.embedding import Quantized
from connector.engine.recall.rows import followed


def _vectors(count: int, dimensions: int = 8, seed: int = 0) -> Quantized:
    rng = np.random.default_rng(seed)
    return Quantized(rng.integers(-127, 128, (count, dimensions), dtype=np.int8),
                     rng.random(count, dtype=np.float32) + 0.5)


def _same(left: Quantized, right: Quantized) -> bool:
    return np.array_equal(left.codes, right.codes) and np.array_equal(left.scales, right.scales)


def test_a_version_that_adds_memories_grows_in_place_and_the_older_one_is_untouched() -> None:
    original = _vectors(100)
    first, rows = followed(original, np.arange(100), 100, None)  # a copy with room after it
    assert _same(first, original) and not np.shares_memory(first.codes, original.codes)
    second, same_rows = followed(first, np.arange(100), 102, rows)
    assert same_rows is rows and np.shares_memory(second.codes, first.codes)
    assert len(first) == 100 and len(second) == 102
    assert _same(Quantized(second.codes[:100], second.scales[:100]), original)
    assert not second.codes[100:].any() and not second.scales[100:].any()  # new rows: zero until set
    second.codes[100:], second.scales[100:] = 7, 2.0
    assert _same(first, original)  # the older version never sees them


def test_a_second_version_grown_from_the_same_one_is_copied() -> None:
    original = _vectors(50, seed=1)
    first, rows = followed(original, np.arange(50), 50, None)
    taken, _ = followed(first, np.arange(50), 51, rows)
    taken.codes[50], taken.scales[50] = 5, 1.0
    other, other_rows = followed(first, np.arange(50), 51, rows)  # a rebase on the same version
    assert other_rows is not rows and not np.shares_memory(other.codes, taken.codes)
    assert not other.codes[50].any() and other.scales[50] == 0  # not the first branch's row
    assert (taken.codes[50] == 5).all()
    # The first branch still grows in place.
    grown, grown_rows = followed(taken, np.arange(51), 52, rows)
    assert grown_rows is rows and np.shares_memory(grown.codes, taken.codes)


def test_removed_or_changed_memories_move_the_rows_into_a_new_buffer() -> None:
    original = _vectors(6, seed=2)
    first, rows = followed(original, np.arange(6), 6, None)
    keep = np.array([0, -1, 1, 2, -1, 3])  # the second and fifth gone, one new at the end
    moved, moved_rows = followed(first, keep, 5, rows)
    assert moved_rows is not rows
    assert _same(Quantized(moved.codes[:4], moved.scales[:4]),
                 Quantized(original.codes[[0, 2, 3, 5]], original.scales[[0, 2, 3, 5]]))
    assert not moved.codes[4].any() and moved.scales[4] == 0
    assert _same(first, original)


def test_a_full_buffer_is_copied_into_a_larger_one() -> None:
    original = _vectors(10, seed=3)
    first, rows = followed(original, np.arange(10), 10, None)
    room = rows.capacity
    grown, same = followed(first, np.arange(10), room, rows)
    assert same is rows and len(grown) == room
    beyond, larger = followed(grown, np.arange(room), room + 1, rows)
    assert larger is not rows and larger.capacity > room + 1
    assert _same(Quantized(beyond.codes[:10], beyond.scales[:10]), original)


def test_vectors_of_another_buffer_are_never_grown_in_it() -> None:
    first, rows = followed(_vectors(4, seed=4), np.arange(4), 4, None)
    stranger = _vectors(4, seed=5)
    assert rows.grown(stranger, 5) is None
    assert rows.grown(first, 3) is None  # fewer rows than it holds
    copied, _ = followed(stranger, np.arange(4), 5, rows)  # same length as the buffer's newest
    assert not np.shares_memory(copied.codes, first.codes)
    assert _same(Quantized(copied.codes[:4], copied.scales[:4]), stranger)
