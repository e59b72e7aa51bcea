"""Hybrid recall: text matching across languages, meaning, fusion, and vectors computed once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from common.docstore import open_document_store
from connector.engine.format.archive import load_archive, pack_archive
from connector.engine.recall import beside
from connector.engine.recall.embedding import quantize, cosines
from connector.engine.recall.channelfusion import CHANNEL_FUSION, fuse_channels
from connector.engine.recall.exact import recall
from connector.engine.recall.hybrid import (
    DEFAULT_FUSION,
    EXACT_CANNOT_READ,
    NO_GOOD_MATCH,
    Fusion,
    HybridIndex,
    Signals,
    empty_recall_reason,
    has_content_word,
    floor_margin,
    fuse,
    hybrid_recall,
    matches_well,
    memory_texts,
    query_signals,
    ranked_positions,
    recall_in_mode,
)
from connector.engine.recall.index import BrainIndex, RecallError
from connector.engine.recall.textmatch import (
    B,
    K1,
    Bm25Index,
    TextIndex,
    capitals,
    fold_traditional,
    initials,
    normalise,
    query_words_in,
    trigrams,
    word_terms,
)
from connector.engine.writes.ops import Memorize
from connector.workcopy.vectors import VectorStore
from tests.engine.hybrid_support import MEMORIES, NOW, CountingEmbedder, make_brain
from tests.support.fixtures import project_parity_dir


@pytest.fixture(scope="module")
def model_store() -> VectorStore:
    """The real model, memory only (shared: loading it takes about a second)."""
    return VectorStore()


def ids_for(brain, query: str, store: VectorStore, top: int = 3) -> list[str]:  # type: ignore[no-untyped-def]
    return [hit["id"] for hit in recall_in_mode(brain, query, mode="hybrid", source=store, top=top, now=NOW)]


def test_text_terms_fold_stem_and_cut_cjk() -> None:
    assert normalise("Jürgen MÜLLER résumé Ｆｕｌｌ") == "jurgen muller resume full"
    assert normalise("がぎぐ") == "がぎぐ", "Japanese voiced marks are not accents"
    assert word_terms("tabs running") == word_terms("tab runs")[:1] + ["run"]
    assert word_terms("猫的疫苗") == ["猫的", "的疫", "疫苗"]
    assert word_terms("鎌倉でrunning") == ["镰仓", "仓で", "run"]  # kanji folded as traditional Chinese is
    assert trigrams("tab") == [" ta", "tab", "ab "] and trigrams("ab") == []


def test_traditional_chinese_is_read_as_simplified_in_memories_and_queries() -> None:
    assert word_terms("資料庫備份") == word_terms("资料库备份") == ["资料", "料库", "库备", "备份"]
    assert fold_traditional("资料库 backup, データベース") == "资料库 backup, データベース", "nothing else changes"
    index = TextIndex.build(["每週備份資料庫", "服务器的记忆体升级", "図書館の自習室は予約制"])
    for query, memory in (("资料库", 0), ("備份", 0), ("記憶體", 1), ("记忆体", 1), ("図書館の自習室", 2)):
        assert index.word_scores(query).argmax() == memory, query
        assert index.word_coverage(query)[memory] == 1.0, query


# Traditional and simplified writings of one memory each, and Japanese whose kanji fold too.
WRITINGS = [
    {"title": "資料庫備份", "content": "每週日凌晨三點備份資料庫，備份檔保留三十天。", "tags": ["運維"]},
    {"title": "记忆体升级", "content": "服务器的记忆体从十六升级到六十四，下个月再换硬盘。", "tags": ["服务器"]},
    {"title": "図書館", "content": "図書館の自習室は予約制で、平日は夜九時まで開いている。", "tags": ["勉強"]},
]


@pytest.mark.parametrize(
    ("query", "title"),
    [
        ("资料库备份", "資料庫備份"),  # simplified query, traditional memory
        ("記憶體升級", "记忆体升级"),  # traditional query, simplified memory
        ("図書館の自習室", "図書館"),  # Japanese still finds Japanese
        ("週末の散歩", "週末の予定"),
    ],
)
def test_traditional_and_simplified_chinese_find_each_other(query: str, title: str) -> None:
    # Every text gets the same vector: the models tell nothing apart, the words decide.
    store = VectorStore(CountingEmbedder(favour={"": 0}))
    brain, ids = make_brain([*MEMORIES, *WRITINGS])
    hits = recall_in_mode(brain, query, mode="hybrid", source=store, top=3, now=NOW)
    assert hits and hits[0]["id"] == ids[title]


def test_bm25_weighs_each_posting_as_over_the_whole_brain_and_scores_by_those_weights() -> None:
    # Weights are computed per term when a query asks for it; they are bit for bit the textbook
    # formula over every posting at once (the mean document length of the whole brain).
    documents = [word_terms(text) for text in (
        "PostgreSQL replication lag on the replica", "the cat sleeps on the sofa", "replication of the cat videos",
        "", "lag lag lag: replication replication", "我家的猫每年三月去宠物医院打疫苗")]
    bm25 = Bm25Index.build(documents)
    postings = bm25.postings
    lengths = postings.lengths
    norm = K1 * (1 - B + B * lengths[postings.docs] / lengths.mean())
    whole = (postings.counts * (K1 + 1) / (postings.counts + norm)).astype(np.float32)
    for number in range(len(postings.vocabulary)):
        start, end = postings.offsets[number], postings.offsets[number + 1]
        assert bm25.weights_of(number).tobytes() == whole[start:end].tobytes()
    terms = word_terms("replication lag")
    expected = np.zeros(postings.count)
    for term in terms:
        number = postings.vocabulary[term]
        start, end = postings.offsets[number], postings.offsets[number + 1]
        np.add.at(expected, postings.docs[start:end], whole[start:end] * bm25.idf[number])
    assert np.allclose(bm25.scores(terms), expected) and int(np.argmax(bm25.scores(terms))) == 4


def test_the_query_words_a_text_holds_are_those_the_word_channel_matches() -> None:
    """What a hybrid hit's explanation names (the exact engine reads no Chinese or Japanese)."""
    assert query_words_in("疫苗", "我家的猫每年三月去宠物医院打疫苗。") == ["疫苗"]
    assert query_words_in("東京の会議はいつ", "東京で会議がある") == ["東京", "会議"]
    # Bigrams the text holds apart are named apart: it holds no 東京都.
    assert query_words_in("東京都", "東京の京都") == ["東京", "京都"]
    assert query_words_in("猫", "猫") == ["猫"] and query_words_in("猫の予防接種", "猫的疫苗") == []
    # Stems and widths as the channel reads them, named as the query has them (normalised), once.
    assert query_words_in("Vaccines ＲＥＤＩＳ vaccines 予約", "vaccine for redis, 予約済み") == ["vaccines", "redis", "予約"]
    assert query_words_in("Outlook予約", "outlook で予約") == ["outlook", "予約"]
    # Traditional and simplified meet, as in the channel; the word is named as the query writes it.
    assert query_words_in("資料庫", "每周备份资料库") == ["資料庫"] and query_words_in("资料库", "備份資料庫") == ["资料库"]
    # An abbreviation the query writes out, named with the memory's capitals.
    assert query_words_in("typical time to live", "Lower TTLs on api records") == ["time to live (TTL)"]


