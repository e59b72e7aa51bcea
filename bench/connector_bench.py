#!/usr/bin/env python3
"""Benchmark of the MCP connector: brain_recall and brain_memorize over MCP on HTTP.

Starts a real store and a real connector (``brain-connector serve``) on loopback,
puts a brain of N memories (default 10,000, written with our engine) in the
store, signs clients in with access tokens sealed by the connector's key, and
measures with the official MCP client SDK:

* ``brain_recall`` p50/p95 over 100 calls with a warm working copy (also with a
  bare JSON-RPC POST, to show how much is the client SDK's own overhead);
* the first recall of a session (cold: pull the archive, parse it, build the index);
* ``brain_memorize`` round trips (the operation, packing the whole brain, the
  conditional push to the store; the recall index follows the write meanwhile),
  each followed at once by a recall of what it wrote, and the phases of a
  memorize timed one by one in this process (``--phases``);
* with ``--memory`` only: the resident memory of a working copy and its index, and
  per user when ``--copies`` users hold a brain in one process (`memory_probe.py`);
* 20 users recalling concurrently (each with their own copy of the brain).

Reference: the public JavaScript connector spawns the `brain` CLI per call
(421 ms for the recall alone at 10,000 memories). Target: recall over MCP
p50 <= 25 ms with a warm copy. Figures are noisy on a shared machine.

Each figure is printed as wall-clock p50/p95; the recall lines also show the
connector process's CPU time per call (from /proc), which is what the server itself
spends whatever else the machine is doing. Beside them: the engine's own recall on
the same brain in this process, and a JSON-RPC ``ping`` through the same HTTP/auth/MCP
path, so the MCP/HTTP overhead can be read off directly.

Usage::

    .venv/bin/python bench/connector_bench.py            # 10,000 memories, 100 calls, 20 users
    .venv/bin/python bench/connector_bench.py --quick    # 2,000 memories, 30 calls, 5 users
    .venv/bin/python bench/connector_bench.py --brain-cache /tmp/brains   # reuse the generated brain
    .venv/bin/python bench/connector_bench.py --mode hybrid --users 2       # hybrid recall (CONNECTOR_RECALL_MODE)

With ``--mode hybrid`` the brain's vectors are computed first, in this process, into
the connector's state directory (sealed with its key), as a connector that has seen
the brain before would have them; the target there is p50 <= 30 ms over MCP.
Add ``--e5 stand-in`` to seed its e5 vectors (and the judge's) too, so every recall fuses the e5
channel (and the judge's) and embeds its query with e5 (and the judge) (the issue's warm-recall target, p50 <= 15 ms, is for that): the
rows are stand-ins drawn from each memory's hash (timing only; the real ones take minutes
of CPU at 10,000 memories); ``--e5 off`` runs the connector without the e5 channel. By
default (``--e5 background``) the connector computes the brain's e5 vectors itself, in the
background, during the measurements.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import httpx2  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from common.docstore import open_document_store  # noqa: E402
from connector.engine.format.archive import load_archive, pack_archive  # noqa: E402
from connector.engine.format.change import BrainChange  # noqa: E402
from connector.engine.recall.exact import recall  # noqa: E402
from connector.engine.recall.hybrid import HybridIndex  # noqa: E402
from connector.engine.recall.incremental import apply_change  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.engine.writes.ops import connector_memorize  # noqa: E402
from store.archive.inspect import inspect_bytes  # noqa: E402
from connector.oauth.tokens import AccessClaims, AccessTokenCodec  # noqa: E402
from connector.workcopy.vectors import E5_PREFIX, JUDGE_PREFIX, VectorStore  # noqa: E402
from connector.engine.recall.judge import DIMENSIONS as JUDGE_DIMENSIONS, JUDGE_MODEL_ID  # noqa: E402
from connector.engine.recall.e5 import E5_DIMENSIONS, E5_MODEL_ID  # noqa: E402
from connector.engine.recall.embedding import Quantized, content_hash, quantize  # noqa: E402
from connector.engine.recall.hybrid import memory_texts  # noqa: E402
from engine_bench import WORDS, brain_archive  # noqa: E402
from tests.support.processes import ServerProcess, console_script, free_port, group_pids, run_server  # noqa: E402

STATE_KEY = bytes(range(32))
REFERENCE_RECALL_MS = 421.0
TARGET_RECALL_MS = 25.0
WARM_S = 3.0  # a warm connector has been answering for a few seconds
TARGET_MEMORIZE_MS = 250.0


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p95) in milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


def row(label: str, value: str, note: str = "") -> None:
    print(f"  {label:<52} {value:>22}  {note}", flush=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), 0.0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (0 once gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def group_cpu(leader: int) -> float:
    """CPU seconds spent so far by the live processes of a process group."""
    return sum(cpu_seconds(pid) for pid in group_pids(leader))


class ServerCpu:
    """CPU time the connector process spends over a stretch of calls."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.began = 0.0

    def start(self) -> None:
        self.began = cpu_seconds(self.pid)

    def per_call_ms(self, calls: int) -> str:
        spent = cpu_seconds(self.pid) - self.began
        return f"server CPU {spent * 1000 / max(1, calls):.1f} ms/call"


