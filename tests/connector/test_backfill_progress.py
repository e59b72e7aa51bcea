"""brain_status's e5 progress names the newest brain version: a version still waiting behind
the one being embedded is never reported ready (a caller waiting for "ready" then recalled
without e5 for a moment, seen as a flaky after-write test under CI load)."""

from __future__ import annotations

import threading

import numpy as np

from connector.engine.recall.embedding import Quantized
from connector.engine.recall.hybrid import HybridIndex, memory_texts
from connector.engine.recall.index import BrainIndex
from connector.workcopy.backfill import EMBEDDING, READY, E5Backfill
from connector.workcopy.vectors import VectorStore
from tests.engine.hybrid_support import MEMORIES, CountingEmbedder, make_brain
from tests.support.waiting import seconds_until


class GatedEmbedder(CountingEmbedder):
    """Embeds a batch only once the test lets it (one event per batch, in order)."""

    def __init__(self, batches: int) -> None:
        super().__init__()
        self.gates = [threading.Event() for _ in range(batches)]
        self.started = [threading.Event() for _ in range(batches)]
        self.calls = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        call, self.calls = self.calls, self.calls + 1
        self.started[call].set()
        assert self.gates[call].wait(30), "the test never let this batch through"
        return super().embed(texts)


def test_a_newer_version_waiting_behind_a_running_one_is_not_called_ready() -> None:
    older, _ = make_brain()
    older_index = BrainIndex.build(older)
    use = VectorStore(CountingEmbedder()).for_brain("b")
    older_hybrid = HybridIndex.build(older, older_index, use)
    # The newer version as a write leaves it: the older version's e5 rows, its new memory pending.
    newer, _ = make_brain([*MEMORIES, {"title": "Release day", "content": "We release every Tuesday.", "tags": []}])
    newer_index = BrainIndex.build(newer)
    newer_hybrid = HybridIndex.build(newer, newer_index, use)
    count = len(newer_index.memories)
    newer_hybrid.e5 = Quantized(np.zeros((count, 32), np.int8), np.ones(count, np.float32))
    newer_hybrid.e5_pending = {count - 1: memory_texts(newer, newer_index)[-1]}
    embedder = GatedEmbedder(batches=2)
    backfill = E5Backfill(lambda: VectorStore(embedder))
    try:
        assert backfill.vectors("b", older, older_index, older_hybrid) is None
        assert embedder.started[0].wait(30)  # the older version is being embedded
        assert backfill.vectors("b", newer, newer_index, newer_hybrid) is None  # the newer one waits
        embedder.gates[0].set()  # the older version completes
        assert embedder.started[1].wait(30)  # the newer version's new memory is being embedded
        assert backfill.progress("b").state == EMBEDDING  # not "ready": the newest version is not
        assert backfill.vectors("b", newer, newer_index, newer_hybrid) is None
        embedder.gates[1].set()
        seconds_until(lambda: backfill.progress("b").state == READY, 30, what="the newer version's vectors")
        assert backfill.vectors("b", newer, newer_index, newer_hybrid) is not None
    finally:
        for gate in embedder.gates:
            gate.set()
        backfill.close()
