#!/usr/bin/env python3
"""Benchmark of the brain engine (recall, archive I/O, memorize) against the reference CLI.

Builds brains of 1,000 and 10,000 memories with our own memorize (the write
operations in ``connector.engine.writes.ops``), with ``search-index.json`` kept up to date
as the command line keeps it, then measures in process:

* recall latency p50/p95, query mode (1-4 word queries drawn from the corpus's Zipf-like word distribution) and context mode
  (varying project/topics/task), on the prepared index (built once per archive
  checksum, as the connector does);
* the cold path: load the archive + build the index + one recall, with the stored
  statistics and with them missing (rebuilt from the files);
* time to load the 10k archive (``load_archive``) and to prepare its index;
* what ``brain_recall`` adds to a query: the hits' content (4,000-character budget)
  and the text rendering;
* memorize one memory into the brain + pack the archive (the connector's write path);
* optionally (``--cli``) ``brain-connector recall`` as one process per query, the way
  the reference figures were taken.

Reference (the `brain` CLI, one process per query, 2-core machine): 90 ms p50 at 1k
memories, 421 ms at 10k, 729 ms at 10k when it must rebuild its search index.
Targets: query p50 <= 5 ms and context p50 <= 50 ms at 10k; loading a 10k archive
<= 1.5 s. Figures are noisy on a shared machine: compare runs on an idle one.

Usage::

    .venv/bin/python bench/engine_bench.py                 # 1k and 10k
    .venv/bin/python bench/engine_bench.py --sizes 1000 --queries 100 --cli 10
    .venv/bin/python bench/engine_bench.py --sizes 10000 --cli 0 --brain-cache /tmp/brains  # reuse the 10k brain
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from connector.engine.format.archive import load_archive, pack_archive  # noqa: E402
from connector.engine.format.brain import Brain  # noqa: E402
from connector.engine.format.views import attach_content  # noqa: E402
from connector.engine.recall.exact import recall  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.engine.writes.ops import Memorize  # noqa: E402
from connector.mcp import render  # noqa: E402

REFERENCE_MS = {1000: 90.0, 10000: 421.0}
REFERENCE_REBUILD_MS = 729.0
TYPES = ["decision", "insight", "goal", "experience", "learning", "relationship", "preference", "observation"]
AREAS = ["professional", "personal", "family", "social"]
PROJECTS = ["atlas", "homepage", "brain-store", "billing", "infra", ""]
TASKS = ["debugging", "reviewing", "planning", "capturing", ""]
WORDS = (
    "postgres cache deploy guitar cooking reading kubernetes nginx terraform caddy pytest snapshot "
    "latency budget travel sleep meditation running language birthday kids asyncio dataclass pydantic "
    "venv incident rollback migration index vacuum replica backup schema queue worker retry timeout "
    "token oauth session cookie header proxy certificate renewal monitoring alert dashboard metric "
    "garden recipe dinner holiday flight hotel museum concert podcast novel chapter habit morning "
    "review release branch commit merge conflict refactor benchmark profile memory leak thread lock"
).split()
SYLLABLES = ["ka", "lo", "mi", "ren", "to", "sa", "vel", "dor", "pi", "an", "qu", "ex", "ul", "fi", "zor", "ben"]


def vocabulary(size: int = 8000) -> list[str]:
    """Real words first, then pronounceable made-up ones: a large vocabulary like real notes."""
    words = list(WORDS)
    rnd = random.Random(42)
    seen = set(words)
    while len(words) < size:
        word = "".join(rnd.choice(SYLLABLES) for _ in range(rnd.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    rnd.shuffle(words)
    return words


VOCABULARY = vocabulary()
# Zipf-like word frequencies ((rank + 30) ** -1.07: natural text once stopwords are gone): a few words are
# everywhere, most are rare; queries are drawn from the same distribution.
ZIPF = list(itertools.accumulate(1 / ((rank + 30) ** 1.07) for rank in range(1, len(VOCABULARY) + 1)))
# Tags mildly skewed (rank ** -0.6 over 400): about 4 tag-overlap neighbours per memory.
TAGS = [f"{word}" for word in VOCABULARY[:150]] + [f"topic-{i}" for i in range(250)]
TAG_WEIGHTS = list(itertools.accumulate(1 / (rank**0.6) for rank in range(1, len(TAGS) + 1)))


def words(rnd: random.Random, count: int) -> list[str]:
    return rnd.choices(VOCABULARY, cum_weights=ZIPF, k=count)


def memory_payload(rnd: random.Random, number: int) -> dict:
    """One memory in the command line's memorize JSON shape."""
    sentences = [" ".join(words(rnd, rnd.randint(5, 12))).capitalize() + "." for _ in range(rnd.randint(2, 6))]
    tags = list(dict.fromkeys(rnd.choices(TAGS, cum_weights=TAG_WEIGHTS, k=rnd.randint(1, 4))))
    return {
        "title": " ".join(words(rnd, rnd.randint(2, 5))).capitalize() + f" {number}",
        "type": rnd.choice(TYPES),
        "cognitive_type": rnd.choice(["semantic", "episodic", "procedural"]),
        "content": " ".join(sentences),
        "path": f"{rnd.choice(AREAS)}/{rnd.choice(VOCABULARY[:40])}",
        "tags": tags,
        "salience": round(rnd.uniform(0.2, 1.0), 2),
        "confidence": round(rnd.uniform(0.3, 1.0), 2),
        "encoding_context": {
            "project": rnd.choice(PROJECTS),
            "topics": list(dict.fromkeys(rnd.choices(TAGS[:40], k=rnd.randint(0, 3)))),
            "task_type": rnd.choice(TASKS),
            "agent": "bench",
        },
    }


