"""The recall index stays compact and reads its documents exactly as a whole parse would.

A process holds one index per user it serves (issue 19: a copy and its index within
4x the brain's inflated size). Entries are kept packed, documents' terms as tuples,
postings as arrays, and index.json / search-index.json are read member by member:
these tests hold the size down and check that nothing a recall or a page reads
changed on the way.
"""

from __future__ import annotations

import importlib.util
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.engine.format.brain import Brain
from connector.engine.format.change import BrainChange
from connector.engine.recall.columns import Postings, doc_terms
from connector.engine.recall.exact import recall
from connector.engine.recall.incremental import apply_change
from connector.engine.recall.index import BrainIndex, HitFields, RecallError, edge_lists, js_object_order, read_json
from connector.engine.writes.ops import connector_memorize
from tests.engine.conftest import REPO_ROOT
from tests.support.footprint import index_footprint

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _generated_brain(size: int) -> Brain:
    """The engine benchmark's brain (our memorize, a Zipf-like vocabulary), ``size`` memories."""
    spec = importlib.util.spec_from_file_location("engine_bench", REPO_ROOT / "bench" / "engine_bench.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    brain, _ = bench.build_brain(size, seed=size, start=NOW - timedelta(days=320))
    return brain  # type: ignore[no-any-return]


def test_index_weighs_less_than_twice_its_brain_and_stays_so_after_a_write() -> None:
    # Before: 2.7x the inflated files at 400 memories (parsed entries, a dict per
    # document, a Python list per term); now 1.5x. Resident memory adds allocator
    # overhead on top (bench/README.md).
    brain = _generated_brain(400)
    index = BrainIndex.build(brain)
    for query in ("postgres cache", "deploy release", "meeting notes"):
        recall(None, query, index=index, now=NOW)
    inflated = sum(map(len, brain.files.values()))
    assert sum(index_footprint(index, brain).values()) < 1.7 * inflated

    working = brain.copy()
    working.journal = []
    connector_memorize("kept small after a write", tags=["cache"]).apply(working, NOW)
    followed = apply_change(index, working, BrainChange.of_journal(working.journal))
    working.journal = None
    assert recall(None, "kept small after a write", index=followed, now=NOW)[0]["title"].startswith("kept small")
    assert sum(index_footprint(followed, working).values()) < 1.7 * sum(map(len, working.files.values()))
    assert all(record.packed.__class__ is bytes for record in followed.memories)


def _brain(index_json: bytes, search_index: bytes | None = None) -> Brain:
    brain = Brain()
    brain.write("index.json", index_json)
    if search_index is not None:
        brain.write("search-index.json", search_index)
    return brain


def _entries_as_parsed_whole(brain: Brain) -> list[tuple[str, Any]]:
    document = read_json(brain, "index.json")
    memories = document.get("memories") if isinstance(document, dict) else None
    memories = js_object_order(memories) if isinstance(memories, dict) else {}
    return [(key, value if isinstance(value, dict) else {}) for key, value in memories.items()]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
entry_fields = st.dictionaries(
    st.sampled_from(["title", "path", "type", "tags", "strength", "origin", "valid_until", "confidence", "x", "é"]),
    json_values,
    max_size=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.dictionaries(st.text(min_size=1, max_size=6), entry_fields | json_values, max_size=6),
       ascii_only=st.booleans(), indent=st.sampled_from([None, 2]))
def test_entries_read_member_by_member_equal_a_whole_parse(entries: dict[str, Any], ascii_only: bool, indent: int | None) -> None:
    data = json.dumps({"version": 2, "memories": entries}, ensure_ascii=ascii_only, indent=indent).encode()
    brain = _brain(data)
    index = BrainIndex.build(brain)
    expected = _entries_as_parsed_whole(brain)
    assert [(record.id, record.entry) for record in index.memories] == expected
    for record, (_, entry) in zip(index.memories, expected):
        fields = record.hit_fields()
        for name in HitFields.__struct_fields__:
            assert getattr(fields, name) == entry[name] if name in entry else getattr(fields, name) is msgspec.UNSET


def test_a_title_with_a_lone_surrogate_is_read_as_the_json_module_reads_it() -> None:
    # msgspec refuses lone surrogate escapes; JavaScript and the json module accept them.
    data = b'{"memories": {"m1": {"title": "broken \\ud800 title", "path": "a.md", "strength": 0.9}}}'
    index = BrainIndex.build(_brain(data))
    assert index.memories[0].entry == {"title": "broken \ud800 title", "path": "a.md", "strength": 0.9}
    assert recall(None, "broken", index=index, now=NOW, context=True)[0]["title"] == "broken \ud800 title"


def test_numbers_beyond_float64_read_as_infinity_and_the_entry_stays_whole() -> None:
    data = b'{"version": 1e400, "memories": {"m1": {"path": "a.md", "salience": 1e400}, "m2": {"path": "b.md"}}}'
    index = BrainIndex.build(_brain(data))
    first, second = index.memories
    assert first.entry == {"path": "a.md", "salience": math.inf} and first.salience == math.inf
    assert first.packed.__class__ is dict  # JSON has no infinity: packing would lose it
    assert second.packed == b'{"path":"b.md"}'


def test_invalid_utf8_anywhere_makes_index_json_invalid_as_before() -> None:
    with pytest.raises(RecallError, match="not a valid brain index"):
        BrainIndex.build(_brain(b'{"version": "\xff", "memories": {"m1": {"path": "a.md"}}}'))
    with pytest.raises(RecallError, match="not a valid brain index"):
        BrainIndex.build(_brain(b'{"memories": {"m1": {"title": "\xff", "path": "a.md"}}}'))
    assert BrainIndex.build(_brain(b'{"memories": [1, 2]}')).memories == []


def _search_index(version: bytes = b"1", doc_count: bytes = b"1") -> bytes:
    return (b'{"version": ' + version + b', "doc_count": ' + doc_count
            + b', "documents": {"m1": {"tf": {"kettle": 2, "descale": 1}, "length": 3}}, "df": {"kettle": 1, "descale": 1}}')


def test_search_index_read_member_by_member_is_used_only_when_a_whole_parse_would_be() -> None:
    entries = b'{"memories": {"m1": {"path": "a.md", "title": "kettle"}}}'
    stored = BrainIndex.build(_brain(entries, _search_index()))
    assert not stored.stats_rebuilt and stored.df == {"kettle": 1.0, "descale": 1.0}
    assert list(stored.postings.term_counts("kettle")) == [(0, 2)]
    # Invalid anywhere (here in "version"): the whole file is, and statistics are rebuilt.
    assert BrainIndex.build(_brain(entries, _search_index(version=b'"\xff"'))).stats_rebuilt
    # A count that does not match the memories: not usable, whatever else it holds.
    assert BrainIndex.build(_brain(entries, _search_index(doc_count=b"2"))).stats_rebuilt
    # Numbers beyond float64 are read as infinity, as a whole parse does: still usable.
    assert not BrainIndex.build(_brain(entries, _search_index(version=b"1e400"))).stats_rebuilt


counts = st.integers(1, 5) | st.sampled_from([0, -1, 300, 2.5, True, "x", None, 10**400])
documents = st.lists(st.dictionaries(st.sampled_from([f"t{i}" for i in range(12)]), counts, max_size=6), max_size=10)


@settings(max_examples=200, deadline=None)
@given(documents=documents, split=st.integers(0, 10))
def test_postings_extended_by_a_write_equal_postings_built_at_once(documents: list[dict[str, Any]], split: int) -> None:
    terms = [doc_terms(tf) for tf in documents]
    norms = [1.0 + doc for doc in range(len(terms))]
    split = min(split, len(terms))
    built = Postings.build(terms, norms)
    extended = Postings.build(terms[:split], norms[:split]).extended(terms, split, norms)
    for term in [f"t{i}" for i in range(12)] + ["absent"]:
        listed = [(doc, count) for doc, tf in enumerate(documents) for name, count in tf.items() if name == term]
        assert built.term_docs(term) == extended.term_docs(term) == [doc for doc, _ in listed]
        for postings in (built, extended):
            with np.errstate(all="ignore"):
                docs, values = postings.contributions(term, 1.5)
            usable = [(doc, count) for doc, count in listed if count.__class__ in (int, float) and count > 0]
            assert docs.tolist() == [doc for doc, _ in usable]
            with np.errstate(all="ignore"):  # a count beyond float64 reads as infinity: inf / inf
                expected = [float(0.0 + 1.5 * (_number(c) * 2.5) / (_number(c) + norms[d])) for d, c in usable]
            assert repr(values.tolist()) == repr(expected)


def _number(count: float) -> float:
    """A count as JavaScript reads it (integers beyond float64: infinity), as a numpy float."""
    return np.float64(math.inf if count > 1e308 else count)  # type: ignore[return-value]


neighbour_maps = st.dictionaries(
    st.sampled_from(["m1", "m2", "x", "3"]),
    st.fixed_dictionaries({"weight": json_values}) | json_values,
    max_size=4,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edges=st.dictionaries(st.sampled_from(["m1", "m2", "y", "7"]), neighbour_maps | json_values, max_size=4) | json_values)
def test_edges_read_node_by_node_equal_a_whole_parse(edges: Any) -> None:
    brain = _brain(b'{"memories": {"m1": {"path": "a.md"}, "m2": {"path": "b.md"}}}')
    brain.write("associations.json", json.dumps({"version": 1, "edges": edges}).encode())
    assert BrainIndex.build(brain).edges == edge_lists(read_json(brain, "associations.json"))


def test_invalid_associations_skip_spreading_as_before() -> None:
    brain = _brain(b'{"memories": {"m1": {"path": "a.md"}, "m2": {"path": "b.md"}}}')
    brain.write("associations.json", b'{"version": "\xff", "edges": {"m1": {"m2": {"weight": 0.5}}}}')
    assert BrainIndex.build(brain).edges is None
    brain.write("associations.json", b'{"version": 1e400, "edges": {"m1": {"m2": {"weight": 0.5}}}}')
    assert BrainIndex.build(brain).edges == {"m1": [("m2", 0.5)]}


def test_js_object_order_puts_array_index_keys_first_whatever_the_smallest_key() -> None:
    from connector.engine.format.text import js_key_order

    unchanged = {"mem_b": 1, "mem_a": 2, ":x": 3, "٣": 4, "Ｘ": 5}
    assert js_object_order(unchanged) is unchanged
    mixed = {"b": 1, "10": 2, "a": 3, "2": 4, ":x": 5, "٣": 6, "07": 7, "-1": 8, "": 9}
    assert list(js_object_order(mixed)) == ["2", "10", "b", "a", ":x", "٣", "07", "-1", ""]
    for keys in (["z", "5"], ["", "1"], ["!", "0"], ["9a", "mem"], ["٣", "mem"]):
        mapping = dict.fromkeys(keys, 0)
        assert list(js_object_order(mapping)) == list(js_key_order(mapping)), keys
    assert js_object_order({}) == {}


def test_document_norms_as_an_array_are_the_scalar_norms_bit_for_bit() -> None:
    import random

    from connector.engine.recall.index import _norm, document_norms

    rnd = random.Random(7)
    for _ in range(50):
        lengths = [rnd.choice([rnd.randint(0, 500), rnd.random() * 300, float(rnd.randint(1, 10**6))])
                   for _ in range(rnd.randint(1, 2000))]
        avgdl, norms = document_norms(lengths, len(lengths))
        assert norms == [_norm(length, avgdl) for length in lengths]
        assert all(type(norm) is float for norm in norms)
