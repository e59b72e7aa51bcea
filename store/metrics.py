"""Prometheus metrics of the store, and the outermost ASGI layer that records them.

Labels are route *templates* (``/api/brains/{id}/sync``), methods, status codes and
outcomes: never brain ids, user ids or tokens, so ``/metrics`` reveals traffic shape
only. Recording costs a few microseconds per request: label children are cached per
(method, route, status) so the hot path is a dict lookup, a counter increment and a
histogram observation.

With several uvicorn workers, the serve command points ``PROMETHEUS_MULTIPROC_DIR``
at a private directory before the workers start; prometheus-client then keeps the
values in memory-mapped files there and ``/metrics`` (answered by any worker) adds
up every worker's values.
"""

from __future__ import annotations

import hmac
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from store.audit import AuditLog, audit_event
from store.settings import StoreSettings

METRICS_PATH = "/metrics"
# Request durations: the 304 path takes well under a millisecond, uploads seconds.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_FIXED_ROUTES = frozenset(
    {"/health", "/health/live", "/health/ready", "/openapi.yaml", "/auth/me", "/api/brains", METRICS_PATH}
)
# How an upload (PUT .../sync) ended, by status code.
_UPLOAD_OUTCOMES = {
    200: "stored",
    400: "rejected",  # malformed request or an archive that failed inspection
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    412: "precondition_failed",
    413: "too_large",  # the upload or the user's quota
    429: "rate_limited",
    503: "contention",
    507: "out_of_space",
}


def route_template(path: str) -> str:
    """The route template of a request path (no ids); ``other`` for anything unknown."""
    if path in _FIXED_ROUTES:
        return path
    if path.startswith("/api/brains/"):
        parts = path[12:].split("/")
        count = len(parts)
        if not parts[0]:
            return "other"
        if count == 1:
            return "/api/brains/{id}"
        if count == 2 and parts[1] in ("sync", "versions"):
            return "/api/brains/{id}/" + parts[1]
        if count == 4 and parts[1] == "versions" and parts[3] == "restore":
            return "/api/brains/{id}/versions/{name}/restore"
    return "other"


def upload_outcome(status: int) -> str:
    """A short word for how an upload ended."""
    if status in _UPLOAD_OUTCOMES:
        return _UPLOAD_OUTCOMES[status]
    return "server_error" if status >= 500 else "refused"


def prepare_multiprocess_dir() -> tuple[dict[str, str], Callable[[], None]]:
    """A private directory for multi-worker metrics: the environment to export and a cleanup."""
    directory = tempfile.mkdtemp(prefix="brain-store-metrics-")  # 0700, ours alone
    return {"PROMETHEUS_MULTIPROC_DIR": directory}, lambda: shutil.rmtree(directory, ignore_errors=True)


