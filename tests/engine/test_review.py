"""The review queue of similar memories (`connector.engine.tending.review`): queueing, listing, decisions, replays."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from common.docstore import open_document_store
from connector.engine.format.archive import load_archive, pack_archive
from connector.engine.format.brain import Brain, dump_json
from connector.engine.recall.exact import recall
from connector.engine.recall.indexcache import IndexCache, index_for
from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import connector_memory
from connector.engine.writes.ops import Forget, Memorize, Pin, connector_memorize, operation_from_dict
from connector.engine.writes.restore import Restore
from connector.engine.tending.review import (
    FIRST_CHECK,
    REVIEW_FILE,
    Decide,
    Flag,
    FlagPairs,
    MemorizeFlagged,
    pending_count,
    pending_pairs,
    review_document,
    unchecked,
    unchecked_ms,
)
from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import connector_memory
from connector.engine.writes.ops import Forget, Memorize, connector_memorize, operation_from_dict
from connector.engine.writes.restore import Restore
from tests.engine.writes_support import (
    FIXTURES,
    NOW,
    check_consistency,
    entries,
    fixture_brain,
    frontmatter,
    require_fixtures,
)

# Dates inside: tests/test_clock_ahead.py runs this module again with the clock a year ahead.
pytestmark = pytest.mark.clock

require_fixtures()

# The command line's own spaced-repetition queue: decisions must leave it byte for byte.
CLI_QUEUE = dump_json({"version": 1, "items": [{"memory_id": "mem_20250101_000000", "due": "2026-04-01"}]})


def _write(brain: Brain, content: str, title: str, at=NOW) -> str:
    result = connector_memorize(content, title=title, tags=["queue", "infra"]).apply(brain, at)
    return result["stored"][0]["id"]


@pytest.fixture
def brain() -> Brain:
    """A fixture brain plus an old fact and a newer restatement of it (and the CLI's queue file)."""
    brain = fixture_brain("brain-1-10")
    brain.write("review-queue.json", CLI_QUEUE)
    return brain


@pytest.fixture
def pair(brain: Brain) -> tuple[str, str]:
    old = _write(brain, "We use Redis for the job queue.", "Job queue on Redis")
    new = _write(brain, "We replaced Redis with NATS for the job queue.", "Job queue on NATS",
                 NOW + timedelta(minutes=5))
    FlagPairs([Flag(new, old, "update", 0.871234, "write", "claude")], []).apply(brain, NOW + timedelta(minutes=5))
    return new, old


def _pending(brain: Brain) -> list[tuple[str, str]]:
    memories = entries(brain)
    return [(item.new, item.old) for item in pending_pairs(review_document(brain), memories.get)]


def _record(brain: Brain, new: str, old: str) -> dict:
    return next(item for item in review_document(brain)["pairs"] if item["new"] == new and item["old"] == old)


def test_a_flagged_pair_is_queued_once_in_our_own_file(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    assert _pending(brain) == [(new, old)]
    record = _record(brain, new, old)
    assert record == {"new": new, "old": old, "relation": "update", "score": 0.871,
                      "flagged_at": "2026-03-01T12:05:00.123Z", "via": "write", "by": "claude", "status": "pending"}
    assert brain.read(REVIEW_FILE) == dump_json(review_document(brain))  # the command line's JSON layout
    # The same pair again, in either order, and relations a person is not asked about: nothing added.
    before = brain.read(REVIEW_FILE)
    result = FlagPairs([Flag(old, new, "duplicate", 0.99), Flag(new, old, "update", 0.9),
                        Flag(new, "mem_20200101_abcdef", "duplicate", 0.9), Flag(new, old, "related", 0.5),
                        Flag(new, new, "duplicate", 1.0)], []).apply(brain, NOW)
    assert result["count"] == 0 and brain.read(REVIEW_FILE) == before
    assert pending_count(brain) == 1
    assert brain.read("review-queue.json") == CLI_QUEUE


def test_pending_leaves_out_pairs_whose_memories_are_gone_superseded_or_waiting(brain: Brain,
                                                                                pair: tuple[str, str]) -> None:
    new, old = pair
    snapshot = brain.copy()
    Forget(old).apply(brain, NOW)
    assert _pending(brain) == [] and pending_count(brain) == 0
    Restore(old).apply(brain, NOW)  # back: the question is open again
    assert _pending(brain) == [(new, old)]
    brain = snapshot
    connector_memorize("Job queue: NATS, decided in June.", supersedes=[old]).apply(brain, NOW)
    assert _pending(brain) == []


def test_keep_new_supersedes_the_old_memory(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    result = Decide(new, old, "keep_new", by="alice").apply(brain, NOW + timedelta(hours=1))
    assert result == {"new": new, "old": old, "decision": "keep_new", "superseded": [old]}
    memories = entries(brain)
    assert memories[old]["superseded_by"] == new
    assert memories[old]["valid_until"] == memories[new]["created"] and memories[old]["valid_until_auto"] is True
    assert memories[new]["supersedes"] == [old]
    assert frontmatter(brain, memories[old]["path"])["superseded_by"] == new
    assert frontmatter(brain, memories[new]["path"])["supersedes"] == [old]
    record = _record(brain, new, old)
    assert record["status"] == "kept_new" and record["decided_by"] == "alice"
    assert record["decided_at"] == "2026-03-01T13:00:00.123Z"
    assert _pending(brain) == []
    check_consistency(brain)
    assert brain.read("review-queue.json") == CLI_QUEUE


def test_keep_old_forgets_the_new_memory_restorably(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    result = Decide(new, old, "keep_old").apply(brain, NOW)
    assert result["archived"] == [new]
    archived = brain.read_json("_archived/index.json")["memories"]
    assert archived[new]["archived_reason"] == "review_keep_old"
    assert new not in entries(brain) and "superseded_by" not in entries(brain)[old]
    check_consistency(brain)
    Restore(new).apply(brain, NOW)  # restorable; the decision stands: not asked again
    assert new in entries(brain) and _pending(brain) == []
    assert _record(brain, new, old)["status"] == "kept_old"


def test_merge_writes_one_memory_that_supersedes_both(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    text = connector_memory("The job queue moved from Redis to NATS in June.", title="Job queue: NATS",
                            origin="user", agent="web app")
    op = Decide(new, old, "merge", by="alice", merged=text)
    result = op.apply(brain, NOW)
    merged = result["merged_into"]
    memories = entries(brain)
    assert memories[merged]["title"] == "Job queue: NATS" and memories[merged]["supersedes"] == [new, old]
    assert memories[new]["superseded_by"] == merged and memories[old]["superseded_by"] == merged
    assert "The job queue moved from Redis to NATS in June." in brain.read_text(memories[merged]["path"])
    assert _record(brain, new, old)["merged_into"] == merged and _record(brain, new, old)["status"] == "merged"
    assert _pending(brain) == []
    check_consistency(brain)


def test_not_the_same_is_never_asked_again(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    Decide(new, old, "dismiss").apply(brain, NOW)
    memories = entries(brain)
    assert "superseded_by" not in memories[old] and "superseded_by" not in memories[new]
    assert _pending(brain) == []
    assert FlagPairs([Flag(old, new, "duplicate", 0.95, "pull")], []).apply(brain, NOW)["count"] == 0
    assert FlagPairs([Flag(new, old, "update", 0.95, "pull")], []).apply(brain, NOW)["count"] == 0
    assert _record(brain, new, old)["status"] == "dismissed" and pending_count(brain) == 0


@pytest.mark.parametrize("decision", ["keep_new", "keep_old", "merge", "dismiss"])
def test_a_decision_replays_from_its_journal_form(brain: Brain, pair: tuple[str, str], decision: str) -> None:
    """As after a lost push (412): the op rebuilt from to_dict applies again on the older base,
    with the same merged id, and a second time on the result as a no-op."""
    new, old = pair
    base = brain.copy()
    merged = connector_memory("Queue: NATS.", origin="user") if decision == "merge" else None
    first = Decide(new, old, decision, by="alice", merged=merged)
    done = first.apply(brain, NOW)
    again = operation_from_dict(json.loads(json.dumps(first.to_dict())))
    assert isinstance(again, Decide)
    assert again.apply(base, NOW) == done
    assert base.files == brain.files
    repeat = operation_from_dict(first.to_dict()).apply(brain, NOW)
    assert repeat["already_decided"] is True
    assert base.files == brain.files


def test_a_refused_decision_changes_nothing(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    before = dict(brain.files)
    with pytest.raises(BrainError, match="no such pair"):
        Decide(old, new, "keep_new").apply(brain, NOW)  # the pair is (new, old), not the other way
    Decide(new, old, "dismiss").apply(brain, NOW)
    after_dismiss = dict(brain.files)
    with pytest.raises(BrainError, match="already decided"):
        Decide(new, old, "keep_new").apply(brain, NOW)
    assert brain.files == after_dismiss and after_dismiss != before
    with pytest.raises(BrainError, match="decision"):
        Decide(new, old, "delete")
    with pytest.raises(BrainError, match="merge needs"):
        Decide(new, old, "merge")


def test_a_decision_about_a_forgotten_memory_is_refused(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    Forget(old).apply(brain, NOW)
    before = dict(brain.files)
    with pytest.raises(BrainError, match="no longer in the brain"):
        Decide(new, old, "keep_new").apply(brain, NOW)
    assert brain.files == before


def test_flag_pairs_replays_from_its_journal_form(brain: Brain) -> None:
    old = _write(brain, "Standup is at 9:30.", "Standup time")
    new = _write(brain, "We moved the standup to 10:00.", "Standup moved")
    op = FlagPairs([Flag(new, old, "update", 0.8, "pull", "another device")], [new])
    rebuilt = operation_from_dict(json.loads(json.dumps(op.to_dict())))
    assert isinstance(rebuilt, FlagPairs) and rebuilt.to_dict() == op.to_dict()
    assert rebuilt.apply(brain, NOW)["count"] == 1
    assert _pending(brain) == [(new, old)]


def test_only_unchecked_memories_are_checked_on_pull_and_the_mark_moves() -> None:
    brain = Brain()
    ids = [_write(brain, f"Fact number {n} about topic {n}.", f"Fact {n}", NOW + timedelta(minutes=n))
           for n in range(FIRST_CHECK + 5)]
    # No review file yet: only the newest FIRST_CHECK memories count as unchecked, oldest first.
    assert unchecked(brain, entries(brain), 100) == ids[5:]
    assert unchecked(brain, entries(brain), 3) == ids[5:8]
    fresh = index_for(brain, None, IndexCache(capacity=1))
    assert unchecked_ms(brain, {record.id: record.created_ms for record in fresh.memories}, 100) == ids[5:]
    FlagPairs([], ids[5:8]).apply(brain, NOW)
    assert unchecked(brain, entries(brain), 100) == ids[8:]
    assert review_document(brain)["checked_until"] == entries(brain)[ids[7]]["created"]
    assert review_document(brain)["checked"] == []
    # Checked out of order: the mark waits for the gap, the later one is remembered.
    FlagPairs([], [ids[10]]).apply(brain, NOW)
    assert unchecked(brain, entries(brain), 100) == [ids[8], ids[9], *ids[11:]]
    assert review_document(brain)["checked"] == [ids[10]]
    FlagPairs([], [ids[8], ids[9]]).apply(brain, NOW)
    assert review_document(brain)["checked_until"] == entries(brain)[ids[10]]["created"]
    assert review_document(brain)["checked"] == []
    later = _write(brain, "Something another device wrote.", "Later", NOW + timedelta(days=1))
    assert unchecked(brain, entries(brain), 100) == [*ids[11:], later]
    # The same from the recall index's milliseconds (what a pull check reads instead of index.json).
    index = index_for(brain, None, IndexCache(capacity=1))
    assert unchecked_ms(brain, {record.id: record.created_ms for record in index.memories}, 100) == [*ids[11:], later]
    check_consistency(brain)


@pytest.mark.parametrize("name", sorted(path.name for path in FIXTURES.iterdir() if (path / "index.json").is_file()))
def test_a_brain_with_decisions_keeps_the_command_line_format(name: str) -> None:
    """The engine's compatibility checks over each fixture brain (written by the reference
    command line) with every kind of decision in it: JSON layout, cross-file invariants,
    search index in step with a rebuild, archive round trip, and later command-line writes
    keeping our file untouched."""
    brain = fixture_brain(name)
    brain.write("review-queue.json", CLI_QUEUE)
    old = _write(brain, "We use Redis for the job queue.", "Job queue on Redis")
    new = _write(brain, "We replaced Redis with NATS for the job queue.", "Job queue on NATS")
    FlagPairs([Flag(new, old, "update", 0.87)], []).apply(brain, NOW)
    a = _write(brain, "Deploys go out on Tuesdays.", "Deploy day")
    b = _write(brain, "We deploy every Tuesday.", "Deploys on Tuesday")
    c = _write(brain, "The office plant needs water weekly.", "Office plant")
    d = _write(brain, "Water the office plant every week.", "Plant watering")
    e = _write(brain, "Lunch is at noon.", "Lunch")
    f = _write(brain, "Lunch moved to 12:30.", "Lunch moved")
    FlagPairs([Flag(b, a, "duplicate", 0.95), Flag(d, c, "duplicate", 0.9), Flag(f, e, "update", 0.8)],
              [b, d, f]).apply(brain, NOW)
    Decide(new, old, "keep_new").apply(brain, NOW)
    Decide(b, a, "keep_old").apply(brain, NOW)
    Decide(d, c, "merge", merged=connector_memory("Water the office plant weekly.", origin="user")).apply(brain, NOW)
    Decide(f, e, "dismiss").apply(brain, NOW)
    check_consistency(brain)
    assert brain.read("review-queue.json") == CLI_QUEUE
    assert brain.read(REVIEW_FILE) == dump_json(json.loads(brain.read(REVIEW_FILE)))
    rebuilt = brain.copy()
    rebuilt.remove("search-index.json")
    later = NOW + timedelta(days=2)
    for query in ("job queue", "deploy tuesday", "office plant", "lunch"):
        assert recall(brain, query, top=25, now=later) == recall(rebuilt, query, top=25, now=later), query
    assert load_archive(pack_archive(brain)).files == brain.files
    review = brain.read(REVIEW_FILE)
    Memorize.from_request({"title": "CLI note", "type": "learning", "path": "notes/",
                           "content": "Written by the command line."}).apply(brain, later)
    Forget(e).apply(brain, later)
    assert brain.read(REVIEW_FILE) == review  # the command line's writes leave our file as it is
    check_consistency(brain)


def test_a_flagged_memorize_queues_its_pairs_in_the_same_write(brain: Brain) -> None:
    old = _write(brain, "The standup is at 9:30.", "Standup time")
    base = brain.copy()
    memory = connector_memory("We moved the standup to 10:00.", title="Standup moved")
    op = MemorizeFlagged.of(Memorize([memory]), [{"id": old, "relation": "update", "score": 0.81},
                                                 {"id": "mem_20250101_aaaaaa", "relation": "related", "score": 0.4}],
                            by="claude")
    brain.journal = []
    result = op.apply(brain, NOW)
    new = result["stored"][0]["id"]
    assert result["review_queued"] == [old] and _pending(brain) == [(new, old)]
    [change] = brain.journal  # one commit: the memory and its queued pair together
    assert REVIEW_FILE in change.paths and "index.json" in change.paths
    brain.journal = None
    assert _record(brain, new, old)["by"] == "claude" and _record(brain, new, old)["via"] == "write"
    check_consistency(brain)
    # Replayed from the journal's form on the older base: the same memory id, the same queue.
    again = operation_from_dict(json.loads(json.dumps(op.to_dict())))
    assert isinstance(again, MemorizeFlagged)
    again.apply(base, NOW)
    assert base.files == brain.files
    assert "review_queued" not in again.apply(base, NOW)  # and once more: nothing added twice


def test_review_writes_survive_the_held_write_journal(brain: Brain, pair: tuple[str, str], tmp_path) -> None:
    """Held (unpushed) review writes are sealed to disk and read back as the same operations,
    which then apply to the brain as the originals would."""
    import secrets

    from connector.workcopy.journal import HeldWriteJournal
    from connector.workcopy.model import Account, PendingWrite

    new, old = pair
    base = brain.copy()
    ops = [FlagPairs([Flag(new, old, "duplicate", 0.9)], [new]),
           MemorizeFlagged.of(Memorize([connector_memory("Queue: NATS since June.")]),
                              [{"id": old, "relation": "update", "score": 0.8}], by="claude"),
           Decide(new, old, "merge", by="alice", merged=connector_memory("The job queue is NATS.", origin="user"))]
    for op in ops:
        op.apply(brain, NOW)
    key = secrets.token_bytes(32)
    journal = HeldWriteJournal(open_document_store(tmp_path), key)
    journal.record("copy", Account("static:alice", "token"), "brain-1", "default", None,
                   [PendingWrite(op, NOW, op.kind) for op in ops])
    journal._release("copy")  # as when the process that held them ends
    [entry] = HeldWriteJournal(open_document_store(tmp_path), key).load()  # a restarted process reads them back
    assert [item.op.to_dict() for item in entry.pending] == [op.to_dict() for op in ops]
    for item in entry.pending:  # a restart replays them on the store's brain, with the same ids
        item.op.apply(base, item.at)
    assert base.files == brain.files


def _pin_state(brain: Brain, memory_id: str) -> tuple[bool, bool, bool]:
    """(entry pinned, listed in pinned.json, file's front matter pinned)."""
    entry = entries(brain)[memory_id]
    listed = any(pin.get("id") == memory_id for pin in (brain.read_json("pinned.json") or {}).get("pins", []))
    return entry.get("pinned") is True, listed, frontmatter(brain, entry["path"]).get("pinned") is True


def test_keep_new_moves_the_old_memorys_pin_to_the_new_one(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    Pin(old, "project:infra", 3).apply(brain, NOW)
    Decide(new, old, "keep_new").apply(brain, NOW + timedelta(hours=1))
    assert _pin_state(brain, old) == (False, False, False)
    assert _pin_state(brain, new) == (True, True, True)
    assert (entries(brain)[new]["pin_scope"], entries(brain)[new]["pin_priority"]) == ("project:infra", 3)
    check_consistency(brain)


def test_keep_new_keeps_the_new_memorys_own_pin(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    Pin(old, "global", 9).apply(brain, NOW)
    Pin(new, "global", 1).apply(brain, NOW)
    Decide(new, old, "keep_new").apply(brain, NOW + timedelta(hours=1))
    assert _pin_state(brain, old) == (False, False, False)
    assert _pin_state(brain, new) == (True, True, True) and entries(brain)[new]["pin_priority"] == 1


def test_merge_pins_the_merged_memory_with_the_higher_priority(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    Pin(old, "global", 2).apply(brain, NOW)
    Pin(new, "project:infra", 4).apply(brain, NOW)
    text = connector_memory("The job queue moved from Redis to NATS in June.", title="Job queue: NATS",
                            origin="user", agent="web app")
    merged = Decide(new, old, "merge", merged=text).apply(brain, NOW)["merged_into"]
    assert _pin_state(brain, old) == _pin_state(brain, new) == (False, False, False)
    assert _pin_state(brain, merged) == (True, True, True)
    assert (entries(brain)[merged]["pin_scope"], entries(brain)[merged]["pin_priority"]) == ("project:infra", 4)
    check_consistency(brain)


def test_a_merged_text_held_for_verification_leaves_the_pins_where_they_are(brain: Brain,
                                                                              pair: tuple[str, str]) -> None:
    new, old = pair
    Pin(old).apply(brain, NOW)
    text = connector_memory("A forum post says the job queue moved to NATS.", title="Job queue",
                            origin="external", agent="web app")
    merged = Decide(new, old, "merge", merged=text).apply(brain, NOW)["merged_into"]
    assert entries(brain)[merged].get("quarantined") is True, "the text must be held for this test"
    assert _pin_state(brain, old) == (True, True, True)  # still current until the merged text is approved
    assert entries(brain)[merged].get("pinned") is not True


def test_an_old_version_cannot_be_pinned(brain: Brain, pair: tuple[str, str]) -> None:
    new, old = pair
    Decide(new, old, "keep_new").apply(brain, NOW)
    before = {name: brain.read(name) for name in brain.files}
    with pytest.raises(BrainError, match="old version"):
        Pin(old).apply(brain, NOW)
    assert {name: brain.read(name) for name in brain.files} == before
