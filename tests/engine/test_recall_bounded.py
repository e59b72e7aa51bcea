"""Bounded recall (numpy columns, exact scoring of candidates only) against the
exhaustive scalar path, on generated brains that exercise every branch: context
mode with project/topics/task, as_of / as_known_of, quarantine, superseded and
expired memories, brains without edges, negative weights, unusual decay rates."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.engine.format.brain import Brain
from connector.engine.format.text import tokenize
from connector.engine.recall.columns import Postings, bm25_relevance, doc_terms
import connector.engine.recall.exact as recall_module
from connector.engine.recall.exact import recall, relevances
from connector.engine.recall.index import BrainIndex
from tests.engine.test_recall import make_brain

NOW = datetime(2026, 1, 1, tzinfo=UTC)
VOCABULARY = ["postgres", "cache", "vacuum", "garden", "deploy", "tests", "alpha", "queue", "index", "lock", "guitar"]
TOPICS = ["db", "cache", "ops", "home", "music"]
DAYS = ["2024-06-01", "2025-06-01", "2025-11-20", "2025-12-31", "2026-01-01", "2026-03-01"]


def generated_brain(rnd: random.Random, count: int, *, edges: bool = True, odd_rates: bool = False) -> Brain:
    """A brain of ``count`` memories with every field recall reads, drawn from ``rnd``."""
    entries: dict[str, dict[str, Any]] = {}
    bodies: dict[str, str] = {}
    for i in range(count):
        day = rnd.choice(DAYS)
        entry: dict[str, Any] = {
            "title": " ".join(rnd.choices(VOCABULARY, k=rnd.randint(1, 3))),
            "path": f"n/{i}.md",
            "type": "learning",
            "created": f"{rnd.choice(DAYS[:4])}T00:00:00.000Z",
            "last_accessed": f"{day}T{rnd.randint(0, 23):02d}:00:00.000Z",
            "strength": round(rnd.uniform(0.0, 1.0), 3),
            "decay_rate": rnd.choice([0.95, 0.99, 0.995, 0.9999, 1.0]),
            "tags": rnd.sample(VOCABULARY, rnd.randint(0, 3)),
        }
        if odd_rates and rnd.random() < 0.3:
            entry["decay_rate"] = rnd.choice([1.001, 1.01, 1.2, 0.0, 0.5])
        if rnd.random() < 0.7:
            entry["salience"] = round(rnd.uniform(0.0, 1.0), 2)
        if rnd.random() < 0.8:
            entry["encoding_context"] = {
                "project": rnd.choice(["atlas", "homepage", "", None]),
                "topics": rnd.sample(TOPICS, rnd.randint(0, 3)) if rnd.random() < 0.9 else "db",
                "task_type": rnd.choice(["debugging", "planning", ""]),
            }
        roll = rnd.random()
        if roll < 0.1:
            entry["pinned"] = True
        elif roll < 0.15:
            entry["stable"] = True
        if rnd.random() < 0.2:
            entry["origin"] = rnd.choice(["user", "agent-inferred", "tool-output", "external", "other"])
        if rnd.random() < 0.1:
            entry["superseded_by"] = "m0"
        if rnd.random() < 0.1:
            entry["valid_until"] = f"{rnd.choice(DAYS)}T00:00:00.000Z"
        if rnd.random() < 0.1:
            entry["valid_from"] = f"{rnd.choice(DAYS)}T00:00:00.000Z"
        if rnd.random() < 0.08:
            entry["quarantined"] = True
        entries[f"m{i}"] = entry
        bodies[f"m{i}"] = " ".join(rnd.choices(VOCABULARY, k=rnd.randint(1, 12)))
    files: dict[str, Any] = {}
    if edges:
        graph: dict[str, dict[str, Any]] = {}
        for _ in range(count * rnd.randint(1, 5)):
            a, b = f"m{rnd.randrange(count)}", f"m{rnd.randrange(count + 3)}"
            weight = rnd.choice([0.1, 0.1, 0.2, 0.3, 0.5, 0.9, 1.0, 1.5, -0.4])
            graph.setdefault(a, {})[b] = {"weight": weight}
            if rnd.random() < 0.8:
                graph.setdefault(b, {})[a] = {"weight": weight}
        files["associations"] = {"version": 1, "edges": graph}
    if rnd.random() < 0.3:
        files["config"] = {"quarantine_mode": "enforce"}
    return make_brain(entries, bodies, **files)


def random_arguments(rnd: random.Random) -> dict[str, Any]:
    """Recall arguments covering query and context mode and the time options."""
    context = rnd.random() < 0.5
    arguments: dict[str, Any] = {"top": rnd.choice([1, 2, 3, 5, 10]), "context": context, "now": NOW}
    if not context or rnd.random() < 0.3:
        arguments["query"] = " ".join(rnd.choices(VOCABULARY + ["the", "zebra"], k=rnd.randint(1, 4)))
    if rnd.random() < 0.6:
        arguments["project"] = rnd.choice(["atlas", "homepage", "nowhere"])
    if rnd.random() < 0.5:
        arguments["topics"] = ",".join(rnd.sample(TOPICS, rnd.randint(1, 3)))
    if rnd.random() < 0.4:
        arguments["task"] = rnd.choice(["debugging", "planning"])
    if rnd.random() < 0.2:
        arguments["as_of"] = f"{rnd.choice(DAYS)}T12:00:00.000Z"
    if rnd.random() < 0.15:
        arguments["as_known_of"] = f"{rnd.choice(DAYS)}T12:00:00.000Z"
    return arguments


def check_same(index: BrainIndex, arguments: dict[str, Any]) -> None:
    arguments = dict(arguments)
    query = arguments.pop("query", None)
    fast = recall(None, query, index=index, **arguments)
    slow = recall(None, query, index=index, exhaustive=True, **arguments)
    assert fast == slow, arguments


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("edges", "odd_rates"), [(True, False), (False, False), (True, True)])
def test_bounded_equals_exhaustive_on_generated_brains(seed: int, edges: bool, odd_rates: bool) -> None:
    rnd = random.Random(seed * 7 + edges * 3 + odd_rates)
    index = BrainIndex.build(generated_brain(rnd, rnd.randint(60, 250), edges=edges, odd_rates=odd_rates))
    for _ in range(25):
        check_same(index, random_arguments(rnd))


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=5, max_value=60))
def test_bounded_equals_exhaustive_property(seed: int, count: int) -> None:
    rnd = random.Random(seed)
    index = BrainIndex.build(generated_brain(rnd, count, edges=rnd.random() < 0.8, odd_rates=rnd.random() < 0.3))
    for _ in range(4):
        check_same(index, random_arguments(rnd))


def test_bounded_path_is_taken_on_ordinary_brains(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cross-checks above must exercise the bounded path, not its fallback."""
    index = BrainIndex.build(generated_brain(random.Random(5), 200))

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("fell back to scoring every memory")

    monkeypatch.setattr(recall_module, "_every", refuse)
    assert recall(None, "postgres cache", top=5, index=index, now=NOW)
    assert recall(None, context=True, project="atlas", topics="db,ops", task="debugging", top=5, index=index, now=NOW)


