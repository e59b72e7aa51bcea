"""A server's judge vectors (`WhenReady`): never waited for, and the model's working memory given back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.docstore import open_document_store
from connector.engine.recall.embedding import content_hash, quantize
from connector.engine.recall.judge import JudgeEmbedder, JudgeUnavailable
from connector.workcopy import vectors as vectors_module
from connector.workcopy.vectors import VectorStore, WhenReady, judge_store
from tests.support.waiting import seconds_until


def test_judge_vectors_start_the_model_then_give_its_buffers_back(monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[int] = []
    monkeypatch.setattr(vectors_module, "give_back_memory", lambda: given.append(1))
    model = JudgeEmbedder()
    store = VectorStore(model)
    vectors = WhenReady(store, "brain-a")
    long = "We planned the trip to Lisbon for the spring; the museum tickets are booked. " * 12
    keys = [content_hash(store.model_id, long)]
    # Asked before the model is there: no waiting, the model starts loading in the background.
    with pytest.raises(JudgeUnavailable):
        vectors.vectors(keys, [long])
    assert model.started
    seconds_until(lambda: model.ready or model.failed is not None, 120, what="the judge loads")
    assert model.failed is None, model.failed
    first = vectors.vectors(keys, [long])
    assert first.codes.shape == (1, 384) and given == [1]  # a text was run: its buffers go back
    again = vectors.vectors(keys, [long])
    assert np.array_equal(again.codes, first.codes) and given == [1]  # kept: nothing run, nothing to give back


def test_judge_vectors_read_what_the_channels_store_keeps_and_embed_only_the_rest(tmp_path: Path) -> None:
    # Right after a write the gate asks about memories the background read already: only the new
    # one is run by the model, kept in memory; the channel's store is not written.
    model = JudgeEmbedder()
    kept = judge_store(open_document_store(tmp_path / "state"), bytes(32))
    texts = ["The cabin has a wood stove; bring dry kindling in winter.", "Our dentist moved to Elm Street."]
    hashes = [content_hash(kept.model_id, text) for text in texts]
    kept.keep(hashes[:1], quantize(np.eye(1, 384, dtype=np.float32)), "brain-a")
    store = VectorStore(model)
    vectors = WhenReady(store, "brain-a", kept)
    model.start()
    seconds_until(lambda: model.ready or model.failed is not None, 120, what="the judge loads")
    assert model.failed is None, model.failed
    got = vectors.vectors(hashes, texts)
    assert np.array_equal(got.codes[0], kept.known(hashes[:1], "brain-a")[0].codes[0])  # the kept row, not re-run
    assert store.embedded == 1 and got.scales[1] > 0  # the new memory's, run now
    assert np.array_equal(got.codes[1], store.vectors(hashes[1:], texts[1:], "brain-a").codes[0])
    assert kept.embedded == 0 and not kept.known(hashes[1:], "brain-a")[1].any()
