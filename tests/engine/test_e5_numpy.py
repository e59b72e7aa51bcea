"""The numpy e5 pass: the engine's tokens and vectors, the background embedding's path, its fallback."""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from connector.engine.recall.e5 import NUMPY_MIN_TEXTS, E5Embedder, e5_embedder
from connector.engine.recall.e5forward import Shape, _attention, _Scratch, gelu_
from connector.engine.recall.e5numpy import NumpyE5, packaged_model_path
from connector.engine.recall.e5tokenizer import E5Tokenizer
from connector.engine.recall.e5weights import E5FormatError, E5Weights
from connector.engine.recall.embedding import MAX_EMBED_CHARS
from connector.engine.recall.hybrid import HybridIndex, memory_texts
from connector.engine.recall.index import BrainIndex
from connector.workcopy.backfill import E5Backfill
from connector.workcopy.vectors import E5_BATCH, E5_PREFIX, VectorStore
from tests.engine.hybrid_support import MEMORIES, CountingEmbedder, backfilled, make_brain
from tests.support.waiting import seconds_until

TEXTS = [
    "I adopted a grey cat from the shelter last spring.",
    "Meeting with Jürgen Müller about the résumé review on Friday.",
    "我家的猫每年三月去宠物医院打疫苗。",
    "土曜日は鎌倉で友達と海辺を散歩する予定です。",
    "  spaces   before, between\tand after  ",
    "ＦＵＬＬ－ＷＩＤＴＨ ｌｅｔｔｅｒｓ, the ﬁ ligature, emoji 🐈‍⬛ and a rare 𠀀 character",
    "",
    "cut at a NUL\0 as the engine reads a C string",
]
# Several 510-token windows (the engine splits a long text the same way).
LONG = ("我家的猫每年三月去宠物医院打疫苗，医生说它很健康。" * 80)[:MAX_EMBED_CHARS]


@pytest.fixture(scope="module")
def engine() -> E5Embedder:
    embedder = e5_embedder()
    if embedder is None:
        pytest.fail("the e5 engine does not load on this machine (x86-64 Linux expected)")
    return E5Embedder(bulk=False)  # the engine alone, as the reference


@pytest.fixture(scope="module")
def numpy_pass() -> NumpyE5:
    return NumpyE5()


def test_tokens_are_the_engines(engine: E5Embedder, numpy_pass: NumpyE5) -> None:
    model = engine._loaded()
    for text in [*TEXTS, LONG]:
        assert len(numpy_pass.token_ids(text)) + 2 == model.token_count(text), text


def test_the_vocabulary_finds_each_piece_as_a_dict_of_them_would(numpy_pass: NumpyE5) -> None:
    # The tokenizer's compact table (ids and hashes, the pieces' bytes left in the mapped file)
    # against the plain dict it replaced: the first id of each piece, none for the rest.
    tables = numpy_pass.weights.tokenizer()
    vocabulary = E5Tokenizer(tables)._vocabulary
    pieces = [bytes(tables.blob[tables.ends[i] : tables.ends[i + 1]]).decode("utf-8", "surrogateescape")
              for i in range(len(tables.ends) - 1)]
    expected: dict[str, int] = {}
    for index, piece in enumerate(pieces):
        if piece and index != tables.unk:
            expected.setdefault(piece, index)
    assert len(expected) > 200_000
    assert all(vocabulary.find(piece) == index for piece, index in expected.items())
    strangers = [piece + "\u2581zq" for piece in pieces[:: 97]] + ["", "<unk>", "\u2581" * 40, "\udcff"]
    assert [vocabulary.find(text) for text in strangers] == [expected.get(text, -1) for text in strangers]


def test_vectors_are_the_engines(engine: E5Embedder, numpy_pass: NumpyE5) -> None:
    texts = [*TEXTS, LONG]
    assert len(numpy_pass.token_ids(LONG)) > 2 * 510  # three windows
    expected = engine.embed(texts)
    for threads in (1, 2):
        got = numpy_pass.passages(texts, threads=threads)
        assert got.shape == expected.shape and got.dtype == np.float32
        assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        cosines = np.einsum("ij,ij->i", got, expected)
        # The engine's own source built here (gcc -O3, AVX2) is as far from the shipped binary
        # (0.99995-0.99998): the int8 rounding of activations flips where floats differ a little.
        assert cosines.min() > 0.9995 and cosines.mean() > 0.9999, cosines


def test_gelu_is_the_erf_form_to_a_millionth() -> None:
    x = np.linspace(-12, 12, 48001, dtype=np.float32)
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    got = gelu_(x.copy(), np.empty_like(x), np.empty_like(x), np.empty_like(x))
    assert np.abs(got - want).max() < 1e-6


def test_a_damaged_weights_file_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "e5.bin"
    shutil.copyfile(packaged_model_path(), path)
    with open(path, "r+b") as file:
        file.truncate(60_000_000)  # the layers' tensors run past the end
    with pytest.raises(E5FormatError, match="past the end"):
        E5Weights(path)
    path.write_bytes(b"not a model at all" * 10)
    with pytest.raises(E5FormatError, match="not an e5 model"):
        E5Weights(path)