def test_huge_values_fall_back_and_stay_exact() -> None:
    """Decay rates that overflow, or huge strengths: bounds are not trusted, the
    scalar path answers (as the reference: non-finite terms count as 0)."""
    rnd = random.Random(11)
    brain = generated_brain(rnd, 80)
    entries = brain.read_json("index.json")["memories"]
    entries["m1"]["decay_rate"] = 1e10
    entries["m1"]["last_accessed"] = "2020-01-01T00:00:00.000Z"
    entries["m2"]["strength"] = 1e12
    entries["m3"]["decay_rate"] = -0.5
    brain.write_json("index.json", {"version": 2, "memories": entries})
    index = BrainIndex.build(brain)
    for _ in range(20):
        check_same(index, random_arguments(rnd))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["postgr", "cache", "vacuum", "garden"]),
            st.one_of(st.integers(-2, 5), st.floats(allow_nan=False, allow_infinity=False, min_value=-3, max_value=9), st.booleans(), st.just("3")),
            max_size=4,
        ),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.sampled_from(["postgres", "cache", "vacuum", "garden", "zebra"]), max_size=4),
)
def test_array_relevance_is_bit_identical(tfs: list[dict[str, Any]], query: list[str]) -> None:
    """BM25 on arrays equals the scalar loop exactly, garbage counts included."""
    documents = {f"m{i}": {"tf": tf, "length": float(len(tf) * 3)} for i, tf in enumerate(tfs)}
    df: dict[str, int] = {}
    for tf in tfs:
        for term in tf:
            df[term] = df.get(term, 0) + 1
    entries = {f"m{i}": {"title": f"t{i}", "path": f"n/{i}.md"} for i in range(len(tfs))}
    brain = Brain()
    brain.write_json("index.json", {"version": 2, "memories": entries})
    brain.write_json("search-index.json", {"version": 1, "doc_count": len(tfs), "documents": documents, "df": df})
    index = BrainIndex.build(brain)
    assert not index.stats_rebuilt
    text = " ".join(query)
    expected = relevances(index, text)
    terms = list(dict.fromkeys(tokenize(text)))
    prepared = [(term, index.idf(term)) for term in terms]
    got = bm25_relevance(index.postings, index.doc_memory_array, len(index.memories), prepared)
    assert {i: v for i, v in enumerate(got.tolist()) if v} == expected


def test_postings_keep_document_order_and_flag_non_numbers() -> None:
    postings = Postings.build([doc_terms(tf) for tf in ({"a": 1, "b": True}, {"b": 2.5, "a": "x"}, {"a": 3})], [1.0, 1.0, 1.0])
    assert postings.term_docs("a") == [0, 1, 2]
    assert postings.term_docs("zebra") == []
    docs, contributions = postings.contributions("b", 1.0)
    assert docs.tolist() == [1]  # a boolean count is not a number
    assert contributions.tolist() == [0.0 + 1.0 * (2.5 * 2.5) / (2.5 + 1.0)]
    docs, counts = postings.arrays("a")
    assert docs.tolist() == [0, 1, 2] and counts[0] == 1.0 and np.isnan(counts[1]) and counts[2] == 3.0
    assert postings.arrays("zebra")[0].tolist() == []


@pytest.mark.parametrize("seed", [10_270, *range(20_000, 20_012)])
def test_bounded_equals_exhaustive_mixed_brains(seed: int) -> None:
    """Brains of 5-300 memories, edges in an order unrelated to memory order
    (seed 10_270 caught a two-hop bound that assumed the same order)."""
    rnd = random.Random(seed)
    index = BrainIndex.build(generated_brain(rnd, rnd.randint(5, 300), edges=rnd.random() < 0.8, odd_rates=rnd.random() < 0.3))
    for _ in range(10):
        check_same(index, random_arguments(rnd))
