"""Documents joined from kept pieces are byte for byte their full serialisation.

`connector.engine.format.jsonpieces` re-encodes only the entries a write names as changed;
these tests drive random change sequences on random documents (nested values,
escapes, non-ASCII, empty containers, integer-like keys) and compare every output
with `fast_dump_json` of the same document, bit for bit; then whole writes on a
brain: each large document a write commits from pieces equals its full
serialisation, and the pieces path is really the one taken.
"""

from __future__ import annotations

import json
import random
from datetime import timedelta
from typing import Any

import pytest

from connector.engine.format import jsonpieces
from connector.engine.format.archive import load_directory
from connector.engine.format.brain import dump_json
from connector.engine.writes import txn
from connector.engine.writes.ops import connector_memorize
from connector.engine.writes.txn import KEPT_MAPS, fast_dump_json
from tests.engine.test_writes_parsed_cache import FIXTURES, chain, written_once

ALPHABET = ["a", "b", "é", "漢", "\n", '"', "\\", "\t", "\u2028", "/", "<", " ", "0", "\x01", "😀"]


def text(rnd: random.Random) -> str:
    return "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 6)))


def value(rnd: random.Random, depth: int = 0) -> Any:
    kind = rnd.randrange(9 if depth < 3 else 5)
    if kind == 0:
        return rnd.randint(-10**6, 10**6)
    if kind == 1:
        return round(rnd.uniform(-5, 5), rnd.randint(1, 6)) + 0.0001  # plain floats only
    if kind == 2:
        return text(rnd)
    if kind == 3:
        return rnd.choice([True, False, None])
    if kind == 4:
        return rnd.choice([{}, []])
    if kind in (5, 6):
        return {text(rnd) + str(i): value(rnd, depth + 1) for i in range(rnd.randint(0, 4))}
    return [value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]


def document(rnd: random.Random) -> dict[str, Any]:
    return {
        "version": 1,
        "memories": {f"mem_{i}": value(rnd) for i in range(rnd.randint(0, 30))},
        "df": {str(i) if rnd.random() < 0.3 else text(rnd) + str(i): rnd.randint(1, 9) for i in range(rnd.randint(0, 30))},
        "other": value(rnd),
        "empty": {},
    }


def change(rnd: random.Random, doc: dict[str, Any], changed: dict[str, set[str]]) -> None:
    """One random change to a kept map, named in ``changed``; sometimes the map is re-ordered."""
    name = rnd.choice(["memories", "df"])
    entries = doc[name]
    action = rnd.choice(["add", "add", "remove", "replace", "mutate", "reorder", "clear", "other"])
    if action == "add" or not entries:
        key = rnd.choice([f"mem_new_{rnd.randrange(10**6)}", str(rnd.randrange(100)), text(rnd) + "k"])
        entries[key] = value(rnd)
        changed[name].add(key)
    elif action == "remove":
        key = rnd.choice(list(entries))
        del entries[key]
        changed[name].add(key)
    elif action == "replace":
        key = rnd.choice(list(entries))
        entries[key] = value(rnd)
        changed[name].add(key)
    elif action == "mutate":
        key = rnd.choice(list(entries))
        if isinstance(entries[key], dict):
            entries[key]["x" + text(rnd)] = value(rnd)
        elif isinstance(entries[key], list):
            entries[key].append(value(rnd))
        else:
            entries[key] = [entries[key]]
        changed[name].add(key)
    elif action == "reorder":
        keys = list(entries)
        rnd.shuffle(keys)
        doc[name] = {key: entries[key] for key in keys}  # order only: no entry changed
    elif action == "clear":
        changed[name].update(entries)
        entries.clear()
    else:
        doc["other"] = value(rnd)
        doc["version"] = rnd.randint(1, 3)


@pytest.mark.parametrize("seed", range(40))
def test_joined_pieces_equal_the_full_serialisation(seed: int) -> None:
    rnd = random.Random(seed)
    doc = document(rnd)
    data = fast_dump_json(doc)
    assert data == dump_json(doc)
    pieces = jsonpieces.split(data, doc, ["memories", "df"])
    assert pieces is not None
    for _ in range(30):
        changed: dict[str, set[str]] = {"memories": set(), "df": set()}
        for _ in range(rnd.randint(0, 4)):
            change(rnd, doc, changed)
        joined = jsonpieces.serialise(doc, pieces, changed)
        assert joined == fast_dump_json(doc) == dump_json(doc)


def test_unnamed_additions_and_removals_are_refused() -> None:
    doc = {"version": 1, "memories": {"a": {"x": 1}, "b": [1, 2]}, "df": {"t": 1}}
    pieces = jsonpieces.split(fast_dump_json(doc), doc, ["memories", "df"])
    assert pieces is not None
    doc["memories"]["c"] = 3  # not named
    assert jsonpieces.serialise(doc, pieces, {"memories": set(), "df": set()}) is None
    pieces = jsonpieces.split(fast_dump_json(doc), doc, ["memories", "df"])
    assert pieces is not None
    assert jsonpieces.serialise(doc, pieces, {"memories": set()}) is None  # df: not known
    del doc["memories"]["a"], doc["memories"]["c"]
    doc["memories"]["d"] = 4  # same count, but a key the pieces do not hold
    assert jsonpieces.serialise(doc, pieces, {"memories": set(), "df": set()}) is None