def test_many_texts_go_through_the_numpy_pass_and_a_few_through_the_engine(engine: E5Embedder) -> None:
    e5 = E5Embedder()
    texts = (TEXTS * NUMPY_MIN_TEXTS)[:NUMPY_MIN_TEXTS]
    many = e5.embed(texts)
    assert e5.numpy_embedded == NUMPY_MIN_TEXTS
    few = e5.embed(texts[:-1])
    one = e5.embed(TEXTS[:1])
    assert e5.numpy_embedded == NUMPY_MIN_TEXTS  # a write's few memories: the engine (faster for them)
    assert np.array_equal(few, engine.embed(texts[:-1])) and np.array_equal(one, engine.embed(TEXTS[:1]))
    assert np.einsum("ij,ij->i", many, engine.embed(texts)).min() > 0.9995


def test_where_the_numpy_pass_fails_the_engine_embeds(engine: E5Embedder, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    e5 = E5Embedder()

    def broken(self: NumpyE5, texts: list[str], threads: int = 1) -> np.ndarray:
        raise MemoryError("no room for the activations")

    monkeypatch.setattr(NumpyE5, "passages", broken)
    with caplog.at_level(logging.WARNING, logger="connector.e5"):
        vectors = e5.embed(TEXTS)
        again = e5.embed(TEXTS[::-1])
    assert np.array_equal(vectors, engine.embed(TEXTS)) and np.array_equal(again, engine.embed(TEXTS[::-1]))
    assert e5.numpy_embedded == 0
    assert [r.message for r in caplog.records].count(
        "the numpy e5 pass failed (no room for the activations); the engine embeds from now on") == 1


def test_the_background_embedding_uses_the_numpy_pass(engine: E5Embedder, tmp_path: Path) -> None:
    from common.docstore import open_document_store

    memories = [*MEMORIES, *({"title": f"Note {n}", "content": f"Walked {n} km along the river in Lisbon.",
                              "tags": ["walks"]} for n in range(2 * E5_BATCH))]
    brain, _ = make_brain(memories)
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, VectorStore(CountingEmbedder()).for_brain("b"))
    e5 = E5Embedder()
    state = open_document_store(tmp_path)
    backfill = E5Backfill(lambda: VectorStore(e5, state=state, state_key=bytes(32), prefix=E5_PREFIX, batch=E5_BATCH))
    try:
        assert backfill.vectors("b", brain, index, hybrid) is None  # computed in the background
        seconds_until(lambda: backfilled(backfill), 300, every=0.1, what="the background embedding")
        vectors = backfill.vectors("b", brain, index, hybrid)
    finally:
        backfill.close()
    assert vectors is not None and len(vectors) == len(memories)
    assert e5.numpy_embedded == len(memories)
    kept = vectors.codes * vectors.scales[:, None]
    expected = engine.embed(memory_texts(brain, index))
    # Each kept vector is int8 (cosine ~1e-3 from its float): the engine's, as closely as that allows.
    cosines = np.einsum("ij,ij->i", kept, expected) / np.linalg.norm(kept, axis=1)
    assert cosines.min() > 0.999, cosines.min()


def _reference_attention(qkv: np.ndarray, heads: int, windows: list[tuple[int, int]]) -> np.ndarray:
    """Softmax attention in float64, row by row, each window over its own tokens."""
    hidden = qkv.shape[0] // 3
    head = hidden // heads
    out = np.zeros((hidden, qkv.shape[1]))
    for start, end in windows:
        q, k, v = (qkv[part * hidden : (part + 1) * hidden, start:end].astype(np.float64) for part in range(3))
        for h in range(heads):
            rows = slice(h * head, (h + 1) * head)
            scores = q[rows].T @ k[rows] / math.sqrt(head)
            weights = np.exp(scores - scores.max(axis=1, keepdims=True))
            weights /= weights.sum(axis=1, keepdims=True)
            out[rows, start:end] = v[rows] @ weights.T
    return out


def test_attention_keeps_every_row_even_far_below_the_windows_largest_score() -> None:
    shape = Shape(hidden=64, layers=1, heads=2, ffn=128, eps=1e-12)
    rng = np.random.default_rng(7)
    windows = [(0, 5), (5, 12)]
    qkv = rng.standard_normal((3 * 64, 12)).astype(np.float32)
    # Token 2's query meets every key of its window at a score ~300 below the window's largest
    # (token 0's): shifted by that largest score alone, its row would underflow to zeros.
    qkv[:64, 0] *= 60
    qkv[:64, 2] *= -60
    qkv[64:128, :5] = np.abs(qkv[64:128, :5]) * np.sign(qkv[:64, 0])[:, None]
    context = np.empty((64, 12), np.float32)
    _attention(shape, qkv, windows, context, _Scratch(shape, 12, 7))
    assert np.isfinite(context).all()
    assert np.allclose(context, _reference_attention(qkv, 2, windows), atol=1e-4)