class StoreMetrics:
    """The store's series, in their own registry (one per app; workers share via files)."""

    def __init__(self, multiprocess_dir: Path | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("brain_store_requests", "HTTP requests by method, route template and status",
                                ("method", "route", "status"), registry=r)
        self.latency = Histogram("brain_store_request_duration_seconds", "Time to answer a request",
                                 ("method", "route"), buckets=LATENCY_BUCKETS, registry=r)
        self.bytes_in = Counter("brain_store_request_bytes", "Request body bytes received", ("route",), registry=r)
        self.bytes_out = Counter("brain_store_response_bytes", "Response body bytes sent", ("route",), registry=r)
        self.uploads = Counter("brain_store_uploads", "Archive uploads by outcome", ("outcome",), registry=r)
        self.precondition_failed = Counter("brain_store_precondition_failed",
                                           "Answers 412 (a conditional write lost a race)", ("route",), registry=r)
        self.rate_limited = Counter("brain_store_rate_limited", "Answers 429 (a rate limit was hit)", ("route",),
                                    registry=r)
        # label children by key: .labels() does argument checks and takes a lock each call
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._route_children: dict[tuple[int, str], Any] = {}

    def _child(self, kind: int, metric: Any, label: str) -> Any:
        key = (kind, label)
        child = self._route_children.get(key)
        if child is None:
            child = self._route_children[key] = metric.labels(label)
        return child

    def observe(self, method: str, route: str, status: int, seconds: float, bytes_in: int, bytes_out: int) -> None:
        """Record one finished request."""
        key = (method, route, status)
        children = self._request_children.get(key)
        if children is None:
            children = self._request_children[key] = (
                self.requests.labels(method, route, str(status)).inc,
                self.latency.labels(method, route).observe,
            )
        children[0]()
        children[1](seconds)
        if bytes_in:
            self._child(0, self.bytes_in, route).inc(bytes_in)
        if bytes_out:
            self._child(1, self.bytes_out, route).inc(bytes_out)
        if status == 412:
            self._child(2, self.precondition_failed, route).inc()
        elif status == 429:
            self._child(3, self.rate_limited, route).inc()
        if method == "PUT" and route == "/api/brains/{id}/sync":
            self._child(4, self.uploads, upload_outcome(status)).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition (all workers' values in multi-process mode)."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(self.multiprocess_dir))
        return generate_latest(registry)


async def _send_plain(send: Any, status: int, body: bytes, content_type: bytes, extra: list[Any] | None = None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
               (b"cache-control", b"no-store"), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ObservabilityMiddleware:
    """Outermost layer: answers ``GET /metrics``, records every request, writes the audit log."""

    def __init__(self, app: Any, settings: StoreSettings, metrics: StoreMetrics | None,
                 audit: AuditLog | None, address: Callable[[Any], str]) -> None:
        self.app = app
        self.metrics = metrics
        self.audit = audit
        self.address = address
        self._token = settings.metrics_token.encode() if settings.metrics_token else None

    async def _serve_metrics(self, scope: Any, send: Any) -> None:
        assert self.metrics is not None
        if self._token is not None:
            given = b""
            for name, value in scope["headers"]:
                if name == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, b"Bearer " + self._token):
                await _send_plain(send, 401, b'{"error":"metrics need the metrics token"}', b"application/json",
                                  [(b"www-authenticate", b'Bearer realm="metrics"')])
                return
        await _send_plain(send, 200, self.metrics.render(), CONTENT_TYPE_LATEST.encode())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        method = scope["method"]
        if path == METRICS_PATH and self.metrics is not None and method == "GET":
            await self._serve_metrics(scope, send)
            return
        # Shared with the handlers (they put the authenticated user id here for logs and audit).
        if "state" not in scope:
            scope["state"] = {}
        started = time.perf_counter()
        status = 0
        sent = 0
        received = 0

        async def counting_send(message: Any) -> None:
            nonlocal status, sent
            kind = message["type"]
            if kind == "http.response.body":
                sent += len(message.get("body", b""))
            elif kind == "http.response.start":
                status = message["status"]
            await send(message)

        inner_receive = receive
        if method in ("PUT", "POST"):

            async def counting_receive() -> Any:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                return message

            inner_receive = counting_receive
        try:
            await self.app(scope, inner_receive, counting_send)
        finally:
            route = route_template(path)
            if self.metrics is not None:
                self.metrics.observe(method, route, status or 500, time.perf_counter() - started, received, sent)
            if self.audit is not None:
                event = audit_event(method, route, path, status or 500, scope["state"].get("user_id"))
                if event is not None:
                    event["client"] = self.address(scope)
                    self.audit.write(event)


def observability_layer(app: Any, settings: StoreSettings, address: Callable[[Any], str]) -> Any:
    """Wrap the store's ASGI app with metrics and the audit log as configured (or return it as is)."""
    metrics = StoreMetrics(settings.metrics_multiproc_dir) if settings.metrics else None
    audit_dir = settings.audit_dir
    audit = AuditLog(audit_dir, settings.audit_retention_days) if audit_dir is not None else None
    if metrics is None and audit is None:
        return app
    return ObservabilityMiddleware(app, settings, metrics, audit, address)