def query_text(rnd: random.Random) -> str:
    """A 1-4 word query drawn from the corpus's own word distribution."""
    return " ".join(words(rnd, rnd.randint(1, 4)))


def build_brain(size: int, seed: int, start: datetime) -> tuple[Brain, float]:
    """A brain of ``size`` memories written with our memorize, in batches over ~300 days."""
    rnd = random.Random(seed)
    brain = Brain()
    # An empty statistics file, as `brain init` leaves one: memorize keeps it current.
    brain.write_json("search-index.json", {"version": 1, "doc_count": 0, "documents": {}, "df": {}})
    batch = max(200, size // 10)  # each apply rewrites the JSON indexes: keep applies few
    elapsed = 0.0
    for first in range(0, size, batch):
        payload = [memory_payload(rnd, first + i) for i in range(min(batch, size - first))]
        clock = start + timedelta(days=300 * first / size, seconds=first)
        began = time.perf_counter()
        Memorize.from_request(payload).apply(brain, clock)
        elapsed += time.perf_counter() - began
    return brain, elapsed


CPU_SAMPLES: list[float] = []  # process CPU time of the last `timed` call's runs


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p95) in milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


def timed(action: Callable[[], object], runs: int) -> list[float]:
    """Wall-clock seconds per run; CPU seconds per run are left in CPU_SAMPLES.

    On a shared machine the wall clock includes waiting for a core; the CPU time
    of this process is what the code itself costs.
    """
    samples = []
    CPU_SAMPLES.clear()
    for _ in range(runs):
        began, began_cpu = time.perf_counter(), time.process_time()
        action()
        samples.append(time.perf_counter() - began)
        CPU_SAMPLES.append(time.process_time() - began_cpu)
    return samples


def cpu_p50() -> str:
    """The CPU-time median of the last `timed` call, for the table."""
    return f"cpu {statistics.median(CPU_SAMPLES) * 1000:.2f} ms"


def cpu_p50_p95() -> str:
    """The CPU-time p50 / p95 of the last `timed` call, for the table."""
    p50, p95 = percentiles(CPU_SAMPLES)
    return f"cpu {p50:.2f} / {p95:.2f} ms"


def row(label: str, ours: str, reference: str = "", target: str = "", cpu: str = "") -> None:
    print(f"  {label:<44} {ours:>20} {reference:>10} {target:>8}   {cpu}")


