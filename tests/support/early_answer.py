"""An upstream that begins its answer before it has read the request body (``uvicorn tests.support.early_answer:app``).

For `tests/ops/test_caddy_request_bodies.py`: a POST is answered ``200`` with a JSON body of
``ANSWER_BYTES`` at once; the first ``HEAD_BYTES`` of it go out before the request body is read,
the rest after the whole body came in, ending with the number of body bytes received (ten
digits). The connector's MCP answers are as large; whether a proxy in front passes such an
answer on whole must not depend on when the request body's last bytes arrive.
"""

from __future__ import annotations

from typing import Any

ANSWER_BYTES = 25_000
HEAD_BYTES = 1_000
_COUNT_DIGITS = 10


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI app: ``GET`` (health) answers ``ok``; ``POST`` as in the module doc."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["method"] != "POST":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(ANSWER_BYTES).encode())]})
    opening = b'{"pad":"' + b"x" * (HEAD_BYTES - 8)  # HEAD_BYTES long
    await send({"type": "http.response.body", "body": opening, "more_body": True})
    received, more = 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return  # the client went away
        received += len(message.get("body", b""))
        more = message.get("more_body", False)
    closing = f'","received":"{received:0{_COUNT_DIGITS}d}"}}'.encode()
    await send({"type": "http.response.body",
                "body": b"x" * (ANSWER_BYTES - len(opening) - len(closing)) + closing})
