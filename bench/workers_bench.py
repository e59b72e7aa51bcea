#!/usr/bin/env python3
"""What `brain-connector serve --workers N` costs: brain heads per call, and copies per user.

Two measurements, printed as medians:

* ``heads``: what the brain-head check adds to every call on a clean copy (one small
  file read, `connector/workcopy/heads.py`) and to every accepted push (publishing a
  new token under a lock), beside the alternative of asking the store on every call
  (a conditional download answered 304), all against a real store on loopback.
* ``copies``: how often one user's working copy ends up loaded on more than one
  worker. A real store (audit log on) and a real connector with ``--workers N``;
  ``--users`` users, each an MCP client of the official SDK keeping its connection
  alive, make ``--calls`` recalls each, all users at once, with a pause between calls of
  0 s (back to back) and of ``--idle`` seconds (past the 5-second keep-alive expiry of
  httpx, so each call opens a new connection, which the kernel places on any
  worker). Each worker's first load of a brain is a full download (later checks are
  conditional), so the store's audit log tells how many workers loaded each user's
  brain. The summed resident memory of the workers is printed before and after.

Usage::

    .venv/bin/python bench/workers_bench.py                 # 20 users, 1,000 memories, 2 workers
    .venv/bin/python bench/workers_bench.py --quick         # 6 users, 300 memories
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx  # noqa: E402
import httpx2  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from common.docstore import open_document_store  # noqa: E402
from connector.workcopy.heads import BrainHeads  # noqa: E402
from connector.workcopy.store_client import StoreClient  # noqa: E402
from connector_bench import STATE_KEY, add_users, group_pids, mint, row, rss_bytes, running_store, upload  # noqa: E402
from engine_bench import brain_archive  # noqa: E402
from tests.support.processes import console_script, free_port, run_server  # noqa: E402


def median_us(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e6:.1f} us"


def group_rss_mb(leader: int) -> float:
    """Summed resident memory of the connector's processes (the leader and its forks), MiB."""
    return sum(map(rss_bytes, group_pids(leader))) / (1024 * 1024)


async def heads_cost(store_url: str, token: str, brain_id: str, scratch: Path, rounds: int) -> None:
    heads = BrainHeads(open_document_store(scratch))
    seen = heads.publish(brain_id, "") or ""
    reads, publishes = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        heads.read(brain_id)
        reads.append(time.perf_counter() - began)
    for _ in range(min(rounds, 500)):
        began = time.perf_counter()
        seen = heads.publish(brain_id, seen) or ""
        publishes.append(time.perf_counter() - began)
    client = StoreClient(store_url, timeout_s=30)
    first = await client.download(token, brain_id, None)
    conditional = []
    for _ in range(min(rounds, 300)):
        began = time.perf_counter()
        answer = await client.download(token, brain_id, first.checksum)
        conditional.append(time.perf_counter() - began)
        assert answer.not_modified
    await client.aclose()
    row("head check per call (one small file read)", median_us(reads), f"median of {len(reads)}")
    row("head publish per accepted push (lock, write in place)", median_us(publishes), f"median of {len(publishes)}")
    row("instead: conditional download per call (304)", median_us(conditional), f"median of {len(conditional)}")


async def user_calls(url: str, token: str, calls: int, pause: float) -> None:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(120)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
            for number in range(calls):
                if number:
                    await asyncio.sleep(pause)
                result = await client.call_tool("brain_recall", {"query": "release deploy"})
                assert not result.is_error


def loads_per_user(audit: Path) -> Counter[str]:
    """Full downloads (200) per user id in the store's audit log."""
    loads: Counter[str] = Counter()
    for path in audit.glob("audit-*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("action") == "download" and event.get("status") == 200:
                loads[event["user"]] += 1
    return loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--calls", type=int, default=5, help="recalls per user in each pattern")
    parser.add_argument("--idle", type=float, default=6.0, help="pause between calls of the sparse pattern (s)")
    parser.add_argument("--rounds", type=int, default=2000, help="head checks timed")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--brain-cache", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    if args.quick:
        args.users, args.memories, args.calls, args.rounds = 6, 300, 3, 500

    archive, _ = brain_archive(args.memories, datetime.now(UTC), args.brain_cache)
    print(f"workers benchmark: {args.workers} workers, {args.users} users, brains of {args.memories} memories "
          f"({len(archive) / 1e6:.1f} MB archive)")
    with tempfile.TemporaryDirectory(prefix="workers-bench-") as tmp:
        work = Path(tmp)
        with running_store(work, {"STORE_RATE_LIMITS": "off", "STORE_AUDIT_LOG": "on"}) as store:
            users = add_users(work / "store", [f"user{i}" for i in range(args.users)])
            for token, _ in users:
                upload(store.base_url, token, archive)
            first_token = users[0][0]
            brain_id = httpx.get(store.base_url + "/api/brains", headers={"Authorization": f"Bearer {first_token}"},
                                 timeout=30).json()[0]["id"]
            print("heads")
            asyncio.run(heads_cost(store.base_url, first_token, brain_id, work, args.rounds))

            print("copies")
            for pattern, pause in (("back to back", 0.0), (f"{args.idle:g} s apart", args.idle)):
                port = free_port()
                env = {
                    "CONNECTOR_STORE_URL": store.base_url, "CONNECTOR_IDP": "static", "CONNECTOR_STATE_KEY": STATE_KEY.hex(),
                    "CONNECTOR_STATE_DIR": str(work / f"state-{port}"), "CONNECTOR_PORT": str(port),
                    "CONNECTOR_LOG_LEVEL": "warning", "CONNECTOR_MCP_RATE_PER_MIN": "0",
                    "CONNECTOR_WORKERS": str(args.workers),
                }
                audit = work / "store" / "audit"
                before = loads_per_user(audit)  # the store keeps its audit file open: count, do not delete
                with run_server([console_script("brain-connector"), "serve"], port=port, env=env,
                                log_path=work / f"connector-{port}.log", health_path="/health/live") as connector:
                    time.sleep(1.0)  # every worker up
                    idle_mb = group_rss_mb(connector.process.pid)
                    base = connector.base_url
                    tokens = [mint(base, user_id, token) for token, user_id in users]

                    async def everyone(base: str = base, tokens: list[str] = tokens, pause: float = pause) -> None:
                        await asyncio.gather(*(user_calls(base + "/mcp", t, args.calls, pause) for t in tokens))

                    began = time.perf_counter()
                    asyncio.run(everyone())
                    took = time.perf_counter() - began
                    busy_mb = group_rss_mb(connector.process.pid)
                loads = loads_per_user(audit) - before
                copies = [loads.get(user_id, 0) for _, user_id in users]
                spread = sum(1 for count in copies if count > 1)
                row(f"{pattern}: users with a copy on >1 worker", f"{spread}/{len(copies)}",
                    f"copies per user: mean {statistics.mean(copies):.2f}, max {max(copies)}; {took:.0f} s")
                row(f"{pattern}: RSS of all workers, idle -> after", f"{idle_mb:.0f} -> {busy_mb:.0f} MiB",
                    f"{(busy_mb - idle_mb) / max(1, sum(copies)):.1f} MiB per copy loaded")


if __name__ == "__main__":
    main()
