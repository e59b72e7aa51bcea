#!/usr/bin/env python3
"""What passing a request to its user's worker costs (`serve --workers 2`, connector/affinity.py).

Starts a real store and a real ``brain-connector serve --workers 2`` on loopback and, over
``--connections`` keep-alive connections one after another (the kernel places each on either
worker), sends bare JSON-RPC pings as two users owned by different workers, one after the other:
on every connection one user's pings are served where they arrive and the other's are
passed over the owner's unix socket, so the slower of the two medians is the forwarded one.
Printed: p50 local and forwarded per connection and their medians; with
``CONNECTOR_WORKER_AFFINITY=0`` (every ping local) for reference.

Usage::

    .venv/bin/python bench/affinity_bench.py [--connections 8] [--pings 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from connector_bench import add_users, mint, running_connector, running_store  # noqa: E402

from connector.affinity import owner_of  # noqa: E402

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


async def one_connection(url: str, tokens: list[str], pings: int) -> list[float]:
    """p50 ms of each token's pings, one token after the other on one keep-alive connection (after a warm-up)."""
    samples: list[list[float]] = [[] for _ in tokens]
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=1)) as http:
        for index, token in enumerate(tokens):
            for round_ in range(pings + 20):
                began = time.perf_counter()
                response = await http.post(url, json=PING, headers={**HEADERS, "Authorization": f"Bearer {token}"})
                elapsed = time.perf_counter() - began
                response.raise_for_status()
                if round_ >= 20:
                    samples[index].append(elapsed * 1000)
    return [statistics.median(values) for values in samples]


def measure(work: Path, affinity: bool, connections: int, pings: int) -> list[list[float]]:
    """Per connection, the two users' p50 pings (ms), sorted (local first)."""
    with running_store(work) as store:
        users = add_users(work / "store", [f"ping{n}" for n in range(32)])
        by_slot: dict[int, tuple[str, str]] = {}
        for token, user_id in users:
            by_slot.setdefault(owner_of(f"static:{user_id}", 2), (token, user_id))
        env = {"CONNECTOR_WORKER_AFFINITY": "1" if affinity else "0"}
        with running_connector(store.base_url, work, env=env, argv=["--workers", "2"]) as connector:
            time.sleep(2.0)  # both workers up
            url = connector.base_url + "/mcp"
            tokens = [mint(connector.base_url, by_slot[slot][1], by_slot[slot][0]) for slot in (0, 1)]
            return [sorted(asyncio.run(one_connection(url, tokens, pings))) for _ in range(connections)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--pings", type=int, default=300, help="measured pings per user and connection")
    args = parser.parse_args()
    print(f"affinity benchmark: bare JSON-RPC ping, 2 workers, load average {os.getloadavg()[0]:.1f}")
    for affinity in (False, True):
        with tempfile.TemporaryDirectory(prefix="affinity-bench-") as tmp:
            rows = measure(Path(tmp), affinity, args.connections, args.pings)
        label = "affinity on " if affinity else "affinity off"
        for fast, slow in rows:
            print(f"  {label}: p50 {fast:.2f} / {slow:.2f} ms")
        fast_all, slow_all = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
        if affinity:
            print(f"affinity on:  local p50 {fast_all:.2f} ms, forwarded p50 {slow_all:.2f} ms "
                  f"(+{slow_all - fast_all:.2f} ms per call), medians of {len(rows)} connections")
        else:
            print(f"affinity off: both users local, p50 {fast_all:.2f} / {slow_all:.2f} ms")


if __name__ == "__main__":
    main()
