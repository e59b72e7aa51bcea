#!/usr/bin/env python3
"""Benchmark of the cluster (issue 27): what keeping the connectors' state on S3 costs.

For each state backend, starts the cluster of `tests/ops/cluster.py` (SeaweedFS, two store
replicas on one bucket, three connector replicas behind Caddy round robin): the connectors'
state in a shared directory (``directory``), then in the bucket under another prefix
(``s3``, ``CONNECTOR_STATE_URL``, no shared directory). Through Caddy, with the official MCP
client SDK, it measures:

* sign-in: the SDK's whole OAuth sign-in (discovery, registration, the sign-in page and its
  submission, the token request, the first MCP request), each step at the next replica;
* warm tool call: ``brain_status`` on a session whose working copies are loaded at every replica;
* recall: ``brain_recall`` on the same session;
* memorize: ``brain_memorize`` (the write, the conditional push to the store, the brain's head
  in the shared state), acknowledged only once the store took it.

Each figure is p50/p95 of one run's calls; the printed figure is the median over ``--runs``
runs. Then the difference S3 minus directory for each p50, against the targets (+<= 5 ms on a
warm tool call, +<= 30 ms on a memorize). Requests go round robin, so every replica serves a
third of them. Figures are noisy on a shared machine: say how loaded it was.

Usage::

    .venv/bin/python bench/cluster_bench.py             # 3 runs: 5 sign-ins, 60 calls, 20 memorizes each
    .venv/bin/python bench/cluster_bench.py --quick     # 1 run, fewer calls
    .venv/bin/python bench/cluster_bench.py --backends s3 --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx2  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from connector_bench import percentiles, row  # noqa: E402
from tests.connector.oauth.live import MemoryStorage, signed_in_provider  # noqa: E402
from tests.ops.cluster import BACKENDS, Cluster, running_cluster, state_url_supported  # noqa: E402
from tests.s3.servers import seaweedfs  # noqa: E402

TARGET_WARM_CALL_MS = 5.0
TARGET_MEMORIZE_MS = 30.0
FIGURES = ("sign-in", "warm tool call", "recall", "memorize")


async def sign_in(cluster: Cluster, token: str) -> tuple[float, str]:
    """One whole OAuth sign-in through Caddy with the SDK: seconds taken and the access token."""
    storage = MemoryStorage()
    provider = signed_in_provider(cluster.mcp_url, token, storage, client_name="bench")
    started = time.perf_counter()
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(cluster.mcp_url, http_client=http)) as client:  # type: ignore[arg-type]
            await client.list_tools()
    assert storage.tokens is not None
    return time.perf_counter() - started, storage.tokens.access_token


async def timed(client: Any, name: str, arguments: dict[str, Any]) -> float:
    started = time.perf_counter()
    result = await client.call_tool(name, arguments)
    elapsed = time.perf_counter() - started
    if result.is_error:
        raise RuntimeError(f"{name} failed: {result.content}")
    if name == "brain_memorize" and (result.structured_content or {}).get("synced") is not True:
        raise RuntimeError("a memorize was not synced to the store")
    return elapsed


async def one_run(cluster: Cluster, token: str, sign_ins: int, calls: int, writes: int) -> dict[str, tuple[float, float]]:
    """p50/p95 (ms) of each figure in one run."""
    samples: dict[str, list[float]] = {figure: [] for figure in FIGURES}
    access = ""
    for _ in range(sign_ins):
        seconds, access = await sign_in(cluster, token)
        samples["sign-in"].append(seconds)
    headers = {"Authorization": f"Bearer {access}"}
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(60), headers=headers) as http:
        async with Client(streamable_http_client(cluster.mcp_url, http_client=http)) as client:  # type: ignore[arg-type]
            for number in range(6):  # warm: every replica loads the brain (twice round the balancer)
                await timed(client, "brain_memorize", {"content": f"Warm-up note {number}: {secrets.token_hex(4)}"})
                await timed(client, "brain_recall", {"query": "warm-up note"})
            for _ in range(calls):
                samples["warm tool call"].append(await timed(client, "brain_status", {}))
            for number in range(calls):
                samples["recall"].append(await timed(client, "brain_recall", {"query": f"release note {number % 7}"}))
            for number in range(writes):
                content = f"Release note {number % 7}: the {secrets.token_hex(4)} build ships on day {number}"
                samples["memorize"].append(await timed(client, "brain_memorize", {"content": content, "origin": "user"}))
    return {figure: percentiles(values) for figure, values in samples.items()}


def measure(backend: str, runs: int, sign_ins: int, calls: int, writes: int) -> dict[str, tuple[float, float]]:
    """Median over runs of each figure's p50 and p95 for one backend (a fresh cluster)."""
    with tempfile.TemporaryDirectory(prefix=f"cluster-bench-{backend}-") as temp:
        tmp = Path(temp)
        (tmp / "weed").mkdir()
        (tmp / "cluster").mkdir()
        with seaweedfs(tmp / "weed") as s3:
            # No per-address sign-in limit: every sign-in of the benchmark comes from 127.0.0.1.
            with running_cluster(tmp / "cluster", s3, backend, CONNECTOR_SIGNIN_ATTEMPTS_PER_MIN="0") as cluster:
                user = cluster.add_user("bench")
                results = [asyncio.run(one_run(cluster, user.token, sign_ins, calls, writes)) for _ in range(runs)]
    return {figure: (statistics.median(r[figure][0] for r in results), statistics.median(r[figure][1] for r in results))
            for figure in FIGURES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sign-ins", type=int, default=5)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma list of directory,s3")
    parser.add_argument("--quick", action="store_true", help="1 run, 3 sign-ins, 20 calls, 8 memorizes")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.sign_ins, args.calls, args.writes = 1, 3, 20, 8
    backends = [name for name in args.backends.split(",") if name]
    if "s3" in backends and not state_url_supported():
        print("connector state on S3 (CONNECTOR_STATE_URL) is not in this code: measuring the directory only")
        backends.remove("s3")
    print(f"3 connector replicas, 2 store replicas on SeaweedFS, Caddy round robin; {args.runs} run(s), "
          f"{args.sign_ins} sign-ins, {args.calls} calls, {args.writes} memorizes per run (p50 / p95 ms, medians of runs)")
    figures = {}
    for backend in backends:
        figures[backend] = measure(backend, args.runs, args.sign_ins, args.calls, args.writes)
        print(f"\nconnector state: {backend}")
        for figure in FIGURES:
            p50, p95 = figures[backend][figure]
            row(figure, f"{p50:8.1f} / {p95:8.1f}")
    if {"directory", "s3"} <= set(figures):
        print("\nwhat S3 adds to each p50 (s3 - directory)")
        targets = {"warm tool call": TARGET_WARM_CALL_MS, "memorize": TARGET_MEMORIZE_MS}
        for figure in FIGURES:
            added = figures["s3"][figure][0] - figures["directory"][figure][0]
            target = targets.get(figure)
            note = "" if target is None else f"target <= +{target:.0f} ms: {'met' if added <= target else 'MISSED'}"
            row(figure, f"{added:+8.1f}", note)


if __name__ == "__main__":
    main()
