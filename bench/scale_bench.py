#!/usr/bin/env python3
"""Benchmark of the MCP connector under many users: issue #19's two concurrency targets.

Starts a real store and a real ``brain-connector serve [--workers N]`` on loopback
(the helpers of ``connector_bench.py``: sealed access tokens, the engine benchmark's
brain generator and ``--brain-cache``), and drives it with bare JSON-RPC POSTs
(protocol 2025-11-25, stateless, JSON answers; one keep-alive connection per user, as
an MCP host keeps one), or with the official MCP client SDK (``--client sdk``).

Scenario ``concurrent`` (a): N users (20) with brains of 10,000 memories call
``brain_recall`` back to back (``--calls``, 25 each), after a first recall each and
``--warmup`` unmeasured ones (10: with several workers, connections are rebalanced at
first and a user moved to another worker loads a copy there); p50/p95/p99, calls/s,
the connector's CPU per call (every process of the server, from /proc), errors.
Every user uploads the same archive, so their recall indexes are one (the index is
cached by content); the working copies are each user's own.
Target: p95 <= 100 ms with ``--workers 2``.

Scenario ``users`` (b): U users (200) with brains of 1,000 memories (the cached archive
with one memory naming the user added, so every brain, and every recall index, is
distinct), all signed in, start at random within ``--ramp`` seconds (20; 0 makes the
first recalls a cold-load storm), then run ``--rounds`` calls (12) each with a random
think time between calls (uniform 0..2x``--think``, 5 s mean): a ``brain_memorize``
every ``--write-every``-th call (10),
``brain_recall`` otherwise. Printed: the offered load (calls/s), recall p50/p95/p99
for the first (cold) and the later (warm) calls, memorize p50/p95, errors (must be 0),
the peak RSS of the connector's processes (summed, sampled from /proc every 0.2 s),
per user (peak / U), and the store's. Target: p95 recall <= 250 ms, no errors.

Usage::

    .venv/bin/python bench/scale_bench.py --brain-cache /tmp/brains --workers 2            # both, full size
    .venv/bin/python bench/scale_bench.py --quick --brain-cache /tmp/brains                # CI-sized, < 1 min
    .venv/bin/python bench/scale_bench.py --scenario users --users 200 --runs 3 --workers 2

``--runs R`` repeats a scenario R times on fresh servers and prints the median of each
figure after the runs. The machine the figures come from is shared: the load average
is printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import httpx2  # noqa: E402
from connector_bench import (  # noqa: E402
    add_users,
    console_script,
    group_cpu,
    group_pids,
    mint,
    query,
    row,
    rss_bytes,
    running_connector,
    running_store,
    upload,
)
from engine_bench import WORDS, brain_archive  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from connector.engine.format.archive import load_archive, pack_archive  # noqa: E402
from connector.engine.writes.ops import connector_memorize  # noqa: E402

TARGET_CONCURRENT_P95_MS = 100.0
TARGET_USERS_P95_MS = 250.0
KEEPALIVE_S = 4.0
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


# ----- figures ------------------------------------------------------------------


def quantiles_ms(samples: list[float]) -> tuple[float, float, float]:
    """(p50, p95, p99) in milliseconds of samples in seconds (nearest rank); zeros when empty."""
    if not samples:
        return 0.0, 0.0, 0.0
    ordered = sorted(samples)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000

    return statistics.median(ordered) * 1000, rank(0.95), rank(0.99)


class RssSampler:
    """Samples the summed RSS of process groups in a thread; keeps each group's peak."""

    def __init__(self, leaders: dict[str, int], every_s: float = 0.2) -> None:
        self.leaders = leaders
        self.every_s = every_s
        self.peak = {name: 0 for name in leaders}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            for name, leader in self.leaders.items():
                self.peak[name] = max(self.peak[name], sum(rss_bytes(pid) for pid in group_pids(leader)))
            if self._stop.wait(self.every_s):
                return

    @contextmanager
    def running(self) -> Iterator[RssSampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


# ----- clients ------------------------------------------------------------------


@dataclass
class Tally:
    """Latencies (seconds) by kind and the errors seen."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, kind: str, seconds: float) -> None:
        self.samples.setdefault(kind, []).append(seconds)


class BareUser:
    """One signed-in user speaking bare JSON-RPC over one keep-alive connection; ``async with`` closes it."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        # Idle connections closed before the server's keep-alive does: a POST sent on a connection
        # the server is closing fails with ReadError, and a think time is often longer than 5 s.
        self.http = httpx.AsyncClient(headers={**HEADERS, "Authorization": f"Bearer {token}"}, timeout=300,
                                      limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S))
        self.number = 0

    async def call(self, name: str, arguments: dict[str, Any]) -> str | None:
        """Call a tool; None on success, else what went wrong."""
        self.number += 1
        body = {"jsonrpc": "2.0", "id": self.number, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}}
        try:
            response = await self.http.post(self.url, json=body)
        except httpx.HTTPError as exc:
            return f"{name}: {type(exc).__name__} {exc}"
        if response.status_code != 200:
            return f"{name}: HTTP {response.status_code} {response.text[:200]}"
        answer = response.json()
        if "error" in answer or answer.get("result", {}).get("isError"):
            return f"{name}: {response.text[:300]}"
        return None

    async def __aenter__(self) -> BareUser:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()


