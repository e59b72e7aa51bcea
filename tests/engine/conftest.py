"""Shared helpers for engine tests: where the recall-parity fixtures live, synthetic channels."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support.fixtures import recall_parity_dir
from tests.support.processes import REPO_ROOT

__all__ = ["REPO_ROOT", "fixture_brains", "parity_dir", "synthetic_channels"]


def parity_dir() -> Path:
    """The recall-parity fixture folder (see ``tests.support.fixtures.recall_parity_dir``)."""
    return recall_parity_dir()


def fixture_brains() -> list[Path]:
    """Every brain directory of the parity fixtures (empty when they are absent)."""
    brains = parity_dir() / "brains"
    return sorted(path for path in brains.iterdir() if path.is_dir()) if brains.is_dir() else []


def synthetic_channels(
    count: int, seed: int, *, model_tops: dict[int, tuple[float, float]], word_hits: dict[int, float], e5_spread: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(USE cosines, e5 cosines, word coverage, BM25) of ``count`` memories: noise around
    each model's usual level, ``model_tops`` memories raised to (USE, e5) cosines,
    ``word_hits`` memories sharing words with the query (BM25 follows the coverage)."""
    rng = np.random.default_rng(seed)
    use = rng.normal(0.3, 0.05, count).astype(np.float32)
    e5 = rng.normal(0.8, e5_spread, count).astype(np.float32)
    for memory, (use_cosine, e5_cosine) in model_tops.items():
        use[memory], e5[memory] = use_cosine, e5_cosine
    words = np.zeros(count, dtype=np.float32)
    for memory, coverage in word_hits.items():
        words[memory] = coverage
    return use, e5, words, words * 4
