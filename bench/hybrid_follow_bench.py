#!/usr/bin/env python3
"""What carrying the hybrid index along a write costs, against building it anew (issue 34, item 4).

On the engine benchmark's generated brain (``--memories``, default 10,000; ``--brain-cache``
shares its archives), in this process, CPU time of this thread:

* a full `HybridIndex.build` of the brain (text index, every memory's text read and hashed;
  vectors already known: a stand-in embedder, so only the text side is measured), which is
  what the first hybrid recall after each write used to pay;
* `HybridIndex.changed` after a memorize (its vector kept beforehand, as the similar check
  does), a forget and a pin, ``--rounds`` of each, one after the other on the same brain.

Usage::

    .venv/bin/python bench/hybrid_follow_bench.py --brain-cache /tmp/brains
    .venv/bin/python bench/hybrid_follow_bench.py --memories 2000 --rounds 10

The machine may be shared: CPU time is the firmer figure, medians are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from connector.engine.format.archive import load_archive  # noqa: E402
from connector.engine.format.change import BrainChange  # noqa: E402
from connector.engine.recall.embedding import content_hash  # noqa: E402
from connector.engine.recall.hybrid import HybridIndex, memory_text  # noqa: E402
from connector.engine.recall.incremental import apply_change  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.engine.writes.ops import Forget, Operation, Pin, connector_memorize  # noqa: E402
from connector.workcopy.vectors import VectorStore  # noqa: E402
from engine_bench import WORDS, brain_archive  # noqa: E402
from tests.engine.hybrid_support import CountingEmbedder  # noqa: E402


def _ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.1f} ms (" + ", ".join(f"{v * 1000:.1f}" for v in values) + ")"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6, help="writes of each kind")
    parser.add_argument("--builds", type=int, default=3, help="full builds timed")
    parser.add_argument("--brain-cache", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    archive, _ = brain_archive(args.memories, datetime.now(UTC), args.brain_cache)
    brain = load_archive(archive)
    source = VectorStore(CountingEmbedder()).for_brain("bench")
    index = BrainIndex.build(brain)
    builds = []
    for _ in range(args.builds):
        began = time.process_time()
        hybrid = HybridIndex.build(brain, index, source)
        builds.append(time.process_time() - began)
    print(f"hybrid index, {len(index.memories)} memories, CPU of this thread")
    print(f"  full build (what the recall after a write paid)   {_ms(builds)}")
    followed_cpu: dict[str, list[float]] = {"memorize": [], "forget": [], "pin": []}
    for number in range(args.rounds * 3):
        kind = ("memorize", "forget", "pin")[number % 3]
        working = brain.copy()
        working.journal = []
        op: Operation
        if kind == "memorize":
            op = connector_memorize(f"Bench fact {number}: " + " ".join(WORDS[number % len(WORDS):][:8]), tags=["bench"])
        elif kind == "forget":
            op = Forget(hybrid.ids[(97 * number) % len(hybrid.ids)], force=True)
        else:
            op = Pin(hybrid.ids[(89 * number) % len(hybrid.ids)])
        op.apply(working, datetime.now(UTC))
        change = BrainChange.of_journal(working.journal)
        new_index = apply_change(index, working, change)
        if kind == "memorize":  # the similar check embeds and keeps the new memory's vector before the write
            text = memory_text(working, new_index.memories[-1].entry)
            source.vectors([content_hash(source.model_id, text)], [text])
        began = time.process_time()
        followed = hybrid.changed(working, new_index, source, change)
        followed_cpu[kind].append(time.process_time() - began)
        if followed is None:
            raise SystemExit(f"the index could not follow a {kind}")
        brain, index, hybrid = working, new_index, followed
    for kind, values in followed_cpu.items():
        print(f"  followed after a {kind:<8}                          {_ms(values)}")


if __name__ == "__main__":
    main()