class SdkUser:
    """One signed-in user through the official MCP client SDK (protocol 2026-07-28); open it with ``async with``."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self._stack = AsyncExitStack()
        self.client: Client | None = None

    async def __aenter__(self) -> SdkUser:
        self._stack = AsyncExitStack()
        http = await self._stack.enter_async_context(
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.token}"}, timeout=httpx2.Timeout(300),
                               limits=httpx2.Limits(keepalive_expiry=KEEPALIVE_S))
        )
        self.client = await self._stack.enter_async_context(
            Client(streamable_http_client(self.url, http_client=http))  # type: ignore[arg-type]
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def call(self, name: str, arguments: dict[str, Any]) -> str | None:
        """Call a tool; None on success, else what went wrong."""
        assert self.client is not None, "used outside its async with"
        try:
            result = await self.client.call_tool(name, arguments)
        except Exception as exc:  # the SDK raises on transport and protocol errors: counted, not fatal
            return f"{name}: {type(exc).__name__} {exc}"
        return f"{name}: {result.content[0].text[:300]}" if result.is_error else None


async def timed(user: BareUser | SdkUser, tally: Tally, kind: str, name: str, arguments: dict[str, Any]) -> None:
    began = time.perf_counter()
    error = await user.call(name, arguments)
    tally.add(kind, time.perf_counter() - began)
    if error is not None:
        tally.errors.append(error)


def make_user(client: str, index: int, url: str, token: str) -> BareUser | SdkUser:
    """``bare``, ``sdk``, or ``mix`` (every other user on the SDK)."""
    if client == "sdk" or (client == "mix" and index % 2):
        return SdkUser(url, token)
    return BareUser(url, token)


# ----- servers ------------------------------------------------------------------


def supports_workers() -> bool:
    """Whether this checkout's `brain-connector serve` takes ``--workers``."""
    done = subprocess.run([console_script("brain-connector"), "serve", "--help"], capture_output=True, text=True, timeout=60)
    return "--workers" in done.stdout


def distinct_archives(archive: bytes, users: int) -> list[bytes]:
    """``archive`` with one memory naming each user added: distinct brains (and recall indexes) from one generation."""
    brain = load_archive(archive)
    made = []
    for number in range(users):
        working = brain.copy()
        connector_memorize(f"User {number} keeps this note: {' '.join(random.Random(number).sample(WORDS, 6))}",
                           tags=["user"]).apply(working, datetime.now(UTC))
        made.append(pack_archive(working))
    return made


@dataclass
class Servers:
    connector_url: str
    tokens: list[str]
    connector_leader: int
    store_leader: int


@contextmanager
def servers(work: Path, archives: list[bytes], workers: int, env: dict[str, str]) -> Iterator[Servers]:
    """A store holding one brain per archive (one user each) and a connector signing them in."""
    with running_store(work) as store:
        users = add_users(work / "store", [f"user{i}" for i in range(len(archives))])
        for (token, _), archive in zip(users, archives):
            upload(store.base_url, token, archive)
        argv = ["--workers", str(workers)] if workers > 1 else []
        with running_connector(store.base_url, work, env, argv) as connector:
            tokens = [mint(connector.base_url, user_id, token) for token, user_id in users]
            yield Servers(connector.base_url + "/mcp", tokens, connector.process.pid, store.process.pid)


# ----- scenario (a): N users recalling back to back ---------------------------------