# Bump when the generator (memory_payload, build_brain) changes what it writes, so
# cached archives from an older generator are not reused.
GENERATOR_VERSION = 1


def brain_archive(size: int, now: datetime, cache_dir: Path | None) -> tuple[bytes, float | None]:
    """The generated brain's archive and the memorize time (None when read from the cache).

    With ``cache_dir`` the archive is kept as ``brain-<size>-seed<seed>-g<version>.tar.gz``
    there and reused by later runs (building a 10k brain takes over a minute). The
    key holds size, seed and generator version only: delete the folder after a
    change to memorize that the benchmark should see.
    """
    seed = size
    cached = cache_dir / f"brain-{size}-seed{seed}-g{GENERATOR_VERSION}.tar.gz" if cache_dir else None
    if cached is not None and cached.is_file():
        return cached.read_bytes(), None
    brain, memorize_s = build_brain(size, seed=seed, start=now - timedelta(days=320))
    archive = pack_archive(brain)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".partial")
        partial.write_bytes(archive)
        partial.replace(cached)  # never leave a half-written archive under the final name
    return archive, memorize_s


def bench_size(size: int, queries: int, cli_runs: int, now: datetime, cache_dir: Path | None = None) -> None:
    print(f"\n== {size:,} memories ==")
    archive, memorize_s = brain_archive(size, now, cache_dir)
    brain = load_archive(archive)
    stripped = brain.copy()
    stripped.remove("search-index.json")
    stripped_archive = pack_archive(stripped)
    row("", "ours (wall)", "reference", "target", "ours (CPU of this process, p50 [/ p95])")
    row("memorize (build, batches of size/10)", f"{memorize_s:.1f} s total" if memorize_s is not None else "cached archive")
    row("association edges (directed)", f"{sum(len(v) for v in (load_archive(archive).read_json('associations.json') or {}).get('edges', {}).values()):,}")
    row("archive size", f"{len(archive) / 1e6:.2f} MB gz")

    big = size >= 10000
    load_s = timed(lambda: load_archive(archive), 3)
    load_cpu = min(CPU_SAMPLES)
    row("load archive (load_archive), best of 3", f"{min(load_s) * 1000:.0f} ms", "", "1500 ms" if big else "", f"cpu {load_cpu * 1000:.0f} ms")
    loaded = load_archive(archive)
    build_s = timed(lambda: BrainIndex.build(loaded), 3)
    build_cpu = min(CPU_SAMPLES)
    row("prepare index (stored statistics)", f"{min(build_s) * 1000:.0f} ms", "", "", f"cpu {build_cpu * 1000:.0f} ms")
    loaded_stripped = load_archive(stripped_archive)
    rebuild_s = timed(lambda: BrainIndex.build(loaded_stripped), 2)
    row("prepare index (statistics rebuilt)", f"{min(rebuild_s) * 1000:.0f} ms", "", "", f"cpu {min(CPU_SAMPLES) * 1000:.0f} ms")
    row(
        "load + prepare (ready to recall)", f"{(min(load_s) + min(build_s)) * 1000:.0f} ms", "",
        "1500 ms" if big else "", f"cpu {(load_cpu + build_cpu) * 1000:.0f} ms",
    )

    index = BrainIndex.build(loaded)
    rnd = random.Random(7)
    texts = [query_text(rnd) for _ in range(queries)]
    position = iter(range(10**9))

    def query_once() -> None:
        recall(None, texts[next(position) % len(texts)], top=10, index=index, now=now)

    contexts = [
        (rnd.choice(PROJECTS[:-1]), rnd.choice(TASKS[:-1]), ",".join(rnd.sample(TAGS[:40], 2))) for _ in range(16)
    ]

    def context_once() -> None:
        project, task, topics = contexts[next(position) % len(contexts)]
        recall(None, context=True, project=project, task=task, topics=topics, top=10, index=index, now=now)

    timed(query_once, 5)
    reference = REFERENCE_MS.get(size)
    ref_text = f"{reference:.0f} ms" if reference else ""
    query_p50, query_p95 = percentiles(timed(query_once, queries))
    row("recall query mode p50 / p95 (prepared)", f"{query_p50:.2f} / {query_p95:.2f} ms", ref_text, "5 ms" if big else "", cpu_p50_p95())
    context_p50, context_p95 = percentiles(timed(context_once, max(20, queries // 4)))
    row("recall context mode p50 / p95 (prepared)", f"{context_p50:.1f} / {context_p95:.1f} ms", "", "50 ms" if big else "", cpu_p50_p95())

    # What brain_recall adds to a query: each hit's content (4,000-character budget) and the text.
    hits_by_query = [recall(None, text, top=10, index=index, now=now) for text in texts]

    def content_once() -> None:
        hits = [dict(hit) for hit in hits_by_query[next(position) % len(hits_by_query)]]
        attach_content(hits, loaded, 4000)
        render.recall_text({"count": len(hits), "results": hits})

    content_p50, content_p95 = percentiles(timed(content_once, queries))
    row("recall hits' content + text p50 / p95", f"{content_p50:.2f} / {content_p95:.2f} ms", "", "", cpu_p50_p95())

    def cold(data: bytes) -> Callable[[], None]:
        def run() -> None:
            recall(None, texts[next(position) % len(texts)], index=BrainIndex.build(load_archive(data)), now=now)

        return run

    cold_p50, _ = percentiles(timed(cold(archive), 3))
    row("cold: load + prepare + 1 query (p50)", f"{cold_p50:.0f} ms", ref_text, "", cpu_p50())
    cold_rebuild_p50, _ = percentiles(timed(cold(stripped_archive), 3))
    row("cold, statistics rebuilt (p50)", f"{cold_rebuild_p50:.0f} ms", f"{REFERENCE_REBUILD_MS:.0f} ms" if big else "", "", cpu_p50())

    def write_once() -> None:
        payload = memory_payload(rnd, size + next(position))
        Memorize.from_request(payload).apply(loaded, now)
        pack_archive(loaded)

    write_p50, write_p95 = percentiles(timed(write_once, 5))
    row("memorize 1 + pack archive p50 / p95", f"{write_p50:.0f} / {write_p95:.0f} ms", "", "", cpu_p50())
    pack_s = timed(lambda: pack_archive(loaded), 3)
    row("pack archive alone (best of 3)", f"{min(pack_s) * 1000:.0f} ms", "", "", f"cpu {min(CPU_SAMPLES) * 1000:.0f} ms")

    if cli_runs:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "brain.tar.gz"
            path.write_bytes(archive)
            script = str(Path(sys.executable).parent / "brain-connector")

            def cli_once() -> None:
                subprocess.run(
                    [script, "recall", str(path), texts[next(position) % len(texts)], "--now", now.isoformat()],
                    check=True,
                    capture_output=True,
                    timeout=120,
                )

            cli_p50, cli_p95 = percentiles(timed(cli_once, cli_runs))
        row("CLI: one process per query p50 / p95", f"{cli_p50:.0f} / {cli_p95:.0f} ms", ref_text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated brain sizes")
    parser.add_argument("--queries", type=int, default=200, help="query-mode recalls per size")
    parser.add_argument("--cli", type=int, default=5, help="CLI process runs per size (0 = skip)")
    parser.add_argument(
        "--brain-cache", type=Path, default=None, metavar="DIR",
        help="keep generated brain archives in DIR (keyed by size and seed) and reuse them",
    )
    options = parser.parse_args()
    now = datetime(2026, 6, 1, tzinfo=UTC)
    print("brain engine benchmark (in process unless said; machine may be shared: figures are noisy)")
    print(f"load average at start: {open('/proc/loadavg').read().split()[:3] if Path('/proc/loadavg').exists() else 'n/a'}")
    for size in (int(part) for part in options.sizes.split(",")):
        bench_size(size, options.queries, options.cli, now, options.brain_cache)


if __name__ == "__main__":
    main()
