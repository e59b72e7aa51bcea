"""Token buckets kept in a shared document store (common/limits/stored.py): one budget for every
process (replica) using the store, over the directory backend (S3: tests/s3/test_connector_state_s3.py)."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from common.docstore import DocumentStoreError, open_document_store
from common.limits import StoredTokenBucketLimiter, TokenBucketLimiter

PREFIX = "limits/test"


def test_same_semantics_as_the_in_process_limiter(tmp_path: Path) -> None:
    limiter = StoredTokenBucketLimiter(open_document_store(tmp_path), PREFIX, 60, 3)
    reference = TokenBucketLimiter(60, 3)
    for key, now in [("a", 100.0)] * 4 + [("a", 100.5), ("a", 101.0), ("b", 101.0), ("a", 101.2)]:
        expected, got = reference.hit(key, now=now), limiter.hit(key, now=now)
        assert (expected is None) == (got is None)
        if expected is not None:
            assert got == pytest.approx(expected)


def test_a_block_reached_elsewhere_is_learned_at_the_next_hit(tmp_path: Path) -> None:
    one = StoredTokenBucketLimiter(open_document_store(tmp_path), PREFIX, 60, 2)
    other = StoredTokenBucketLimiter(open_document_store(tmp_path), PREFIX, 60, 2)
    assert one.hit("203.0.113.9", now=10.0) is None and other.hit("203.0.113.9", now=10.0) is None
    assert one.peek("203.0.113.9", now=10.0) is None  # peek asks nothing of the store
    assert one.hit("203.0.113.9", now=10.0) == pytest.approx(1.0)  # the shared budget is spent
    assert one.peek("203.0.113.9", now=10.5) == pytest.approx(0.5)  # and now known here, without I/O
    assert one.peek("203.0.113.9", now=11.0) is None


def _buckets(root: Path) -> dict[str, int]:
    """Buckets per shard document."""
    folder = root / "limits" / "test"
    return {path.name: len(json.loads(path.read_bytes())["b"]) for path in folder.iterdir()
            if not path.name.startswith(".") and not path.name.endswith(".lock")}


def test_documents_are_bounded_and_hold_no_address(tmp_path: Path) -> None:
    limiter = StoredTokenBucketLimiter(open_document_store(tmp_path), PREFIX, 60, 5, shards=4, per_shard=16)
    for index in range(200):
        limiter.hit(f"198.51.100.{index}", now=1000.0)
    counts = _buckets(tmp_path)
    assert len(counts) == 4 and all(count <= 16 for count in counts.values())
    assert not any("198.51.100" in path.read_text() for path in (tmp_path / "limits" / "test").rglob("*") if path.is_file())
    # Buckets that refilled carry nothing: a later write of their document drops them.
    for index in range(20):  # every shard is written again
        limiter.hit(f"late-{index}", now=1000.0 + 60)
    assert sum(_buckets(tmp_path).values()) == 20


class Unreachable:
    """A document store that cannot be reached."""

    where = "s3://nowhere"

    def update(self, *args: Any, **kwargs: Any) -> bytes | None:
        raise DocumentStoreError("connection refused")


def test_an_unreachable_store_falls_back_to_this_process_budget() -> None:
    limiter = StoredTokenBucketLimiter(Unreachable(), PREFIX, 60, 2)  # type: ignore[arg-type]
    assert [limiter.hit("a", now=5.0) for _ in range(2)] == [None, None]
    assert limiter.hit("a", now=5.0) == pytest.approx(1.0)  # still limited, never unlimited
    assert limiter.peek("a", now=5.5) == pytest.approx(0.5)


def _hammer(location: str, endpoint: str | None, burst: int, count: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    if endpoint is not None:
        from tests.s3.servers import CREDENTIALS

        os.environ.update(CREDENTIALS)
    state = open_document_store(location, s3_endpoint_url=endpoint, s3_region="us-east-1" if endpoint else None)
    limiter = StoredTokenBucketLimiter(state, PREFIX, 1, burst)
    queue.put(sum(limiter.hit("203.0.113.7") is None for _ in range(count)))


def granted_by_processes(location: str, endpoint: str | None, burst: int, count: int, processes: int = 3) -> int:
    """Requests granted in all to ``processes`` processes taking ``count`` each from one bucket in the
    state at ``location`` (a directory, or ``s3://`` at ``endpoint``) of ``burst`` (a refill of 1/min)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_hammer, args=(location, endpoint, burst, count, queue)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    totals = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    return sum(totals)


def test_budget_is_shared_between_processes(tmp_path: Path) -> None:
    # 90 attempts from three processes, one budget of 40 (a refill of 1/min is negligible here).
    assert 40 <= granted_by_processes(str(tmp_path), None, 40, 30) <= 41


def test_synced_buckets_decide_at_once_and_share_the_budget_after_a_sync(tmp_path: Path) -> None:
    from common.limits import SyncedTokenBucketLimiter

    def replica() -> SyncedTokenBucketLimiter:
        clock = lambda: 100.0  # noqa: E731  (one wall clock for both replicas)
        shared = StoredTokenBucketLimiter(open_document_store(tmp_path), PREFIX, 1, 10, clock=clock)
        return SyncedTokenBucketLimiter(shared, 1, 10, start=False, clock=clock)

    one, two = replica(), replica()
    # Within one interval each replica decides alone: up to its own bucket each.
    assert [one.hit("203.0.113.5") for _ in range(6)] == [None] * 6
    assert [two.hit("203.0.113.5") for _ in range(6)] == [None] * 6
    assert one.hit("198.51.100.1") is None
    one.sync()
    two.sync()  # 12 of a budget of 10 spent together: the second to sync learns it at once
    wait = two.hit("203.0.113.5")
    assert wait is not None and wait > 60  # the overshoot is paid back first
    assert one.hit("203.0.113.5") is None  # the first learns it at its next sync, one interval later
    one.sync()
    assert one.hit("203.0.113.5") is not None and one.peek("203.0.113.5") is not None
    assert one.hit("198.51.100.1") is None  # another address keeps its budget


def test_a_synced_replica_spends_what_the_others_spent_and_refills_only_at_the_shared_rate(tmp_path: Path) -> None:
    from common.limits import SyncedTokenBucketLimiter

    now = [1000.0]

    def replica() -> SyncedTokenBucketLimiter:
        shared = StoredTokenBucketLimiter(open_document_store(tmp_path), PREFIX, 12, 12, clock=lambda: now[0])
        return SyncedTokenBucketLimiter(shared, 12, 12, start=False, clock=lambda: now[0])

    address = "203.0.113.9"
    replicas = [replica() for _ in range(3)]
    for limiter in replicas:  # a burst of 12 spread over three replicas: the whole budget
        assert [limiter.hit(address) for _ in range(4)] == [None] * 4
    for limiter in replicas:
        limiter.sync()
    # The last to sync took the budget's last tokens; the first two learned only what was left when they
    # synced (8 and 4), not the spending after them: they can pass that much more before their next sync.
    assert replicas[2].hit(address) is not None
    now[0] += 6.0  # more than the five seconds one token takes to refill
    # Each replica passes what it learned plus the one token refilled: the first two 8 + 1 and 4 + 1
    # (four asked each), the third only the refilled one (not the 8 of its own bucket it never used).
    passed = [sum(limiter.hit(address) is None for _ in range(4)) for limiter in replicas]
    for limiter in replicas:
        limiter.sync()
    now[0] += 6.0
    # The third replica's own bucket (8 tokens it never used) does not come back when its wait ends.
    later = sum(limiter.hit(address) is None for limiter in replicas for _ in range(4))
    assert passed == [4, 4, 1] and later == 0, (passed, later)


def test_synced_buckets_without_the_shared_state_keep_this_process_budget() -> None:
    from common.limits import SyncedTokenBucketLimiter

    limiter = SyncedTokenBucketLimiter(StoredTokenBucketLimiter(Unreachable(), PREFIX, 60, 2), 60, 2,  # type: ignore[arg-type]
                                       start=False)
    assert [limiter.hit("a", now=5.0) for _ in range(2)] == [None, None]
    limiter.sync()  # logged, nothing learned
    assert limiter.hit("a", now=5.0) == pytest.approx(1.0)
