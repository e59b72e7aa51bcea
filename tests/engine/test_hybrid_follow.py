"""The hybrid index follows writes (`HybridIndex.changed`, and `HybridIndex.build` given the
previous version's index) and answers exactly as a fresh build.

Random sequences of writes (memorize, some superseding or relating an older memory, pin,
unpin, forget, a memory's file or title edited elsewhere and pulled) run on a brain of
English, Chinese and Japanese memories. After each step the index carried along by the
write's change (from the journal, or by comparing the brains file by file as after a
pull) must hold what `HybridIndex.build` makes from scratch (every posting, weight, idf,
word, trigram, abbreviation either way and vector, up to how terms are numbered) and give the same
hybrid recall answers, to the last bit.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.engine.format.archive import load_archive, pack_archive
from connector.engine.format.brain import Brain
from connector.engine.format.change import BrainChange
from connector.engine.writes.errors import BrainError
from connector.engine.recall.embedding import Quantized, content_hash
from connector.engine.recall.hubness import Neighbours
from connector.engine.recall.hybrid import HybridIndex, hybrid_recall, memory_texts
from connector.engine.recall.hybridpack import pack, unpack
from connector.engine.recall.index import BrainIndex
from connector.engine.writes.ops import Forget, Memorize, MemoryInput, Operation, Pin, Unpin
from connector.engine.recall.textmatch import Postings, TextIndex
from connector.workcopy.vectors import VectorStore
from tests.engine.hybrid_support import NOW, CountingEmbedder, make_brain

WORDS = ["kettle", "harbour", "lantern", "meadow", "quartz", "saffron", "tundra", "violet", "Kubernetes",
         "Designing Data-Intensive Applications", "HorizontalPodAutoscaler", "Müller", "猫の予防接種", "鎌倉で散歩",
         "数据库迁移", "資料庫遷移", "running", "runs", "2025", "TTLs", "SLO"]
QUERIES = ["kettle harbour", "kubernetse upgrade", "DDIA", "HPA settings", "muller", "猫", "鎌倉", "数据库", "资料库迁移",
           "running quartz", "violet meadow lantern", "saffron 2025", "what about tundra", "typical time to live",
           "service level objective"]

memory_specs = st.fixed_dictionaries({
    "words": st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    "supersede": st.booleans(),
    "relate": st.booleans(),
    "pinned": st.booleans(),
})
steps = st.lists(
    st.tuples(
        st.one_of(
            st.tuples(st.just("memorize"), st.lists(memory_specs, min_size=1, max_size=2)),
            st.tuples(st.sampled_from(["pin", "unpin", "forget", "edit body", "edit title"]), st.integers(0, 10_000)),
        ),
        st.sampled_from(["journal", "journal", "pull"]),
    ),
    min_size=1,
    max_size=6,
)


def _ids(brain: Brain) -> list[str]:
    index = brain.read_json("index.json")
    return list(index["memories"]) if isinstance(index, dict) else []


def _operation(brain: Brain, action: tuple[str, Any], counter: int, rnd: random.Random) -> Operation | None:
    kind, argument = action
    ids = _ids(brain)
    if kind == "memorize":
        inputs = []
        for number, spec in enumerate(argument):
            title = " ".join(spec["words"]) + f" {counter}-{number}"
            target = rnd.choice(ids) if ids else None
            inputs.append(MemoryInput(
                title=title, type="learning", content=f"{title} about " + " ".join(rnd.sample(WORDS, 3)), path="notes/",
                tags=(rnd.choice(WORDS).lower(),), supersedes=(target,) if spec["supersede"] and target else (),
                related=(target,) if spec["relate"] and target else (), pinned=spec["pinned"],
            ))
        return Memorize(inputs)
    target = ids[argument % len(ids)] if ids else "mem_20990101_000000"
    if kind in ("pin", "unpin", "forget"):
        return {"pin": Pin, "unpin": Unpin, "forget": lambda memory_id: Forget(memory_id, force=True)}[kind](target)
    return None


def _edit(brain: Brain, kind: str, argument: int, rnd: random.Random) -> bool:
    """A memory changed elsewhere (another device): its file's body or its title in the index."""
    index = brain.read_json("index.json")
    ids = list(index["memories"])
    if not ids:
        return False
    target = ids[argument % len(ids)]
    entry = index["memories"][target]
    if kind == "edit title":
        entry["title"] = " ".join(rnd.sample(WORDS, 2))
        brain.write_json("index.json", index)
    else:
        path = entry["path"]
        brain.write(path, brain.files[path] + ("\n" + " ".join(rnd.sample(WORDS, 3)) + "\n").encode())
    return True