def test_a_kept_map_replaced_by_another_type_is_serialised_in_full() -> None:
    doc: dict[str, Any] = {"df": {"a": 1, "b": 2}}
    pieces = jsonpieces.split(fast_dump_json(doc), doc, ["df"])
    assert pieces is not None
    doc["df"] = [1, {"a": []}]
    assert jsonpieces.serialise(doc, pieces, {"df": set()}) == fast_dump_json(doc)
    doc["df"] = {"a": 1, "b": 2}  # a map again: its old pieces must not come back
    assert jsonpieces.serialise(doc, pieces, {"df": set()}) == fast_dump_json(doc)


def test_a_layout_that_does_not_match_gives_no_pieces() -> None:
    doc = {"memories": {"a": 1, "b": 2}}
    assert jsonpieces.split(b'{"memories": {"a": 1, "b": 2}}', doc, ["memories"]) is None
    assert jsonpieces.split(fast_dump_json({"memories": {"a": 1}}), doc, ["memories"]) is None


@pytest.mark.parametrize("fixture", ["brain-1-00", "brain-1-06"])
def test_writes_from_pieces_commit_the_full_serialisation(fixture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    source = FIXTURES / fixture
    if not source.is_dir():
        pytest.skip("fixtures not present")
    monkeypatch.setattr(txn, "PARSED", txn._ParsedDocuments(capacity=16, min_bytes=0))
    joined: list[str] = []
    real = jsonpieces.serialise

    def counting(doc: Any, pieces: jsonpieces.Pieces, changed: Any) -> bytes | None:
        data = real(doc, pieces, changed)
        if data is not None:
            joined.append("x")
        return data

    monkeypatch.setattr(txn, "serialise", counting)
    start = load_directory(source)
    steps = chain(start.copy(), random.Random(fixture + "pieces"), 40)
    assert sum(1 for _, _, files in steps if files is not None) > 25
    assert len(joined) > 40  # the pieces path is the one taken, not the full serialisation
    # The same writes, parsing and serialising every document in full, give the same files.
    monkeypatch.setattr(txn, "PARSED", txn._ParsedDocuments(capacity=0))
    brain = start.copy()
    for op, clock, expected in steps:
        if expected is None:
            continue
        op.apply(brain, clock)
        assert brain.files == expected
        for path in KEPT_MAPS:
            if path in expected:
                assert expected[path] == dump_json(json.loads(expected[path])), path


def test_an_abandoned_write_leaves_no_stale_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that changes a document and then gives up (refused half-way) must not leave
    its change in pieces that the next write of the same bytes would join."""
    brain, now = written_once(monkeypatch)
    abandoned = txn.WriteTxn(brain.copy(), now)
    abandoned.update_entry(next(iter(abandoned.memories())), {"title": "changed, never committed"})
    after = brain.copy()
    connector_memorize("A second fact", tags=["cache"]).apply(after, now + timedelta(minutes=1))
    assert after.files["index.json"] == dump_json(json.loads(after.files["index.json"]))
    assert b"changed, never committed" not in after.files["index.json"]


def test_entries_replaced_in_place_and_appended_are_spliced_from_the_last_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A memorize's kind of change (entries replaced where they are, new ones appended) copies the
    old text in stretches, never entry by entry, and the pieces then point into the new text."""
    rnd = random.Random(5)
    doc = document(rnd)
    doc["memories"] = {f"mem_{i}": value(rnd) for i in range(40)}
    doc["df"] = {f"term{i}": i for i in range(40)}
    data = fast_dump_json(doc)
    pieces = jsonpieces.split(data, doc, ["memories", "df"])
    assert pieces is not None and pieces.source is data

    def no_entry_by_entry(*args: Any) -> None:
        raise AssertionError("joined entry by entry")

    monkeypatch.setattr(jsonpieces, "_one_by_one", no_entry_by_entry)
    for step in range(20):
        changed: dict[str, set[str]] = {"memories": set(), "df": set()}
        for key in rnd.sample(list(doc["memories"]), 2):
            doc["memories"][key] = value(rnd)
            changed["memories"].add(key)
        doc["memories"][f"mem_new_{step}"] = value(rnd)
        changed["memories"].add(f"mem_new_{step}")
        for key in rnd.sample(list(doc["df"]), 3):
            doc["df"][key] += 1
            changed["df"].add(key)
        doc["df"][f"new{step}"] = 1
        changed["df"].add(f"new{step}")
        doc["version"] = step * 1000  # a top-level value of another length before the maps
        joined = jsonpieces.serialise(doc, pieces, changed)
        assert joined == fast_dump_json(doc)
        assert pieces.source is joined


def test_pieces_hold_no_copy_of_the_entries() -> None:
    doc = {"version": 1, "memories": {f"mem_{i}": {"title": "x" * 50} for i in range(100)}}
    data = fast_dump_json(doc)
    pieces = jsonpieces.split(data, doc, ["memories"])
    assert pieces is not None
    kept = pieces.maps["memories"]
    texts = [data[start:end] for start, end in zip(kept.starts.tolist(), kept.ends.tolist(), strict=True)]
    assert texts == [jsonpieces.entry_text(key, entry) for key, entry in doc["memories"].items()]
    assert kept.keys == list(doc["memories"])
