"""The judge's channel vectors (`E5Backfill`'s ``judge``): read with the background's jobs once a
version's e5 vectors are there, a write's new memory alone afterwards, and none where the judge
cannot load (the channel then stays off)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from connector.engine.format.change import BrainChange
from connector.engine.recall.embedding import content_hash
from connector.engine.recall.hybrid import HybridIndex, memory_texts
from connector.engine.recall.index import BrainIndex
from connector.engine.recall.judge import JudgeUnavailable
from connector.engine.writes.ops import connector_memorize
from connector.workcopy.backfill import READY, E5Backfill
from connector.workcopy.vectors import VectorStore
from tests.engine.hybrid_support import CountingEmbedder, make_brain
from tests.engine.test_hybrid_follow import JudgeStandIn
from tests.support.waiting import seconds_until


def test_the_judge_vectors_follow_e5s_and_a_write_reads_only_its_memory() -> None:
    brain, _ = make_brain()
    index = BrainIndex.build(brain)
    use = VectorStore(CountingEmbedder()).for_brain("b")
    hybrid = HybridIndex.build(brain, index, use)
    judged = JudgeStandIn()
    judge = VectorStore(judged)
    backfill = E5Backfill(lambda: VectorStore(CountingEmbedder()), judge=judge)
    try:
        assert backfill.vectors("b", brain, index, hybrid) is None  # nothing yet: computed in the background
        seconds_until(lambda: hybrid.judge_vectors() is not None, 30, what="the judge's vectors")
        assert backfill.progress("b").state == READY and backfill.vectors("b", brain, index, hybrid) is not None
        texts = memory_texts(brain, index)
        expected = judge.vectors([content_hash(judge.model_id, text) for text in texts], texts, "b")
        read = hybrid.judge_vectors()
        assert read is not None and np.array_equal(read.codes, expected.codes)
        assert judged.embedded == len(texts)

        # A write: the new memory's e5 vector pending, the judge's channel off until it is read too.
        working = brain.copy()
        working.journal = []
        connector_memorize("The lighthouse keeper retires in June.").apply(working, datetime.now(UTC))
        change_index = BrainIndex.build(working)
        followed = hybrid.changed(working, change_index, use, BrainChange.of_journal(working.journal))
        assert followed is not None and followed.e5_pending and followed.judge_vectors() is None
        assert backfill.vectors("b", working, change_index, followed) is None
        seconds_until(lambda: followed.judge_vectors() is not None, 30, what="the new memory's judge vector")
        assert judged.embedded == len(texts) + 1  # the new memory alone
        texts = memory_texts(working, change_index)
        expected = judge.vectors([content_hash(judge.model_id, text) for text in texts], texts, "b")
        read = followed.judge_vectors()
        assert read is not None and np.array_equal(read.codes, expected.codes)
    finally:
        backfill.close()


class Unloadable(JudgeStandIn):
    def embed(self, texts: list[str]) -> np.ndarray:
        raise JudgeUnavailable("the judge's tokenizer cannot load")


def test_a_judge_that_cannot_load_leaves_e5_ready_and_the_channel_off() -> None:
    brain, _ = make_brain()
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, VectorStore(CountingEmbedder()).for_brain("b"))
    backfill = E5Backfill(lambda: VectorStore(CountingEmbedder()), judge=VectorStore(Unloadable()))
    try:
        backfill.vectors("b", brain, index, hybrid)
        seconds_until(lambda: backfill.judge is None, 30, what="the judge given up")
        assert backfill.vectors("b", brain, index, hybrid) is not None and backfill.progress("b").state == READY
        assert hybrid.judge_vectors() is None
    finally:
        backfill.close()
