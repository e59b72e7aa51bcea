"""The e5 background embedding runs at a lower priority than the calls being answered (Linux)."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

from connector.engine.recall.hybrid import HybridIndex
from connector.engine.recall.index import BrainIndex
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