def _terms(postings: Postings) -> dict[str, tuple[tuple[int, ...], tuple[float, ...]]]:
    """Postings by term, whatever the terms' numbers."""
    found = {}
    for term, number in postings.vocabulary.items():
        start, end = int(postings.offsets[number]), int(postings.offsets[number + 1])
        found[term] = (tuple(postings.docs[start:end].tolist()), tuple(postings.counts[start:end].tolist()))
    return found


def _text_state(text: TextIndex) -> dict[str, Any]:
    words = text.words
    weights = {}
    for term, number in words.postings.vocabulary.items():
        weights[term] = (words.weights_of(number).tobytes(), words.idf[number].tobytes())
    fuzzy = text.fuzzy
    trigrams: dict[str, set[str]] = {word: set() for word in fuzzy.words}
    for gram, (docs, _) in _terms(fuzzy.grams).items():
        for doc in docs:
            trigrams[fuzzy.words[doc]].add(gram)
    return {
        "words": _terms(words.postings), "lengths": words.postings.lengths.tobytes(), "count": words.postings.count,
        "weights": weights,
        "fuzzy": {word: (fuzzy.stems[n], float(fuzzy.sizes[n]), frozenset(trigrams[word])) for n, word in enumerate(fuzzy.words)},
        "initials": _terms(text.initials), "initial lengths": text.initials.lengths.tobytes(),
        "spelled_out": text.spelled_out, "holders": _terms(text.holders), "capitals": _terms(text.capitals),
    }


def _same_index(followed: HybridIndex, built: HybridIndex) -> None:
    assert followed.ids == built.ids and followed.hashes == built.hashes and followed.newer == built.newer
    assert np.array_equal(followed.vectors.codes, built.vectors.codes)
    assert np.array_equal(followed.vectors.scales, built.vectors.scales)
    assert _text_state(followed.text) == _text_state(built.text)


class SecondEmbedder(CountingEmbedder):
    """Stands in for the e5 channel's model: other vectors, another model id."""

    model_id = "test-second-embedder"
    dimensions = 24


def _e5_of(brain: Brain, index: BrainIndex, e5: Any) -> Quantized:
    texts = memory_texts(brain, index)
    return e5.vectors([content_hash(e5.model_id, text) for text in texts], texts)


class JudgeStandIn(CountingEmbedder):
    """Stands in for the judge's model: other vectors, another model id."""

    model_id = "test-judge"
    dimensions = 16


def _fill_e5(hybrid: HybridIndex, e5: Any, judge: Any = None) -> None:
    """What the e5 backfill does to a followed index: embed its pending memories only (with the
    judge too when given)."""
    if hybrid.e5_pending:
        texts = list(hybrid.e5_pending.values())
        judged = None if judge is None else judge.vectors([content_hash(judge.model_id, text) for text in texts], texts)
        hybrid.with_e5(list(hybrid.e5_pending), e5.vectors([content_hash(e5.model_id, text) for text in texts], texts),
                       judged)


def _held(hybrid: HybridIndex) -> list[bytes]:
    """The bytes of an index's vectors (USE, e5, the judge's)."""
    return [part.tobytes() for vectors in (hybrid.vectors, hybrid.e5, hybrid.judge) if vectors is not None
            for part in (vectors.codes, vectors.scales)]


