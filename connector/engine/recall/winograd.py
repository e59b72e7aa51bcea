"""Winograd (Toom-Cook) minimal filtering for a 1-D correlation, the fast algorithm of CNN
convolutions (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).

``F(m, r)`` gives ``m`` outputs of an ``r``-tap correlation ``y_i = sum_k d_{i+k} g_k`` from
``m + r - 1`` inputs with ``m + r - 1`` multiplications instead of ``m * r``:
``y = AT @ ((G @ g) * (BT @ d))``. When the taps are matrices and the inputs rows of
features (a convolution over tokens), each multiplication is a matrix product and the
transforms are cheap linear combinations of rows: ``m * r / (m + r - 1)`` times fewer
products. Exact in exact arithmetic; the matrices are built here with rational numbers
and the points are the usual small ones, so float32 rounding stays small.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

# Evaluation points, the usual ones (small, so the transforms' coefficients stay small);
# infinity (the leading coefficient) is always the last point.
_POINTS = (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2), Fraction(-1, 2))


def _evaluation(points: list[Fraction | None], length: int) -> list[list[Fraction]]:
    """Rows evaluating a polynomial of ``length`` coefficients at each point (None: infinity)."""
    one, zero = Fraction(1), Fraction(0)
    return [[zero] * (length - 1) + [one] if p is None else [p**i for i in range(length)] for p in points]


def _inverse(matrix: list[list[Fraction]]) -> list[list[Fraction]]:
    """The exact inverse of a square rational matrix (Gauss-Jordan)."""
    size = len(matrix)
    rows = [row[:] + [Fraction(int(i == j)) for j in range(size)] for i, row in enumerate(matrix)]
    for col in range(size):
        pivot = next(r for r in range(col, size) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        rows[col] = [value / rows[col][col] for value in rows[col]]
        for r in range(size):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col])]
    return [row[size:] for row in rows]


def correlation(m: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(AT, G, BT)`` of F(m, r), float64: ``y = AT @ ((G @ g) * (BT @ d))``.

    Shapes (m, n), (n, r), (n, n) with n = m + r - 1.

    Built as the transpose of the Toom-Cook linear convolution s = A (G g * B x): a
    correlation is the transpose of a convolution, so AT = B^T and BT = A^T.
    """
    n = m + r - 1
    if m < 1 or r < 1 or n - 1 > len(_POINTS):
        raise ValueError(f"F({m}, {r}) needs {n - 1} finite points, {len(_POINTS)} known")
    points: list[Fraction | None] = [*_POINTS[: n - 1], None]
    data = _evaluation(points, m)  # the convolution's B: evaluates the input
    taps = _evaluation(points, r)  # G: evaluates the filter
    interpolate = _inverse(_evaluation(points, n))  # A: the product's coefficients from its values
    at = [[data[j][i] for j in range(n)] for i in range(m)]
    bt = [[interpolate[j][i] for j in range(n)] for i in range(n)]
    return (np.array(at, dtype=np.float64), np.array(taps, dtype=np.float64), np.array(bt, dtype=np.float64))
