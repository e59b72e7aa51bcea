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

from store.asgi_watch import watched
from store.context import AppContext
from store.errors import ServiceError
from store.http import error_response
from store.metrics import observability_layer
from store.routes import ROUTES
from store.routes.brains import serve_list
from store.routes.sync import serve_download
from store.settings import StoreSettings

log = logging.getLogger("store")

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


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return _error(500, "internal error")


class _FastCall:
    """Run one scope-level handler, rendering ServiceError as its JSON error."""

    __slots__ = ("args", "ctx", "fn")

    def __init__(self, fn: Any, ctx: AppContext, args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.ctx = ctx
        self.args = args

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        scope.setdefault("state", {})
        try:
            response = await self.fn(self.ctx, scope, *self.args)
        except ServiceError as exc:
            response = error_response(exc)
        except Exception:
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            response = error_response(ServiceError(500, "internal error"))
        await response(scope, receive, send)


class EdgeMiddleware:
    """Outermost layer: refuse malformed percent-escapes (400) and write JSON request logs.

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
        raw_path = scope.get("raw_path") or b""
        query = scope.get("query_string") or b""
        if (b"%" in raw_path and _BAD_ESCAPE.search(raw_path)) or (b"%" in query and _BAD_ESCAPE.search(query)):
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
        app = self.app
        # Fast path: the hottest reads skip the framework's routing and signature machinery
        # (they only need the raw scope); everything else goes through Litestar.
        if scope["method"] in ("GET", "HEAD"):
            path = scope["path"]
            if path == "/api/brains":
                app = _FastCall(serve_list, self.ctx, ())
            elif path.startswith("/api/brains/") and path.endswith("/sync"):
                brain_id = path[12:-5]
                if brain_id and "/" not in brain_id:
                    app = _FastCall(serve_download, self.ctx, (brain_id,))
        if self.quiet:
            await app(scope, receive, send)
            return

        def log(status: int, seconds: float) -> None:
            client = scope.get("client")
            record = {
                "ts": time.time(),
                "method": scope.get("method"),
                "path": scope.get("path"),
                "status": status,
                "ms": round(seconds * 1000, 2),
                "client": client[0] if client else None,
                "user": scope.get("state", {}).get("user_id"),
            }
            sys.stderr.write(_log_encoder.encode(record).decode() + "\n")

        await watched(app, scope, receive, send, log)


def create_app(settings: StoreSettings, ctx: AppContext | None = None) -> Litestar:
    """The Litestar application for ``settings`` (one per process)."""
    ctx = ctx or AppContext.build(settings)
    app = Litestar(
        route_handlers=ROUTES,
        openapi_config=None,
        exception_handlers={
            ServiceError: _service_error,
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
    return app


def app_from_env() -> Litestar:
    """Factory for uvicorn workers: settings from the environment (the serve command fills it)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return create_app(StoreSettings.from_env(os.environ))
