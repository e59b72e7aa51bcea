"""brain_status's e5 progress names the newest brain version: a version still waiting behind
the one being embedded is never reported ready (a caller waiting for "ready" then recalled
without e5 for a moment, seen as a flaky after-write test under CI load)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import numpy as np

from connector.engine.recall.embedding import Quantized
from connector.engine.recall.hubness import hubness_of
from connector.engine.recall.hybrid import HybridIndex, memory_texts
from connector.engine.recall.index import BrainIndex
from connector.engine.writes.ops import Forget, Memorize, MemoryInput
from connector.mcp import render
from connector.workcopy.backfill import COMPUTING, EMBEDDING, READY, E5Backfill, Progress
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


def test_a_version_with_fewer_memories_is_counted_once_it_is_recalled() -> None:
    """A forget makes a version whose e5 vectors all come from the one before (no job): brain_status
    said "ready (N memories)" with the forgotten one still counted."""
    whole, ids = make_brain()
    whole_index = BrainIndex.build(whole)
    use = VectorStore(CountingEmbedder()).for_brain("b")
    whole_hybrid = HybridIndex.build(whole, whole_index, use)
    backfill = E5Backfill(lambda: VectorStore(CountingEmbedder()))
    try:
        assert backfill.vectors("b", whole, whole_index, whole_hybrid) is None
        seconds_until(lambda: backfill.progress("b").state == READY, 30, what="the whole brain's vectors")
        assert backfill.progress("b").total == len(whole_index.memories)
        # One memory forgotten: the vectors of the rest are the earlier version's, nothing is pending.
        fewer = whole.copy()
        Forget(ids[MEMORIES[-1]["title"]], force=True).apply(fewer, datetime.now(UTC))
        fewer_index = BrainIndex.build(fewer)
        fewer_hybrid = HybridIndex.build(fewer, fewer_index, use, whole_hybrid)
        assert fewer_hybrid.e5_state()[0] is not None and not fewer_hybrid.e5_state()[1]
        assert backfill.vectors("b", fewer, fewer_index, fewer_hybrid) is not None
        progress = backfill.progress("b")
        assert (progress.state, progress.done, progress.total) == (READY, len(fewer_index.memories),
                                                                   len(fewer_index.memories))
    finally:
        backfill.close()


def test_a_job_computes_the_memories_neighbours_and_a_write_grows_them() -> None:
    """The background computes a version's neighbours (recall then reads its hubness instead of a
    pass over the vectors); a version that only added memories grows them, and one that forgot a
    memory, whose e5 vectors are all there, is still handed a job for its neighbours."""
    whole, ids = make_brain()
    whole_index = BrainIndex.build(whole)
    use = VectorStore(CountingEmbedder()).for_brain("b")
    whole_hybrid = HybridIndex.build(whole, whole_index, use)
    assert whole_hybrid.needs_neighbours
    backfill = E5Backfill(lambda: VectorStore(CountingEmbedder()))
    try:
        backfill.vectors("b", whole, whole_index, whole_hybrid)
        seconds_until(lambda: backfill.progress("b").state == READY, 30, what="the whole brain's vectors")
        assert whole_hybrid.neighbours is not None
        everything = range(len(whole_index.memories))
        assert whole_hybrid.hubness(everything) == hubness_of(whole_hybrid.vectors, everything)
        assert not whole_hybrid.hubness_known  # read from the neighbours: none computed on demand
        more = whole.copy()
        written = MemoryInput(title="Release day", type="learning", content="We release every Tuesday.", path="notes/")
        Memorize([written]).apply(more, datetime.now(UTC))
        more_index = BrainIndex.build(more)
        grown = HybridIndex.build(more, more_index, use, whole_hybrid)
        assert grown.grows_from is whole_hybrid.neighbours and not grown.needs_neighbours
        more_all = range(len(more_index.memories))
        assert grown.hubness(more_all) == hubness_of(grown.vectors, more_all) and grown.neighbours is not None
        fewer = whole.copy()
        Forget(ids[MEMORIES[-1]["title"]], force=True).apply(fewer, datetime.now(UTC))
        fewer_index = BrainIndex.build(fewer)
        fewer_hybrid = HybridIndex.build(fewer, fewer_index, use, whole_hybrid)
        assert fewer_hybrid.needs_neighbours and fewer_hybrid.e5_state()[0] is not None
        assert backfill.vectors("b", fewer, fewer_index, fewer_hybrid) is not None  # e5 at once
        seconds_until(lambda: fewer_hybrid.neighbours is not None, 30, what="the neighbours after a forget")
        fewer_all = range(len(fewer_index.memories))
        assert fewer_hybrid.hubness(fewer_all) == hubness_of(fewer_hybrid.vectors, fewer_all)
    finally:
        backfill.close()


def test_brain_status_says_while_the_neighbours_are_computed() -> None:
    computing = Progress(READY, 40, 40, neighbours=COMPUTING).to_json()
    assert computing == {"state": "ready", "embedded": 40, "total": 40, "neighbours": "computing"}
    text = render.status_text({"brains": [], "identity": {"status": "ok"}, "recall_e5": computing})
    assert "Recall model e5: ready (40 memories). The memories' nearest neighbours are being computed" in text
    done = render.status_text({"brains": [], "identity": {"status": "ok"},
                               "recall_e5": Progress(READY, 40, 40, neighbours=READY).to_json()})
    assert "Recall model e5: ready (40 memories).\n" in done and "neighbours" not in done