def test_stems_come_from_the_c_stemmer_and_match_the_pure_python_one() -> None:
    """PyStemmer (C) runs the same Snowball English algorithm as snowballstemmer's own Python
    port, 11x faster (a text index build is mostly stemming): the same stems, word for word."""
    import Stemmer
    from snowballstemmer.english_stemmer import EnglishStemmer

    from connector.engine.recall import textmatch

    assert isinstance(textmatch._STEMMER, Stemmer.Stemmer)
    words = {"running", "generously", "caresses", "ponies", "dying", "skies", "news", "gently", "Müller"}
    for memory in MEMORIES:
        words.update(re.findall(r"[^\W\d_]+", f"{memory['title']} {memory['content']}".casefold()))
    for path in sorted(project_parity_dir().glob("**/*.md"))[:400]:
        words.update(re.findall(r"[^\W\d_]+", path.read_text(encoding="utf-8").casefold()))
    pure = EnglishStemmer()
    assert len(words) > 200
    assert [textmatch._stem(word) for word in sorted(words)] == [pure.stemWord(word) for word in sorted(words)]


def test_near_spellings_find_the_word_meant() -> None:
    index = TextIndex.build(["kubernetes cluster upgrade", "coffee in the morning", "猫的疫苗"])
    assert set(index.fuzzy.similar("kubernetse")) == {"kubernet"}
    scores = index.fuzzy_scores("kuberntes upgrad")
    assert scores.argmax() == 0 and scores[1] == 0 and scores[2] == 0
    assert index.word_scores("疫苗").argmax() == 2


@pytest.mark.parametrize(
    ("query", "title"),
    [
        ("疫苗", "猫的疫苗"),  # Chinese substring, no spaces
        ("鎌倉の散歩", "週末の予定"),  # Japanese phrase
        ("tab width", "Editor settings"),  # inflection: tabs
        ("muller resume", "Contract meeting"),  # accents folded
        ("kubernetse clustr", "Cluster upgrade"),  # typo
        ("knee ache running", "Track habit"),  # stems: knees/runs
        ("when does my cat get vaccinated", "猫的疫苗"),  # across languages, by meaning
    ],
)
def test_hybrid_finds_what_exact_misses(query: str, title: str, model_store: VectorStore) -> None:
    brain, ids = make_brain()
    exact = [hit["id"] for hit in recall(brain, query, top=3, now=NOW)]
    assert ids[title] not in exact
    assert ids[title] in ids_for(brain, query, model_store)


def test_exact_mode_is_the_exact_engine(model_store: VectorStore) -> None:
    brain, _ = make_brain()
    for query in ("postgresql tracking", "疫苗", "coffee morning"):
        assert recall_in_mode(brain, query, mode="exact", top=5, now=NOW) == recall(brain, query, top=5, now=NOW)


def test_hits_carry_the_exact_fields_and_context_mode_stays_exact(model_store: VectorStore) -> None:
    brain, ids = make_brain()
    hits = recall_in_mode(brain, "webhook retries", mode="hybrid", source=model_store, top=3, now=NOW)
    assert hits[0]["id"] == ids["Webhook relay"]
    assert {"id", "title", "path", "type", "score", "relevance", "similarity"} <= set(hits[0])
    assert [hit["score"] for hit in hits] == sorted((hit["score"] for hit in hits), reverse=True)
    context = recall_in_mode(brain, None, mode="hybrid", source=model_store, context=True, top=4, now=NOW)
    assert context == recall(brain, None, context=True, top=4, now=NOW)


