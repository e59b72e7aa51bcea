"""Winograd minimal filtering: F(m, r) computes a correlation exactly (in float64)."""

from __future__ import annotations

import numpy as np
import pytest

from connector.engine.recall.winograd import correlation


@pytest.mark.parametrize(("m", "r"), [(1, 1), (2, 3), (4, 2), (4, 3), (4, 5), (2, 5)])
def test_the_transforms_give_the_correlation(m: int, r: int) -> None:
    at, g, bt = correlation(m, r)
    assert at.shape == (m, m + r - 1) and g.shape == (m + r - 1, r) and bt.shape == (m + r - 1, m + r - 1)
    rng = np.random.default_rng(m * 10 + r)
    for _ in range(5):
        d, taps = rng.standard_normal(m + r - 1), rng.standard_normal(r)
        assert np.allclose(at @ ((g @ taps) * (bt @ d)), np.correlate(d, taps, "valid"), atol=1e-12)


def test_matrix_taps_as_the_model_uses_them() -> None:
    """Taps that are matrices (a convolution over rows of features): y_i = sum_k d[i+k] @ W_k."""
    at, g, bt = correlation(4, 5)
    rng = np.random.default_rng(7)
    d, w = rng.standard_normal((8, 6)), rng.standard_normal((5, 6, 3))
    expected = np.stack([sum(d[i + k] @ w[k] for k in range(5)) for i in range(4)])
    products = np.matmul(np.tensordot(bt, d[:, None, :], axes=1), np.einsum("pk,kab->pab", g, w))
    assert np.allclose(np.tensordot(at, products, axes=1)[:, 0, :], expected, atol=1e-10)


def test_too_many_outputs_for_the_known_points_is_refused() -> None:
    with pytest.raises(ValueError, match="finite points"):
        correlation(8, 5)
