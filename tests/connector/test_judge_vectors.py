"""A server's judge vectors (`WhenReady`): never waited for, and the model's working memory given back."""

from __future__ import annotations

import numpy as np
import pytest

from connector.engine.recall.embedding import content_hash
from connector.engine.recall.judge import JudgeEmbedder, JudgeUnavailable
from connector.workcopy import vectors as vectors_module
from connector.workcopy.vectors import VectorStore, WhenReady
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
