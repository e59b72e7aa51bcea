#!/usr/bin/env python3
"""Resident memory of working copies and their recall indexes, measured in this process.

`connector_bench.py --memory` runs this in a fresh process per measure and prints
its figures; it prints one JSON object. Resident memory (RSS) is read after
``gc.collect()`` and glibc's ``malloc_trim``, above the process's baseline once the
modules are imported.

* one copy (default): RSS after the brain is unpacked (the working copy), after its
  index is built and three recalls ran, after one memorize is applied and followed
  by the index (the older copy and index dropped), and after the write's parsed
  JSON documents are taken back out of ``txn.PARSED`` (the last write's documents,
  process-wide, kept for that brain's next write: not per user); plus the index's
  live objects by part (`tests/support/footprint.py`).
* ``--copies N``: N users holding a copy of the same brain each, with its index
  after three recalls; then each user memorizes once (followed). RSS per copy is
  what the process grew by, divided by N. The copies share their interned terms
  (one brain, one vocabulary), so distinct users' brains cost slightly more.

Usage::

    .venv/bin/python bench/memory_probe.py ARCHIVE.tar.gz
    .venv/bin/python bench/memory_probe.py ARCHIVE.tar.gz --copies 50
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from connector.engine.format.archive import load_archive  # noqa: E402
from connector.engine.format.brain import Brain  # noqa: E402
from connector.engine.format.change import BrainChange  # noqa: E402
from connector.engine.recall.exact import recall  # noqa: E402
from connector.engine.recall.incremental import apply_change  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.engine.writes import txn  # noqa: E402
from connector.engine.writes.ops import connector_memorize  # noqa: E402
from tests.support.footprint import index_footprint  # noqa: E402

QUERIES = ("postgres cache", "deploy release", "meeting notes")
_LIBC = ctypes.CDLL("libc.so.6")


def rss() -> int:
    """Resident bytes of this process after a full collection and malloc_trim."""
    gc.collect()
    _LIBC.malloc_trim(0)
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


def ready(data: bytes) -> tuple[Brain, BrainIndex]:
    """A user's working copy of ``data`` and its index, after three recalls."""
    brain = load_archive(data)
    index = BrainIndex.build(brain)
    for query in QUERIES:
        recall(None, query, index=index, now=datetime.now(UTC))
    return brain, index


def memorized(brain: Brain, index: BrainIndex, text: str) -> tuple[Brain, BrainIndex]:
    """The brain after one memorize and its index following it, as a connector write does."""
    working = brain.copy()
    working.journal = []
    connector_memorize(text, tags=["cache", "probe"]).apply(working, datetime.now(UTC))
    index = apply_change(index, working, BrainChange.of_journal(working.journal))
    working.journal = None
    recall(None, text, index=index, now=datetime.now(UTC))
    return working, index


def forget_parsed(brain: Brain) -> None:
    """Take the last write's parsed documents of ``brain`` out of the process-wide cache."""
    for data in brain.files.values():
        txn.PARSED.take(data)


def one_copy(data: bytes) -> dict[str, Any]:
    start = rss()
    brain = load_archive(data)
    loaded = rss()
    inflated = sum(map(len, brain.files.values()))
    index = BrainIndex.build(brain)
    for query in QUERIES:
        recall(None, query, index=index, now=datetime.now(UTC))
    built = rss()
    parts = index_footprint(index, brain)
    brain, index = memorized(brain, index, "memory probe fact")
    followed = rss()
    forget_parsed(brain)
    per_user = rss()
    return {
        "inflated": inflated, "start": start, "loaded": loaded, "built": built,
        "followed": followed, "followed_per_user": per_user, "parts": parts,
    }


def many_copies(data: bytes, copies: int) -> dict[str, Any]:
    start = rss()
    users = [ready(data) for _ in range(copies)]
    held = rss()
    inflated = sum(map(len, users[0][0].files.values()))
    users = [memorized(brain, index, f"memory probe fact {user}") for user, (brain, index) in enumerate(users)]
    written = rss()
    return {"inflated": inflated, "copies": copies, "start": start, "held": held, "written": written}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archive", type=Path)
    parser.add_argument("--copies", type=int, default=0, help="hold this many users' copies of the brain at once")
    options = parser.parse_args()
    data = options.archive.read_bytes()
    result = many_copies(data, options.copies) if options.copies else one_copy(data)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