def test_a_strong_exact_hit_stays_first() -> None:
    # The semantic side is made to prefer another memory strongly (same direction as the query).
    memories = [
        {"title": "Pgbouncer pooling", "content": "pgbouncer transaction pooling breaks prepared statements"},
        *({"title": f"Pooling note {i}", "content": f"connection pools in general, note {i} POOLVEC"} for i in range(6)),
    ]
    brain, ids = make_brain(memories)
    index = BrainIndex.build(brain)
    embedder = CountingEmbedder(favour={"POOLVEC": 0, "pgbouncer prepared": 0})
    store = VectorStore(embedder)
    hybrid = HybridIndex.build(brain, index, store)
    query = "pgbouncer prepared statements transaction pooling"
    assert recall(brain, query, top=1, now=NOW)[0]["relevance"] >= 0.8
    hits = hybrid_recall(brain, query, index=index, hybrid=hybrid, embed_query=store.embed_query, top=5, now=NOW)
    assert hits[0]["id"] == ids["Pgbouncer pooling"]
    assert hits[1]["similarity"] > hits[0]["similarity"], "the fusion alone would have put another first"


def test_filters_apply_in_hybrid_mode(model_store: VectorStore) -> None:
    brain, ids = make_brain()
    hits = recall_in_mode(brain, "猫 疫苗", mode="hybrid", source=model_store, top=5, now=NOW, as_known_of="2020-01-01T00:00:00Z")
    assert hits == []


def test_vectors_are_computed_once_per_content(tmp_path: Path) -> None:
    brain, ids = make_brain()
    key = bytes(range(32))
    embedder = CountingEmbedder()
    store = VectorStore(embedder, open_document_store(tmp_path), key)
    first = HybridIndex.build(brain, BrainIndex.build(brain), store)
    assert embedder.embedded == len(ids)
    # A pull of the unchanged brain (a new archive, parsed again): nothing embedded.
    pulled = load_archive(pack_archive(brain))
    again = HybridIndex.build(pulled, BrainIndex.build(pulled), store)
    assert embedder.embedded == len(ids)
    assert np.array_equal(again.vectors.codes, first.vectors.codes)
    memory_id = ids["Coffee"]
    by_id = again.vector_of(memory_id)
    assert by_id is not None and np.allclose(by_id, store.get(again.hashes[again.ids.index(memory_id)]))
    assert again.vector_of("mem_missing") is None and store.get(bytes(16)) is None
    # A restarted connector reads them back from the state directory.
    restarted = CountingEmbedder()
    HybridIndex.build(pulled, BrainIndex.build(pulled), VectorStore(restarted, open_document_store(tmp_path), key))
    assert restarted.embedded == 0
    # A memory written elsewhere gets its vector on first use, alone.
    Memorize.from_request([{"title": "New", "type": "learning", "path": "notes/", "content": "brand new"}]).apply(pulled, NOW)
    HybridIndex.build(pulled, BrainIndex.build(pulled), store)
    assert embedder.embedded == len(ids) + 1
    # Sealed under the state key, private files; another key cannot read them (recomputes).
    segments = list((tmp_path / "vectors").glob("seg-*.bin"))
    assert segments and all(path.stat().st_mode & 0o777 == 0o600 for path in segments)
    assert all(b"Editor settings" not in path.read_bytes() for path in segments)
    stranger = CountingEmbedder()
    HybridIndex.build(pulled, BrainIndex.build(pulled), VectorStore(stranger, open_document_store(tmp_path), bytes(32)))
    assert stranger.embedded == len(ids) + 1


def test_a_segment_that_cannot_be_read_is_skipped_and_kept(tmp_path: Path) -> None:
    """A segment whose read fails (no permission, an I/O error) is no damaged segment: the vectors
    are computed without it and it stays. The first such read raised UnboundLocalError (nothing
    read yet to judge), and a later one was judged by the previous segment and removed."""
    from common.docstore import DirectoryStore, DocumentStoreError

    brain, ids = make_brain()
    key = bytes(range(32))
    HybridIndex.build(brain, BrainIndex.build(brain), VectorStore(CountingEmbedder(), open_document_store(tmp_path), key))
    segments = sorted((tmp_path / "vectors").glob("seg-*.bin"))
    assert segments

    class Unreadable(DirectoryStore):
        def get(self, name: str):  # type: ignore[no-untyped-def]
            if name.endswith(segments[0].name):
                raise DocumentStoreError(f"cannot read {name}: Permission denied")
            return super().get(name)

    again = CountingEmbedder()
    store = VectorStore(again, Unreadable(tmp_path), key, prune_unreadable=True)
    HybridIndex.build(brain, BrainIndex.build(brain), store)
    assert segments[0].exists() and 0 < again.embedded <= len(ids)


def test_building_never_changes_the_brain(model_store: VectorStore) -> None:
    brain, _ = make_brain()
    before = dict(brain.files)
    recall_in_mode(brain, "coffee", mode="hybrid", source=model_store, top=3, now=NOW)
    assert brain.files == before


