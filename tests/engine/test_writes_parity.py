"""Write parity: rebuilding a fixture brain with our memorize gives the command line's bytes.

Each fixture brain was made by the reference `brain memorize` (then, for some, `reinforce`,
`pin` and `forget`). Replaying its memories through our `Memorize`, with the same ids and
clocks, must reproduce every file of the brains made by memorize alone, and, in the others,
every memory the later commands did not touch. Replaying its pins and forgets through our
`Pin` and `Forget` must reproduce what `brain pin` and `brain forget` wrote.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

import pytest
import yaml

from connector.engine.format.brain import Brain
from connector.engine.format.frontmatter import frontmatter_text
from connector.engine.format.rules import parse_iso
from connector.engine.writes.ops import Forget, Memorize, MemoryInput, Pin
from tests.engine.writes_support import FIXTURES, NOW, fixture_brain, require_fixtures

require_fixtures()

BRAINS = sorted(path.name for path in FIXTURES.iterdir() if (path / "index.json").is_file())


def rebuild(fixture: Brain) -> Brain:
    """Memorize the fixture's memories in index order, batched by creation time."""
    memories = fixture.read_json("index.json")["memories"]
    brain = Brain()
    if fixture.read("search-index.json") is not None:
        brain.write_json("search-index.json", {"version": 1, "doc_count": 0, "documents": {}, "df": {}})
    for created, group in groupby(memories.items(), key=lambda item: item[1]["created"]):
        ids, inputs = [], []
        for memory_id, entry in group:
            text = fixture.read_text(entry["path"]) or ""
            ids.append(memory_id)
            inputs.append(MemoryInput(
                title=entry["title"], type=entry["type"], content=text.split("\n---\n", 1)[1][:-1],
                path=entry["path"], cognitive_type=entry["cognitive_type"], tags=tuple(entry["tags"]),
                related=tuple(entry["related"]), salience=entry["salience"], confidence=entry["confidence"],
                encoding_context=entry["encoding_context"], stable=bool(entry.get("stable")),
            ))
        Memorize(inputs, ids=ids, created=created).apply(brain, parse_iso(created))
    return brain


def _memorize_only(fixture: Brain) -> bool:
    memories = fixture.read_json("index.json")["memories"]
    edges: dict[str, Any] = (fixture.read_json("associations.json") or {}).get("edges", {})
    return (
        all(entry["access_count"] == 0 and not entry.get("pinned") for entry in memories.values())
        and fixture.read("_archived/index.json") is None
        and all(edge["origin"] != "co_retrieval" for targets in edges.values() for edge in targets.values())
    )


@pytest.mark.parametrize("name", BRAINS)
def test_rebuilt_brain_matches_the_command_line(name: str) -> None:
    fixture = fixture_brain(name)
    ours = rebuild(fixture)
    if _memorize_only(fixture):
        assert sorted(ours.files) == sorted(fixture.files)
        for path in fixture.files:
            assert ours.read(path) == fixture.read(path), path
        return
    # Later commands changed some memories: every untouched one must still match exactly.
    theirs, rebuilt = fixture.read_json("index.json")["memories"], ours.read_json("index.json")["memories"]
    compared = 0
    for memory_id, entry in theirs.items():
        if entry["access_count"] or entry.get("pinned") is not None:
            continue
        assert rebuilt[memory_id] == entry, memory_id
        assert ours.read(entry["path"]) == fixture.read(entry["path"]), entry["path"]
        compared += 1
    assert compared > 0


def test_some_fixture_brains_are_memorize_only() -> None:
    assert sum(_memorize_only(fixture_brain(name)) for name in BRAINS) >= 3


