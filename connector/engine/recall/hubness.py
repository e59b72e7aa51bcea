"""Hubness: a memory's mean cosine to its nearest other memories of the brain.

A memory in a dense part of a brain is near every query about that part; the relevance floor
lowers such a memory by its hubness (`hybrid.fuse`), and the similar check reads it too
(connector/engine/tending/similar.py). It is asked for a query's few strongest memories.

Asked one memory at a time it costs a pass over the brain's vectors (~2 ms at 10,000 memories),
on every recall. `Neighbours` keeps every memory's nearest cosines instead: computed once per
brain in the background (~1.2 s of CPU at 10,000 memories) and grown when a write adds memories
(one pass over the brain for the new ones), so recall reads it.

Every cosine here is computed the same way wherever it is computed: the int8 codes' dot
products are integers below 2**24 (at most 1,040 dimensions of |code| <= 127), which float32
BLAS sums exactly in any order, then multiplied by the product of the two rows' scales (the
same either way round). So a cosine does not depend on which other rows shared its product (one
memory asked, a block of 256, a write's few), nor on which of the two memories asked: asked one
at a time, computed for the whole brain or grown after a write, a memory's hubness is the same
number, to the bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from connector.engine.recall.embedding import Quantized, products

__all__ = ["HUBNESS_NEIGHBOURS", "Neighbours", "hubness_of", "pair_cosines"]

# A memory's hubness: its mean cosine to this many nearest other memories of the brain.
HUBNESS_NEIGHBOURS = 10
# Memories computed per product when the whole brain's are (a block of 256 x 10,000 cosines: 10 MB).
_BLOCK = 256
# Integer dot products of int8 codes stay exact in float32 below this (2**24).
_EXACT = 1 << 24


def pair_cosines(vectors: Quantized, positions: Sequence[int] | np.ndarray) -> np.ndarray:
    """The cosine of every memory with each memory at ``positions``: (len(vectors), len(positions)),
    float32, the same numbers however the positions are grouped (the module's docstring)."""
    codes, scales = vectors.codes, vectors.scales
    if codes.shape[1] * 127 * 127 >= _EXACT:
        raise ValueError(f"{codes.shape[1]} dimensions: the dot products of int8 codes would round")
    chosen = np.asarray(positions, dtype=np.int64)
    # The codes' integer dot products (`products` with unit scales: a multiplication by one is exact).
    out = products(Quantized(codes, np.ones(len(codes), dtype=np.float32)), codes[chosen].astype(np.float32))
    out *= scales[:, None] * scales[chosen][None, :]  # one product of two scales: the same either way round
    return out


def _neighbours_of(count: int) -> int:
    """How many nearest others a memory's hubness averages in a brain of ``count`` memories."""
    return max(0, min(HUBNESS_NEIGHBOURS, count - 1))


def _nearest(cosines: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` largest of each row, in ascending order (sorted: the mean adds them in one order)."""
    if k == 0:
        return np.zeros((len(cosines), 0), dtype=np.float32)
    return np.sort(np.partition(cosines, -k, axis=1)[:, -k:], axis=1)


def _means(nearest: np.ndarray) -> np.ndarray:
    if nearest.shape[1] == 0:  # a brain of one memory: no neighbour, no hubness
        return np.zeros(len(nearest), dtype=np.float64)
    return nearest.astype(np.float64).mean(axis=1)


def _others(vectors: Quantized, positions: np.ndarray) -> np.ndarray:
    """The cosines of the memories at ``positions`` (a row each) with every memory (a column each),
    a memory's own column out of reach (it is not its own neighbour)."""
    cosines = np.ascontiguousarray(pair_cosines(vectors, positions).T)
    cosines[np.arange(len(positions)), positions] = -np.inf
    return cosines


def hubness_of(vectors: Quantized, positions: Sequence[int]) -> dict[int, float]:
    """The hubness of the memories at ``positions``, computed now (one pass over ``vectors``)."""
    chosen = np.asarray(list(dict.fromkeys(positions)), dtype=np.int64)
    if not len(chosen):
        return {}
    means = _means(_nearest(_others(vectors, chosen), _neighbours_of(len(vectors))))
    return {int(position): float(value) for position, value in zip(chosen, means, strict=True)}


@dataclass(frozen=True)
class Neighbours:
    """Every memory's nearest cosines to the other memories of one brain version, and their means
    (the memories' hubness), in the version's order."""

    nearest: np.ndarray  # (memories, k) float32, each row ascending
    means: np.ndarray  # (memories,) float64

    def __len__(self) -> int:
        return len(self.means)

    @classmethod
    def of(cls, vectors: Quantized, stop: Callable[[], bool] | None = None) -> Neighbours | None:
        """The neighbours of every memory of ``vectors`` (a block of memories a pass over them);
        None when ``stop`` says so between two blocks (a newer version came, the process ends)."""
        count = len(vectors)
        k = _neighbours_of(count)
        nearest = np.empty((count, k), dtype=np.float32)
        for start in range(0, count, _BLOCK):
            if stop is not None and stop():
                return None
            block = np.arange(start, min(start + _BLOCK, count), dtype=np.int64)
            nearest[start : start + len(block)] = _nearest(_others(vectors, block), k)
        return cls(nearest, _means(nearest))

    def grown(self, vectors: Quantized) -> Neighbours:
        """The neighbours of ``vectors``: this version's memories, unchanged and in the same places,
        then the memories a write added. One pass over ``vectors`` for the added ones: each earlier
        memory keeps its nearest among its old ones and the new."""
        count, before = len(vectors), len(self)
        k = _neighbours_of(count)
        if before > count:
            raise ValueError("grown from a version with more memories")
        if count == before:
            return self
        if self.nearest.shape[1] != k:  # a brain of fewer than HUBNESS_NEIGHBOURS + 1 memories: all again
            grown = Neighbours.of(vectors)
            assert grown is not None
            return grown
        added = np.arange(before, count, dtype=np.int64)
        cosines = _others(vectors, added)  # a row per added memory
        # An earlier memory's nearest: among its old nearest and its cosines with the added ones.
        old = _nearest(np.concatenate([self.nearest, cosines[:, :before].T], axis=1), k)
        new = _nearest(cosines, k)
        nearest = np.concatenate([old, new])
        return Neighbours(nearest, _means(nearest))
