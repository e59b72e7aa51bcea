"""Replaying pending operations on a newer base (what the connector does after a 412).

Operations are applied to base A (the working copy), then the very same operation
objects are applied to base B: A plus writes another device pushed meanwhile. B must
end up with the same memory ids, every effect of the operations, and everything the
other device wrote. Replaying a second time must not duplicate anything.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.engine.format.brain import Brain
from connector.engine.writes.errors import BrainError
from connector.engine.writes.ops import Forget, Memorize, MemoryInput, Operation, Pin, Unpin, Verify
from tests.engine.writes_support import require_fixtures, NOW, check_consistency, edges, entries, fixture_brain

require_fixtures()

BASE = fixture_brain("brain-1-00")
BASE_IDS = list(entries(BASE))
OURS = BASE_IDS[:4]  # base memories our operations may touch
THEIRS = BASE_IDS[4]  # the other device forgets this one
TAGS = ["cooking", "travel", "personal", "running", "language", "sleep", "alpha", "beta"]
WORDS = ["kettle", "harbour", "lantern", "meadow", "quartz", "saffron", "tundra", "violet"]

memory_specs = st.fixed_dictionaries({
    "title": st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    "tags": st.lists(st.sampled_from(TAGS), max_size=4, unique=True),
    "origin": st.sampled_from([None, "user", "agent-inferred", "tool-output"]),
    "path": st.sampled_from(["notes/", "notes/same.md", "personal/personal/cooking/", "captured/"]),
    "supersede": st.booleans(),
})
actions = st.lists(
    st.one_of(
        st.tuples(st.just("memorize"), st.lists(memory_specs, min_size=1, max_size=2)),
        st.tuples(st.sampled_from(["pin", "unpin", "forget", "approve"]), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=8,
)
their_writes = st.lists(memory_specs, min_size=1, max_size=3)


def _input(spec: dict[str, Any], position: int, supersede_target: str | None) -> MemoryInput:
    return MemoryInput(
        title=f"{spec['title']} {position}",
        type="learning",
        content=f"{spec['title']} notes number {position}",
        path=spec["path"],
        tags=tuple(spec["tags"]),
        origin=spec["origin"],
        supersedes=(supersede_target,) if spec["supersede"] and supersede_target else (),
    )


def _run_on_a(brain: Brain, plan: list[tuple[str, Any]]) -> list[Operation]:
    """Apply the plan to A, building operation objects as a connector would; keep the ones that succeeded."""
    applied: list[Operation] = []
    known = list(OURS)
    counter = 0
    for kind, argument in plan:
        if kind == "memorize":
            inputs = []
            for spec in argument:
                counter += 1
                inputs.append(_input(spec, counter, known[counter % len(known)] if known else None))
            operation: Operation = Memorize(inputs)
        else:
            target = known[argument % len(known)] if known else "mem_20990101_000000"
            operation = {"pin": lambda: Pin(target), "unpin": lambda: Unpin(target),
                         "forget": lambda: Forget(target, force=True),
                         "approve": lambda: Verify("approve", [target])}[kind]()
        try:
            operation.apply(brain, NOW)
        except BrainError:
            continue  # refused on the working copy: never acknowledged, never replayed
        applied.append(operation)
        if isinstance(operation, Memorize):
            known.extend(operation.ids or [])
    return applied


def _state(brain: Brain, memory_id: str) -> tuple[Any, ...]:
    entry = entries(brain).get(memory_id)
    archived = (brain.read_json("_archived/index.json") or {"memories": {}})["memories"]
    if entry is None:
        return ("archived" if memory_id in archived else "missing",)
    return ("live", entry["title"], bool(entry.get("pinned")), bool(entry.get("quarantined")),
            entry.get("superseded_by"), bool(entry.get("vetted")), tuple(entry["tags"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=actions, theirs=their_writes)
def test_replay_on_a_changed_base_keeps_ids_and_loses_nothing(plan: list, theirs: list) -> None:
    base_a = BASE.copy()
    applied = _run_on_a(base_a, plan)

    # Base B: the store's newer brain, with another device's writes.
    base_b = BASE.copy()
    other = Memorize([_input(spec, 100 + index, None) for index, spec in enumerate(theirs)])
    other.apply(base_b, NOW + timedelta(minutes=5))
    Forget(THEIRS, force=True).apply(base_b, NOW + timedelta(minutes=6))
    their_ids = list(other.ids or [])
    snapshot_ids = [op.ids for op in applied if isinstance(op, Memorize)]

    later = NOW + timedelta(hours=1)
    for operation in applied:
        operation.apply(base_b, later)
    check_consistency(base_b)

    # Same ids as on A.
    assert [op.ids for op in applied if isinstance(op, Memorize)] == snapshot_ids
    touched = list(OURS) + [mid for ids in snapshot_ids for mid in ids or []]
    for memory_id in touched:
        assert _state(base_b, memory_id) == _state(base_a, memory_id), memory_id
    # Edges among the memories our operations touched are identical.
    a_edges, b_edges = edges(base_a), edges(base_b)
    for source in touched:
        for target in touched:
            assert (a_edges.get(source, {}).get(target) is None) == (b_edges.get(source, {}).get(target) is None)
            if a_edges.get(source, {}).get(target):
                assert a_edges[source][target]["weight"] == b_edges[source][target]["weight"]
    # The other device's writes survive.
    for memory_id in their_ids:
        assert _state(base_b, memory_id)[0] == "live"
    assert _state(base_b, THEIRS) == ("archived",)

    # Replaying once more duplicates nothing.
    files_before = {path for path in base_b.files if path.endswith(".md")}
    live_before = set(entries(base_b))
    for operation in applied:
        try:
            result = operation.apply(base_b, later + timedelta(minutes=1))
        except BrainError:
            continue
        if isinstance(operation, Memorize):
            assert all(item.get("already_present") for item in result["stored"])
    assert {path for path in base_b.files if path.endswith(".md")} == files_before
    assert set(entries(base_b)) == live_before
    check_consistency(base_b)


def test_replay_after_the_first_push_landed_is_idempotent() -> None:
    """The push succeeded but its answer was lost: replaying on the pushed brain changes nothing new."""
    brain = BASE.copy()
    op = Memorize([_input({"title": "kettle", "tags": ["alpha", "beta"], "origin": None,
                           "path": "notes/", "supersede": False}, 1, None)])
    op.apply(brain, NOW)
    pushed = dict(brain.files)
    result = op.apply(brain, NOW + timedelta(minutes=1))
    assert result["stored"][0]["already_present"] is True
    assert brain.files == pushed


def test_an_id_taken_meanwhile_by_another_memory_is_redrawn() -> None:
    brain_a = BASE.copy()
    op = Memorize([MemoryInput(title="ours", type="learning", content="ours", path="notes/")])
    op.apply(brain_a, NOW)
    [our_id] = op.ids or []
    brain_b = BASE.copy()
    theirs = Memorize([MemoryInput(title="theirs", type="learning", content="theirs", path="notes/")],
                      ids=[our_id])
    theirs.apply(brain_b, NOW)
    result = op.apply(brain_b, NOW)
    new_id = result["stored"][0]["id"]
    assert new_id != our_id and op.ids == [new_id]
    assert entries(brain_b)[our_id]["title"] == "theirs" and entries(brain_b)[new_id]["title"] == "ours"
    check_consistency(brain_b)
