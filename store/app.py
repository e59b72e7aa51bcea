"""The store's ASGI application: ``create_app(settings)`` and a factory for uvicorn workers."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from typing import Any

import msgspec
from litestar import Litestar, Request, Response
from litestar.exceptions import HTTPException, ValidationException

from common.asgi_watch import watched
from common.docstore import DocumentStoreError
from common.host_guard import AllowedHosts, host_guard
from store.audit import caller, logged_path
from store.context import AppContext
from store.errors import ServiceError, storage_unavailable
from store.http import error_response
from store.logs import configure_logging
from store.metrics import ObservabilityMiddleware, ReceiveCounter, observability_layer
from store.routes import ROUTES
from store.routes.brains import serve_list
from store.routes.sync import serve_download, serve_upload
from store.settings import StoreSettings
from store.storage.base import StorageUnavailable

log = logging.getLogger("store")

HOST_REFUSAL = ("421 Misdirected Request: this store answers only for its own host names "
                "(STORE_ALLOWED_HOSTS, localhost).")
_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")
_log_encoder = msgspec.json.Encoder()


def _error(status: int, message: str, headers: dict[str, str] | None = None, **extra: Any) -> Response[Any]:
    return Response(
        content={"error": message, **extra}, status_code=status, media_type="application/json", headers=headers
    )


def _service_error(request: Request[Any, Any, Any], exc: ServiceError) -> Response[Any]:
    return _error(exc.status, exc.message, exc.headers or None, **exc.extra)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    status = exc.status_code
    if isinstance(exc, ValidationException):
        status = 400
    message = exc.detail if isinstance(exc.detail, str) and exc.detail else "request refused"
    if status == 404:
        message = "not found"
    elif status == 405:
        message = "method not allowed"
    headers = dict(exc.headers) if exc.headers else None
    return _error(status, message, headers)


def _unreachable(method: str, path: str, exc: Exception) -> ServiceError:
    """The 503 for a request that failed because storage cannot be reached, logged in one line
    (the operator needs the reason, not a traceback, once per request)."""
    log.warning("storage unavailable on %s %s: %s", method, logged_path(path), exc)
    return storage_unavailable()


def _storage_unavailable(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    return _service_error(request, _unreachable(request.method, request.url.path, exc))


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unexpected error on %s %s", request.method, logged_path(request.url.path))
    return _error(500, "internal error")


def _bad_escape(scope: Any) -> bool:
    """True when the raw path or query holds a ``%`` not followed by two hex digits."""
    raw_path = scope.get("raw_path") or b""
    query = scope.get("query_string") or b""
    return (b"%" in raw_path and _BAD_ESCAPE.search(raw_path) is not None) or (
        b"%" in query and _BAD_ESCAPE.search(query) is not None
    )


def _write_log(scope: Any, status: int, seconds: float) -> None:
    """One JSON request-log line on stderr (no headers, query strings or bodies); a request made
    with an agent key names it by its listed prefix, as its audit entry does."""
    client = scope.get("client")
    user_id, key = caller(scope)
    record = {
        "ts": time.time(),
        "method": scope.get("method"),
        "path": logged_path(scope.get("path", "")),
        "status": status,
        "ms": round(seconds * 1000, 2),
        "client": client[0] if client else None,
        "user": user_id,
    }
    if key:
        record["key"] = key
    sys.stderr.write(_log_encoder.encode(record).decode() + "\n")


SYNC_ROUTE = "/api/brains/{id}/sync"
LIST_ROUTE = "/api/brains"


class FrontDoor:
    """The ASGI app the server runs: the hottest reads are answered here, the rest by Litestar.

    ``GET``/``HEAD`` of ``/api/brains`` and ``/api/brains/{id}/sync`` (downloads and their
    304s: what every client does on every pull) and ``PUT`` of ``/sync`` (every push) need
    only the raw scope (and, for a push, ``receive``), so they skip the framework's routing,
    its ``send`` and ``receive`` wrappers and the middleware stack: the handler returns
    a response object that knows its status and reports the bytes it sent, and metrics,
    audit and request log are recorded here directly, exactly as the middleware would.
    Everything else, and any hot-path request with a malformed percent-escape (refused by
    EdgeMiddleware), goes to the Litestar app unchanged.
    """

    def __init__(self, app: Litestar) -> None:
        self.app = app
        self.ctx: AppContext = app.state.ctx
        self.observer: ObservabilityMiddleware | None = app.state.observer
        self.quiet: bool = self.ctx.settings.quiet

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            method = scope["method"]
            path = scope["path"]
            reads = method == "GET" or method == "HEAD"
            if path == "/api/brains":
                if reads and not _bad_escape(scope):
                    await self._answer(scope, send, LIST_ROUTE, serve_list, ())
                    return
            elif path.startswith("/api/brains/") and path.endswith("/sync") and (reads or method == "PUT"):
                brain_id = path[12:-5]
                if brain_id and "/" not in brain_id and not _bad_escape(scope):
                    if reads:
                        await self._answer(scope, send, SYNC_ROUTE, serve_download, (brain_id,))
                    else:
                        await self._answer(scope, send, SYNC_ROUTE, serve_upload, (brain_id,), receive)
                    return
        await self.app(scope, receive, send)

    async def _answer(
        self, scope: Any, send: Any, route: str, handler: Any, args: tuple[Any, ...], receive: Any = None
    ) -> None:
        started = time.perf_counter()
        if "state" not in scope:
            scope["state"] = {}
        counter = None
        if receive is not None:  # an upload: the handler reads the body, the metrics count it
            counter = ReceiveCounter(receive) if self.observer is not None else None
            args = (*args, counter or receive)
        try:
            response = await handler(self.ctx, scope, *args)
        except ServiceError as exc:
            response = error_response(exc)
        except (StorageUnavailable, DocumentStoreError) as exc:
            response = error_response(_unreachable(scope["method"], scope["path"], exc))
        except Exception:
            log.exception("unexpected error on %s %s", scope["method"], logged_path(scope["path"]))
            response = error_response(ServiceError(500, "internal error"))
        sent = 0
        try:
            sent = await response.send_to(scope, send)
        finally:
            seconds = time.perf_counter() - started
            if self.observer is not None:
                self.observer.record(scope, route, response.status, seconds, counter.count if counter else 0, sent)
            if not self.quiet:
                _write_log(scope, response.status, seconds)


class EdgeMiddleware:
    """Inside the metrics layer: refuse malformed percent-escapes (400) and write JSON request logs.

    Logs carry method, path, status, duration, client and user id; never headers, query
    strings or bodies (they may hold tokens or memory content).
    """

    def __init__(self, app: Any, ctx: AppContext, quiet: bool) -> None:
        self.app = app
        self.ctx = ctx
        self.quiet = quiet

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _bad_escape(scope):
            body = b'{"error":"malformed percent-escape in the request URL"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if self.quiet:
            await self.app(scope, receive, send)
            return
        await watched(self.app, scope, receive, send, lambda status, seconds: _write_log(scope, status, seconds))


def create_app(settings: StoreSettings, ctx: AppContext | None = None) -> Litestar:
    """The Litestar application for ``settings`` (one per process)."""
    ctx = ctx or AppContext.build(settings)
    app = Litestar(
        route_handlers=ROUTES,
        openapi_config=None,
        exception_handlers={
            ServiceError: _service_error,
            StorageUnavailable: _storage_unavailable,
            DocumentStoreError: _storage_unavailable,
            HTTPException: _http_error,
            Exception: _unexpected,
        },
        request_max_body_size=None,
        debug=False,
        logging_config=None,
    )
    app.state.ctx = ctx
    app.asgi_handler = EdgeMiddleware(app.asgi_handler, ctx, settings.quiet)
    # Outermost: /metrics, per-route metrics and the opt-in audit log (store/metrics.py).
    app.asgi_handler = observability_layer(app.asgi_handler, settings, ctx.address)
    app.state.observer = app.asgi_handler if isinstance(app.asgi_handler, ObservabilityMiddleware) else None
    return app


def serving_app(settings: StoreSettings) -> Any:
    """What the server runs: the front door over ``create_app(settings)`` (with
    ``STORE_ALLOWED_HOSTS``, behind the host check: 421 for other names, DNS rebinding)."""
    door = FrontDoor(create_app(settings))
    if not settings.allowed_hosts:
        return door
    return host_guard(door, AllowedHosts.of(hosts=settings.allowed_hosts), HOST_REFUSAL)


def app_from_env() -> Any:
    """Factory for uvicorn workers: settings from the environment (the serve command fills it)."""
    settings = StoreSettings.from_env(os.environ)
    configure_logging(settings)
    return serving_app(settings)
