"""Recall behaviour beyond the fixtures: statistics paths, newer fields, caching, robustness."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.engine.format.archive import load_directory
from connector.engine.format.brain import Brain
from connector.engine.format.jsvalues import parse_iso_ms, round3
from connector.engine.recall.exact import recall
from connector.engine.recall.index import BrainIndex, BrainNotInitialized
from connector.engine.recall.indexcache import IndexCache, index_for
from tests.engine.conftest import parity_dir
from tests.engine.test_recall_parity import run_case, same_json

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def entry(title: str, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "title": title,
        "path": f"notes/{title.lower().replace(' ', '-')}.md",
        "type": "learning",
        "created": "2025-12-01T00:00:00.000Z",
        "last_accessed": "2025-12-01T00:00:00.000Z",
        "strength": 0.7,
        "decay_rate": 0.99,
        "salience": 0.5,
        "confidence": 0.8,
        "tags": ["alpha"],
        "encoding_context": {"project": "atlas", "topics": ["db", "cache"], "task_type": "debugging"},
    }
    base.update(extra)
    return base


def make_brain(entries: dict[str, dict[str, Any]], bodies: dict[str, str] | None = None, **files: Any) -> Brain:
    brain = Brain()
    brain.write_json("index.json", {"version": 2, "memory_count": len(entries), "memories": entries})
    for memory_id, item in entries.items():
        body = (bodies or {}).get(memory_id, "postgres tuning notes")
        brain.write(item["path"], f"---\nid: {memory_id}\n---\n{body}\n".encode())
    for name, value in files.items():
        brain.write_json(name.replace("_", "-") + ".json", value)
    return brain


def ids(hits: list[dict[str, Any]]) -> list[str]:
    return [hit["id"] for hit in hits]


def test_not_initialized_and_empty() -> None:
    with pytest.raises(BrainNotInitialized, match="brain not initialized"):
        recall(Brain(), "x", now=NOW)
    assert recall(make_brain({}), "x", now=NOW) == []


@pytest.mark.parametrize(
    ("value", "expected"), [(0.0005, 0.001), (-0.0005, 0.0), (1.0005, 1.001), (2.675, 2.675), (0.1234999, 0.123), (float("nan"), 0.0)]
)
def test_round3_is_javascript_rounding(value: float, expected: float) -> None:
    assert round3(value) == expected


def test_iso_parsing() -> None:
    assert parse_iso_ms("1970-01-01T00:00:01.5Z") == 1500
    assert parse_iso_ms("1970-01-01T00:00:01") == 1000  # no offset: UTC
    assert parse_iso_ms("1970-01-01T01:00:00+01:00") == 0
    assert parse_iso_ms("1970-01-02") == 86_400_000
    assert parse_iso_ms("1970-01-01T00:00:00.123999Z") == 123
    # V8 rolls days 29..31 over into the next month and takes 24:00 as next midnight.
    assert parse_iso_ms("1970-02-31T00:00:00.000Z") == parse_iso_ms("1970-03-03T00:00:00.000Z")
    assert parse_iso_ms("1970-01-01T24:00Z") == 86_400_000
    for bad in ("", "yesterday", "2025-13-01", "2025-02-32T00:00:00Z", "2025-01-01T24:00:01Z", "2025-01-01T00:00:00,5Z", None, 5):
        assert parse_iso_ms(bad) is None


def _cases_with_search_index() -> list[dict[str, Any]]:
    cases_file = parity_dir() / "cases.jsonl"
    if not cases_file.is_file():
        return []
    cases = [json.loads(line) for line in cases_file.read_text().splitlines() if line.strip()]
    return [c for c in cases if (parity_dir() / "brains" / c["brain"] / "search-index.json").is_file()]


def test_rebuilt_statistics_equal_stored_ones() -> None:
    """Without search-index.json we rebuild from the files and get the same answers."""
    cases = _cases_with_search_index()
    if not cases:
        pytest.skip("no fixtures")
    prepared: dict[str, tuple[Brain, BrainIndex]] = {}
    for case in cases:
        if case["brain"] not in prepared:
            brain = load_directory(parity_dir() / "brains" / case["brain"])
            brain.remove("search-index.json")
            index = BrainIndex.build(brain)
            assert index.stats_rebuilt
            prepared[case["brain"]] = (brain, index)
        brain, index = prepared[case["brain"]]
        assert same_json(run_case(brain, case, index), case["expected"]), case["args"]


def test_search_index_usable_or_stale() -> None:
    entries = {"m1": entry("Postgres vacuum"), "m2": entry("Redis eviction")}
    brain = make_brain(entries, {"m1": "vacuum", "m2": "eviction"})
    # A usable stored index is trusted even though it disagrees with the files (quirk).
    stored = {
        "version": 1,
        "doc_count": 2,
        "documents": {"m1": {"tf": {"zebra": 1}, "length": 1}, "m2": {"tf": {"other": 1}, "length": 1}},
        "df": {"zebra": 1, "other": 1},
    }
    brain.write_json("search-index.json", stored)
    assert not BrainIndex.build(brain).stats_rebuilt
    assert ids(recall(brain, "zebra", now=NOW)) == ["m1"]
    assert recall(brain, "vacuum", now=NOW) == []
    for stale in (
        {**stored, "doc_count": 3},
        {**stored, "documents": {"m1": stored["documents"]["m1"], "x": {}}},
        {key: value for key, value in stored.items() if key != "documents"},
        "not json",
    ):
        if isinstance(stale, str):
            brain.write("search-index.json", stale.encode())
        else:
            brain.write_json("search-index.json", stale)
        assert BrainIndex.build(brain).stats_rebuilt
        assert ids(recall(brain, "vacuum", now=NOW)) == ["m1"]


def test_newer_fields() -> None:
    entries = {
        "m_plain": entry("Cache plan", path="p/plain.md"),
        "m_user": entry("Cache plan", path="p/user.md", origin="user"),
        "m_tool": entry(
            "Cache plan", path="p/tool.md", origin="tool-output", quarantined=True, quarantine_reasons=["origin:tool-output"]
        ),
        "m_old": entry("Cache plan", path="p/old.md", superseded_by="m_plain", valid_until="2025-06-01T00:00:00.000Z"),
        "m_future": entry("Cache plan", path="p/future.md", valid_from="2026-06-01T00:00:00.000Z"),
    }
    brain = make_brain(entries, {key: "cache plan" for key in entries})
    hits = {hit["id"]: hit for hit in recall(brain, "cache plan", now=NOW, top=50)}
    base = hits["m_plain"]["score"]
    assert hits["m_user"]["score"] == base and hits["m_user"]["origin"] == "user"
    assert hits["m_tool"]["low_trust"] is True and hits["m_tool"]["quarantine_pending"] is True
    assert hits["m_tool"]["score"] == round3(base * 0.85) or abs(hits["m_tool"]["score"] - base * 0.85) <= 0.001
    # superseded and expired: penalised once, not twice
    assert abs(hits["m_old"]["score"] - base * 0.25) <= 0.001 and hits["m_old"]["expired"] is True
    assert list(hits["m_old"])[-3:] == ["superseded_by", "valid_until", "expired"]
    assert "expired" not in hits["m_plain"] and "origin" not in hits["m_plain"]

    as_of = recall(brain, "cache plan", now=NOW, top=50, as_of="2025-03-01T00:00:00Z")
    assert "m_future" not in ids(as_of) and "m_old" in ids(as_of)
    old_then = next(hit for hit in as_of if hit["id"] == "m_old")
    assert old_then["score"] == base  # valid then, and has a valid_until: no penalty
    later = recall(brain, "cache plan", now=NOW, top=50, as_of="2026-07-01T00:00:00Z")
    assert "m_old" not in ids(later) and "m_future" in ids(later)
    assert recall(brain, "cache plan", now=NOW, as_known_of="2025-01-01T00:00:00Z") == []

    brain.write_json("config.json", {"quarantine_mode": "enforce"})
    assert "m_tool" not in ids(recall(brain, "cache plan", now=NOW, top=50))


def test_context_mode_and_match() -> None:
    entries = {"m1": entry("Alpha"), "m2": entry("Beta", encoding_context={"project": "other", "topics": [], "task_type": ""})}
    brain = make_brain(entries)
    hits = recall(brain, context=True, project="atlas", task="debugging", topics="db,cache,x", now=NOW)
    by_id = {hit["id"]: hit for hit in hits}
    assert by_id["m1"]["context_match"] == round3(0.3 + 0.4 * (2 / 3) + 0.3)
    assert by_id["m2"]["context_match"] == 0
    assert ids(hits) == ["m1", "m2"]  # no floor in context mode
    assert recall(brain, "unrelated words", now=NOW) == []  # floor in query mode


def test_spreading_reaches_unmatched_neighbours() -> None:
    entries = {"a": entry("Postgres"), "b": entry("Gardening"), "c": entry("Knitting")}
    edge = {"weight": 0.9, "co_retrievals": 0, "last_activated": "2025-12-01T00:00:00.000Z", "origin": "manual"}
    brain = make_brain(
        entries,
        {"a": "postgres", "b": "soil", "c": "wool"},
        associations={"version": 1, "edges": {"a": {"b": edge}, "b": {"a": edge, "c": edge}, "c": {"b": edge}}},
    )
    hits = recall(brain, "postgres", now=NOW)
    assert ids(hits)[0] == "a" and "b" in ids(hits)
    bonus_b = next(hit["spreading_bonus"] for hit in hits if hit["id"] == "b")
    assert bonus_b > 0
    assert all(hit["relevance"] == 0 for hit in hits if hit["id"] != "a")


def test_cache_and_invalidation() -> None:
    cache = IndexCache(capacity=2)
    brain = make_brain({"m1": entry("Vacuum")}, {"m1": "vacuum"})
    assert ids(recall(brain, "vacuum", now=NOW, cache_key="v1", cache=cache)) == ["m1"]
    changed = make_brain({"m2": entry("Eviction")}, {"m2": "eviction"})
    assert ids(recall(changed, "vacuum", now=NOW, cache_key="v1", cache=cache)) == ["m1"]  # same key, cached
    cache.invalidate("v1")
    assert recall(changed, "vacuum", now=NOW, cache_key="v1", cache=cache) == []
    for key in ("k2", "k3"):
        recall(brain, "vacuum", now=NOW, cache_key=key, cache=cache)
    assert len(cache) == 2
    prepared = BrainIndex.build(brain)
    assert ids(recall(None, "vacuum", now=NOW, index=prepared)) == ["m1"]
    assert index_for(brain, "k3", cache) is cache.get("k3", brain)
    cache.put("k4", prepared)
    assert cache.get("k4", changed) is prepared


def test_garbage_fields_do_not_crash() -> None:
    entries = {
        "m1": entry("Vacuum", strength="strong", decay_rate=-0.5, last_accessed="yesterday", salience=None, tags="x"),
        "m2": entry("Vacuum two", decay_rate=-0.5, pinned=True, encoding_context="nope"),
        "m3": "not an object",
    }
    brain = make_brain({k: v for k, v in entries.items() if isinstance(v, dict)}, {"m1": "vacuum", "m2": "vacuum"})
    index = json.loads(brain.read("index.json"))
    index["memories"]["m3"] = "not an object"
    brain.write_json("index.json", index)
    brain.write("associations.json", b"{broken")
    hits = recall(brain, "vacuum", now=NOW, project="atlas")
    assert set(ids(hits)) == {"m1", "m2"}
    m1 = next(hit for hit in hits if hit["id"] == "m1")
    assert m1["decayed_strength"] == 0
    assert recall(brain, "vacuum", now=NOW, top=0) == []
    assert len(recall(brain, "vacuum", now=NOW, top=-1)) == 1  # JavaScript slice(0, -1)


words = st.sampled_from(["postgres", "cache", "vacuum", "index", "garden", "deploy", "the", "tests", "alpha"])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(words, min_size=1, max_size=6), min_size=1, max_size=8),
    st.lists(words, max_size=4),
    st.integers(min_value=1, max_value=10),
    st.booleans(),
)
def test_results_are_ordered_bounded_and_read_only(bodies: list[list[str]], query: list[str], top: int, context: bool) -> None:
    entries = {f"m{i}": entry(f"Note {i}", tags=body[:2]) for i, body in enumerate(bodies)}
    brain = make_brain(entries, {f"m{i}": " ".join(body) for i, body in enumerate(bodies)})
    before = dict(brain.files)
    hits = recall(brain, " ".join(query), top=top, context=context, now=NOW)
    assert len(hits) <= top and brain.files == before
    keys = [(-hit["score"], hit["id"]) for hit in hits]
    assert keys == sorted(keys)
    for hit in hits:
        assert 0 <= hit["relevance"] <= 1 and 0 <= hit["spreading_bonus"] <= 1


@st.composite
def random_brains(draw: st.DrawFn) -> Brain:
    """Brains with dense random association graphs (asymmetric, self-loops, heavy weights)."""
    count = draw(st.integers(min_value=8, max_value=40))
    vocabulary = ["postgres", "cache", "vacuum", "garden", "deploy", "tests", "alpha", "queue", "index", "lock"]
    entries = {}
    bodies = {}
    for i in range(count):
        extra: dict[str, Any] = {
            "strength": draw(st.floats(min_value=0.0, max_value=1.0)),
            "decay_rate": draw(st.sampled_from([0.95, 0.99, 0.9999, 1.0])),
            "last_accessed": draw(st.sampled_from(["2025-06-01T00:00:00.000Z", "2025-12-31T00:00:00.000Z", "2026-02-01T00:00:00.000Z"])),
            "tags": draw(st.lists(st.sampled_from(vocabulary), max_size=3)),
        }
        if draw(st.booleans()):
            extra["salience"] = draw(st.floats(min_value=0.0, max_value=1.0))
        if draw(st.integers(0, 5)) == 0:
            extra["origin"] = draw(st.sampled_from(["user", "agent-inferred", "tool-output", "external"]))
        if draw(st.integers(0, 6)) == 0:
            extra["superseded_by"] = "m0"
        if draw(st.integers(0, 6)) == 0:
            extra["pinned"] = True
        entries[f"m{i}"] = entry(f"Note {i}", path=f"n/{i}.md", **extra)
        bodies[f"m{i}"] = " ".join(draw(st.lists(st.sampled_from(vocabulary), min_size=1, max_size=8)))
    edges: dict[str, dict[str, Any]] = {}
    for _ in range(draw(st.integers(min_value=0, max_value=count * 4))):
        a = f"m{draw(st.integers(0, count - 1))}"
        b = f"m{draw(st.integers(0, count + 2))}"  # sometimes a node that is not a memory
        weight = draw(st.sampled_from([0.1, 0.2, 0.28, 0.5, 0.9, 1.0, 1.7]))
        edges.setdefault(a, {})[b] = {"weight": weight}
        if draw(st.integers(0, 4)):
            edges.setdefault(b, {})[a] = {"weight": weight}
    return make_brain(entries, bodies, associations={"version": 1, "edges": edges})


@settings(max_examples=50, deadline=None)
@given(
    random_brains(),
    st.lists(st.sampled_from(["postgres", "cache", "vacuum", "garden", "deploy", "tests", "queue"]), min_size=1, max_size=3),
    st.integers(min_value=1, max_value=3),
    st.booleans(),
    st.sampled_from([None, "atlas"]),
)
def test_pruned_recall_equals_exhaustive(brain: Brain, query: list[str], top: int, context: bool, project: str | None) -> None:
    """Bounding scores never changes the answer: same hits as scoring every memory."""
    index = BrainIndex.build(brain)
    arguments: dict[str, Any] = {"top": top, "context": context, "project": project, "now": NOW, "index": index}
    text = None if context and len(query) == 1 else " ".join(query)
    assert recall(None, text, **arguments) == recall(None, text, exhaustive=True, **arguments)
