#!/usr/bin/env python3
"""How long an import takes: reading a vault, the plan's checks, the one write.

Generates a brain of ``--existing`` memories and a zip of ``--notes`` Markdown notes (a
tenth of them repeating memories of the brain word for word), then times, over ``--runs``
runs (median printed): reading the zip into memories, the plan with the exact-duplicate
check only, the plan with brain_memorize's whole similar check (one embedding per note; the
brain's own vectors built once beforehand, as a warm connector has them), and the write.

Usage::

    .venv/bin/python bench/import_bench.py                       # 200 existing, 200 notes
    .venv/bin/python bench/import_bench.py --existing 2000 --notes 1000 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import time
import zipfile
from datetime import UTC, datetime
from functools import partial

from connector.engine.format.brain import Brain
from connector.engine.recall.hybrid import HybridIndex
from connector.engine.recall.index import BrainIndex
from connector.engine.writes.memorize import MemoryInput
from connector.engine.writes.ops import Memorize
from connector.engine.tending.similar import find_similar
from connector.imports.files import Upload
from connector.imports.load import load
from connector.imports.plan import plan_import
from connector.workcopy.vectors import VectorStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SUBJECTS = ["garden", "boiler", "dentist", "bike", "router", "passport", "tax", "car", "piano", "dog"]


def fact(number: int) -> str:
    subject = SUBJECTS[number % len(SUBJECTS)]
    return f"The {subject} note number {number}: check it on day {number % 28 + 1} of month {number % 12 + 1}."


def brain_of(count: int) -> Brain:
    brain = Brain()
    memories = [MemoryInput(title=f"Fact {n}", type="learning", content=fact(n), path="notes/") for n in range(count)]
    if memories:
        Memorize(memories).apply(brain, NOW)
    return brain


def vault_of(count: int, existing: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for n in range(count):
            # Every tenth note repeats a memory of the brain; the others are new.
            repeat = n % 10 == 0 and existing
            body = fact(n % existing) if repeat else f"# Note {n}\n\n{fact(100_000 + n)}"
            archive.writestr(f"Vault/folder{n % 7}/note-{n}.md", f"---\ntags: [bench, n{n % 5}]\n---\n{body}\n")
    return buffer.getvalue()


def timed(function: object) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()  # type: ignore[operator]
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--existing", type=int, default=200)
    parser.add_argument("--notes", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    brain, data = brain_of(args.existing), vault_of(args.notes, args.existing)
    store = VectorStore()
    index = BrainIndex.build(brain)
    built, hybrid = timed(lambda: HybridIndex.build(brain, index, store))
    check = partial(find_similar, brain, index=index, hybrid=hybrid, embed=store.embed_query)
    figures: dict[str, list[float]] = {"read": [], "plan, exact check": [], "plan, similar check": [], "write": []}
    for _ in range(args.runs):
        seconds, imported = timed(lambda: asyncio.run(load(Upload.of_bytes("Vault.zip", data), None, None, NOW)))
        figures["read"].append(seconds)
        seconds, _ = timed(lambda: plan_import(imported, brain, NOW))  # type: ignore[arg-type]
        figures["plan, exact check"].append(seconds)
        seconds, plan = timed(lambda: plan_import(imported, brain, NOW, similar=check))  # type: ignore[arg-type]
        figures["plan, similar check"].append(seconds)
        seconds, _ = timed(lambda: plan.operation().apply(brain.copy(), NOW))  # type: ignore[attr-defined]
        figures["write"].append(seconds)
    print(f"brain of {args.existing} memories (vectors built once: {built:.1f} s), {args.notes} notes, "
          f"{len(plan.duplicates)} duplicates found, {len(plan.inputs)} new; median of {args.runs} runs:")  # type: ignore[attr-defined]
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"  {name:22s} {median * 1000:9.0f} ms  ({median * 1000 / max(args.notes, 1):6.2f} ms per note)")


if __name__ == "__main__":
    main()
