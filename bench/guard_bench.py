#!/usr/bin/env python3
"""What the connection guard (``common/connection_guard.py``) costs a request, in process.

uvicorn's httptools protocol with and without the guard, fed keep-alive requests (a
store's 304 freshness request) through a fake transport, answered by a trivial ASGI app
(304, no body). Alternating rounds; the figure is CPU time per request (process time, so
other load on a shared machine moves it less than wall-clock time would).

Usage::

    .venv/bin/python bench/guard_bench.py                  # 20,000 requests x 15 rounds
    .venv/bin/python bench/guard_bench.py --requests 5000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvloop  # noqa: E402
from uvicorn.config import Config  # noqa: E402
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from common.connection_guard import HttpLimits, guarded_protocol  # noqa: E402

REQUEST = (
    b"GET /api/brains/0b0c6d3e-1b9a-4f7e-9c1d-2a3b4c5d6e7f/sync HTTP/1.1\r\nHost: 127.0.0.1:8787\r\n"
    b"Authorization: Bearer bst_0123456789abcdef0123456789abcdef\r\nIf-None-Match: \"abc\"\r\n\r\n"
)


async def not_modified(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 304, "headers": [(b"etag", b'"abc"')]})
    await send({"type": "http.response.body", "body": b""})


class FakeTransport:
    """Counts writes (two per response: head, then the empty body)."""

    def __init__(self) -> None:
        self.writes = 0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 8787) if name in ("peername", "sockname") else default

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def cpu_per_request(protocol_class: type[HttpToolsProtocol], requests: int) -> float:
    """CPU microseconds per request over ``requests`` keep-alive requests on one connection."""
    config = Config(not_modified, lifespan="off", log_level="warning", access_log=False)
    config.load()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop())
    transport = FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]

    async def serve(count: int) -> None:
        done = transport.writes
        for _ in range(count):
            protocol.data_received(REQUEST)
            done += 2
            while transport.writes < done:
                await asyncio.sleep(0)

    await serve(200)  # warm up
    started = time.process_time()
    await serve(requests)
    return (time.process_time() - started) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    variants = {"plain": HttpToolsProtocol, "guarded": guarded_protocol(HttpLimits())}
    results: dict[str, list[float]] = {name: [] for name in variants}
    for round_number in range(args.rounds):
        order = list(variants) if round_number % 2 == 0 else list(reversed(variants))
        for name in order:
            results[name].append(uvloop.run(cpu_per_request(variants[name], args.requests)))
    for name, values in results.items():
        print(f"{name:8} median {statistics.median(values):6.2f} us CPU/request  "
              f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} rounds)")
    extra = statistics.median(results["guarded"]) - statistics.median(results["plain"])
    print(f"the guard adds {extra:+.2f} us per request")


if __name__ == "__main__":
    main()
