"""Hubness kept for every memory (connector/engine/recall/hubness.py): the same number, to the
bit, whether asked one memory at a time, computed for the whole brain or grown after a write."""

from __future__ import annotations

import numpy as np
import pytest

from connector.engine.recall.embedding import Quantized, quantize
from connector.engine.recall.hubness import HUBNESS_NEIGHBOURS, Neighbours, hubness_of, pair_cosines


def _vectors(count: int, dimensions: int = 512, seed: int = 7) -> Quantized:
    """Unit vectors with clusters (so that neighbours matter), quantised as the channels keep them."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(8, dimensions))
    raw = centres[rng.integers(0, 8, count)] + rng.normal(scale=0.8, size=(count, dimensions))
    return quantize((raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32))


def _head(vectors: Quantized, count: int) -> Quantized:
    return Quantized(vectors.codes[:count].copy(), vectors.scales[:count].copy())


def _reference(vectors: Quantized, position: int) -> float:
    """The definition in float64: the mean of the largest cosines to the other memories."""
    rows = vectors.codes.astype(np.float64) * vectors.scales[:, None].astype(np.float64)
    cosines = np.delete(rows @ rows[position], position)
    k = min(HUBNESS_NEIGHBOURS, len(cosines))
    return float(np.sort(cosines)[-k:].mean()) if k else 0.0


def test_a_cosine_does_not_depend_on_the_product_it_was_part_of() -> None:
    vectors = _vectors(700)
    alone = pair_cosines(vectors, [3])[:, 0]
    in_a_block = pair_cosines(vectors, np.arange(300))[:, 3]
    assert np.array_equal(alone, in_a_block)
    # Either way round: the cosine of 3 with 650 is the cosine of 650 with 3.
    assert pair_cosines(vectors, [650])[3, 0] == alone[650]
    rows = vectors.codes.astype(np.float64) * vectors.scales[:, None]
    assert np.allclose(alone, rows @ rows[3], atol=1e-6)


def test_too_many_dimensions_for_exact_dot_products_are_refused() -> None:
    with pytest.raises(ValueError, match="would round"):
        pair_cosines(_vectors(4, dimensions=1100), [0])


def test_the_whole_brain_matches_one_memory_at_a_time_and_the_definition() -> None:
    vectors = _vectors(600)
    neighbours = Neighbours.of(vectors)
    assert neighbours is not None and neighbours.nearest.shape == (600, HUBNESS_NEIGHBOURS)
    asked = hubness_of(vectors, [0, 17, 255, 256, 599, 17])
    assert list(asked) == [0, 17, 255, 256, 599]
    for position, value in asked.items():
        assert value == neighbours.means[position]  # to the bit
        assert value == pytest.approx(_reference(vectors, position), abs=1e-5)


@pytest.mark.parametrize(("start", "steps"), [(600, [1, 1, 3, 40]), (4, [1, 3, 8, 2]), (1, [1]), (11, [300])])
def test_neighbours_grown_after_writes_are_those_of_the_whole_brain(start: int, steps: list[int]) -> None:
    """Grown one write at a time (from a brain of a few memories, fewer than HUBNESS_NEIGHBOURS
    others, too), every memory's nearest cosines are those computed for the whole brain."""
    vectors = _vectors(start + sum(steps))
    neighbours = Neighbours.of(_head(vectors, start))
    assert neighbours is not None
    count = start
    for step in steps:
        count += step
        grown = neighbours.grown(_head(vectors, count))
        whole = Neighbours.of(_head(vectors, count))
        assert whole is not None
        assert np.array_equal(grown.nearest, whole.nearest) and np.array_equal(grown.means, whole.means)
        assert len(neighbours) == count - step  # the older version's are left as they were
        neighbours = grown


def test_one_memory_has_no_hubness_and_fewer_than_ten_average_the_others() -> None:
    assert hubness_of(_vectors(1), [0]) == {0: 0.0}
    vectors = _vectors(3)
    assert hubness_of(vectors, [1])[1] == pytest.approx(_reference(vectors, 1), abs=1e-5)


def test_computing_the_whole_brain_stops_when_asked() -> None:
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 2

    assert Neighbours.of(_vectors(1000), stop) is None
    assert len(calls) == 3  # checked between blocks, not run to the end


def test_a_version_with_fewer_memories_cannot_grow_from_more() -> None:
    vectors = _vectors(30)
    neighbours = Neighbours.of(vectors)
    assert neighbours is not None
    with pytest.raises(ValueError, match="more memories"):
        neighbours.grown(_head(vectors, 20))
    assert neighbours.grown(vectors) is neighbours
