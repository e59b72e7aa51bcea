"""The e5 channel's vectors, computed in the background: recall never waits for them.

e5 costs ~10x USE's compute per memory (connector/engine/recall/e5.py), so a brain's e5 vectors
are computed on one background thread per process, a batch at a time, kept (and saved)
by the e5 `VectorStore` as they come. Until every memory of a brain version has its
vector, hybrid recall runs on its other channels; then `E5Backfill.vectors` hands the
version's vectors over and recall fuses them in. `progress` says how far a brain is
(brain_status shows it).

One job per brain: a newer version replaces the waiting one (the vectors the older one
computed are kept: a version mostly shares its memories with the one before).

The answer gate's judge (connector/engine/recall/judge.py) is a channel too, for English
queries: its vectors are computed by the same jobs, once a version's e5 vectors are all there
(a write's new memories with their e5 vector), kept by a store of their own, and handed over
on the version (`HybridIndex.judge`). So are the memories' neighbours (their hubness,
connector/engine/recall/hubness.py), first: a version that only added memories to one that has
them grows them on first use instead.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from connector.engine.format.brain import Brain
from connector.engine.recall.embedding import Quantized, content_hash
from connector.engine.recall.hybrid import HybridIndex, memory_texts
from connector.engine.recall.index import BrainIndex
from connector.engine.recall.judge import JudgeUnavailable
from connector.workcopy.longlived import give_back_memory
from connector.workcopy.vectors import VectorStore

log = logging.getLogger("connector.e5")


@dataclass(frozen=True)
class Progress:
    """How far a brain's e5 vectors are: ``done`` of ``total`` memories (``state``: ready,
    embedding, or unavailable when the engine cannot load here)."""

    state: str
    done: int
    total: int
    # Where the int8 kernels stand (`E5Embedder.query_kernels`: off, unloaded, loading, ready,
    # failed): queries and memories are embedded by them once ready (memories wait while they
    # load), by the engine or the numpy pass otherwise (vectors equal to ~1e-4, not to the bit).
    # None: not known.
    query_kernels: str | None = None
    # The memories' nearest neighbours (their hubness, `HybridIndex.fill_neighbours`), computed by
    # the same jobs: ready, or computing (each recall computes its candidates' meanwhile). None: not known.
    neighbours: str | None = None

    def to_json(self) -> dict[str, object]:
        """The figures brain_status shows."""
        shown: dict[str, object] = {"state": self.state, "embedded": self.done, "total": self.total}
        if self.query_kernels is not None:
            shown["query_kernels"] = self.query_kernels
        if self.neighbours is not None:
            shown["neighbours"] = self.neighbours
        return shown


# The background thread's nice value (Linux: per thread, inherited by the engine's OpenMP
# threads it starts): on a busy host its embedding yields the cores to the calls being
# answered and to the other processes; on an idle one it runs at full speed all the same.
BACKGROUND_NICE = 10

# While the process answers calls, a job waits to start (checking every YIELD_POLL_S), at most
# YIELD_MAX_S: a write's new memories hold a core for tens of ms, which the calls' own work (the next
# write's pack and push, the store's checks, a recall's fusion) would share. Once started, a whole
# brain's batches follow one another (at BACKGROUND_NICE): waiting before each, a stream of calls
# would stretch a 1,000-memory brain from half a minute to minutes.
YIELD_POLL_S = 0.02
YIELD_MAX_S = 3.0

UNAVAILABLE = "unavailable"
READY = "ready"
EMBEDDING = "embedding"
COMPUTING = "computing"


@dataclass
class _Job:
    brain_id: str | None
    brain: Brain
    index: BrainIndex
    hybrid: HybridIndex


class E5Backfill:
    """Hands out a brain version's e5 vectors once they are all computed; computes them meanwhile.

    ``make_store`` makes the e5 store on first use (it loads the engine: ~1 s), returning None
    where the engine cannot load. ``judge``: the judge's store, whose vectors the jobs compute
    after e5's (None: no judge channel). Thread-safe.
    """

    def __init__(self, make_store: Callable[[], VectorStore | None], judge: VectorStore | None = None) -> None:
        self._make_store = make_store
        self.judge = judge
        self._store: VectorStore | None = None
        self._made = False
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting: dict[str | None, _Job] = {}
        self._running: _Job | None = None
        self._progress: dict[str | None, Progress] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        # Whether the process is answering calls now (`BrainTools.answering`): jobs wait to start while it is.
        self.answering: Callable[[], bool] | None = None

    @property
    def store(self) -> VectorStore | None:
        """The e5 store (made now if it was not yet; None where the engine cannot load)."""
        with self._lock:
            if not self._made:
                self._made = True
                self._store = self._make_store()
            return self._store

    @property
    def available(self) -> bool:
        return self.store is not None

    def embed_query(self, text: str):  # type: ignore[no-untyped-def]
        """The e5 vector of a query (the store must be available)."""
        store = self.store
        assert store is not None
        return store.embed_query(text)

    def embed_query_as_passage(self, text: str):  # type: ignore[no-untyped-def]
        """The e5 vector of a query embedded as a passage (the store must be available)."""
        store = self.store
        assert store is not None
        return store.embed_query_as_passage(text)

    def vectors(self, brain_id: str | None, brain: Brain, index: BrainIndex, hybrid: HybridIndex) -> Quantized | None:
        """The e5 vectors of this brain version in the index's order when all are computed, else
        None (and the missing ones are computed in the background, the judge's vectors after
        them: `HybridIndex.judge_vectors` has them once there). Never embeds on the caller's thread."""
        e5, pending = hybrid.e5_state()
        complete = e5 if e5 is not None and not pending else None
        if complete is not None:
            self._counted(brain_id, len(index.memories))
            if (self.judge is None or hybrid.judge is not None) and not hybrid.needs_neighbours:
                return complete
        if self.store is None:
            return None
        with self._lock:
            if self._closed:
                return complete
            running = self._running
            if running is not None and running.brain_id == brain_id and running.hybrid is hybrid:
                return complete  # this version is being computed already
            self._waiting[brain_id] = _Job(brain_id, brain, index, hybrid)
            previous = self._progress.get(brain_id)
            if complete is None and (previous is None or previous.state == READY):
                done = len(index.memories) - len(hybrid.e5_pending) if hybrid.e5 is not None else 0
                self._progress[brain_id] = Progress(EMBEDDING, done, len(index.memories))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="e5-backfill", daemon=True)
                self._thread.start()
            self._wake.notify()
        return complete

    def progress(self, brain_id: str | None) -> Progress | None:
        """How far the brain's e5 vectors are (None: no hybrid recall has asked yet)."""
        if self._made and self._store is None:
            return Progress(UNAVAILABLE, 0, 0)
        with self._lock:
            progress = self._progress.get(brain_id)
            store = self._store
        if progress is None or store is None:
            return progress
        kernels = getattr(store.embedder, "query_kernels", None)
        return replace(progress, query_kernels=kernels) if isinstance(kernels, str) else progress

    def close(self, timeout: float = 5.0) -> None:
        """Stop the background thread (after its current batch)."""
        with self._lock:
            self._closed = True
            self._waiting.clear()
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        _lower_priority(BACKGROUND_NICE)
        while True:
            with self._lock:
                while not self._waiting and not self._closed:
                    self._wake.wait()
            self._quiet()  # then the newest version of the brain, should one have come meanwhile
            with self._lock:
                if self._closed:
                    return
                brain_id = next(iter(self._waiting))
                job = self._running = self._waiting.pop(brain_id)
            try:
                self._fill(job)
            except Exception:  # a broken job must not end the thread: recall goes on without e5
                log.exception("computing e5 vectors failed")
            finally:
                with self._lock:
                    self._running = None
                # The models' working buffers of long memories (~80 MB for e5's 510-token windows on
                # two threads) stay in the heap once freed: given back, a worker keeps the models.
                give_back_memory()

    def _fill(self, job: _Job) -> None:
        store = self._store
        assert store is not None
        # The memories' neighbours first (~1 s at 10,000 memories; a write's version grows them
        # instead): until then each recall computes its candidates' hubness (~2 ms).
        if not job.hybrid.fill_neighbours(lambda: self._superseded(job)):
            return
        if job.hybrid.e5 is not None:
            self._fill_pending(store, job)
        elif not self._fill_whole(store, job):
            return
        self._fill_judge(job)

    def _fill_whole(self, store: VectorStore, job: _Job) -> bool:
        """Every e5 vector of the job's version (those not kept yet embedded); False when a newer
        version came first or the process is closing."""
        texts = memory_texts(job.brain, job.index)
        hashes = [content_hash(store.model_id, text) for text in texts]
        _, found = store.known(hashes, job.brain_id)
        missing = [position for position in range(len(texts)) if not found[position]]
        done = len(texts) - len(missing)
        self._set(job.brain_id, Progress(EMBEDDING, done, len(texts)))
        for start in range(0, len(missing), store.batch):
            if self._superseded(job):
                return False
            batch = missing[start : start + store.batch]
            store.vectors([hashes[p] for p in batch], [texts[p] for p in batch], job.brain_id)
            done += len(batch)
            self._set(job.brain_id, Progress(EMBEDDING, done, len(texts)))
        vectors, found = store.known(hashes, job.brain_id)
        if not found.all():
            return False
        job.hybrid.e5 = vectors
        self._finished(job.brain_id, len(texts))
        return True

    def _quiet(self) -> None:
        """Wait while the process is answering calls, at most YIELD_MAX_S (a stream of calls still
        lets a job start that often; nice alone did not keep a write's embedding off the next calls)."""
        answering = self.answering
        if answering is None:
            return
        deadline = time.monotonic() + YIELD_MAX_S
        with self._lock:
            while not self._closed and answering() and (left := deadline - time.monotonic()) > 0:
                self._wake.wait(min(left, YIELD_POLL_S))

    def _superseded(self, job: _Job) -> bool:
        """A newer version of the job's brain is waiting (go on with it: the vectors computed are
        kept), or the process is closing."""
        with self._lock:
            return self._closed or job.brain_id in self._waiting

    def _fill_pending(self, store: VectorStore, job: _Job) -> None:
        """A version followed from one with e5 vectors (a write, a pull): only its new
        memories are embedded (a write's one or few), never the whole brain again; the judge's
        vectors of them too when the version carries the judge's."""
        pending = dict(job.hybrid.e5_pending)
        total = len(job.index.memories)
        if pending:
            self._set(job.brain_id, Progress(EMBEDDING, total - len(pending), total))
            positions, texts = list(pending), list(pending.values())
            vectors = store.vectors([content_hash(store.model_id, text) for text in texts], texts, job.brain_id)
            job.hybrid.with_e5(positions, vectors, self._judged(job, texts) if job.hybrid.judge is not None else None)
        self._finished(job.brain_id, total)

    def _fill_judge(self, job: _Job) -> None:
        """The judge's vectors of every memory of the job's version, when it has none yet (its
        model loads on first use here, ~1 s; where it cannot, the channel stays off)."""
        if self.judge is None or job.hybrid.judge is not None:
            return
        texts = memory_texts(job.brain, job.index)
        for start in range(0, len(texts), self.judge.batch):
            if self._superseded(job) or self._judged(job, texts[start : start + self.judge.batch]) is None:
                return
        judge = self.judge
        if judge is None:
            return
        vectors, found = judge.known([content_hash(judge.model_id, text) for text in texts], job.brain_id)
        if found.all() and not job.hybrid.e5_pending:
            job.hybrid.judge = vectors

    def _judged(self, job: _Job, texts: list[str]) -> Quantized | None:
        """The judge's vectors of ``texts``, embedding those not kept yet; None where its model
        cannot load (logged once by the model: the gate and the fusion go on without it, and no
        later job asks it again)."""
        judge = self.judge
        if judge is None:
            return None
        try:
            return judge.vectors([content_hash(judge.model_id, text) for text in texts], texts, job.brain_id)
        except JudgeUnavailable:
            self.judge = None
            return None

    def _finished(self, brain_id: str | None, total: int) -> None:
        """The job's version is complete: READY, unless a newer version of the brain is already
        waiting (brain_status would call that one ready before its vectors are there)."""
        with self._lock:
            if brain_id not in self._waiting:
                self._progress[brain_id] = Progress(READY, total, total)

    def _counted(self, brain_id: str | None, total: int) -> None:
        """A complete version of a brain called ready: brain_status counts its memories. A version
        that only lost memories (a forget) takes its vectors from the one before and is never a
        job, so the count of the last version embedded would otherwise stay."""
        with self._lock:
            progress = self._progress.get(brain_id)
            if progress is not None and progress.state == READY and progress.total != total \
                    and brain_id not in self._waiting:
                self._progress[brain_id] = Progress(READY, total, total)

    def _set(self, brain_id: str | None, progress: Progress) -> None:
        with self._lock:
            self._progress[brain_id] = progress


def _lower_priority(nice: int) -> None:
    """Give the calling thread (and the threads it starts) the nice value ``nice`` where the
    platform has per-thread priorities (Linux); elsewhere nothing changes."""
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, max(nice, os.getpriority(os.PRIO_PROCESS, thread)))
    except (AttributeError, OSError):
        pass
