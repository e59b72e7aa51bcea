"""Writes that take the previous write's parsed documents give exactly the bytes of writes that parse.

`connector.engine.writes.txn.PARSED` keeps the documents a commit serialised for the next
write on the same bytes. A chain of mixed writes is run with the cache on (every
document size cached) and then replayed, the same operations with the same ids and
times, with the cache off: every step must leave identical files.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from connector.engine.format.archive import load_directory
from connector.engine.format.brain import Brain
from connector.engine.writes import txn
from connector.engine.writes.errors import BrainError
from connector.engine.writes.ops import Forget, Pin, Unpin, Verify, connector_memorize
from tests.support.fixtures import project_parity_dir

FIXTURES = project_parity_dir() / "brains"
WORDS = ["cache", "deploy", "postgres", "review", "budget", "lunch", "guitar", "kubernetes", "release"]


def live_ids(brain: Brain) -> list[str]:
    return list(((brain.read_json("index.json") or {}).get("memories") or {}).keys())


def chain(brain: Brain, rnd: random.Random, steps: int) -> list[tuple[Any, datetime, dict[str, bytes] | None]]:
    """Apply ``steps`` random writes in a chain; returns (op, time, files after or None if refused)."""
    done = []
    clock = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    for step in range(steps):
        clock += timedelta(minutes=7, milliseconds=rnd.randint(0, 999))
        ids = live_ids(brain)
        kind = rnd.choice(["memorize", "memorize", "memorize", "pin", "unpin", "forget", "verify"])
        if kind == "memorize" or not ids:
            op: Any = connector_memorize(
                f"Fact {step}: " + " ".join(rnd.sample(WORDS, 5)),
                tags=rnd.sample(WORDS, rnd.randint(0, 3)),
                origin=rnd.choice(["user", "agent-inferred", "tool-output"]),
                supersedes=rnd.sample(ids, 1) if ids and rnd.random() < 0.2 else (),
            )
        elif kind == "pin":
            op = Pin(rnd.choice(ids))
        elif kind == "unpin":
            op = Unpin(rnd.choice(ids))
        elif kind == "forget":
            op = Forget(rnd.choice(ids), force=True)
        else:
            op = Verify(rnd.choice(["approve", "reject"]), rnd.sample(ids, min(2, len(ids))))
        working = brain.copy()
        try:
            op.apply(working, clock)
        except BrainError:
            done.append((op, clock, None))
            continue
        brain = working
        done.append((op, clock, dict(brain.files)))
    return done


@pytest.mark.parametrize("fixture", ["brain-1-00", "brain-1-06"])
def test_cached_documents_give_the_same_bytes(fixture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    source = FIXTURES / fixture
    if not source.is_dir():
        pytest.skip("fixtures not present")
    start = load_directory(source)
    monkeypatch.setattr(txn, "PARSED", txn._ParsedDocuments(capacity=16, min_bytes=0))
    cached_run = chain(start.copy(), random.Random(fixture), 40)
    assert sum(1 for _, _, files in cached_run if files is not None) > 25
    monkeypatch.setattr(txn, "PARSED", txn._ParsedDocuments(capacity=0))
    brain = start.copy()
    for op, clock, expected in cached_run:
        working = brain.copy()
        try:
            op.apply(working, clock)  # the same ids and times: a replay writes the same memories
        except BrainError:
            assert expected is None
            continue
        assert expected is not None and working.files == expected
        brain = working


def written_once(monkeypatch: pytest.MonkeyPatch) -> tuple[Brain, datetime]:
    """A fixture brain after one memorize, with every document cached for the next write."""
    source = FIXTURES / "brain-1-06"
    if not source.is_dir():
        pytest.skip("fixtures not present")
    monkeypatch.setattr(txn, "PARSED", txn._ParsedDocuments(capacity=16, min_bytes=0))
    now = datetime(2026, 3, 1, tzinfo=UTC)
    first = load_directory(source)
    connector_memorize("A first fact about caching", tags=["cache", "deploy"]).apply(first, now)
    return first, now


def test_a_failed_write_leaves_no_stale_document(monkeypatch: pytest.MonkeyPatch) -> None:
    first, now = written_once(monkeypatch)
    refused = first.copy()
    with pytest.raises(BrainError):
        Pin("mem_19990101_000000").apply(refused, now)  # takes the cached index.json, then refuses
    assert refused.files == first.files
    after = first.copy()
    second = connector_memorize("A second fact about caching", tags=["cache"])
    second.apply(after, now)
    monkeypatch.setattr(txn, "PARSED", txn._ParsedDocuments(capacity=0))
    replayed = first.copy()
    second.apply(replayed, now)
    assert replayed.files == after.files


def test_a_document_serialised_to_the_same_bytes_keeps_its_bytes_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """A memorize whose tags overlap no memory adds no association: associations.json stays the very
    bytes object it was (packing and the indexes then see it as untouched) and is not in the change."""
    first, now = written_once(monkeypatch)
    after = first.copy()
    after.journal = []
    connector_memorize("A fact about nothing else here", tags=["zzz-unshared-tag"]).apply(after, now)
    assert after.files["associations.json"] is first.files["associations.json"]
    assert after.files["index.json"] is not first.files["index.json"]
    [change] = after.journal
    assert "associations.json" not in change.paths and "index.json" in change.paths
    # The next write takes the document from the cache as if it had been rewritten.
    second = connector_memorize("Another fact about caching", tags=["cache", "deploy"])
    again = after.copy()
    second.apply(again, now)
    monkeypatch.setattr(txn, "PARSED", txn._ParsedDocuments(capacity=0))
    replayed = after.copy()
    second.apply(replayed, now)
    assert replayed.files == again.files
    assert again.files["associations.json"] is not after.files["associations.json"]  # this one added edges
