"""One step of a recall run on a worker thread beside the others, when the host has a core to spare.

Hybrid recall's e5 channel (its query embedding, ~10 ms on one core, then its cosines) is
the longest step of a warm recall; the e5 engine and BLAS release the GIL, so on a second
core it runs while the recall's own thread computes the exact, text and USE channels, and
the recall takes about the longer of the two instead of their sum.

That pays only when the host gives this process a second core. On a busy host the two
threads take turns on one, and the hand-over costs ~5% more than running the step inline
(bench/hybrid_profile.py --ab at load 4-8 on two cores). So each job measures the share of
a core it got while it ran (its thread's CPU time over its wall time): close to 1 beside the
caller, about half when taking turns with it, nothing when the job had not even started by the
time its caller needed it (the caller then runs the step itself: it never waits for a queue).
While the recent share is low, the step runs inline, and every `SpareCore.probe_every`-th call
tries the worker again. Where it runs never changes its answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Job", "SpareCore", "finish", "start"]

T = TypeVar("T")

# Two: one recall's step on each core; a third caller's step, queued, is run by its caller.
_WORKERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="recall-beside")


class SpareCore:
    """Whether recent steps on the worker ran beside their caller (thread-safe enough: a lost
    update of the average only delays a switch by one call)."""

    def __init__(self, share: float = 0.75, weight: float = 0.3, probe_every: int = 8, min_cpu_s: float = 0.002):
        """``share``: the least core share a job must have had (moving average, ``weight`` on the
        newest) for the worker to be used; ``min_cpu_s``: shorter jobs say too little to count."""
        self.share = share
        self.weight = weight
        self.probe_every = probe_every
        self.min_cpu_s = min_cpu_s
        self.recent = 1.0  # optimistic until measured
        self._calls = 0

    def use_worker(self) -> bool:
        """Whether this call's step goes to the worker (a probe now and then while it does not pay)."""
        self._calls += 1
        return self.recent >= self.share or self._calls % self.probe_every == 0

    def record(self, cpu_s: float, wall_s: float) -> None:
        """A job on the worker took ``cpu_s`` of its thread's CPU over ``wall_s``."""
        if cpu_s >= self.min_cpu_s and wall_s > 0:
            self._add(min(1.0, cpu_s / wall_s))

    def missed(self) -> None:
        """A job had not started when its caller needed it (the caller ran the step itself)."""
        self._add(0.0)

    def _add(self, share: float) -> None:
        self.recent += self.weight * (share - self.recent)


SPARE_CORE = SpareCore()


@dataclass(frozen=True)
class Job(Generic[T]):
    """A step started on the worker, and the policy that sent it there."""

    future: Future[T]
    policy: SpareCore

    def drop(self) -> None:
        """Its answer is not wanted any more (the recall failed): not run when not started yet."""
        self.future.cancel()


def start(step: Callable[..., T], *args: object, policy: SpareCore | None = None) -> Job[T] | None:
    """``step(*args)`` started on a worker thread, or None when the host has had no core to spare
    (the caller then runs it inline with `finish`)."""
    policy = policy or SPARE_CORE
    if not policy.use_worker():
        return None
    return Job(_WORKERS.submit(_timed, policy, step, *args), policy)


def finish(started: Job[T] | None, step: Callable[..., T], *args: object) -> T:
    """The answer of ``step(*args)``: the started job's, or computed here when it was not started
    or is still queued (a caller never waits for a queue; that counts as no core to spare)."""
    if started is not None:
        if not started.future.cancel():
            return started.future.result()
        started.policy.missed()
    return step(*args)


def _timed(policy: SpareCore, step: Callable[..., T], *args: object) -> T:
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        return step(*args)
    finally:
        policy.record(time.thread_time() - cpu, time.perf_counter() - wall)
