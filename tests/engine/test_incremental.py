"""The recall index follows writes (`incremental.apply_change`) and answers exactly as a fresh build.

Random sequences of writes (memorize with tags, links, supersessions and low-trust
origins, pin, unpin, forget, verify approve and reject) run on fixture brains with
stored statistics, without them (rebuilt from the files) and with quarantine
enforced. After each step the index carried along by the writes' journal (or, at
random, by comparing the brains file by file, as after a pull) must give the same
recall results as `BrainIndex.build` on the new brain: same hits, same order, same
numbers to the last bit, in query and context mode, bounded and exhaustive.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.engine.format.archive import load_archive, pack_archive
from connector.engine.format.brain import Brain
from connector.engine.format.change import BrainChange
from connector.engine.recall.exact import recall
from connector.engine.recall.incremental import apply_change
from connector.engine.recall.index import BrainIndex
from connector.engine.writes.errors import BrainError
from connector.engine.writes.ops import Forget, Memorize, MemoryInput, Operation, Pin, Unpin, Verify
from tests.engine.writes_support import NOW, entries, fixture_brain, require_fixtures

require_fixtures()

TAGS = ["cooking", "travel", "personal", "running", "language", "sleep", "alpha", "beta"]
WORDS = ["kettle", "harbour", "lantern", "meadow", "quartz", "saffron", "tundra", "violet", "2025", "ignore"]
QUERIES = ["kettle harbour", "running", "cooking travel notes", "quartz 2025", "personal sleep", "violet meadow lantern"]


def _base(name: str, variant: str) -> Brain:
    brain = fixture_brain(name)
    if variant == "rebuilt":
        brain.remove("search-index.json")
    elif variant == "enforce":
        brain.write_json("config.json", {"quarantine_mode": "enforce"})
    return brain


memory_specs = st.fixed_dictionaries({
    "words": st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    "tags": st.lists(st.sampled_from(TAGS), max_size=4, unique=True),
    "origin": st.sampled_from([None, "user", "agent-inferred", "tool-output", "external"]),
    "path": st.sampled_from(["notes/", "captured/", "personal/cooking/", "notes/same.md"]),
    "supersede": st.booleans(),
    "relate": st.booleans(),
    "pinned": st.booleans(),
    "valid_until": st.sampled_from([None, "2026-02-01T00:00:00.000Z", "2027-01-01T00:00:00.000Z"]),
    "project": st.sampled_from([None, "alpha", "beta"]),
})
steps = st.lists(
    st.tuples(
        st.one_of(
            st.tuples(st.just("memorize"), st.lists(memory_specs, min_size=1, max_size=2)),
            st.tuples(st.sampled_from(["pin", "unpin", "forget", "approve", "reject"]), st.integers(0, 10_000)),
        ),
        st.sampled_from(["journal", "journal", "journal", "pull", "batch"]),
    ),
    min_size=1,
    max_size=7,
)


def _operation(brain: Brain, action: tuple[str, Any], counter: int, rnd: random.Random) -> Operation:
    kind, argument = action
    ids = list(entries(brain))
    if kind == "memorize":
        inputs = []
        for number, spec in enumerate(argument):
            title = " ".join(spec["words"]) + f" {counter}-{number}"
            target = rnd.choice(ids) if ids else None
            inputs.append(MemoryInput(
                title=title,
                type="learning",
                content=f"{title} about " + " ".join(rnd.sample(WORDS, 3)),
                path=spec["path"],
                tags=tuple(spec["tags"]),
                origin=spec["origin"],
                supersedes=(target,) if spec["supersede"] and target else (),
                related=(target,) if spec["relate"] and target else (),
                pinned=spec["pinned"],
                valid_until=spec["valid_until"],
                encoding_context={"project": spec["project"], "topics": spec["tags"][:2]} if spec["project"] else {},
            ))
        return Memorize(inputs)
    target = ids[argument % len(ids)] if ids else "mem_20990101_000000"
    pending = [memory_id for memory_id, entry in entries(brain).items() if isinstance(entry, dict) and entry.get("quarantined")]
    if kind in ("approve", "reject") and pending:
        target = pending[argument % len(pending)]
    return {
        "pin": lambda: Pin(target),
        "unpin": lambda: Unpin(target),
        "forget": lambda: Forget(target, force=True),
        "approve": lambda: Verify("approve", [target]),
        "reject": lambda: Verify("reject", [target]),
    }[kind]()


def _answers(index: BrainIndex, now: Any) -> list[Any]:
    """Recall over many kinds of query; repr keeps every float's exact digits."""
    answers = []
    for query in QUERIES:
        for options in (
            {},
            {"exhaustive": True},
            {"top": 3, "project": "alpha"},
            {"top": 50, "as_of": "2026-06-01T00:00:00.000Z"},
            {"as_known_of": "2026-03-01T12:00:00.123Z"},
        ):
            answers.append(repr(recall(None, query, index=index, now=now, **options)))
    for options in ({}, {"exhaustive": True}):
        answers.append(repr(recall(None, None, index=index, now=now, context=True, project="alpha", topics="cooking,travel",
                                   **options)))
    return answers