def add_users(data: Path, names: list[str]) -> list[tuple[str, str]]:
    """(token, user id) of new store users, each with a first brain, as `brain-store user add` makes them.

    In this process (one spawn of the CLI per user would cost ~1 s each at 200 users);
    the running store sees the changed users file at once, as it does the CLI's.
    """
    from store.service import BrainService
    from store.settings import StoreSettings
    from store.context import open_registry
    from store.storage.factory import open_backend

    settings = StoreSettings.from_env(os.environ, data_dir=data)  # as the CLI reads them
    registry, service = open_registry(settings), BrainService(settings, open_backend(settings))
    made = []
    for name in names:
        user, token = registry.add(name)
        service.ensure_default(user.id)
        made.append((token, user.id))
    return made


def upload(store_url: str, token: str, archive: bytes) -> str:
    """Upload ``archive`` as the user's first brain; its id."""
    headers = {"Authorization": f"Bearer {token}"}
    brain_id = httpx.get(store_url + "/api/brains", headers=headers, timeout=30).json()[0]["id"]
    response = httpx.put(
        f"{store_url}/api/brains/{brain_id}/sync", headers=headers,
        files={"brain": ("brain.tar.gz", archive, "application/gzip")}, timeout=120,
    )
    response.raise_for_status()
    return brain_id


def mint(base: str, user_id: str, store_token: str) -> str:
    claims = AccessClaims(
        sub=f"static:{user_id}", scope=frozenset({"brain.read", "brain.write"}), aud=base + "/mcp",
        exp=int(time.time()) + 3600, client_id="bench", client_name="connector-bench", idp="static",
        store_credential=store_token,
    )
    return AccessTokenCodec(STATE_KEY).issue(claims)


def query(rnd: random.Random) -> str:
    return " ".join(rnd.sample(WORDS, rnd.randint(1, 3)))


async def timed_calls(client: Client, name: str, argument_sets: list[dict[str, Any]]) -> list[float]:
    samples = []
    for arguments in argument_sets:
        began = time.perf_counter()
        result = await client.call_tool(name, arguments)
        samples.append(time.perf_counter() - began)
        if result.is_error:
            raise RuntimeError(f"{name} failed: {result.content[0].text}")
    return samples


async def channels_ready(client: Client, limit_s: float = 300.0) -> float:
    """Seconds until brain_status says e5's vectors and kernels, the memories' neighbours and the
    judge's channel are ready (each only where the connector runs it); raises after ``limit_s``."""
    began = time.perf_counter()
    while True:
        status = (await client.call_tool("brain_status", {})).structured_content or {}
        e5, judge = status.get("recall_e5"), status.get("recall_judge")
        e5_ready = e5 is None or all(e5.get(key, "ready") == "ready" for key in ("state", "query_kernels", "neighbours"))
        judge_ready = judge is None or judge.get("channel", "ready") == "ready"
        if e5_ready and judge_ready:
            return time.perf_counter() - began
        if time.perf_counter() - began > limit_s:
            raise RuntimeError(f"the recall channels were not ready after {limit_s:.0f} s: {e5}, {judge}")
        await asyncio.sleep(0.25)


