"""A request passed to a user's worker while that worker is still starting waits for it (connector/affinity.py).

`serve --workers N` binds every worker's unix socket before the fork and each worker
builds its own app afterwards, which can take seconds on a busy machine. A request that
reaches another worker meanwhile must still be served by the user's own worker: served
anywhere else, it meets none of the user's state (a write while the store is away could
not be held there).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from cli.connector.serve import bind_unix
from connector.affinity import WorkerAffinity, owner_of


def _answering(name: str) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": name.encode()})

    return app


def _subject_owned_by(slot: int, workers: int) -> str:
    return next(f"user-{number}" for number in range(1000) if owner_of(f"user-{number}", workers) == slot)


def test_a_request_for_a_worker_still_starting_waits_for_it_instead_of_being_served_elsewhere() -> None:
    subject = _subject_owned_by(1, 2)

    async def scenario(paths: list[Path]) -> str:
        sockets = [bind_unix(path) for path in paths]
        late = uvicorn.Server(uvicorn.Config(_answering("owner"), log_config=None, lifespan="off"))

        async def start_late() -> None:
            await asyncio.sleep(1.5)  # the owner is still building its app
            await late.serve(sockets=[sockets[1]])

        starting = asyncio.create_task(start_late())
        routed = WorkerAffinity(_answering("elsewhere"), slot=0, sockets=paths, secret="s" * 64,
                                subject_of=lambda token: subject if token == "token" else None)
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=routed), base_url="http://connector") as client:
                answer = await asyncio.wait_for(
                    client.post("/mcp", headers={"Authorization": "Bearer token"}, content=b"{}"), timeout=30
                )
            return answer.text
        finally:
            late.should_exit = True
            await asyncio.wait_for(starting, timeout=30)
            for sock in sockets:
                sock.close()

    with tempfile.TemporaryDirectory(prefix="bw-") as short:  # a unix socket's path must be short
        paths = [Path(short) / f"worker-{slot}.sock" for slot in range(2)]
        assert asyncio.run(scenario(paths)) == "owner"
