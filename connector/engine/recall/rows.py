"""The vectors of successive versions of a brain's index, kept in one buffer with room to grow.

A write usually adds a memory or two after the others. Each version of the hybrid index
(`hybrid.HybridIndex`) holds a matrix of every memory's vectors, and copying three of them
(USE, e5, the judge's) for every version cost a memorize at 10,000 memories ~7 ms of CPU
alone, ~20 ms beside the store's validation on two cores (fresh pages, each faulted in).
Here the versions are views of the first rows of one buffer: a version that only adds
memories after the ones it follows gets them in the rows after them, in place.

The rows a version holds never change under it, except the rows it holds as pending (zero,
their vectors computed in the background, see `HybridIndex.with_e5`), which are filled in
place: each buffer row is one memory's in every version that holds it, so every version
that has it pending gets the same vector. Rows beyond the newest version's are zero.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from connector.engine.recall.embedding import Quantized

__all__ = ["GrowingRows", "followed", "kept_in_place"]

# Room after the rows a buffer is made for: a copy every ~1/16 of the brain's size in added
# memories (625 at 10,000). Rows never written stay untouched zero pages.
_ROOM_SHARE = 16
_LEAST_ROOM = 256


class GrowingRows:
    """A buffer of vector rows shared by the versions that followed one another in it."""

    def __init__(self, dimensions: int, capacity: int, dtype: np.dtype[Any]) -> None:
        self._codes = np.zeros((capacity, dimensions), dtype=dtype)
        self._scales = np.zeros(capacity, dtype=np.float32)
        self._used = 0
        self._lock = threading.Lock()

    @classmethod
    def moved(cls, vectors: Quantized, keep: np.ndarray, count: int) -> tuple[Quantized, GrowingRows]:
        """A new buffer holding ``count`` rows: ``vectors``' rows moved as ``keep`` says (each
        row's new position, -1: dropped; increasing over the kept ones), the others zero."""
        rows = cls(vectors.codes.shape[1], count + max(_LEAST_ROOM, count // _ROOM_SHARE), vectors.codes.dtype)
        if kept_in_place(keep):  # two copies, not a gather and a scatter of the whole matrix
            rows._codes[: len(keep)], rows._scales[: len(keep)] = vectors.codes, vectors.scales
        else:
            held = keep >= 0
            rows._codes[keep[held]], rows._scales[keep[held]] = vectors.codes[held], vectors.scales[held]
        rows._used = count
        return rows._view(count), rows

    def grown(self, vectors: Quantized, count: int) -> Quantized | None:
        """``vectors`` (this buffer's newest version) followed by zero rows up to ``count``, in
        place; None when they are not that version (another version grew from it already, or
        they are not this buffer's) or the room is used up."""
        with self._lock:
            if (vectors.codes.base is not self._codes or vectors.scales.base is not self._scales
                    or len(vectors) != self._used or not self._used <= count <= len(self._codes)):
                return None
            self._used = count
            return self._view(count)

    @property
    def capacity(self) -> int:
        """Rows the buffer has room for."""
        return len(self._codes)

    def _view(self, count: int) -> Quantized:
        return Quantized(self._codes[:count], self._scales[:count])


def followed(
    vectors: Quantized, keep: np.ndarray, count: int, rows: GrowingRows | None
) -> tuple[Quantized, GrowingRows]:
    """The vectors of a newer version of ``count`` memories: ``vectors``' rows moved as ``keep``
    says, the other rows zero (for the caller to fill), and the buffer holding them. Grown in
    ``rows`` in place when the newer version only adds memories after these, else copied."""
    if rows is not None and kept_in_place(keep) and count >= len(keep):
        grown = rows.grown(vectors, count)
        if grown is not None:
            return grown, rows
    return GrowingRows.moved(vectors, keep, count)


def kept_in_place(keep: np.ndarray) -> bool:
    """Whether every row is kept where it was (``keep`` increases over the kept rows, so all
    kept and the last at its own place means each at its own)."""
    return bool(not len(keep) or (keep[-1] == len(keep) - 1 and (keep >= 0).all()))