def _same_statistics(followed: BrainIndex, built: BrainIndex) -> None:
    assert [record.id for record in followed.memories] == [record.id for record in built.memories]
    assert followed.positions == built.positions
    assert (followed.doc_count, followed.avgdl, followed.stats_rebuilt) == (built.doc_count, built.avgdl, built.stats_rebuilt)
    assert followed.df == built.df
    assert followed.quarantine_enforce == built.quarantine_enforce
    assert (None if followed.edges is None else list(followed.edges.items())) == (
        None if built.edges is None else list(built.edges.items())
    )
    followed_docs = {doc_id: (followed.doc_tfs[doc], followed.doc_lengths[doc], followed.doc_norms[doc])
                     for doc_id, doc in followed.doc_positions.items()}
    built_docs = {doc_id: (built.doc_tfs[doc], built.doc_lengths[doc], built.doc_norms[doc])
                  for doc_id, doc in built.doc_positions.items()}
    assert followed_docs == built_docs


@pytest.mark.parametrize("name,variant", [
    ("brain-1-10", "stored"), ("brain-1-11", "rebuilt"), ("brain-1-05", "enforce"), ("brain-1-08", "stored"),
])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(plan=steps, seed=st.integers(0, 2**16))
def test_followed_index_answers_as_a_fresh_build(name: str, variant: str, plan: list[Any], seed: int) -> None:
    rnd = random.Random(seed)
    brain = _base(name, variant)
    index = BrainIndex.build(brain)
    recall(None, "warm kettle", index=index, now=NOW)  # fill the caches a follower must not trust blindly
    batch: list[BrainChange] = []
    before = brain
    for counter, (action, how) in enumerate(plan):
        now = NOW + timedelta(minutes=counter)
        working = brain.copy()
        working.journal = []
        try:
            _operation(working, action, counter, rnd).apply(working, now)
        except BrainError:
            continue  # refused: the brain is unchanged
        journal, working.journal = working.journal, None
        if how == "pull":
            # A newer archive from elsewhere: new bytes objects, nothing parsed, no hints.
            working = load_archive(pack_archive(working))
            index = apply_change(index, working, BrainChange.between(before, working))
            batch, before = [], working
        elif how == "batch" and counter < len(plan) - 1:
            batch += journal  # followed later, several writes at once (as a replay after a 412 does)
        else:
            index = apply_change(index, working, BrainChange.of_journal(batch + journal))
            batch, before = [], working
        brain = working
        if not batch:
            built = BrainIndex.build(brain)
            _same_statistics(index, built)
            assert _answers(index, now) == _answers(built, now)
    if batch:
        index = apply_change(index, brain, BrainChange.of_journal(batch))
        assert _answers(index, NOW) == _answers(BrainIndex.build(brain), NOW)


def test_an_unchanged_brain_keeps_its_index() -> None:
    brain = fixture_brain("brain-1-10")
    index = BrainIndex.build(brain)
    assert apply_change(index, brain.copy(), BrainChange()) is index
    assert apply_change(index, load_archive(pack_archive(brain)), BrainChange.between(brain, load_archive(pack_archive(brain)))) is index


def test_a_write_keeps_the_older_index_intact() -> None:
    """Recalls of the older brain may still run on its index while the write follows it."""
    brain = fixture_brain("brain-1-05")
    index = BrainIndex.build(brain)
    before = _answers(index, NOW)
    working = brain.copy()
    working.journal = []
    Memorize([MemoryInput(title="kettle harbour", type="learning", content="kettle harbour running", path="notes/",
                          tags=("running", "cooking"))]).apply(working, NOW)
    Forget(next(iter(entries(brain))), force=True).apply(working, NOW)
    followed = apply_change(index, working, BrainChange.of_journal(working.journal))
    assert followed is not index
    assert _answers(index, NOW) == before
    assert _answers(followed, NOW) == _answers(BrainIndex.build(working), NOW)


def test_a_journal_records_what_each_write_changed() -> None:
    brain = fixture_brain("brain-1-10")
    target = next(iter(entries(brain)))
    brain.journal = []
    Pin(target).apply(brain, NOW)
    (change,) = brain.journal
    assert change.memories == {target}
    assert change.edge_nodes == set() and change.documents == set()
    assert "index.json" in change.paths and "pinned.json" in change.paths
    assert change.document(brain, "index.json")["memories"][target]["pinned"] is True


def test_new_contexts_extend_the_group_columns_as_a_build_numbers_them() -> None:
    """A memory with a new encoding context adds a group: the follower encodes only the added
    groups, and its arrays equal a fresh build's (codes in order of first appearance)."""
    from connector.engine.recall.columns import _GROUP_FIELDS

    brain = fixture_brain("brain-1-10")
    index = BrainIndex.build(brain)
    contexts = [
        {"project": "alpha", "topics": ["cooking", "travel"]},
        {"project": "gamma", "task": "plan", "topics": ["travel", "new-topic"]},
        {"project": "alpha", "task": "plan", "topics": ["new-topic"]},
        {"task": "solo"},
    ]
    for number, context in enumerate(contexts):
        working = brain.copy()
        working.journal = []
        Memorize([MemoryInput(title=f"kettle {number}", type="learning", content=f"kettle harbour {number}",
                              path="notes/", tags=("cooking",), encoding_context=context)]).apply(working, NOW)
        followed = apply_change(index, working, BrainChange.of_journal(working.journal))
        built = BrainIndex.build(working)
        assert followed.ctx_groups == built.ctx_groups and len(built.ctx_groups) == len(index.ctx_groups) + 1
        assert followed.columns is not None and built.columns is not None
        for name in _GROUP_FIELDS:
            mine, theirs = getattr(followed.columns, name), getattr(built.columns, name)
            if isinstance(theirs, dict):
                assert list(mine) == list(theirs), name
                for key, value in theirs.items():
                    assert np.array_equal(mine[key], value), (name, key)
            else:
                assert np.array_equal(mine, theirs), name
        assert _answers(followed, NOW) == _answers(built, NOW)
        brain, index = working, followed
