"""Each user's MCP requests served by one worker of `serve --workers N` (an outer ASGI layer).

The kernel places connections on the workers at random (SO_REUSEPORT), a client that
reconnects lands anywhere, and a proxy pools its connections across users. Without this
layer every worker would keep its own working copy and recall index of every user's brain
(twice the memory with two workers), and a write through one worker would make the other
pull and index the brain again.

So the owner of a request is the worker ``hash(subject) mod N``, the subject read from the
sealed access token (an AES-GCM open, about 4 us) for ``/mcp`` and ``/mcp/brains/{brain}``, from the signed-in session
for the web app's ``/app`` pages. A request arriving on another worker is passed to its
owner over the owner's unix socket in a private runtime directory (made by `serve`, 0700)
and the answer relayed, streamed both ways. The owner believes the
original client's address only from a request carrying the run's random secret (compared
in constant time) that arrived on its unix socket, never from the network.

Every worker still serves everyone correctly: when the owner cannot be reached before the
request body was handed over (dead worker, no socket, refused), the request is served
here. A request is forwarded at most once and never sent twice. Requests without a
token or session (they get their 401 or sign-in page anywhere), and every other path (the
OAuth endpoints, health, metrics), are served where they arrive.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx

from connector.mcp.http import bearer_token, is_mcp_path
from connector.public_path import local_path

log = logging.getLogger("connector.affinity")

# Carries the run's secret: the request was passed on by a sibling worker.
FORWARD_HEADER = b"x-brain-connector-forward"
# The original client as "<scheme> <host> <port>" (believed only along with the secret).
CLIENT_HEADER = b"x-brain-connector-client"
# Headers about one connection, never passed on (RFC 9110 section 7.6.1).
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)
_OURS = frozenset({FORWARD_HEADER, CLIENT_HEADER})
WEB_APP = "/app"


def owner_of(subject: str, workers: int) -> int:
    """The worker slot (0..workers-1) that serves ``subject``: the same in every process and run."""
    digest = hashlib.blake2b(subject.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % workers


def _is_web_page(path: str) -> bool:
    """A page of the web app (its static files are the same on every worker: served where asked)."""
    return (path == WEB_APP or path.startswith(WEB_APP + "/")) and not path.startswith(WEB_APP + "/static/")


class WorkerAffinity:
    """ASGI layer in front of one worker's app: serve a user's requests here or pass them to their owner.

    ``slot`` is this worker's index into ``sockets`` (every worker's unix socket path),
    ``secret`` the run's random forwarding secret, ``subject_of`` the subject of a bearer
    token (None when it does not open), ``session_subject`` that of a web app request's
    live session (None: signed out; the layer leaves ``/app`` alone without it), ``prefix`` the path
    of CONNECTOR_PUBLIC_URL, which a proxy may pass on in front of ``/mcp`` and ``/app``.
    """

    def __init__(
        self,
        app: Any,
        *,
        slot: int,
        sockets: Sequence[Path],
        secret: str,
        subject_of: Callable[[str], str | None],
        session_subject: Callable[[dict[str, Any]], str | None] | None = None,
        prefix: str = "",
    ) -> None:
        self.app = app
        self.slot = slot
        self._sockets = list(sockets)
        self._secret = secret.encode("ascii")
        self._subject_of = subject_of
        self._session_subject = session_subject
        self._prefix = prefix
        self._clients: dict[int, httpx.AsyncClient] = {}  # made in the worker's event loop, on first use
        self._unreachable: set[int] = set()  # owners whose failure was logged (once until they answer)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._from_sibling(scope):
            await self.app(scope, receive, send)
            return
        owner = await self._owner(scope)
        if owner is None or owner == self.slot or not await self._forward(owner, scope, receive, send):
            await self.app(scope, receive, send)

    def _from_sibling(self, scope: dict[str, Any]) -> bool:
        """Strip our headers; True (and the original client put back) only for a genuine forward."""
        headers = scope.get("headers", [])
        if not any(key.lower() in _OURS for key, _ in headers):
            return False
        ours = {key.lower(): value for key, value in headers if key.lower() in _OURS}
        scope["headers"] = [(key, value) for key, value in headers if key.lower() not in _OURS]
        # A unix socket connection has no peer address: one from the network always has one.
        genuine = scope.get("client") is None and hmac.compare_digest(ours.get(FORWARD_HEADER, b""), self._secret)
        if not genuine:
            log.warning("forwarding header from the network ignored")
            return False
        parts = ours.get(CLIENT_HEADER, b"").decode("latin-1").split(" ")
        if len(parts) == 3 and parts[2].isdigit():
            scope["scheme"] = parts[0] if parts[0] in ("http", "https") else "http"
            scope["client"] = (parts[1], int(parts[2]))
        return True

    async def _owner(self, scope: dict[str, Any]) -> int | None:
        """The slot of the worker that serves this request's user; None: serve it here."""
        # The path as the app will serve it (the request itself is passed on as it came).
        path = local_path(scope.get("path", ""), self._prefix)
        subject = None
        if is_mcp_path(path):
            token = bearer_token(scope)
            subject = self._subject_of(token) if token else None
        elif self._session_subject is not None and _is_web_page(path):
            # A session lookup reads the state (two GETs when it is a bucket): off the event loop.
            subject = await anyio.to_thread.run_sync(self._session_subject, scope)
        return owner_of(subject, len(self._sockets)) if subject else None

    def _client(self, owner: int) -> httpx.AsyncClient:
        client = self._clients.get(owner)
        if client is None:
            transport = httpx.AsyncHTTPTransport(
                uds=str(self._sockets[owner]), limits=httpx.Limits(max_connections=None, max_keepalive_connections=64)
            )
            # No read bound: the owner's own limits apply to the call; connecting must be quick.
            client = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(None, connect=2.0))
            self._clients[owner] = client
        return client

    async def _forward(self, owner: int, scope: dict[str, Any], receive: Any, send: Any) -> bool:
        """Pass the request to ``owner`` and relay its answer; False if it could not be handed over."""
        handed_over = False  # once the body is read from the client, the request cannot be served here

        async def body() -> AsyncIterator[bytes]:
            nonlocal handed_over
            while True:
                message = await receive()
                handed_over = True
                if message["type"] == "http.disconnect":
                    raise httpx.ReadError("client went away")
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body", False):
                    return

        peer = scope.get("client")
        origin = f"{scope.get('scheme', 'http')} {peer[0]} {peer[1]}" if peer else ""
        headers = [(key, value) for key, value in scope.get("headers", []) if key.lower() not in _HOP_BY_HOP]
        headers += [(FORWARD_HEADER, self._secret), (CLIENT_HEADER, origin.encode("latin-1"))]
        target = scope.get("raw_path") or scope["path"].encode("utf-8")
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        client = self._client(owner)
        request = client.build_request(
            scope["method"], "http://worker" + target.decode("latin-1"), headers=headers, content=body()
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            if not handed_over:
                if owner not in self._unreachable:
                    self._unreachable.add(owner)
                    log.warning("owner worker unreachable, serving here", extra={"owner": owner, "error": type(exc).__name__})
                return False
            log.warning("owner worker failed during a request", extra={"owner": owner, "error": type(exc).__name__})
            await _send_unavailable(send)  # never sent twice: the body may have reached the owner
            return True
        self._unreachable.discard(owner)
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except httpx.HTTPError as exc:  # the owner died mid-answer: the client sees a cut response
            log.warning("owner worker failed during a request", extra={"owner": owner, "error": type(exc).__name__})
        finally:
            await response.aclose()
        return True


async def _send_unavailable(send: Any) -> None:
    payload = b'{"error": "worker_unavailable"}'
    await send(
        {
            "type": "http.response.start",
            "status": 502,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode("ascii")),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
