"""The e5 background embedding yields to the calls being answered: a lower priority (Linux), and
its jobs wait to start while calls are answered, for a bounded time."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest

from connector.engine.recall.hybrid import HybridIndex
from connector.engine.recall.index import BrainIndex
from connector.workcopy import backfill as backfill_module
from connector.workcopy.backfill import BACKGROUND_NICE, E5Backfill
from connector.workcopy.vectors import VectorStore
from tests.engine.hybrid_support import CountingEmbedder, backfilled, make_brain
from tests.support.waiting import seconds_until


class NiceRecorder(CountingEmbedder):
    """Records the nice value of the thread each batch is embedded on."""

    def __init__(self) -> None:
        super().__init__()
        self.nice: list[int] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.nice.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return super().embed(texts)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's")
def test_background_embedding_yields_to_the_answers_and_the_caller_keeps_its_priority() -> None:
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    brain, _ = make_brain()
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, VectorStore(CountingEmbedder()).for_brain("b"))
    recorder = NiceRecorder()
    backfill = E5Backfill(lambda: VectorStore(recorder))
    try:
        assert backfill.vectors("b", brain, index, hybrid) is None  # computed in the background
        seconds_until(lambda: backfilled(backfill), 60, every=0.05, what="the background embedding")
        assert backfill.vectors("b", brain, index, hybrid) is not None
    finally:
        backfill.close()
    assert recorder.nice and all(nice >= max(BACKGROUND_NICE, before) for nice in recorder.nice)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


def test_background_embedding_waits_while_calls_are_answered() -> None:
    # Nothing is embedded while the process answers calls; the batch goes once they stop.
    brain, _ = make_brain()
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, VectorStore(CountingEmbedder()).for_brain("b"))
    embedder = CountingEmbedder()
    backfill = E5Backfill(lambda: VectorStore(embedder))
    calls = threading.Event()
    calls.set()
    backfill.answering = calls.is_set
    try:
        assert backfill.store is not None
        backfill.vectors("b", brain, index, hybrid)
        time.sleep(0.5)
        assert embedder.embedded == 0 and not backfilled(backfill)
        calls.clear()
        seconds_until(lambda: backfilled(backfill), 60, every=0.02, what="the embedding once calls stopped")
        assert embedder.embedded == len(index.memories)
    finally:
        backfill.close()


def test_a_stream_of_calls_delays_background_embedding_by_a_bounded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # A job waits to start, once; its batches (five here) then follow one another: waiting before
    # each, a stream of calls would stretch a large brain's embedding many times over.
    monkeypatch.setattr(backfill_module, "YIELD_MAX_S", 0.6)
    brain, _ = make_brain()
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, VectorStore(CountingEmbedder()).for_brain("b"))
    embedder = CountingEmbedder()
    backfill = E5Backfill(lambda: VectorStore(embedder, batch=2))
    backfill.answering = lambda: True  # calls never stop
    try:
        began = time.monotonic()
        backfill.vectors("b", brain, index, hybrid)
        seconds_until(lambda: backfilled(backfill), 60, every=0.02, what="the embedding despite the calls")
        assert 0.6 <= time.monotonic() - began < 2.8  # a wait before each batch: 3.0 s
        assert embedder.embedded == len(index.memories)
    finally:
        backfill.close()


def test_each_job_gives_the_models_buffers_back_once_done(monkeypatch: pytest.MonkeyPatch) -> None:
    # e5's kernels free ~80 MB of working buffers after long memories; glibc keeps them unless told.
    brain, _ = make_brain()
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, VectorStore(CountingEmbedder()).for_brain("b"))
    embedder = CountingEmbedder()
    given_back: list[int] = []  # how many memories had been embedded each time
    monkeypatch.setattr(backfill_module, "give_back_memory", lambda: given_back.append(embedder.embedded))
    backfill = E5Backfill(lambda: VectorStore(embedder))
    try:
        backfill.vectors("b", brain, index, hybrid)
        seconds_until(lambda: backfilled(backfill) and bool(given_back), 60, every=0.02, what="the job and its give-back")
    finally:
        backfill.close()
    assert given_back == [len(index.memories)]
