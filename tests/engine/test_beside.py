"""A recall's step on a worker thread beside the others, only while the host has had a core to spare."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from connector.engine.recall.beside import SpareCore, finish, start


def test_the_worker_is_left_while_its_jobs_take_turns_with_their_caller_and_probed_again() -> None:
    policy = SpareCore(share=0.75, weight=0.5, probe_every=4)
    assert policy.use_worker(), "optimistic until measured"
    for _ in range(4):
        policy.record(0.010, 0.020)  # half a core: the two threads took turns on one
    decisions = [policy.use_worker() for _ in range(8)]
    assert decisions == [False, False, True, False, False, False, True, False], "inline, a probe every 4th call"
    policy.record(0.010, 0.0101)
    policy.record(0.010, 0.0101)
    assert policy.use_worker() and policy.use_worker(), "a core to spare again: back to the worker"


def test_short_jobs_do_not_count() -> None:
    policy = SpareCore(min_cpu_s=0.002)
    for _ in range(10):
        policy.record(0.0005, 0.01)  # a cached query vector: only the cosines, too short to say anything
    assert policy.recent == 1.0 and policy.use_worker()


def test_a_step_runs_on_the_worker_or_inline_with_the_same_answer() -> None:
    ran_on: list[threading.Thread] = []

    def step(value: int) -> int:
        ran_on.append(threading.current_thread())
        return value * 2

    started = start(step, 21, policy=SpareCore(share=0.0))
    assert started is not None
    _until_taken(started.future)
    assert finish(started, step, 21) == 42
    assert ran_on == [ran_on[0]] and ran_on[0] is not threading.current_thread()
    busy = SpareCore(share=2.0, probe_every=1000)  # never a core to spare
    busy.use_worker()
    assert start(step, 5, policy=busy) is None
    assert finish(None, step, 5) == 10 and ran_on[-1] is threading.current_thread()


def test_a_caller_never_waits_for_a_queued_job() -> None:
    # Both workers held: a third job is queued, and its caller runs the step itself.
    with _both_workers_held():
        ran_on: list[threading.Thread] = []
        policy = SpareCore(share=0.5, weight=1.0)
        queued = start(lambda: ran_on.append(threading.current_thread()) or 7, policy=policy)
        assert queued is not None
        assert finish(queued, lambda: ran_on.append(threading.current_thread()) or 7) == 7
        assert ran_on == [threading.current_thread()] and queued.future.cancelled()
        assert policy.recent == 0.0 and not policy.use_worker(), "a job that did not start counts as no core to spare"


def test_a_dropped_job_does_not_count_against_the_worker() -> None:
    with _both_workers_held():
        policy = SpareCore(weight=1.0)
        queued = start(lambda: 7, policy=policy)
        assert queued is not None
        queued.drop()  # the recall failed before it needed the answer
        assert queued.future.cancelled() and policy.recent == 1.0


@contextmanager
def _both_workers_held() -> Iterator[None]:
    """Both worker threads busy until the block ends (a job started inside it is queued)."""
    release = threading.Event()
    held = [start(release.wait, 30, policy=SpareCore(share=0.0)) for _ in range(2)]
    try:
        for job in held:
            assert job is not None
            _until_taken(job.future)
        yield
    finally:
        release.set()
    assert all(job is not None and job.future.result(timeout=30) for job in held)


def _until_taken(job: Future[object]) -> None:
    """Wait until a worker has taken ``job`` (a caller that asks before that runs the step itself)."""
    deadline = time.monotonic() + 30
    while not (job.running() or job.done()):
        assert time.monotonic() < deadline, "no worker took the job"
        time.sleep(0.001)