def test_int8_vectors_keep_cosines() -> None:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((50, 512)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    packed = quantize(vectors)
    assert packed.codes.dtype == np.int8 and packed.nbytes == 50 * (512 + 4)
    assert np.max(np.abs(cosines(packed, vectors[3]) - vectors @ vectors[3])) < 0.01


def test_the_model_loads_and_works_without_network(tmp_path: Path) -> None:
    code = (
        "import socket\n"
        "def refuse(*a, **k):\n"
        "    raise OSError('network used')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "socket.getaddrinfo = refuse\n"
        "from connector.engine.recall.embedding import default_embedder\n"
        "v = default_embedder().embed(['my cat needs a vaccine', '我的猫需要打疫苗', 'quarterly tax filing'])\n"
        "print(round(float(v[0] @ v[1]), 3), round(float(v[0] @ v[2]), 3))\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "TRANSFORMERS_"))}
    env["HOME"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    same, different = map(float, done.stdout.split())
    assert same > different + 0.2, "English and Chinese sentences that mean the same are close"


def test_one_build_per_content_key_at_a_time() -> None:
    import threading

    from connector.workcopy.vectors import HybridCache

    brain, ids = make_brain()
    index = BrainIndex.build(brain)
    embedder = CountingEmbedder()
    store = VectorStore(embedder)
    cache = HybridCache(capacity=2)
    built = []

    def build() -> HybridIndex:
        built.append(1)
        return HybridIndex.build(brain, index, store)

    threads = [threading.Thread(target=cache.get_or_build, args=("key", build)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(built) == 1 and embedder.embedded == len(ids) and "key" in cache
    cache.get_or_build("other", build)
    cache.get_or_build("third", build)
    assert "key" not in cache and len(cache) == 2


def test_a_query_about_nothing_in_the_brain_returns_little(model_store: VectorStore) -> None:
    brain, _ = make_brain()
    assert ids_for(brain, "quantum chromodynamics lattice gauge", model_store, top=10) == []


def test_a_superseded_memory_ranks_below_its_replacement(model_store: VectorStore) -> None:
    brain, ids = make_brain([{"title": "Coffee rule", "content": "I drink two coffees every morning."}])
    Memorize.from_request([{
        "title": "Coffee rule now", "type": "learning", "path": "notes/",
        "content": "I drink two coffees every morning, since May one.", "supersedes": [ids["Coffee rule"]],
    }]).apply(brain, NOW)
    hits = recall_in_mode(brain, "how much coffee do I drink", mode="hybrid", source=model_store, top=2, now=NOW)
    assert [hit["title"] for hit in hits] == ["Coffee rule now", "Coffee rule"]
    assert hits[1]["superseded_by"] and hits[1]["score"] < hits[0]["score"] / 2


def test_segments_merge_without_losing_another_process_vectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from connector.workcopy import vectors as vectors_module

    monkeypatch.setattr(vectors_module, "_MAX_SEGMENTS", 3)
    monkeypatch.setattr(vectors_module, "_BATCH", 1)
    key = bytes(range(32))
    texts = [f"memory number {i}" for i in range(6)]
    hashes = [bytes([i]) * 16 for i in range(6)]
    mine = VectorStore(CountingEmbedder(), open_document_store(tmp_path), key)
    mine.vectors(hashes[:1], texts[:1])  # reads the (empty) state
    other = VectorStore(CountingEmbedder(), open_document_store(tmp_path), key)  # a replica on the same state
    other.vectors(hashes[3:5], texts[3:5])
    mine.vectors(hashes[1:3], texts[1:3])  # past 3 segments: merged
    assert len(list((tmp_path / "vectors").glob("seg-*.bin"))) <= 3
    fresh = CountingEmbedder()
    VectorStore(fresh, open_document_store(tmp_path), key).vectors(hashes[:5], texts[:5])
    assert fresh.embedded == 0


def test_word_coverage_is_absolute_and_counts_near_spellings() -> None:
    index = TextIndex.build(["kubernetes cluster upgrade window", "swimming lessons on sunday", "coffee in the morning", "猫的疫苗"])
    # Unlike BM25 divided by the best, a memory sharing only a common word of the query scores low.
    lessons = index.word_coverage("saxophone lessons")
    assert lessons.argmax() == 1 and 0 < lessons[1] < 0.5
    assert index.word_scores("saxophone lessons")[1] == 1.0, "the relative score calls it the best match"
    assert index.word_coverage("kubernetes cluster upgrade")[0] == pytest.approx(1.0)
    # A misspelt word counts by how close its nearest spelling is; CJK bigrams count too.
    typo = index.word_coverage("kubernetse clustr")
    assert typo.argmax() == 0 and 0.5 < typo[0] < 1.0
    assert not index.word_coverage("kubernetse clustr", near=False).any()
    assert index.word_coverage("疫苗")[3] == pytest.approx(1.0)
    assert not index.word_coverage("").any() and not index.word_coverage("zebra").any()


def test_abbreviations_are_spelt_out_from_the_brain_own_words() -> None:
    assert initials("Rereading Designing Data-Intensive Applications. The HorizontalPodAutoscaler scales") == {
        "rddia": "Rereading Designing Data-Intensive Applications",
        "ddia": "Designing Data-Intensive Applications",
        "thpa": "The HorizontalPodAutoscaler",
        "hpa": "HorizontalPodAutoscaler",
    }
    assert initials("a lone Word and lower case words") == {}
    texts = ["Rereading Designing Data-Intensive Applications: write skew", "The HorizontalPodAutoscaler targets CPU",
             "Notes on the hpa of the garden"]
    index = TextIndex.build(texts)
    assert index.spell_out("what I learned from DDIA?") == "what I learned from Designing Data-Intensive Applications?"
    # A word some memory holds as a word ("hpa" in the third) is not an abbreviation to spell out.
    assert index.spell_out("HPA thresholds") is None and index.spell_out("saxophone") is None
    coverage = index.word_coverage("DDIA")
    assert coverage.tolist() == [1.0, 0.0, 0.0], "the memory that writes it out holds the abbreviation"


def test_an_abbreviation_the_query_writes_out_finds_the_memories_writing_it() -> None:
    assert capitals("Lower TTLs before the SLO review in NYC; IT and PR stay, Go too") == ["ttl", "slo", "nyc"]
    texts = ["DNS: lower TTLs on api records a day before a cutover", "Our SLO for tracking is 99.9 %",
             "Time off: live a little, the time to rest", "Notes on the dsn setting"]
    index = TextIndex.build(texts)
    assert index.reworded("typical time to live") == "typical TTL"
    assert index.reworded("service level objective for tracking") == "SLO for tracking"
    coverage = index.word_coverage("time to live")
    assert coverage[0] == pytest.approx(1.0), "the memory writing TTL holds the words it stands for"
    assert coverage[3] == 0.0
    # BM25 reads the abbreviation too, in its plural as written ("TTLs": the stemmer keeps the s),
    # beside the memory holding the words themselves; and an abbreviation spelt out the other way.
    assert index.word_scores("typical time to live")[0] == 0.0
    assert index.bm25("typical time to live")[0] > 0 and index.bm25("typical time to live")[2] > 0
    assert TextIndex.build(["Rereading Designing Data-Intensive Applications", "some applications"]).bm25("DDIA")[0] > 0
    # A run starting or ending with a stopword is no abbreviation ("saxophone lessons on" is not
    # "SLO"); nor is one the query also abbreviates itself; nor a word in lower case ("dsn").
    assert index.reworded("saxophone lessons on Saturday") is None
    assert index.reworded("TTL: time to live") is None
    assert index.reworded("dining spot nearby") is None


def test_the_embedding_sees_the_spelt_out_query(model_store: VectorStore) -> None:
    book = {"title": "Book notes", "content": "Rereading Designing Data-Intensive Applications: write skew", "tags": ["books"]}
    brain, ids = make_brain([*MEMORIES, book])
    new_id = ids["Book notes"]
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, model_store)
    signals = query_signals("what I learned from DDIA", [], index=index, hybrid=hybrid, embed_query=model_store.embed_query)
    position = index.positions[new_id]
    assert signals.written is not None and signals.semantic[position] > signals.written[position] + 0.1
    plain = query_signals("write skew", [], index=index, hybrid=hybrid, embed_query=model_store.embed_query)
    assert plain.written is None


def test_the_embedding_sees_the_query_with_what_it_writes_out_abbreviated(model_store: VectorStore) -> None:
    dns = {"title": "DNS changes before migrations", "content": "Lower TTLs on api records to 60 s a day before a cutover.",
           "tags": ["dns"]}
    brain, ids = make_brain([*MEMORIES, dns])
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, model_store)
    signals = query_signals("typical time to live", [], index=index, hybrid=hybrid, embed_query=model_store.embed_query)
    position = index.positions[ids["DNS changes before migrations"]]
    assert signals.written is not None and signals.semantic[position] > signals.written[position] + 0.05
    # It holds none of the query's words as written: "time to live" counts through its TTLs.
    assert signals.near_words[position] > 0.5 and signals.near_words.argmax() == position


@pytest.mark.parametrize("query", ["saxophone lessons", "学习萨克斯", "サックスの練習", "horse riding stables"])
def test_a_query_on_an_absent_topic_returns_nothing(query: str, model_store: VectorStore) -> None:
    brain, _ = make_brain()
    assert ids_for(brain, query, model_store, top=10) == []
    assert empty_recall_reason("hybrid", query) == NO_GOOD_MATCH
    # Without the floor the same fusion would have listed the nearest strangers.
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, model_store)
    unfloored = hybrid_recall(brain, query, index=index, hybrid=hybrid, embed_query=model_store.embed_query, top=10,
                              now=NOW, fusion=replace(CHANNEL_FUSION, gate=False))
    assert len(unfloored) == len(index.memories)


@pytest.mark.parametrize(
    ("query", "title"),
    [("coffee", "Coffee"), ("when does my cat get vaccinated", "猫的疫苗"), ("海辺 散歩", "週末の予定"),
     ("webhook relay retries", "Webhook relay")],
)
def test_a_matching_query_still_finds_its_memory_first(query: str, title: str, model_store: VectorStore) -> None:
    brain, ids = make_brain()
    found = ids_for(brain, query, model_store, top=10)
    assert found and found[0] == ids[title]


def test_the_floor_weighs_meaning_and_words_jointly() -> None:
    # Four memories; the signals are set by hand: the floor is a pure function of them.
    def signals(semantic: list[float], words: list[float], strong: int | None = None) -> Signals:
        zeros = np.zeros(4, dtype=np.float32)
        covered = np.asarray(words, dtype=np.float32)
        return Signals(np.asarray(semantic, dtype=np.float32), covered, covered, zeros, zeros, strong)

    fusion = Fusion(floor=0.3, strength_words=0.5, window=0.1, standout=0.0)
    _, listed = fuse(signals([0.2, 0.1, 0.1, 0.0], [0.0, 0.0, 0.0, 0.0]), fusion)
    assert not listed.any(), "weak meaning, no words: nothing matches well"
    _, listed = fuse(signals([0.2, 0.1, 0.1, 0.0], [0.4, 0.0, 0.0, 0.0]), fusion)
    assert listed.tolist() == [True, False, False, False], "the same meaning with the query's words does"
    _, listed = fuse(signals([0.5, 0.45, 0.1, 0.0], [0.0, 0.0, 0.0, 0.0]), fusion)
    assert listed.tolist() == [True, True, False, False], "a strong meaning alone does; the far tail is cut"
    _, listed = fuse(signals([0.0, 0.1, 0.1, 0.0], [0.0, 0.0, 0.0, 0.0], strong=3), fusion)
    assert listed.tolist() == [False, False, False, True], "a strong exact hit always stands"
    eligible = np.array([True, False, True, True])
    _, listed = fuse(signals([0.5, 0.9, 0.1, 0.0], [0.0, 0.0, 0.0, 0.0]), fusion, eligible)
    assert listed.tolist() == [True, False, False, False], "filtered memories neither list nor set the bar"
    _, listed = fuse(signals([0.2, 0.1, 0.1, 0.0], [0.0, 0.0, 0.0, 0.0]), replace(fusion, floor=None))
    assert listed.all()


def test_the_floor_discounts_memories_that_resemble_everything_near_them() -> None:
    # The same strength says less of a memory in a dense part of the brain (a hub): the
    # floor lowers each of the strongest memories by half its hubness.
    def signals(semantic: list[float], hubness: list[float]) -> Signals:
        zeros = np.zeros(len(semantic), dtype=np.float32)
        return Signals(np.asarray(semantic, dtype=np.float32), zeros, zeros, zeros, zeros, None,
                       np.asarray(hubness, dtype=np.float32))

    fusion = Fusion(floor=0.1, hubness=0.5, strength_min=0.2, window=0.1, hit_z=None)
    _, listed = fuse(signals([0.3, 0.1, 0.0], [0.2, 0.2, 0.2]), fusion)
    assert listed.tolist() == [True, False, False], "0.3 - 0.5 x 0.2 reaches the floor"
    _, listed = fuse(signals([0.3, 0.1, 0.0], [0.6, 0.2, 0.2]), fusion)
    assert not listed.any(), "the same cosine to a hub does not (0.3 - 0.5 x 0.6 < 0.1)"
    _, listed = fuse(signals([0.3, 0.1, 0.0], [np.nan, 0.2, 0.2]), fusion)
    assert not listed.any(), "a hubness not computed counts as the highest"
    _, listed = fuse(signals([0.19, 0.1, 0.0], [0.0, 0.0, 0.0]), fusion)
    assert not listed.any(), "below the absolute minimum, whatever the hubness"
    _, listed = fuse(signals([0.3, 0.1, 0.0], [0.6, 0.2, 0.2]), replace(fusion, hubness=0.0, floor=0.25))
    assert listed.tolist() == [True, False, False], "without the correction the absolute floor alone decides"
    # The margin says how far the best memory is over the floor (matches_well: at least 0).
    eligible = np.ones(3, dtype=bool)
    margins = {(0.3, 0.2): 0.3 - 0.5 * 0.2 - 0.1, (0.3, 0.6): 0.3 - 0.5 * 0.6 - 0.1, (0.19, 0.0): 0.19 - 0.2}
    for (best, hub), margin in margins.items():
        case = signals([best, 0.1, 0.0], [hub, 0.2, 0.2])
        assert floor_margin(case, eligible, fusion) == pytest.approx(margin, abs=1e-6)
        assert matches_well(case, eligible, fusion) == (margin >= 0)
    assert floor_margin(signals([0.3, 0.1, 0.0], [0.2, 0.2, 0.2]), np.zeros(3, dtype=bool), fusion) == -np.inf


def test_listed_memories_must_stand_out_of_a_populated_brain() -> None:
    # 40 memories: one best, one just under it, the rest spread low; all within the window.
    semantic = np.linspace(0.30, 0.36, 40, dtype=np.float32)
    semantic[0], semantic[1] = 0.5, 0.47
    zeros = np.zeros(40, dtype=np.float32)
    signals = Signals(semantic, zeros, zeros, zeros, zeros, None, None)
    fusion = Fusion(floor=0.22, hubness=0.0, window=0.2, hit_z=2.0)
    _, listed = fuse(signals, fusion)
    assert np.flatnonzero(listed).tolist() == [0, 1], "the crowd within the window is cut by its z-score"
    _, listed = fuse(signals, replace(fusion, hit_z=None))
    assert listed.sum() == 40
    # In a small brain there is no population to stand out of: the window alone decides.
    small = Signals(semantic[:5], zeros[:5], zeros[:5], zeros[:5], zeros[:5], None, None)
    _, listed = fuse(small, fusion)
    assert listed.all()


def test_hubness_is_the_mean_cosine_to_the_nearest_other_memories() -> None:
    vectors = np.array([[1, 0, 0], [0.8, 0.6, 0], [0, 0, 1]], dtype=np.float32)
    texts = ["a", "b", "c"]
    hybrid = HybridIndex(["m0", "m1", "m2"], [b"0", b"1", b"2"], TextIndex.build(texts), quantize(vectors), [])
    hubness = hybrid.hubness([0, 2])
    # Three memories: each has two others (fewer than HUBNESS_NEIGHBOURS), never itself.
    assert hubness[0] == pytest.approx((0.8 + 0.0) / 2, abs=0.02)
    assert hubness[2] == pytest.approx(0.0, abs=0.02)
    assert hybrid.hubness([0]) == {0: hubness[0]} and set(hybrid.hubness_known) == {0, 2}


def test_empty_answers_say_why() -> None:
    assert empty_recall_reason("hybrid", "saxophone") == NO_GOOD_MATCH
    assert empty_recall_reason("exact", "疫苗") == EXACT_CANNOT_READ
    assert empty_recall_reason("exact", "ワクチン") == EXACT_CANNOT_READ
    assert empty_recall_reason("exact", "saxophone") is None
    assert empty_recall_reason("hybrid", "  ") is None and empty_recall_reason("exact", None) is None


def test_vectors_are_kept_per_brain_across_restarts_and_without_a_state_dir(tmp_path: Path) -> None:
    from connector.workcopy import vectors as vectors_module

    brain, ids = make_brain()
    index = BrainIndex.build(brain)
    key = bytes(range(32))
    directory = tmp_path / "vectors"
    # A segment of the first format (keyed by content alone, shared by all brains) is dropped.
    old = VectorStore(CountingEmbedder(), open_document_store(tmp_path), key)
    old._load_once()
    directory.mkdir(mode=0o700, exist_ok=True)
    payload = vectors_module._OLD_MAGIC + b"\0" * 8
    nonce = os.urandom(12)
    (directory / "seg-0000000000000000.bin").write_bytes(nonce + old._aead.encrypt(nonce, payload, old.model_id.encode()))
    for brain_id, state in (("alice", (open_document_store(tmp_path), key)), ("alice", (None, None))):
        embedder = CountingEmbedder()
        store = VectorStore(embedder, *state)
        first = HybridIndex.build(brain, index, store.for_brain(brain_id))
        assert embedder.embedded == len(ids)
        HybridIndex.build(brain, index, store.for_brain(brain_id))
        assert embedder.embedded == len(ids), "known vectors are not embedded again"
        HybridIndex.build(brain, index, store.for_brain("bob"))
        assert embedder.embedded == 2 * len(ids), "another brain's vectors are never used"
        HybridIndex.build(brain, index, store)
        assert embedder.embedded == 3 * len(ids), "nor those of a brain from the bare store"
        assert np.array_equal(store.for_brain("bob").get(first.hashes[0]), store.for_brain(brain_id).get(first.hashes[0]))
    assert not (directory / "seg-0000000000000000.bin").exists()
    # Restarted: alice's and bob's vectors come back from the state directory, each its own.
    restarted = CountingEmbedder()
    store = VectorStore(restarted, open_document_store(tmp_path), key)
    for brain_id in ("alice", "bob", None):
        HybridIndex.build(brain, index, store.for_brain(brain_id))
    assert restarted.embedded == 0 and len(store) == 3 * len(ids)
    HybridIndex.build(brain, index, store.for_brain("carol"))
    assert restarted.embedded == len(ids)
    # Vectors computed elsewhere can be kept for a brain (benchmarks seed copies of one brain).
    seeded = HybridIndex.build(brain, index, store.for_brain("alice"))
    store.keep(seeded.hashes, seeded.vectors, "dave")
    HybridIndex.build(brain, index, store.for_brain("dave"))
    assert restarted.embedded == len(ids)


def test_a_version_with_unchanged_texts_reuses_the_previous_index() -> None:
    brain, ids = make_brain()
    embedder = CountingEmbedder()
    store = VectorStore(embedder).for_brain("b")
    first = HybridIndex.build(brain, BrainIndex.build(brain), store)
    pulled = load_archive(pack_archive(brain))
    again = HybridIndex.build(pulled, BrainIndex.build(pulled), store, first)
    assert again.text is first.text and again.vectors is first.vectors and again.ids == first.ids
    Memorize.from_request([{"title": "New", "type": "learning", "path": "notes/", "content": "brand new"}]).apply(pulled, NOW)
    changed = HybridIndex.build(pulled, BrainIndex.build(pulled), store, first)
    assert changed.text is not first.text and len(changed.ids) == len(ids) + 1
    assert embedder.embedded == len(ids) + 1


def test_the_e5_channel_runs_beside_the_others_and_answers_as_inline(
    model_store: VectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The e5 query is embedded on a worker thread while this one scores the other channels: the
    # answer is the one the channels computed one after the other give, the query embedded once.
    monkeypatch.setattr(beside, "SPARE_CORE", beside.SpareCore(share=0.0))  # the worker whatever the host's load
    brain, _ = make_brain()
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, model_store)
    second = VectorStore(CountingEmbedder(favour={"PostgreSQL": 3, "database": 3}))
    e5 = second.vectors([b"%d" % number for number in range(len(index.memories))], memory_texts(brain, index))
    callers: list[threading.Thread] = []
    entered = threading.Event()

    def embed_e5(text: str) -> np.ndarray:
        callers.append(threading.current_thread())
        entered.set()
        return second.embed_query(text)

    def embed_use(text: str) -> np.ndarray:
        # The recall's own thread gets here after starting the e5 job: it waits until a worker has
        # taken it (asked for before that, the recall would run the step itself).
        assert entered.wait(30), "no worker took the e5 job"
        return model_store.embed_query(text)

    for query in ("which database did we pick", "猫 疫苗", "webhook retries"):
        callers.clear()
        entered.clear()
        hits = hybrid_recall(brain, query, index=index, hybrid=hybrid, embed_query=embed_use, e5=e5,
                             embed_e5_query=embed_e5, top=5, now=NOW)
        assert len(callers) == 1 and callers[0] is not threading.current_thread()
        exact = recall(brain, query, top=50, now=NOW, index=index)
        inline = query_signals(query, exact, index=index, hybrid=hybrid, embed_query=model_store.embed_query, e5=e5,
                               embed_e5_query=second.embed_query)
        assert inline.e5 is not None
        assert np.array_equal(inline.e5, cosines(e5, second.embed_query(query)))
        channels = {"exact": inline.exact, "bm25": inline.bm25, "use": inline.semantic, "e5": inline.e5}
        everyone = np.ones(len(index.memories), dtype=bool)
        fused, listed = fuse_channels(channels, CHANNEL_FUSION.for_query(channels, everyone, inline.words), everyone,
                                      hybrid.adjacent(index), matches_well(inline, everyone))
        expected = [hybrid.ids[position] for position in ranked_positions(fused, listed, inline.strong, 5, hybrid.ids)]
        assert [hit["id"] for hit in hits] == expected


def test_a_failing_e5_query_fails_the_recall_and_a_bad_argument_is_still_what_is_said(model_store: VectorStore) -> None:
    # The e5 job started beside the exact engine: its failure is the recall's, but an argument the
    # exact engine refuses is reported as such (the job's own failure is dropped with it).
    brain, _ = make_brain()
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, model_store)
    e5 = quantize(np.eye(len(index.memories), 32, dtype=np.float32))

    def broken(text: str) -> np.ndarray:
        raise RuntimeError("engine failed")

    with pytest.raises(RuntimeError, match="engine failed"):
        hybrid_recall(brain, "database", index=index, hybrid=hybrid, embed_query=model_store.embed_query, e5=e5,
                      embed_e5_query=broken, now=NOW)
    with pytest.raises(RecallError, match="not an ISO 8601 instant"):
        hybrid_recall(brain, "database", index=index, hybrid=hybrid, embed_query=model_store.embed_query, e5=e5,
                      embed_e5_query=broken, now=NOW, as_of="yesterday")


STOPWORD_MEMORIES = [*MEMORIES,
                     {"title": "Server costs", "content": "The cost of the servers and of the disks is what it is.",
                      "tags": ["costs"]},
                     {"title": "Chores", "content": "What is left of the chores and the errands is on the list.",
                      "tags": ["home"]},
                     {"title": "Node drains", "content": "k8s nodes are drained before each upgrade.", "tags": ["k8s"]},
                     {"title": "Cache", "content": "The cache TTL is five minutes for the price lists.", "tags": ["cache"]}]


@pytest.mark.parametrize("query", ["the of and", "what is it", "The OF and?", "is it the", "ｔｈｅ ｏｆ ａｎｄ"])
def test_a_query_of_stopwords_alone_lists_nothing_in_hybrid_mode(query: str, model_store: VectorStore) -> None:
    """Memories holding every word of "the of and" matched it in full (word coverage 1.0) and ten
    memories were listed; such a query says nothing by its words. Exact mode stays the reference's."""
    brain, _ = make_brain(STOPWORD_MEMORIES)
    assert not has_content_word(query)
    assert ids_for(brain, query, model_store, top=10) == []
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, model_store)
    signals = query_signals(query, [], index=index, hybrid=hybrid, embed_query=model_store.embed_query)
    assert not signals.words.any() and not signals.near_words.any() and not signals.fuzzy.any()
    assert signals.bm25 is not None and not signals.bm25.any()
    assert recall_in_mode(brain, query, mode="exact", top=10, now=NOW) == recall(brain, query, top=10, now=NOW)


@pytest.mark.parametrize(("query", "title"), [("k8s", "Node drains"), ("TTL", "Cache"), ("猫", "猫的疫苗"),
                                              ("the cache TTL", "Cache"), ("what is the cost of the servers", "Server costs")])
def test_short_real_words_and_cjk_keep_their_word_channels(query: str, title: str, model_store: VectorStore) -> None:
    brain, ids = make_brain(STOPWORD_MEMORIES)
    assert has_content_word(query)
    found = ids_for(brain, query, model_store, top=10)
    assert found and found[0] == ids[title], found


def test_what_counts_as_a_content_word() -> None:
    assert not any(map(has_content_word, ["", "  ", "the of and", "a b c", "what is it?", "？", "- _"]))
    assert all(map(has_content_word, ["k8s", "TTL", "猫", "кот", "ＲＥＤＩＳ", "it is Redis", "ok", "café"]))
