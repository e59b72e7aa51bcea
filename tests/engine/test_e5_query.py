"""e5 queries through the int8 kernels (ONNX Runtime): the engine's vectors, built off the recall's
thread, and the engine wherever the kernels cannot load or fail."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from connector.engine.recall.e5 import E5Embedder, e5_embedder
from connector.engine.recall.e5int8 import Int8Encoder, Int8Unavailable
from connector.engine.recall.e5numpy import NumpyE5
from connector.engine.recall.embedding import MAX_EMBED_CHARS
from connector.workcopy.vectors import e5_store

# Queries as people ask them, in the three languages recall serves, short and long.
QUERIES = [
    "cat", "tabs or spaces", "what did I decide about the database migration",
    "kubernetes cluster upgrade plan for next quarter", "Jürgen Müller résumé",
    "where did we go hiking last summer with the kids and which trail was too steep",
    "postgres vs PostgreSQL connection pooling", "TF", "PII redaction rules", "what time should I go to bed",
    "我的猫叫什么名字", "上次体检的结果怎么样", "宠物医院疫苗", "周末和朋友去哪里吃饭比较好",
    "来週の会議はいつですか", "鎌倉で散歩", "好きなラーメン屋さん", "東京から大阪への引っ越しの準備",
    "the dog's vaccination schedule", "things to put in my suitcase", "  spaces   and\ttabs  ", "",
    "ＦＵＬＬ－ＷＩＤＴＨ query with emoji 🐈‍⬛", "when is mom's birthday party",
    "favourite restaurant in Lisbon for dinner with friends", "how much protein per day",
]
# Two windows of 510 tokens: the query is cut and averaged as the engine does.
LONG = ("我家的猫每年三月去宠物医院打疫苗，医生说它很健康。" * 80)[:MAX_EMBED_CHARS]


@pytest.fixture(scope="module")
def engine() -> E5Embedder:
    if e5_embedder() is None:
        pytest.fail("the e5 engine does not load on this machine (x86-64 Linux expected)")
    reference = E5Embedder(bulk=False, fast_queries=False)  # the engine alone, as the reference
    reference.load()
    return reference


@pytest.fixture(scope="module")
def fast() -> E5Embedder:
    embedder = E5Embedder()
    embedder.load()
    assert embedder.prepare_queries(timeout=120), "the int8 query kernels do not load here"
    return embedder


def test_query_vectors_are_the_engines(engine: E5Embedder, fast: E5Embedder) -> None:
    before = fast.int8_queries
    expected = np.stack([engine.embed_query(text) for text in [*QUERIES, LONG]])
    got = np.stack([fast.embed_query(text) for text in [*QUERIES, LONG]])
    assert fast.int8_queries - before == len(QUERIES) + 1
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosines = dict(zip([*QUERIES, "LONG"], np.einsum("ij,ij->i", got, expected).tolist(), strict=True))
    # As close as the bulk numpy pass (the engine's own source compiled here is as far from its
    # shipped binary, 0.99995-0.99998): the int8 rounding of activations flips where floats differ
    # a little. The empty text (4 tokens; recall never embeds it: no query is context mode) 0.99989.
    assert min(value for text, value in cosines.items() if text) >= 0.9999, cosines
    assert cosines[""] >= 0.9998 and np.mean(list(cosines.values())) >= 0.99995, cosines


def test_a_query_is_not_a_passage(fast: E5Embedder) -> None:
    text = "what did I decide about the database migration"
    assert float(fast.embed_query(text) @ fast.embed([text])[0]) < 0.99


def test_a_query_as_a_passage_is_the_engines_passage(engine: E5Embedder, fast: E5Embedder) -> None:
    # The answer gate's cascade compares the query with memories text against text: its vector is
    # the one the engine gives the same text as a memory, through the int8 kernels or the engine.
    texts = ["what did I decide about the database migration", "宠物医院疫苗", "鎌倉で散歩", "TF"]
    before = fast.int8_queries
    got = np.stack([fast.embed_query_as_passage(text) for text in texts])
    assert fast.int8_queries - before == len(texts)
    as_memories = engine.embed(texts)
    assert np.einsum("ij,ij->i", got, as_memories).min() >= 0.9999
    assert np.einsum("ij,ij->i", np.stack([engine.embed_query_as_passage(text) for text in texts]), as_memories).min() >= 0.9999
    assert float(got[0] @ fast.embed_query(texts[0])) < 0.99


def test_where_the_graph_cannot_be_written_there_is_no_int8_path(tmp_path: Path) -> None:
    weights = NumpyE5().weights
    weights.path = str(tmp_path / "gone.bin")  # the child reads the file itself: here it is not there
    with pytest.raises(Int8Unavailable, match="the int4 encoder could not be written: .*gone.bin"):
        Int8Encoder(weights)


def test_queries_wait_for_nothing_while_the_kernels_build(engine: E5Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    # The build is held until the queries meanwhile are asserted: left to itself (~1 s) it could end
    # before them when this thread is late on a loaded machine.
    e5 = E5Embedder()
    building, release = threading.Event(), threading.Event()
    build = NumpyE5.int8_encoder

    def held_build(self: NumpyE5) -> Int8Encoder:
        if self is e5._numpy:  # this embedder's build only: another one in this process goes on
            building.set()
            release.wait(60)  # bounded: a test that fails before releasing it leaves no thread waiting for ever
        return build(self)

    monkeypatch.setattr(NumpyE5, "int8_encoder", held_build)
    text = "kubernetes cluster upgrade plan"
    first = e5.embed_query(text)  # nobody asked for the kernels: the engine, and no build begins
    assert e5.query_kernels == "unloaded" and e5.int8_queries == 0 and not building.is_set()
    assert np.array_equal(first, engine.embed_query(text))
    try:
        assert not e5.prepare_queries(timeout=0)  # begun, not waited for
        assert e5.query_kernels == "loading"
        meanwhile = e5.embed_query(text)
        assert e5.int8_queries == 0 and np.array_equal(meanwhile, first)
        assert building.wait(60), "the kernels' build did not begin in the background"
    finally:
        release.set()
    assert e5.prepare_queries(timeout=120) and e5.query_kernels == "ready"
    later = e5.embed_query(text)
    assert e5.int8_queries == 1 and float(later @ first) >= 0.9999


def test_the_connectors_e5_store_begins_building_the_kernels() -> None:
    assert e5_embedder() is not None
    server = e5_store(fast_queries=True)  # what the connector's background embedding makes at first use
    assert server is not None and isinstance(server.embedder, E5Embedder)
    assert server.embedder.query_kernels in ("loading", "ready")
    assert server.embedder.prepare_queries(timeout=120)


def test_off_means_the_engine_alone(engine: E5Embedder) -> None:
    e5 = E5Embedder(fast_queries=False)
    assert not e5.prepare_queries(timeout=1)
    assert np.array_equal(e5.embed_query("tabs"), engine.embed_query("tabs")) and e5.int8_queries == 0


def test_where_onnxruntime_cannot_load_the_engine_embeds_queries(
    engine: E5Embedder, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as where the package is not installed
    with pytest.raises(Int8Unavailable, match="onnxruntime cannot load"):
        Int8Encoder(NumpyE5().weights)
    e5 = E5Embedder()
    with caplog.at_level(logging.WARNING, logger="connector.e5"):
        assert not e5.prepare_queries(timeout=120)
        vectors = [e5.embed_query(text) for text in QUERIES[:3]]
    assert all(np.array_equal(got, engine.embed_query(text)) for got, text in zip(vectors, QUERIES[:3], strict=True))
    assert e5.int8_queries == 0
    messages = [record.message for record in caplog.records]
    assert len([m for m in messages if m.startswith("the int8 e5 query pass cannot load")]) == 1, messages


def test_where_the_int8_pass_fails_the_engine_embeds_queries_from_then_on(
    engine: E5Embedder, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    e5 = E5Embedder()
    assert e5.prepare_queries(timeout=120)

    def broken(self: NumpyE5, text: str, prefix: str = "") -> np.ndarray:
        raise MemoryError("no room for the activations")

    monkeypatch.setattr(NumpyE5, "query", broken)
    with caplog.at_level(logging.WARNING, logger="connector.e5"):
        got = [e5.embed_query(text) for text in QUERIES[:3]]
    assert all(np.array_equal(vector, engine.embed_query(text)) for vector, text in zip(got, QUERIES[:3], strict=True))
    assert [r.message for r in caplog.records].count(
        "the int8 e5 query pass failed (no room for the activations); the engine embeds queries from now on") == 1
