#!/usr/bin/env python3
"""Benchmark of OAuth client registration (POST /register) at 10 and at 50,000 clients.

Starts a real connector (``brain-connector serve``, static provider, a state
directory) whose state already holds N registered clients, then registers
``--registrations`` more, one after the other, while a probe asks for
``GET /health/live`` every 5 ms on its own connection. Printed per N:

* registration latency p50/p95 (wall clock, one client);
* the event-loop stall seen by the probe: its p99 and maximum latency while the
  registrations run (the probe answers instantly unless the loop is blocked);
* the connector's CPU time per registration (from /proc).

The N clients are written before start-up as a ``clients.json`` (the format of
every version so far; the current connector moves it into ``clients/`` at
start-up), each with one redirect URI and a name, as a real client registers.
The registry holds at most 50,000 clients, so "50,000" starts from 50,000 minus
the registrations measured and ends full.

``--source DIR`` runs the connector from another checkout (e.g. ``main`` exported
with ``git archive main | tar -x -C DIR``) with this venv, for before/after
figures. Each registration comes from its own forwarded address (the connector
trusts loopback), so the per-address limit of 10 a minute does not interfere.

Usage::

    .venv/bin/python bench/registration_bench.py                      # 10 and 50,000 clients, 200 registrations
    .venv/bin/python bench/registration_bench.py --clients 10 --registrations 50
    .venv/bin/python bench/registration_bench.py --source /tmp/main   # the same against another checkout
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from connector.oauth.clients import MAX_CLIENTS  # noqa: E402
from tests.support.processes import console_script, free_port, wait_for_http  # noqa: E402

CLIENT_BODY = {"redirect_uris": ["https://claude.ai/api/mcp/auth_callback"], "client_name": "Bench client"}


def prefill(state_dir: Path, count: int) -> None:
    """``count`` registered clients in the state directory, as clients.json."""
    state_dir.mkdir(mode=0o700)
    records = {
        "bcc_" + secrets.token_urlsafe(24): {
            "redirect_uris": CLIENT_BODY["redirect_uris"],
            "client_name": f"Client {n}",
            "grant_types": ["authorization_code", "refresh_token"],
            "scope": "",
            "issued_at": int(time.time()),
        }
        for n in range(count)
    }
    path = state_dir / "clients.json"
    path.write_text(json.dumps(records, separators=(",", ":"), sort_keys=True))
    path.chmod(0o600)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(base: str, registrations: int) -> dict[str, float]:
    """Register ``registrations`` clients while probing the event loop."""
    stop = asyncio.Event()
    probes: list[float] = []

    async def probe() -> None:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            while not stop.is_set():
                started = time.perf_counter()
                response = await http.get("/health/live")
                probes.append(time.perf_counter() - started)
                assert response.status_code == 200
                await asyncio.sleep(0.005)

    latencies: list[float] = []
    task = asyncio.create_task(probe())
    await asyncio.sleep(0.3)
    probes.clear()  # only what the probe saw while registrations ran
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        for n in range(registrations):
            address = f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"
            started = time.perf_counter()
            response = await http.post("/register", json=CLIENT_BODY, headers={"X-Forwarded-For": address})
            latencies.append(time.perf_counter() - started)
            assert response.status_code == 201, response.text
    stop.set()
    await task
    probes.sort()
    latencies.sort()
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p95_ms": latencies[int(len(latencies) * 0.95) - 1] * 1000,
        "stall_p99_ms": probes[int(len(probes) * 0.99) - 1] * 1000 if probes else 0.0,
        "stall_max_ms": probes[-1] * 1000 if probes else 0.0,
        "probes": float(len(probes)),
    }


def run_one(count: int, registrations: int, source: Path | None) -> dict[str, float]:
    """Start a connector over ``count`` clients and measure ``registrations`` more."""
    with tempfile.TemporaryDirectory(prefix="regbench-") as tmp:
        state_dir = Path(tmp) / "state"
        prefill(state_dir, min(count, MAX_CLIENTS - registrations))
        port = free_port()
        env = {
            **os.environ,
            "HOME": tmp,
            "CONNECTOR_STORE_URL": "http://127.0.0.1:9",  # never asked: registration needs no store
            "CONNECTOR_IDP": "static",
            "CONNECTOR_STATE_DIR": str(state_dir),
            "CONNECTOR_HOST": "127.0.0.1",
            "CONNECTOR_PORT": str(port),
            "CONNECTOR_LOG_LEVEL": "warning",
        }
        if source is not None:
            env["PYTHONPATH"] = str(source)
        with open(Path(tmp) / "connector.log", "wb") as log:
            process = subprocess.Popen([console_script("brain-connector"), "serve"], env=env, stdout=log,
                                       stderr=subprocess.STDOUT, cwd=source or REPO, start_new_session=True)
            try:
                wait_for_http(f"http://127.0.0.1:{port}/health/live", process, timeout=120)
                cpu_before = cpu_seconds(process.pid)
                result = asyncio.run(measure(f"http://127.0.0.1:{port}", registrations))
                result["cpu_ms"] = (cpu_seconds(process.pid) - cpu_before) * 1000 / registrations
            finally:
                process.terminate()
                process.wait(timeout=30)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="10,50000", help="comma-separated client counts (default 10,50000)")
    parser.add_argument("--registrations", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3, help="runs per count; medians are printed")
    parser.add_argument("--source", type=Path, help="run the connector from this checkout instead")
    args = parser.parse_args()
    label = str(args.source) if args.source else "this checkout"
    print(f"registration benchmark ({label}); {args.registrations} registrations, {args.runs} runs, medians")
    print(f"{'clients':>8} {'p50 ms':>8} {'p95 ms':>8} {'stall p99':>10} {'stall max':>10} {'cpu ms/reg':>11}")
    for count in (int(part) for part in args.clients.split(",")):
        runs = [run_one(count, args.registrations, args.source) for _ in range(args.runs)]

        def median(key: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(run[key] for run in runs)

        print(f"{count:>8} {median('p50_ms'):>8.2f} {median('p95_ms'):>8.2f} {median('stall_p99_ms'):>10.2f} "
              f"{median('stall_max_ms'):>10.2f} {median('cpu_ms'):>11.2f}", flush=True)


if __name__ == "__main__":
    main()