def _answers(brain: Brain, index: BrainIndex, hybrid: HybridIndex, store: Any, e5: Any = None) -> list[str]:
    answers = []
    for query in QUERIES:
        for options in ({}, {"top": 3}, {"top": 25, "as_of": "2026-06-01T00:00:00.000Z"}):
            answers.append(repr(hybrid_recall(brain, query, index=index, hybrid=hybrid, embed_query=store.embed_query,
                                              now=NOW, e5=hybrid.e5 if e5 is not None else None,
                                              embed_e5_query=e5.embed_query if e5 is not None else None, **options)))
    return answers


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(plan=steps, seed=st.integers(0, 2**16))
def test_followed_hybrid_index_is_the_fresh_build(plan: list[Any], seed: int) -> None:
    rnd = random.Random(seed)
    brain, _ = make_brain()
    store = VectorStore(CountingEmbedder()).for_brain("b")
    second = SecondEmbedder()
    e5 = VectorStore(second).for_brain("b")
    judged = JudgeStandIn()
    judge = VectorStore(judged).for_brain("b")
    hybrid = HybridIndex.build(brain, BrainIndex.build(brain), store)
    hybrid.e5 = _e5_of(brain, BrainIndex.build(brain), e5)
    hybrid.judge = _e5_of(brain, BrainIndex.build(brain), judge)
    hybrid.fill_neighbours()
    for counter, (action, how) in enumerate(plan):
        working = brain.copy()
        working.journal = []
        operation = _operation(working, action, counter, rnd)
        try:
            if operation is not None:
                operation.apply(working, NOW + timedelta(minutes=counter))
            elif not _edit(working, action[0], action[1], rnd):
                continue
        except BrainError:
            continue  # refused: the brain is unchanged
        journal, working.journal = working.journal, None
        if how == "pull" or operation is None:
            pulled = load_archive(pack_archive(working))
            change = BrainChange.between(brain, pulled)
            working = pulled
        else:
            change = BrainChange.of_journal(journal)
        index = BrainIndex.build(working)
        before = _held(hybrid)
        followed = hybrid.changed(working, index, store, change)
        assert followed is not None  # writes and pulls keep the memories' order
        built = HybridIndex.build(working, index, store)
        _same_index(followed, built)
        # Hubness: from the older version's neighbours (grown) when the change kept its memories
        # and only added some after them, else asked one memory at a time until the background
        # computes them whole: the fresh build's either way, to the bit.
        count = len(hybrid.ids)
        kept_first = followed.ids[:count] == hybrid.ids and followed.hashes[:count] == hybrid.hashes
        assert followed.needs_neighbours == (not kept_first)
        everything = list(range(len(built.ids)))
        fresh = Neighbours.of(built.vectors)
        assert fresh is not None
        assert followed.hubness(everything) == built.hubness(everything) == dict(enumerate(fresh.means.tolist()))
        assert _answers(working, index, followed, store) == _answers(working, index, built, store)
        # A build given the previous version's index (a pull: `changed` over every text) too.
        again = HybridIndex.build(working, index, store, hybrid)
        _same_index(again, built)
        # The e5 vectors follow too: the kept memories' rows move, only the new ones are
        # embedded (pending until then), and the answers are those of the whole brain's e5.
        assert followed.e5 is not None and set(followed.e5_pending) <= set(range(len(followed.ids)))
        embedded, pending = second.embedded, len(followed.e5_pending)
        # The judge's rows go with e5's: none of the whole brain's until the pending ones are read.
        assert followed.judge_vectors() is None if followed.e5_pending else followed.judge_vectors() is not None
        judge_embedded = judged.embedded
        _fill_e5(followed, e5, judge)
        _fill_e5(again, e5, judge)
        assert second.embedded - embedded <= pending  # never the whole brain again
        assert judged.embedded - judge_embedded <= pending
        built.e5 = _e5_of(working, index, e5)
        built_judge = _e5_of(working, index, judge)
        for carried in (followed, again):
            assert not carried.e5_pending and carried.e5 is not None
            assert np.array_equal(carried.e5.codes, built.e5.codes) and np.array_equal(carried.e5.scales, built.e5.scales)
            read = carried.judge_vectors()
            assert read is not None
            assert np.array_equal(read.codes, built_judge.codes) and np.array_equal(read.scales, built_judge.scales)
        assert _answers(working, index, followed, store, e5) == _answers(working, index, built, store, e5)
        # Two newer versions (grown in place where they only add memories) and their filled
        # rows left the older one as it was.
        assert _held(hybrid) == before
        followed.fill_neighbours()  # as the background does for a version that cannot grow them
        brain, hybrid = working, followed


def test_a_memorize_reads_and_embeds_only_the_new_memory() -> None:
    brain, _ = make_brain()
    embedder = CountingEmbedder()
    store = VectorStore(embedder).for_brain("b")
    hybrid = HybridIndex.build(brain, BrainIndex.build(brain), store)
    embedded = embedder.embedded
    working = brain.copy()
    working.journal = []
    Memorize([MemoryInput(title="Harbour lantern", type="learning", content="A lantern at the harbour.", path="notes/",
                          supersedes=(hybrid.ids[0],))]).apply(working, NOW)
    change = BrainChange.of_journal(working.journal)
    index = BrainIndex.build(working)
    read: list[str] = []
    original = Brain.read_text

    def counting(self: Brain, path: str) -> str | None:
        read.append(path)
        return original(self, path)

    Brain.read_text = counting  # type: ignore[method-assign]
    try:
        followed = hybrid.changed(working, index, store, change)
    finally:
        Brain.read_text = original  # type: ignore[method-assign]
    assert followed is not None and embedder.embedded == embedded + 1
    assert followed.e5 is None and not followed.e5_pending  # none before: the background computes them all
    # The new memory's file, and the superseded one's (its entry changed: its text is compared).
    assert len(read) == 2
    assert followed.text.words.postings.count == len(hybrid.ids) + 1
    assert followed.text is not hybrid.text and hybrid.text.words.postings.count == len(hybrid.ids)  # the old one intact


