#!/usr/bin/env python3
"""Benchmark of the cluster (issue 27): what keeping the connectors' state on S3 costs.

For each state backend, starts the cluster of `tests/ops/cluster.py` (two store replicas on
a bucket, three connector replicas behind Caddy round robin), both on one SeaweedFS and
side by side: the connectors' state in a shared directory (``directory``), and in the
bucket under another prefix (``s3``, ``CONNECTOR_STATE_URL``, no shared directory). Through Caddy, with the official MCP
client SDK, it measures:

* sign-in: the SDK's whole OAuth sign-in (discovery, registration, the sign-in page and its
  submission, the token request, the first MCP request), each step at the next replica;
* warm tool call: ``brain_status`` on a session whose working copies are loaded at every replica;
* recall: ``brain_recall`` on the same session;
* memorize: ``brain_memorize`` (the write, the conditional push to the store, the brain's head
  in the shared state), acknowledged only once the store took it.

Beside each figure: the CPU time the three connector processes spent per call (from /proc),
which a loaded machine stretches less than wall-clock time.

Each figure is p50/p95 of one run's calls; the printed figure is the median over ``--runs``
runs, the two clusters' runs alternating. Then the difference S3 minus directory for each
p50, against the targets (+<= 5 ms on a warm tool call, +<= 30 ms on a memorize). Requests
go round robin, so every replica serves a third of them. Figures are noisy on a shared
machine: say how loaded it was.

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
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx2  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from connector_bench import cpu_seconds, percentiles, row  # noqa: E402
from tests.connector.oauth.live import MemoryStorage, signed_in_provider  # noqa: E402
from tests.ops.cluster import BACKENDS, Cluster, running_cluster  # noqa: E402
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


def connectors_cpu(cluster: Cluster) -> float:
    """CPU seconds the connector replicas have used so far (what they spend, whatever the load)."""
    return sum(cpu_seconds(replica.process.pid) for replica in cluster.connectors)


Figures = dict[str, tuple[float, float, float]]  # figure -> (p50 ms, p95 ms, connector CPU ms per call)


async def one_run(cluster: Cluster, token: str, sign_ins: int, calls: int, writes: int) -> Figures:
    """p50/p95 (ms) of each figure in one run, and the connectors' CPU time per call (ms)."""
    samples: dict[str, list[float]] = {figure: [] for figure in FIGURES}
    cpu: dict[str, float] = {}
    access = ""
    cpu["sign-in"] = connectors_cpu(cluster)
    for _ in range(sign_ins):
        seconds, access = await sign_in(cluster, token)
        samples["sign-in"].append(seconds)
    cpu["sign-in"] = connectors_cpu(cluster) - cpu["sign-in"]
    headers = {"Authorization": f"Bearer {access}"}
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(60), headers=headers) as http:
        async with Client(streamable_http_client(cluster.mcp_url, http_client=http)) as client:  # type: ignore[arg-type]
            for number in range(6):  # warm: every replica loads the brain (twice round the balancer)
                await timed(client, "brain_memorize", {"content": f"Warm-up note {number}: {secrets.token_hex(4)}"})
                await timed(client, "brain_recall", {"query": "warm-up note"})
            cpu["warm tool call"] = connectors_cpu(cluster)
            for _ in range(calls):
                samples["warm tool call"].append(await timed(client, "brain_status", {}))
            cpu["recall"] = connectors_cpu(cluster)
            cpu["warm tool call"] = cpu["recall"] - cpu["warm tool call"]
            for number in range(calls):
                samples["recall"].append(await timed(client, "brain_recall", {"query": f"release note {number % 7}"}))
            cpu["memorize"] = connectors_cpu(cluster)
            cpu["recall"] = cpu["memorize"] - cpu["recall"]
            for number in range(writes):
                content = f"Release note {number % 7}: the {secrets.token_hex(4)} build ships on day {number}"
                samples["memorize"].append(await timed(client, "brain_memorize", {"content": content, "origin": "user"}))
            cpu["memorize"] = connectors_cpu(cluster) - cpu["memorize"]
    return {figure: (*percentiles(values), cpu[figure] * 1000 / len(values)) for figure, values in samples.items()}


def measure(backends: list[str], runs: int, sign_ins: int, calls: int, writes: int) -> dict[str, Figures]:
    """Median over runs of each figure's p50, p95 and CPU per call, per backend. The clusters run side by side
    on one SeaweedFS and their runs alternate, so a change in the machine's load meanwhile
    weighs on both alike."""
    results: dict[str, list[Figures]] = {backend: [] for backend in backends}
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as temp, ExitStack() as stack:
        tmp = Path(temp)
        (tmp / "weed").mkdir()
        s3 = stack.enter_context(seaweedfs(tmp / "weed"))
        clusters: dict[str, tuple[Cluster, str]] = {}
        for backend in backends:
            (tmp / backend).mkdir()
            # No per-address limits (sign-ins, /mcp requests, counted across the replicas): every
            # request of the benchmark comes from 127.0.0.1.
            cluster = stack.enter_context(running_cluster(tmp / backend, s3, backend, CONNECTOR_SIGNIN_ATTEMPTS_PER_MIN="0",
                                                          CONNECTOR_MCP_RATE_PER_MIN="0"))
            clusters[backend] = (cluster, cluster.add_user("bench").token)
        for _ in range(runs):
            for backend, (cluster, token) in clusters.items():
                results[backend].append(asyncio.run(one_run(cluster, token, sign_ins, calls, writes)))
    return {backend: {figure: tuple(statistics.median(r[figure][i] for r in done) for i in range(3))  # type: ignore[misc]
                      for figure in FIGURES} for backend, done in results.items()}


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
    print(f"3 connector replicas, 2 store replicas on SeaweedFS, Caddy round robin; {args.runs} run(s), "
          f"{args.sign_ins} sign-ins, {args.calls} calls, {args.writes} memorizes per run\n"
          "(p50 / p95 ms, and the 3 connectors' CPU ms per call: medians of runs)")
    figures = measure(backends, args.runs, args.sign_ins, args.calls, args.writes)
    for backend in backends:
        print(f"\nconnector state: {backend}")
        for figure in FIGURES:
            p50, p95, cpu = figures[backend][figure]
            row(figure, f"{p50:8.1f} / {p95:8.1f}", f"CPU {cpu:6.1f}")
    if {"directory", "s3"} <= set(figures):
        print("\nwhat S3 adds to each p50 (s3 - directory)")
        targets = {"warm tool call": TARGET_WARM_CALL_MS, "memorize": TARGET_MEMORIZE_MS}
        for figure in FIGURES:
            added = figures["s3"][figure][0] - figures["directory"][figure][0]
            added_cpu = figures["s3"][figure][2] - figures["directory"][figure][2]
            target = targets.get(figure)
            note = "" if target is None else f"target <= +{target:.0f} ms: {'met' if added <= target else 'MISSED'}"
            row(figure, f"{added:+8.1f}", f"CPU {added_cpu:+6.1f}  {note}")


if __name__ == "__main__":
    main()
