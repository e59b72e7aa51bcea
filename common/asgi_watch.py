"""Small pieces for outermost ASGI layers (store and connector alike).

``watched`` runs an app and reports the response status and the time it took
(for request logs and metrics); ``serve_metrics`` answers a ``GET /metrics``,
optionally behind a bearer token. Both sides keep their own metrics and logs;
only this plumbing is shared.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import Any

__all__ = ["send_plain", "serve_metrics", "watched"]


async def watched(app: Any, scope: Any, receive: Any, send: Any, report: Callable[[int, float], None]) -> None:
    """Run ``app``, then call ``report(status, seconds)`` even when it fails.

    ``status`` is 0 when the app never started a response.
    """
    started = time.perf_counter()
    status = 0

    async def status_send(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    try:
        await app(scope, receive, status_send)
    finally:
        report(status, time.perf_counter() - started)


async def send_plain(send: Any, status: int, body: bytes, content_type: bytes, extra: list[Any] | None = None) -> None:
    """A complete small response that no cache keeps."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
               (b"cache-control", b"no-store"), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve_metrics(scope: Any, send: Any, token: bytes | None, render: Callable[[], bytes],
                        content_type: bytes) -> None:
    """The metrics page from ``render()``; with a ``token``, only for ``Authorization: Bearer <token>``."""
    if token is not None:
        given = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        if not hmac.compare_digest(given, b"Bearer " + token):
            await send_plain(send, 401, b'{"error":"metrics need the metrics token"}', b"application/json",
                             [(b"www-authenticate", b'Bearer realm="metrics"')])
            return
    await send_plain(send, 200, render(), content_type)
