"""A trivial Litestar app: the yardsticks issue #2 quotes for the reference machine.

The issue measured, on the machine its targets come from, "a trivial Litestar 304
handler" (31 k req/s) and "a trivial Litestar app serving a 100 KiB file with
``File(...)``" (2.3 k req/s; 2.05 GiB/s for 5 MiB). ``bench/store_bench.py``
(section ``yardstick``) runs this app on this machine with the same load, so the
ratio of the two figures says how much slower or faster this machine is.

It runs the way our store runs (``cli/serving/workers.py``): one uvicorn worker,
uvloop and httptools, access log off, lifespan off, no server header, and a Litestar
app with ``debug=False``, ``logging_config=None`` and no OpenAPI routes.

Usage::

    python bench/yardsticks/litestar_app.py --port 8001 --small a.bin --big b.bin
"""

from __future__ import annotations

import argparse
from pathlib import Path

import uvicorn
from litestar import Litestar, Response, get
from litestar.response import File

HOST = "127.0.0.1"
ETAG = '"yardstick"'


def create_app(small: Path, big: Path) -> Litestar:
    """The app: ``/health``, a 304 handler and two ``File(...)`` handlers (100 KiB, 5 MiB)."""

    @get("/health", sync_to_thread=False)
    def health() -> str:
        return "ok"

    @get("/304")
    async def not_modified() -> Response[bytes]:
        # Trivial on purpose: no lookup, no header check, just the answer.
        return Response(content=b"", status_code=304, headers={"ETag": ETAG})

    @get("/file/small")
    async def file_small() -> File:
        return File(path=small, filename=small.name)

    @get("/file/big")
    async def file_big() -> File:
        return File(path=big, filename=big.name)

    return Litestar(
        route_handlers=[health, not_modified, file_small, file_big],
        openapi_config=None,
        debug=False,
        logging_config=None,
    )


def main(argv: list[str] | None = None) -> None:
    """Serve the app on loopback until stopped (SIGTERM/SIGINT)."""
    parser = argparse.ArgumentParser(description="trivial Litestar yardstick app")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--small", type=Path, required=True, help="the file behind /file/small (100 KiB)")
    parser.add_argument("--big", type=Path, required=True, help="the file behind /file/big (5 MiB)")
    args = parser.parse_args(argv)
    uvicorn.run(
        create_app(args.small, args.big),
        host=HOST,
        port=args.port,
        workers=1,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        lifespan="off",
    )


if __name__ == "__main__":
    main()
