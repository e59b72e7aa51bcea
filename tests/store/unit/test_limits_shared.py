"""Token buckets shared between processes through a mapped file."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.limits import SharedTokenBucketLimiter, TokenBucketLimiter


def test_same_semantics_as_the_in_process_limiter(tmp_path: Path) -> None:
    with SharedTokenBucketLimiter(tmp_path / "r.bin", 60, 3) as limiter:
        assert [limiter.hit("a", now=100.0) for _ in range(3)] == [None, None, None]
        assert limiter.hit("a", now=100.0) == pytest.approx(1.0)
        assert limiter.peek("a", now=100.5) == pytest.approx(0.5)
        assert limiter.hit("a", now=101.0) is None
        assert limiter.hit("b", now=101.0) is None
        assert limiter.peek("never-seen", now=101.0) is None


@settings(max_examples=30, deadline=None)
@given(
    rate=st.integers(min_value=1, max_value=600),
    burst=st.integers(min_value=1, max_value=20),
    steps=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(min_value=0, max_value=3)), max_size=80),
)
def test_matches_the_in_process_limiter(tmp_path_factory: pytest.TempPathFactory, rate: int, burst: int,
                                        steps: list[tuple[str, float]]) -> None:
    path = tmp_path_factory.mktemp("shared") / "r.bin"
    reference = TokenBucketLimiter(rate, burst)
    with SharedTokenBucketLimiter(path, rate, burst) as shared:
        now = 50.0
        for key, gap in steps:
            now += gap
            expected = reference.hit(key, now=now)
            got = shared.hit(key, now=now)
            assert (expected is None) == (got is None)
            if expected is not None:
                assert got == pytest.approx(expected)


def test_file_is_private_and_fixed_size(tmp_path: Path) -> None:
    path = tmp_path / "r.bin"
    with SharedTokenBucketLimiter(path, 60, 5, slots=1024) as limiter:
        for index in range(20_000):
            limiter.hit(f"k{index}", now=0.0)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_size == 16 + 1024 * 24


def test_damaged_or_resized_file_is_reset(tmp_path: Path) -> None:
    path = tmp_path / "r.bin"
    path.write_bytes(b"garbage" * 10)
    with SharedTokenBucketLimiter(path, 60, 1, slots=64) as limiter:
        assert limiter.hit("a", now=0.0) is None
        assert limiter.hit("a", now=0.0) is not None
    with SharedTokenBucketLimiter(path, 60, 1, slots=128) as limiter:  # another size: fresh table
        assert limiter.hit("a", now=0.0) is None


def test_eviction_prefers_idle_buckets(tmp_path: Path) -> None:
    # 6/min with a burst of 2: a bucket untouched for 20 s is full again.
    with SharedTokenBucketLimiter(tmp_path / "r.bin", 6, 2, slots=8) as limiter:
        for index in range(7):
            limiter.hit(f"idle{index}", now=0.0)
        limiter.hit("hot", now=15.0)
        limiter.hit("hot", now=15.0)
        for index in range(7):  # the idle buckets have refilled: their slots are reused
            limiter.hit(f"new{index}", now=21.0)
        assert limiter.hit("hot", now=21.0) == pytest.approx(4.0)  # still remembered, still limited


def _hammer(path: str, count: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    allowed = 0
    with SharedTokenBucketLimiter(path, 1, 500) as limiter:
        for _ in range(count):
            if limiter.hit("user-1") is None:
                allowed += 1
    queue.put(allowed)


def test_budget_is_shared_between_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "r.bin")
    SharedTokenBucketLimiter(path, 1, 500).close()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_hammer, args=(path, 400, queue)) for _ in range(3)]
    for worker in workers:
        worker.start()
    totals = [queue.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    # 1200 attempts, one budget of 500 (refill of 1/min is negligible here).
    assert 500 <= sum(totals) <= 501


def test_closed_limiter_refuses_use(tmp_path: Path) -> None:
    limiter = SharedTokenBucketLimiter(tmp_path / "r.bin", 60, 1)
    limiter.close()
    limiter.close()
    with pytest.raises(ValueError):
        limiter.hit("a")


@pytest.mark.parametrize("rate,burst,slots", [(0, 1, 64), (10, 0, 64), (10, 1, 2)])
def test_invalid_parameters(tmp_path: Path, rate: float, burst: float, slots: int) -> None:
    with pytest.raises(ValueError):
        SharedTokenBucketLimiter(tmp_path / "r.bin", rate, burst, slots=slots)
    assert not os.path.exists(tmp_path / "r.bin") or os.path.getsize(tmp_path / "r.bin") == 0