@pytest.mark.parametrize("name", [name for name in BRAINS if (FIXTURES / name / "pinned.json").is_file()])
def test_pins_match_the_command_line(name: str) -> None:
    """`brain pin` appended the same frontmatter lines and index fields, and wrote pinned.json alike."""
    fixture = fixture_brain(name)
    ours = rebuild(fixture)
    pins = fixture.read_json("pinned.json")["pins"]
    for pin in pins:
        Pin(pin["id"], pin["scope"], pin["priority"]).apply(ours, NOW)
    assert ours.read("pinned.json") == fixture.read("pinned.json")
    theirs = fixture.read_json("index.json")["memories"]
    rebuilt = ours.read_json("index.json")["memories"]
    for pin in pins:
        entry = theirs[pin["id"]]
        if entry["access_count"]:
            continue  # reinforced later: strength and access fields moved on
        assert rebuilt[pin["id"]] == entry
        assert ours.read(entry["path"]) == fixture.read(entry["path"])


def rebuild_with_forgets(fixture: Brain) -> Brain:
    """Like `rebuild`, also memorizing each archived memory (from its archived file) and
    forgetting it at its archive date, in time order."""
    live = fixture.read_json("index.json")["memories"]
    archived = fixture.read_json("_archived/index.json")["memories"]
    items: list[tuple[str, str, dict[str, Any], str]] = []
    for memory_id, entry in live.items():
        items.append((entry["created"], memory_id, entry, fixture.read_text(entry["path"]) or ""))
    for memory_id, record in archived.items():
        text = fixture.read_text(record["archived_path"]) or ""
        fields = yaml.safe_load(frontmatter_text(text) or "")
        items.append((fields["created"], memory_id, {**fields, **record}, text))
    items.sort(key=lambda item: item[0])  # stable: index order kept within a clock
    events: list[tuple[str, int, Any]] = [
        (created, 0, list(group)) for created, group in groupby(items, key=lambda item: item[0])
    ]
    events += [(record["archived_date"], 1, memory_id) for memory_id, record in archived.items()]
    events.sort(key=lambda event: (event[0], event[1]))
    brain = Brain()
    if fixture.read("search-index.json") is not None:
        brain.write_json("search-index.json", {"version": 1, "doc_count": 0, "documents": {}, "df": {}})
    for when, kind, payload in events:
        if kind == 1:
            Forget(payload, force=True).apply(brain, parse_iso(when))
            continue
        inputs = [
            MemoryInput(
                title=entry["title"], type=entry["type"], content=text.split("\n---\n", 1)[1][:-1],
                path=entry["path"], cognitive_type=entry["cognitive_type"], tags=tuple(entry["tags"]),
                related=tuple(entry["related"]), salience=entry["salience"], confidence=entry["confidence"],
                encoding_context=entry["encoding_context"], stable=bool(entry.get("stable")),
            )
            for _, _, entry, text in payload
        ]
        Memorize(inputs, ids=[memory_id for _, memory_id, _, _ in payload], created=when).apply(brain, parse_iso(when))
    return brain


@pytest.mark.parametrize("name", [name for name in BRAINS if (FIXTURES / name / "_archived" / "index.json").is_file()])
def test_forget_matches_the_command_line(name: str) -> None:
    """`brain forget` moved the same files and wrote the same archive index; _meta counts kept."""
    fixture = fixture_brain(name)
    ours = rebuild_with_forgets(fixture)
    for path in fixture.files:
        if path.startswith("_archived/"):
            assert ours.read(path) == fixture.read(path), path
    assert sorted(path for path in ours.files if path.startswith("_archived/")) == \
        sorted(path for path in fixture.files if path.startswith("_archived/"))
    assert set(ours.read_json("index.json")["memories"]) == set(fixture.read_json("index.json")["memories"])
    for path in fixture.files:
        if path.endswith("_meta.json"):
            theirs, rebuilt = fixture.read_json(path), ours.read_json(path)
            # Counts include forgotten memories; list order depends on the order of writes
            # within one clock tick, which the fixture does not record.
            assert rebuilt["memory_count"] == theirs["memory_count"], path
            assert sorted(rebuilt["subcategories"]) == sorted(theirs["subcategories"]), path
