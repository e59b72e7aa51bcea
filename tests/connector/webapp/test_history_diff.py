"""What changed between a snapshot and now."""

from __future__ import annotations

from datetime import UTC, datetime

from connector.engine.format.brain import Brain
from connector.engine.writes.ops import Forget, Pin, connector_memorize
from connector.webapp.history import diff_brains

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_added_removed_and_changed_memories() -> None:
    then = Brain()
    kept = connector_memorize("Kept as it was.").apply(then, NOW)["stored"][0]["id"]
    pinned = connector_memorize("Pinned later.", origin="user").apply(then, NOW)["stored"][0]["id"]
    gone = connector_memorize("Forgotten later.").apply(then, NOW)["stored"][0]["id"]
    now = then.copy()
    Pin(pinned).apply(now, NOW)
    Forget(gone).apply(now, NOW)
    added = connector_memorize("New since.").apply(now, NOW)["stored"][0]["id"]

    changes = diff_brains(then, now)
    assert [c.id for c in changes.added] == [added]
    assert [c.id for c in changes.removed] == [gone]
    assert [c.id for c in changes.changed] == [pinned]
    assert kept not in {c.id for c in changes.changed}
    assert diff_brains(now, now).empty and diff_brains(None, None).empty
    assert [c.id for c in diff_brains(None, then).added] == sorted([kept, pinned, gone], key=lambda i: {
        kept: "kept as it was.", pinned: "pinned later.", gone: "forgotten later."}[i])


def test_an_index_of_unusual_shape_is_still_compared() -> None:
    then = Brain()
    then.write_json("index.json", {"memories": {"a": {"title": "A", "path": "a.md"}, "odd": "not an entry"}})
    then.write("a.md", b"---\\nid: a\\n---\\nold\\n")
    now = then.copy()
    now.write("a.md", b"---\\nid: a\\n---\\nnew\\n")
    assert [c.id for c in diff_brains(then, now).changed] == ["a"]