async def concurrent_recalls(site: Servers, calls: int, warmup: int, client: str) -> dict[str, float]:
    warm, tally = Tally(), Tally()
    # Every user's session is one task (the SDK's client must be closed in the task that opened
    # it); the phases are kept in step by a barrier, the measurement runs between two of them.
    phase = asyncio.Barrier(len(site.tokens) + 1)

    async def session(number: int, token: str) -> None:
        rnd = random.Random(number)
        async with make_user(client, number, site.connector_url, token) as user:
            # The first recall pulls and loads the user's copy: all at once, before measuring.
            await timed(user, warm, "cold", "brain_recall", {"query": "warm up"})
            await phase.wait()
            # Then the same load, unmeasured: with several workers, connections are rebalanced in
            # the first seconds and a user moved to another worker loads a copy there (once).
            for _ in range(warmup):
                await timed(user, warm, "recall", "brain_recall", {"query": query(rnd)})
            await phase.wait()
            for _ in range(calls):
                await timed(user, tally, "recall", "brain_recall", {"query": query(rnd)})
            await phase.wait()

    sessions = asyncio.gather(*(session(number, token) for number, token in enumerate(site.tokens)))
    await phase.wait()
    await phase.wait()
    cpu_before, began, client_began = group_cpu(site.connector_leader), time.perf_counter(), time.process_time()
    await phase.wait()
    wall = time.perf_counter() - began
    cpu = group_cpu(site.connector_leader) - cpu_before
    client_cpu = time.process_time() - client_began
    await sessions
    samples = tally.samples["recall"]
    p50, p95, p99 = quantiles_ms(samples)
    figures = {
        "first recalls (cold, all at once) p95 ms": quantiles_ms(warm.samples["cold"])[1],
        "recall p50 ms": p50, "recall p95 ms": p95, "recall p99 ms": p99,
        "calls/s": len(samples) / wall, "connector CPU ms/call": cpu * 1000 / len(samples),
        "this client's CPU ms/call": client_cpu * 1000 / len(samples),
        "errors": float(len(warm.errors) + len(tally.errors)),
    }
    for error in (warm.errors + tally.errors)[:5]:
        print(f"    error: {error}")
    return figures


# ----- scenario (b): many signed-in users, recalls and some writes -------------------------


async def many_users(
    site: Servers, rounds: int, write_every: int, think_s: float, ramp_s: float, client: str
) -> dict[str, float]:
    tally = Tally()

    async def session(number: int, token: str) -> None:
        rnd = random.Random(number)
        await asyncio.sleep(rnd.uniform(0, ramp_s))  # when this user's session starts
        async with make_user(client, number, site.connector_url, token) as user:
            await calls(number, user, rnd)

    async def calls(number: int, user: BareUser | SdkUser, rnd: random.Random) -> None:
        for call in range(rounds):
            if call:
                await asyncio.sleep(rnd.uniform(0, 2 * think_s))
            if write_every and call % write_every == write_every - 1:
                words = rnd.sample(WORDS, 8)
                await timed(user, tally, "memorize", "brain_memorize",
                            {"content": f"User {number} fact {call}: " + " ".join(words), "tags": rnd.sample(WORDS, 2)})
            else:
                await timed(user, tally, "cold" if call == 0 else "warm", "brain_recall", {"query": query(rnd)})

    cpu_before, began, client_began = group_cpu(site.connector_leader), time.perf_counter(), time.process_time()
    with RssSampler({"connector": site.connector_leader, "store": site.store_leader}).running() as rss:
        await asyncio.gather(*(session(number, token) for number, token in enumerate(site.tokens)))
    wall = time.perf_counter() - began
    cpu = group_cpu(site.connector_leader) - cpu_before
    calls = sum(len(samples) for samples in tally.samples.values())
    cold, warm = quantiles_ms(tally.samples.get("cold", [])), quantiles_ms(tally.samples.get("warm", []))
    every = quantiles_ms(tally.samples.get("cold", []) + tally.samples.get("warm", []))
    writes = quantiles_ms(tally.samples.get("memorize", []))
    mib = 1024 * 1024
    for error in tally.errors[:5]:
        print(f"    error: {error}")
    return {
        "offered calls/s (users / mean think, once all started)": len(site.tokens) / think_s if think_s else 0.0,
        "served calls/s": calls / wall,
        "first recall (cold) p50 ms": cold[0], "first recall (cold) p95 ms": cold[1], "first recall (cold) p99 ms": cold[2],
        "warm recall p50 ms": warm[0], "warm recall p95 ms": warm[1], "warm recall p99 ms": warm[2],
        "all recalls p95 ms": every[1],
        "memorize p50 ms": writes[0], "memorize p95 ms": writes[1],
        "connector CPU ms/call": cpu * 1000 / max(1, calls),
        "this client's CPU ms/call": (time.process_time() - client_began) * 1000 / max(1, calls),
        "errors": float(len(tally.errors)),
        "connector peak RSS MiB (all processes)": rss.peak["connector"] / mib,
        "connector peak RSS per user MiB": rss.peak["connector"] / mib / len(site.tokens),
        "store peak RSS MiB": rss.peak["store"] / mib,
    }


# ----- driver -------------------------------------------------------------------------