async def bare_posts(url: str, token: str, bodies: list[dict[str, Any]]) -> list[float]:
    """Wall seconds of bare JSON-RPC POSTs (2025-11-25, stateless), one keep-alive connection."""
    headers = {
        "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    samples = []
    async with httpx.AsyncClient(timeout=300) as http:
        for body in bodies:
            began = time.perf_counter()
            response = await http.post(url, json=body, headers=headers)
            samples.append(time.perf_counter() - began)
            response.raise_for_status()
            if "error" in response.json() or response.json().get("result", {}).get("isError"):
                raise RuntimeError(f"bare POST failed: {response.text[:300]}")
    return samples


def engine_recall_ms(archive: bytes, queries: list[str]) -> tuple[float, float]:
    """p50/p95 of the engine's own recall (prepared index) on the same brain, in this process."""
    brain = load_archive(archive)
    now = datetime.now(UTC)
    recall(brain, "warm up", top=10, now=now, cache_key="bench")
    samples = []
    for text in queries:
        began = time.perf_counter()
        recall(brain, text, top=10, now=now, cache_key="bench")
        samples.append(time.perf_counter() - began)
    return percentiles(samples)


async def bench(
    base: str, tokens: list[str], calls: int, concurrent_calls: int, cpu: ServerCpu, archive: bytes, writes_count: int
) -> None:
    rnd = random.Random(7)
    url = base + "/mcp"
    main_token = tokens[0]
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {main_token}"}, timeout=httpx2.Timeout(300)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
            began = time.perf_counter()
            await client.call_tool("brain_recall", {"query": "postgres cache"})
            row("first recall (pull + parse + index)", f"{(time.perf_counter() - began) * 1000:.0f} ms", "cold")
            # Warm: a few calls, for at least 3 s (the connector builds its int8 e5 query kernels in the
            # background from its first hybrid recall, ~1-2 s; the engine embeds the queries meanwhile).
            # Extra calls draw from their own generator: the measured queries stay those of before.
            warming, extra = time.perf_counter(), random.Random(8)
            await timed_calls(client, "brain_recall", [{"query": query(rnd)} for _ in range(5)])
            while time.perf_counter() - warming < WARM_S:
                await timed_calls(client, "brain_recall", [{"query": query(extra)}])
            # Every channel of the default in use before the warm figure: e5's vectors and kernels,
            # the judge's channel (read in the background after the first recall; measured without
            # them, a warm recall was the cheaper one of a version that has only USE).
            waited = await channels_ready(client)
            row("e5 and judge channels ready (brain_status)", f"{waited:.1f} s", "after the warm-up")
            cpu.start()
            p50, p95 = percentiles(await timed_calls(client, "brain_recall", [{"query": query(rnd)} for _ in range(calls)]))
            verdict = "meets" if p50 <= TARGET_RECALL_MS else "misses"
            row(f"brain_recall over MCP, SDK client, warm ({calls})", f"p50 {p50:.1f} / p95 {p95:.1f} ms",
                f"{cpu.per_call_ms(calls)}; target p50 <= {TARGET_RECALL_MS:.0f} ms ({verdict}); "
                f"reference {REFERENCE_RECALL_MS:.0f} ms")

    # Bare JSON-RPC (2025-11-25, stateless): what the server itself costs, without the SDK client.
    queries = [query(rnd) for _ in range(calls)]
    recall_bodies = [
        {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": {"name": "brain_recall", "arguments": {"query": text}}}
        for number, text in enumerate(queries)
    ]
    await bare_posts(url, main_token, recall_bodies[:5])
    cpu.start()
    bare50, bare95 = percentiles(await bare_posts(url, main_token, recall_bodies))
    verdict = "meets" if bare50 <= TARGET_RECALL_MS else "misses"
    row(f"brain_recall, bare JSON-RPC POST ({calls})", f"p50 {bare50:.1f} / p95 {bare95:.1f} ms",
        f"{cpu.per_call_ms(calls)}; target p50 <= {TARGET_RECALL_MS:.0f} ms ({verdict})")
    cpu.start()
    ping50, ping95 = percentiles(await bare_posts(
        url, main_token, [{"jsonrpc": "2.0", "id": number, "method": "ping"} for number in range(calls)]
    ))
    row(f"ping, bare JSON-RPC POST ({calls}): HTTP+auth+MCP", f"p50 {ping50:.1f} / p95 {ping95:.1f} ms", cpu.per_call_ms(calls))
    eng50, eng95 = engine_recall_ms(archive, queries)
    row("engine recall in process, same queries", f"p50 {eng50:.1f} / p95 {eng95:.1f} ms",
        f"MCP/HTTP overhead ~ {bare50 - eng50:.1f} ms (bare POST p50 - engine p50)")

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {main_token}"}, timeout=httpx2.Timeout(300)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
            # Pairs: a memorize, then at once a recall of what it wrote (the index must follow the write).
            writes, recalls_after = [], []
            write_cpu = recall_cpu = 0.0
            for i in range(writes_count):
                words = rnd.sample(WORDS, 8)
                began = cpu_seconds(cpu.pid)
                writes += await timed_calls(client, "brain_memorize", [
                    {"content": f"Benchmark fact {i}: " + " ".join(words), "tags": rnd.sample(WORDS, 2)}
                ])
                middle = cpu_seconds(cpu.pid)
                recalls_after += await timed_calls(client, "brain_recall", [{"query": f"benchmark fact {i} {words[0]}"}])
                write_cpu += middle - began
                recall_cpu += cpu_seconds(cpu.pid) - middle
            p50, p95 = percentiles(writes)
            verdict = "meets" if p50 <= TARGET_MEMORIZE_MS else "misses"
            row(f"brain_memorize round trip incl. pack + push ({writes_count})", f"p50 {p50:.0f} / p95 {p95:.0f} ms",
                f"server CPU {write_cpu * 1000 / writes_count:.0f} ms/call; "
                f"target p50 <= {TARGET_MEMORIZE_MS:.0f} ms ({verdict})")
            p50, p95 = percentiles(recalls_after)
            verdict = "meets" if p50 <= TARGET_RECALL_MS else "misses"
            row(f"recall right after each memorize ({writes_count})", f"p50 {p50:.1f} / p95 {p95:.1f} ms",
                f"server CPU {recall_cpu * 1000 / writes_count:.1f} ms/call; "
                f"target p50 <= {TARGET_RECALL_MS:.0f} ms ({verdict})")

    async def one_user(token: str) -> list[float]:
        user_rnd = random.Random(token)
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(300)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
                return await timed_calls(client, "brain_recall", [{"query": query(user_rnd)} for _ in range(concurrent_calls)])

    # Warm every user's copy first (each pulls and loads its own brain), then measure together.
    began = time.perf_counter()
    await asyncio.gather(*(one_user_warm(url, token) for token in tokens))
    row(f"{len(tokens)} users' first recalls, concurrently", f"{time.perf_counter() - began:.1f} s total", "cold")
    cpu.start()
    began = time.perf_counter()
    results = await asyncio.gather(*(one_user(token) for token in tokens))
    wall = time.perf_counter() - began
    samples = [sample for batch in results for sample in batch]
    p50, p95 = percentiles(samples)
    row(f"{len(tokens)} users recalling concurrently ({len(samples)} calls)", f"p50 {p50:.1f} / p95 {p95:.1f} ms",
        f"{len(samples) / wall:.0f} calls/s; {cpu.per_call_ms(len(samples))}")


def memorize_phases(store_url: str, token: str, archive: bytes, runs: int, scratch: Path, store_pid: int) -> None:
    """Where a memorize round trip's time goes, phase by phase, in this process against the store.

    The phases the connector runs one after the other: apply the operation, follow
    it in the recall index, pack the archive, upload it with If-Match (the store
    inflates and validates it, writes and fsyncs it, commits its metadata). SHA-256 of
    the archive is timed too, outside the round trip: a push no longer hashes an
    archive whose end differs from its base's (the store's answer gives the checksum),
    and the figure says how fast the host is against other sessions' (2.8-3.0 ms at 5 MB).
    Beside the upload: the store's own validation of the same archive
    (`inspect_bytes`, in this process) and the fsyncs of a commit like the store's
    (archive file, metadata file, their directories) in a scratch directory.
    Beside each wall-clock figure, the CPU time it took: this thread's for the
    connector's phases, the store process's for the upload.
    """
    headers = {"Authorization": f"Bearer {token}"}
    brain_id = httpx.get(store_url + "/api/brains", headers=headers, timeout=30).json()[0]["id"]
    brain = load_archive(archive)
    base = hashlib.sha256(archive).hexdigest()
    index = BrainIndex.build(brain)
    recall(None, "warm up", index=index, now=datetime.now(UTC))
    rnd = random.Random(11)
    times: dict[str, list[float]] = {name: [] for name in PHASES}
    cpu: dict[str, list[float]] = {name: [] for name in PHASES}
    scratch.mkdir(parents=True, exist_ok=True)
    with httpx.Client(timeout=300) as http:
        for i in range(runs + 1):  # the first run parses the JSON documents: not counted
            working = brain.copy()
            working.journal = []
            op = connector_memorize(f"Phase fact {i}: " + " ".join(rnd.sample(WORDS, 8)), tags=rnd.sample(WORDS, 2))
            marks = [time.perf_counter()]
            spent = [time.thread_time()]

            def mark(clock: float | None = None) -> None:
                marks.append(time.perf_counter())
                spent.append(time.thread_time() if clock is None else clock)

            op.apply(working, datetime.now(UTC))
            mark()
            index = apply_change(index, working, BrainChange.of_journal(working.journal))
            working.journal = None
            mark()
            packed = pack_archive(working)
            mark()
            checksum = hashlib.sha256(packed).hexdigest()
            mark()
            store_before = cpu_seconds(store_pid)
            response = http.put(
                f"{store_url}/api/brains/{brain_id}/sync", headers={**headers, "If-Match": f'"{base}"'},
                files={"brain": ("brain.tar.gz", packed, "application/gzip")},
            )
            mark(spent[-1] + cpu_seconds(store_pid) - store_before)
            response.raise_for_status()
            began_inspect = time.thread_time()
            inspect_bytes(packed)
            mark(spent[-1] + time.thread_time() - began_inspect)
            began_fsync = time.thread_time()
            commit_fsyncs(scratch, packed)
            mark(spent[-1] + time.thread_time() - began_fsync)
            brain, base = working, response.json()["checksum"]
            assert base == checksum
            if i:
                for name, began, ended, cpu_began, cpu_ended in zip(PHASES, marks, marks[1:], spent, spent[1:]):
                    times[name].append(ended - began)
                    cpu[name].append(cpu_ended - cpu_began)
    total = [sum(times[name][run] for name in (*PHASES[:3], PHASES[4])) for run in range(runs)]
    print(f"  memorize phases in process ({runs} runs, {len(packed) / 1e6:.1f} MB archive), p50:")
    for name in PHASES:
        p50, p95 = percentiles(times[name])
        cpu50, _ = percentiles(cpu[name])
        owner = "store process" if name == PHASES[4] else "this thread"
        note = f"CPU p50 {cpu50:.1f} ms ({owner})" + ("; within the upload" if name in PHASES[5:] else "")
        row(f"  {name}", f"p50 {p50:.1f} / p95 {p95:.1f} ms", note)
    p50, p95 = percentiles(total)
    row("  round trip (apply, follow, pack, upload, one after the other)", f"p50 {p50:.0f} / p95 {p95:.0f} ms")


PHASES = ("apply", "follow index", "pack", "sha-256 (host speed; not on the path)", "upload (HTTP, validation, fsync, commit)",
          "store validation alone (inspect_bytes)", "commit fsyncs alone (4, like the store's)")


def commit_fsyncs(folder: Path, data: bytes) -> None:
    """Write and fsync a blob and a small metadata file and fsync their directory twice, as a local commit does."""
    for name, content in (("blob", data), ("meta.json", b"{}" * 64)):
        temporary = folder / f".{name}.tmp"
        with open(temporary, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, folder / name)
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def memory_report(cache_dir: Path | None, runs: int, copies: int) -> None:
    """Resident memory of one working copy plus its recall index (1,000 and 10,000 memories), and per
    user when ``copies`` users hold the 1,000-memory brain in one process: `memory_probe.py` in a fresh
    process per measure, medians of ``runs``."""
    print(f"resident memory of a working copy + its recall index (fresh process per measure, RSS after gc + "
          f"malloc_trim above the imported baseline; medians of {runs})")
    mib = 1024 * 1024
    for size in (1000, 10_000):
        results = [probe(size, cache_dir, 0) for _ in range(runs)]
        inflated = results[0]["inflated"]

        def median(key: str) -> float:
            return statistics.median(result[key] - result["start"] for result in results)

        copy, built, followed, per_user = median("loaded"), median("built"), median("followed"), median("followed_per_user")
        row(f"{size:,} memories: brain files (inflated)", f"{inflated / mib:.1f} MiB")
        row("  working copy (unpacked brain)", f"{copy / mib:.1f} MiB", f"{copy / inflated:.2f}x inflated")
        row("  + recall index, after 3 recalls", f"{built / mib:.1f} MiB", f"{built / inflated:.2f}x inflated; target <= 4x")
        parts = results[0]["parts"]
        row("    the index's live objects (tests/support/footprint.py)", f"{sum(parts.values()) / mib:.1f} MiB",
            ", ".join(f"{name.split(' (')[0]} {value / mib:.1f}" for name, value in parts.items() if value >= mib / 20))
        row("  + one memorize followed (old copy freed)", f"{followed / mib:.1f} MiB", f"{followed / inflated:.2f}x inflated")
        row("    without the write's parsed documents (process-wide)", f"{per_user / mib:.1f} MiB",
            f"{per_user / inflated:.2f}x inflated")
    if copies:
        results = [probe(1000, cache_dir, copies) for _ in range(runs)]
        inflated = results[0]["inflated"]
        held = statistics.median((result["held"] - result["start"]) / copies for result in results)
        written = statistics.median((result["written"] - result["start"]) / copies for result in results)
        row(f"{copies} users holding the 1,000-memory brain in one process", "")
        row("  per user: working copy + index, after 3 recalls", f"{held / mib:.2f} MiB", f"{held / inflated:.2f}x inflated")
        row("  per user, after each memorized once (followed)", f"{written / mib:.2f} MiB",
            f"{written / inflated:.2f}x inflated")


def probe(size: int, cache_dir: Path | None, copies: int) -> dict[str, Any]:
    """One run of bench/memory_probe.py on the generated brain of ``size`` memories, in a fresh process."""
    archive, _ = brain_archive(size, datetime.now(UTC), cache_dir)
    with tempfile.NamedTemporaryFile(suffix=".tar.gz") as handle:
        handle.write(archive)
        handle.flush()
        command = [sys.executable, str(REPO / "bench" / "memory_probe.py"), handle.name, "--copies", str(copies)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def e5_stand_in(brain: Any, model_id: str = E5_MODEL_ID, dimensions: int = E5_DIMENSIONS) -> tuple[list[bytes], Quantized]:
    """Stand-in e5 vectors of a brain's memories (timing only): a unit row per memory drawn from its
    content hash. What a recall costs does not depend on the rows' values, and computing the real
    ones for 10,000 memories takes minutes of CPU; the answers of such a recall are not e5's.
    (``model_id``, ``dimensions``: another model's, the judge's.)"""
    texts = memory_texts(brain, BrainIndex.build(brain))
    hashes = [content_hash(model_id, text) for text in texts]
    rows = np.stack([np.random.default_rng(list(digest[:16])).standard_normal(dimensions) for digest in hashes])
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return hashes, quantize(rows)


async def one_user_warm(url: str, token: str) -> None:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(300)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
            await client.call_tool("brain_recall", {"query": "warm up"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--concurrent-calls", type=int, default=10, help="recalls per user in the concurrent run")
    parser.add_argument("--writes", type=int, default=20, help="memorize + recall pairs")
    parser.add_argument("--phases", type=int, default=10, help="memorize round trips timed phase by phase, in process")
    parser.add_argument("--memory", action="store_true",
                        help="only measure the resident memory of a working copy and its index (1,000 and 10,000 memories)")
    parser.add_argument("--copies", type=int, default=50,
                        help="with --memory: users holding the 1,000-memory brain in one process (0: skip)")
    parser.add_argument("--memory-runs", type=int, default=3, help="with --memory: runs per measure (medians)")
    parser.add_argument("--quick", action="store_true", help="2,000 memories, 30 calls, 5 users")
    parser.add_argument("--mode", choices=["exact", "hybrid"], default="exact", help="brain_recall's mode")
    parser.add_argument("--e5", choices=["background", "stand-in", "off"], default="background",
                        help="hybrid mode: the e5 channel's vectors computed by the connector meanwhile, seeded "
                             "beforehand with stand-in rows (timing only), or the channel off")
    parser.add_argument("--no-judge", action="store_true",
                        help="hybrid mode: the connector without the judge (CONNECTOR_RECALL_JUDGE=false), to compare")
    parser.add_argument("--brain-cache", type=Path, default=None, metavar="DIR",
                        help="keep/reuse the generated brain archive here (shared format with engine_bench.py)")
    args = parser.parse_args()
    if args.mode == "hybrid":
        global TARGET_RECALL_MS
        TARGET_RECALL_MS = 30.0  # issue 17's target for hybrid recall over MCP
    if args.quick:
        args.memories, args.calls, args.users, args.concurrent_calls, args.writes = 2000, 30, 5, 5, 10
    if args.memory:
        memory_report(args.brain_cache, args.memory_runs, args.copies)
        return

    print(f"connector benchmark: {args.memories} memories, {args.calls} calls, {args.users} concurrent users, "
          f"{args.mode} recall")
    began = time.perf_counter()
    archive, _ = brain_archive(args.memories, datetime.now(UTC), args.brain_cache)
    row("brain archive (generated or cached)", f"{time.perf_counter() - began:.1f} s", f"{len(archive) / 1e6:.1f} MB archive")

    with tempfile.TemporaryDirectory(prefix="connector-bench-") as tmp:
        work = Path(tmp)
        if args.mode == "hybrid":
            began = time.perf_counter()
            vectors = VectorStore(state=open_document_store(work / "state"), state_key=STATE_KEY)
            # With --brain-cache the brain's USE vectors are kept there too (a minute of CPU at 10,000).
            seed = VectorStore(state=open_document_store(args.brain_cache / "use-vectors"), state_key=STATE_KEY) \
                if args.brain_cache else vectors
            brain = load_archive(archive)
            computed = HybridIndex.build(brain, BrainIndex.build(brain), seed)
            row("vectors computed beforehand (this process)", f"{time.perf_counter() - began:.1f} s",
                f"{seed.embedded} embedded")
            if args.e5 == "stand-in":
                began = time.perf_counter()
                e5_hashes, e5_rows = e5_stand_in(brain)
                e5_seed = VectorStore(_NoEmbedder(), state=open_document_store(work / "state"), state_key=STATE_KEY,
                                      prefix=E5_PREFIX)
                # The judge's channel beside e5's (its model still embeds each query, for real).
                judge_hashes, judge_rows = e5_stand_in(brain, JUDGE_MODEL_ID, JUDGE_DIMENSIONS)
                judge_seed = VectorStore(_NoEmbedder(JUDGE_MODEL_ID, JUDGE_DIMENSIONS),
                                         state=open_document_store(work / "state"), state_key=STATE_KEY,
                                         prefix=JUDGE_PREFIX)
                row("e5 and judge vectors: stand-in rows (timing only)", f"{time.perf_counter() - began:.1f} s")
        with running_store(work) as store:
            users = add_users(work / "store", [f"bench{i}" for i in range(args.users)])
            for token, _ in users:
                brain_id = upload(store.base_url, token, archive)
                if args.mode == "hybrid":  # vectors are kept per brain: seed each user's copy
                    vectors.keep(computed.hashes, computed.vectors, brain_id)
                    if args.e5 == "stand-in":
                        e5_seed.keep(e5_hashes, e5_rows, brain_id)
                        judge_seed.keep(judge_hashes, judge_rows, brain_id)
            [(phases_token, _)] = add_users(work / "store", ["phases"])
            upload(store.base_url, phases_token, archive)
            memorize_phases(store.base_url, phases_token, archive, args.phases, work / "fsync", store.process.pid)
            env = {"CONNECTOR_RECALL_MODE": args.mode, "CONNECTOR_RECALL_E5": "false" if args.e5 == "off" else "true",
                   "CONNECTOR_RECALL_JUDGE": "false" if args.no_judge else "true"}
            with running_connector(store.base_url, work, env) as connector:
                tokens = [mint(connector.base_url, user_id, token) for token, user_id in users]
                cpu = ServerCpu(connector.process.pid)
                asyncio.run(bench(connector.base_url, tokens, args.calls, args.concurrent_calls, cpu, archive, args.writes))


class _NoEmbedder:
    """A model (e5's, or the judge's) as seen by a store that only keeps vectors computed elsewhere."""

    def __init__(self, model_id: str = E5_MODEL_ID, dimensions: int = E5_DIMENSIONS) -> None:
        self.model_id, self.dimensions = model_id, dimensions

    def embed(self, texts: list[str]) -> Any:
        raise RuntimeError("a seeded store embeds nothing")


@contextmanager
def running_store(work: Path, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """A real `brain-store serve` on loopback over ``work/store``, its rate limits out of the way (plus ``env``)."""
    port = free_port()
    env = {"STORE_RATE_UPLOADS_PER_MIN": "100000", "STORE_RATE_REQUESTS_PER_MIN": "100000", "STORE_QUIET": "1",
           **(env or {})}
    with run_server(
        [console_script("brain-store"), "serve", "--host", "127.0.0.1", "--port", str(port), "--data", str(work / "store")],
        port=port, log_path=work / "store.log", env=env,
    ) as store:
        yield store


@contextmanager
def running_connector(
    store_url: str, work: Path, env: dict[str, str] | None = None, argv: list[str] | None = None
) -> Iterator[ServerProcess]:
    """A real `brain-connector serve` (extra ``argv``, e.g. ``--workers 2``) signing in with STATE_KEY's tokens."""
    port = free_port()
    full_env = {
        "CONNECTOR_STORE_URL": store_url, "CONNECTOR_IDP": "static", "CONNECTOR_STATE_KEY": STATE_KEY.hex(),
        "CONNECTOR_STATE_DIR": str(work / "state"), "CONNECTOR_PORT": str(port), "CONNECTOR_LOG_LEVEL": "warning",
        # Every call comes from 127.0.0.1: the per-address limit (300/min) would answer 429.
        "CONNECTOR_MCP_RATE_PER_MIN": "0",
        **(env or {}),
    }
    with run_server([console_script("brain-connector"), "serve", *(argv or [])], port=port, env=full_env,
                    log_path=work / "connector.log", health_path="/health/live") as connector:
        yield connector

if __name__ == "__main__":
    main()
