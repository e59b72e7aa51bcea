"""Recent query vectors (`QueryVectors`): a query asked again within a brain is not embedded again."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.hybrid_support import CountingEmbedder
from connector.workcopy.vectors import QueryVectors


def test_a_query_asked_again_is_embedded_once_within_its_brain_and_model() -> None:
    model = CountingEmbedder()
    cache = QueryVectors()
    mine = cache.embedder("brain-a", "use", lambda text: model.embed([text])[0])
    first = mine("postgres cache")
    again = mine("postgres cache")
    assert model.embedded == 1
    assert np.array_equal(first, again) and np.array_equal(first, model.embed(["postgres cache"])[0])
    # Shared by later calls: nobody may change it in place.
    with pytest.raises(ValueError):
        again[0] = 1.0


def test_other_brains_and_models_never_share_an_entry() -> None:
    """A shared entry would let one user time whether another asked the same words recently (recall
    scopes by asker and brain)."""
    model = CountingEmbedder()
    cache = QueryVectors()
    embed = lambda text: model.embed([text])[0]  # noqa: E731
    cache.embedder("brain-a", "use", embed)("tabs or spaces")
    cache.embedder("brain-b", "use", embed)("tabs or spaces")
    cache.embedder("brain-a", "e5", embed)("tabs or spaces")
    cache.embedder(None, "use", embed)("tabs or spaces")
    assert model.embedded == 4
    cache.embedder("brain-b", "use", embed)("tabs or spaces")
    assert model.embedded == 4


def test_the_cache_keeps_the_most_recent_queries_only() -> None:
    model = CountingEmbedder()
    cache = QueryVectors(capacity=3)
    embed = cache.embedder("brain-a", "use", lambda text: model.embed([text])[0])
    for text in ("one", "two", "three", "one", "four"):  # "one" used again: "two" is the oldest
        embed(text)
    assert len(cache) == 3 and model.embedded == 4
    embed("one")
    embed("three")
    assert model.embedded == 4
    embed("two")  # was dropped
    assert model.embedded == 5 and len(cache) == 3