def report(title: str, runs: list[dict[str, float]], target: tuple[str, float]) -> bool:
    """Each figure's runs and their median, the target's verdict on the median; False when a call failed."""
    print(f"{title}: medians of {len(runs)} run(s); load average now {os.getloadavg()[0]:.1f}")
    for name in runs[0]:
        values = [run[name] for run in runs]
        median = statistics.median(values)
        note = ""
        if name == target[0]:
            note = f"target <= {target[1]:.0f} ({'meets' if median <= target[1] else 'misses'})"
        if name == "errors":
            note = "must be 0" + ("" if median == 0 and max(values) == 0 else " (FAILS)")
        shown = " / ".join(f"{value:.1f}" for value in values)
        row(f"  {name}", f"{median:.1f}", f"runs: {shown}  {note}")
    return not any(run["errors"] for run in runs)


def main() -> int:
    """Run the scenarios asked for; exit status 1 when any call failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=["concurrent", "users", "both"], default="both")
    parser.add_argument("--workers", type=int, default=2, help="connector processes (serve --workers)")
    parser.add_argument("--client", choices=["bare", "sdk", "mix"], default="bare",
                        help="bare JSON-RPC POSTs, the MCP client SDK, or every other user on the SDK")
    parser.add_argument("--runs", type=int, default=1, help="runs per scenario, each on fresh servers")
    parser.add_argument("--concurrent-users", type=int, default=20)
    parser.add_argument("--concurrent-memories", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=25, help="recalls per user in scenario concurrent, measured")
    parser.add_argument("--warmup", type=int, default=10, help="recalls per user before those, not measured")
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--memories", type=int, default=1000, help="memories per brain in scenario users")
    parser.add_argument("--rounds", type=int, default=12, help="calls per user in scenario users")
    parser.add_argument("--write-every", type=int, default=10, help="every k-th call is a memorize (0: none)")
    parser.add_argument("--think", type=float, default=5.0, help="mean think time between a user's calls, seconds")
    parser.add_argument("--ramp", type=float, default=20.0,
                        help="users start at random within this many seconds (0: all at once, a cold-load storm)")
    parser.add_argument("--quick", action="store_true",
                        help="CI-sized: 4 users at 2,000 memories x 10 calls; 20 users at 200 memories x 6 rounds, every 3rd a memorize "
                             "(sizes given as options win)")
    parser.add_argument("--brain-cache", type=Path, default=None, metavar="DIR",
                        help="keep/reuse the generated brain archives here (shared with engine_bench.py)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra connector setting, e.g. CONNECTOR_MAX_CONCURRENT_LOADS=4 (repeatable)")
    args = parser.parse_args()
    if args.quick:  # new defaults: a size given on the command line still wins
        parser.set_defaults(concurrent_users=4, concurrent_memories=2000, calls=10, warmup=3,
                            users=20, memories=200, rounds=6, think=0.2, write_every=3, ramp=0.5)
        args = parser.parse_args()
    workers = args.workers
    if workers > 1 and not supports_workers():
        print(f"note: this connector has no `serve --workers`; running 1 process instead of {workers}")
        workers = 1
    env = dict(item.split("=", 1) for item in args.env)
    print(f"scale benchmark: {workers} connector process(es), {args.client} client, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}" + (f", {env}" if env else ""))

    clean = True
    if args.scenario in ("concurrent", "both"):
        archive, _ = brain_archive(args.concurrent_memories, datetime.now(UTC), args.brain_cache)
        runs = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
                with servers(Path(tmp), [archive] * args.concurrent_users, workers, env) as site:
                    runs.append(asyncio.run(concurrent_recalls(site, args.calls, args.warmup, args.client)))
            print(f"  run {run + 1}: p95 {runs[-1]['recall p95 ms']:.1f} ms", flush=True)
        title = f"(a) {args.concurrent_users} users x {args.calls} recalls back to back, {args.concurrent_memories:,} memories each"
        clean &= report(title, runs, ("recall p95 ms", TARGET_CONCURRENT_P95_MS))

    if args.scenario in ("users", "both"):
        archive, _ = brain_archive(args.memories, datetime.now(UTC), args.brain_cache)
        archives = distinct_archives(archive, args.users)
        runs = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
                with servers(Path(tmp), archives, workers, env) as site:
                    figures = many_users(site, args.rounds, args.write_every, args.think, args.ramp, args.client)
                    runs.append(asyncio.run(figures))
            print(f"  run {run + 1}: warm recall p95 {runs[-1]['warm recall p95 ms']:.1f} ms", flush=True)
        title = (f"(b) {args.users} users x {args.rounds} calls (memorize every {args.write_every}), think "
                 f"{args.think:g} s mean, started within {args.ramp:g} s, {args.memories:,} memories each")
        clean &= report(title, runs, ("all recalls p95 ms", TARGET_USERS_P95_MS))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
