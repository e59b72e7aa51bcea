#!/usr/bin/env python3
"""What one brain_status costs when an uploaded brain's file holds many mental models (issue #35 item 6).

Starts a real store and a real ``brain-connector serve`` on loopback, uploads (as a device would)
a brain of ``--memories`` memories whose ``mental-models.json`` holds ``--models`` models, each
written and refreshed before the memories (so each is checked for staleness), and times
``brain_status`` over MCP ``--calls`` times after a warm-up. Every call reads the first 50
models only (docs/thinking.md), so the figure should not grow with ``--models``.

Usage::

    .venv/bin/python bench/mental_models_bench.py [--models 10000] [--memories 200] [--calls 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from connector_bench import add_users, mint, running_connector, running_store, upload  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from connector.engine.format.archive import pack_archive  # noqa: E402
from connector.engine.format.brain import Brain  # noqa: E402
from connector.engine.tending.mental import MENTAL_FILE  # noqa: E402
from connector.engine.writes.ops import connector_memorize  # noqa: E402


def archive(models: int, memories: int) -> bytes:
    """A brain of ``memories`` memories and ``models`` mental models refreshed before them."""
    brain = Brain()
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    first = ""
    for n in range(memories):
        stored = connector_memorize(f"Team note {n}: the platform team deploys on Thursdays, review {n % 7}",
                                    agent="bench").apply(brain, now)
        first = first or stored["stored"][0]["id"]
    brain.write_json(MENTAL_FILE, {"version": 1, "models": [
        {"id": f"mm_{n:012x}", "name": f"Model {n}", "question": f"Which team deploys on Thursdays? {n % 7}",
         "created": "2026-02-01T12:00:00.000Z", "created_by": "bench", "text": f"Platform [{first}].",
         "cited": [first], "refreshed_at": "2026-02-01T12:00:00.000Z",
         "written_by": {"source": "operator", "model": "m"}, "updated_by": ""} for n in range(models)]})
    return pack_archive(brain)


async def timed_status(url: str, token: str, calls: int) -> tuple[list[float], dict[str, object]]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(600)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
            await client.call_tool("brain_status", {})  # pulls the brain, builds its indexes
            samples, last = [], {}
            for _ in range(calls):
                began = time.perf_counter()
                result = await client.call_tool("brain_status", {})
                samples.append(time.perf_counter() - began)
                last = dict((result.structured_content or {}).get("mental_models") or {})
            return samples, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=10_000)
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--calls", type=int, default=7)
    args = parser.parse_args()
    print(f"mental models benchmark: {args.models:,} models, {args.memories} memories, "
          f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="mental-bench-") as tmp:
        work = Path(tmp)
        with running_store(work) as store:
            token, user_id = add_users(work / "store", ["bench"])[0]
            upload(store.base_url, token, archive(args.models, args.memories))
            with running_connector(store.base_url, work) as connector:
                samples, summary = asyncio.run(timed_status(connector.base_url + "/mcp",
                                                            mint(connector.base_url, user_id, token), args.calls))
    print(f"  brain_status: median {statistics.median(samples) * 1000:.0f} ms, "
          f"min {min(samples) * 1000:.0f} ms, max {max(samples) * 1000:.0f} ms over {len(samples)} calls")
    print(f"  mental_models: count {summary.get('count')}, read {summary.get('read', summary.get('count'))}, "
          f"stale {len(summary.get('stale') or [])}")


if __name__ == "__main__":
    main()