def test_a_pin_keeps_the_text_index_and_vectors() -> None:
    brain, _ = make_brain()
    store = VectorStore(CountingEmbedder()).for_brain("b")
    hybrid = HybridIndex.build(brain, BrainIndex.build(brain), store)
    hybrid.hubness([0, 1])
    working = brain.copy()
    working.journal = []
    Pin(hybrid.ids[3]).apply(working, NOW)
    followed = hybrid.changed(working, BrainIndex.build(working), store, BrainChange.of_journal(working.journal))
    assert followed is not None and followed.text is hybrid.text and followed.vectors is hybrid.vectors
    assert followed.hubness_known == hybrid.hubness_known


def test_an_index_read_back_from_the_disk_cache_follows_writes_too() -> None:
    brain, _ = make_brain()
    store = VectorStore(CountingEmbedder()).for_brain("b")
    index = BrainIndex.build(brain)
    kept = unpack(pack(HybridIndex.build(brain, index, store), store.model_id), index, store.model_id)
    assert kept is not None
    working = brain.copy()
    working.journal = []
    Forget(kept.ids[2], force=True).apply(working, NOW)
    Memorize([MemoryInput(title="Designing Data-Intensive Applications", type="learning", content="Rereading DDIA.",
                          path="notes/")]).apply(working, NOW)
    index = BrainIndex.build(working)
    followed = kept.changed(working, index, store, BrainChange.of_journal(working.journal))
    assert followed is not None
    built = HybridIndex.build(working, index, store)
    _same_index(followed, built)
    assert _answers(working, index, followed, store) == _answers(working, index, built, store)


def test_a_memorize_leaves_only_its_memory_e5_vector_to_compute() -> None:
    brain, _ = make_brain()
    store = VectorStore(CountingEmbedder()).for_brain("b")
    second = SecondEmbedder()
    e5 = VectorStore(second).for_brain("b")
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, store)
    hybrid.e5 = _e5_of(brain, index, e5)
    embedded = second.embedded
    working = brain.copy()
    working.journal = []
    Memorize([MemoryInput(title="Harbour lantern", type="learning", content="A lantern at the harbour.",
                          path="notes/")]).apply(working, NOW)
    index = BrainIndex.build(working)
    followed = hybrid.changed(working, index, store, BrainChange.of_journal(working.journal))
    assert followed is not None and followed.e5 is not None
    new = followed.ids.index(next(memory_id for memory_id in followed.ids if memory_id not in hybrid.ids))
    assert list(followed.e5_pending) == [new] and second.embedded == embedded  # nothing embedded on the write
    assert hybrid.e5 is not None and not hybrid.e5_pending  # the old version keeps its vectors
    _fill_e5(followed, e5)
    assert second.embedded == embedded + 1 and not followed.e5_pending
    fresh = _e5_of(working, index, e5)
    assert np.array_equal(followed.e5.codes, fresh.codes)


def test_memorizes_in_a_row_grow_the_vectors_in_place() -> None:
    """Each version of a run of memorizes holds its vectors in the buffer of the one before
    (no copy of the brain's rows per write); every version keeps the rows it had."""
    brain, _ = make_brain()
    store = VectorStore(CountingEmbedder()).for_brain("b")
    e5 = VectorStore(SecondEmbedder()).for_brain("b")
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, store)
    hybrid.e5 = _e5_of(brain, index, e5)
    versions = [hybrid]
    for counter in range(3):
        working = brain.copy()
        working.journal = []
        Memorize([MemoryInput(title=f"Harbour lantern {counter}", type="learning",
                              content=f"Lantern number {counter} hangs at the harbour.", path="notes/")]
                 ).apply(working, NOW + timedelta(minutes=counter))
        index = BrainIndex.build(working)
        followed = versions[-1].changed(working, index, store, BrainChange.of_journal(working.journal))
        assert followed is not None and followed.e5 is not None
        _fill_e5(followed, e5)
        versions.append(followed)
        brain = working
    first, *later = versions[1:]
    for version in later:
        for name in ("vectors", "e5"):
            assert np.shares_memory(getattr(version, name).codes, getattr(first, name).codes), name
    for version in versions:
        built = HybridIndex.build(brain, BrainIndex.build(brain), store)
        assert np.array_equal(version.vectors.codes, built.vectors.codes[: len(version.ids)])
        fresh = _e5_of(brain, BrainIndex.build(brain), e5)
        assert version.e5 is not None and np.array_equal(version.e5.codes, fresh.codes[: len(version.ids)])
