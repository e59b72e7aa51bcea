"""e5 queries, and passages once they are ready, through the int8 kernels (ONNX Runtime): the
engine's vectors, built off the recall's thread, and the other passes wherever the kernels cannot
load or fail."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from connector.engine.recall.e5 import NUMPY_MIN_TEXTS, E5Embedder, e5_embedder
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


def _held_build(e5: E5Embedder, monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """``e5``'s kernels' build, held: the first event is set once it begins, the second lets it go on."""
    building, release = threading.Event(), threading.Event()
    build = NumpyE5.int8_encoder

    def held_build(self: NumpyE5) -> Int8Encoder:
        if self is e5._numpy:  # this embedder's build only: another one in this process goes on
            building.set()
            release.wait(60)  # bounded: a test that fails before releasing it leaves no thread waiting for ever
        return build(self)

    monkeypatch.setattr(NumpyE5, "int8_encoder", held_build)
    return building, release


def _failing_kernels(monkeypatch: pytest.MonkeyPatch) -> E5Embedder:
    """An embedder whose int8 kernels are built, then fail on every text."""
    e5 = E5Embedder()
    assert e5.prepare_queries(timeout=120)

    def broken(self: NumpyE5, content: list[int]) -> np.ndarray:
        raise MemoryError("no room for the activations")

    monkeypatch.setattr(NumpyE5, "_through_int8", broken)
    return e5


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


def test_passages_go_through_the_kernels_once_they_are_ready(engine: E5Embedder, fast: E5Embedder) -> None:
    # A write's one new memory, a few, and a batch the numpy pass would have taken: all through
    # the kernels, each text's own vector in its own row (the texts are shared by two threads).
    texts = [text for text in QUERIES if text.strip()] + [LONG]
    assert len(texts) >= NUMPY_MIN_TEXTS
    before, numpy_before = fast.int8_passages, fast.numpy_embedded
    one, few, many = fast.embed(texts[:1]), fast.embed(texts[:3]), fast.embed(texts)
    assert fast.int8_passages - before == 1 + 3 + len(texts) and fast.numpy_embedded == numpy_before
    expected = engine.embed(texts)
    assert many.dtype == np.float32 and many.shape == expected.shape
    cosines = np.einsum("ij,ij->i", many, expected)
    assert cosines.min() >= 0.9999, dict(zip(texts, cosines.tolist(), strict=True))
    assert np.array_equal(one[0], many[0]) and np.array_equal(few, many[:3])
    # Each row is its own text's: far from the others' (the nearest pair of these texts is < 0.99).
    assert (many @ expected.T - np.eye(len(texts)) * 2).max() < 0.99


def test_a_servers_passages_wait_for_the_kernels_being_built(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every vector a server computes comes from one path (the paths differ by ~1e-4 in cosine):
    # passages embedded while the kernels build wait for them, then go through them.
    e5 = E5Embedder()
    building, release = _held_build(e5, monkeypatch)
    texts = QUERIES[:3]
    got: list[np.ndarray] = []
    try:
        e5.prepare_queries(timeout=0)
        assert building.wait(60), "the kernels' build did not begin in the background"
        embedding = threading.Thread(target=lambda: got.append(e5.embed(texts)))
        embedding.start()
        embedding.join(0.5)
        assert embedding.is_alive() and not got  # waiting for the kernels, not embedding through another pass
    finally:
        release.set()
    embedding.join(120)
    assert len(got) == 1 and e5.int8_passages == len(texts) and e5.numpy_embedded == 0


def test_where_the_kernels_fail_on_passages_the_other_passes_embed_from_then_on(
    engine: E5Embedder, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    e5 = _failing_kernels(monkeypatch)
    texts = QUERIES[:NUMPY_MIN_TEXTS]
    with caplog.at_level(logging.WARNING, logger="connector.e5"):
        many, one = e5.embed(texts), e5.embed(texts[:1])
        query = e5.embed_query(texts[0])
    assert e5.int8_passages == 0 and e5.numpy_embedded == len(texts) and e5.query_kernels == "failed"
    assert np.einsum("ij,ij->i", many, engine.embed(texts)).min() >= 0.9999
    assert np.array_equal(one, engine.embed(texts[:1])) and np.array_equal(query, engine.embed_query(texts[0]))
    assert [r.message for r in caplog.records].count(
        "the int8 e5 pass failed (no room for the activations); the numpy pass and the engine embed from now on") == 1


def test_where_the_graph_cannot_be_written_there_is_no_int8_path(tmp_path: Path) -> None:
    weights = NumpyE5().weights
    weights.path = str(tmp_path / "gone.bin")  # the child reads the file itself: here it is not there
    with pytest.raises(Int8Unavailable, match="the int4 encoder could not be written: .*gone.bin"):
        Int8Encoder(weights)


def test_queries_wait_for_nothing_while_the_kernels_build(engine: E5Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    # The build is held until the queries meanwhile are asserted: left to itself (~1 s) it could end
    # before them when this thread is late on a loaded machine.
    e5 = E5Embedder()
    building, release = _held_build(e5, monkeypatch)
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
    e5 = _failing_kernels(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="connector.e5"):
        got = [e5.embed_query(text) for text in QUERIES[:3]]
    assert all(np.array_equal(vector, engine.embed_query(text)) for vector, text in zip(got, QUERIES[:3], strict=True))
    assert [r.message for r in caplog.records].count(
        "the int8 e5 query pass failed (no room for the activations); the engine embeds queries from now on") == 1
