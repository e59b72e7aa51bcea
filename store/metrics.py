"""Prometheus metrics of the store, and the outermost ASGI layer that records them.

Labels are route *templates* (``/api/brains/{id}/sync``), methods, status codes and
outcomes: never brain ids, user ids or tokens, so ``/metrics`` reveals traffic shape
only. Recording costs about a microsecond per request: one list in a dict is updated
(prometheus-client's own counters take a lock and cost several times more); the
series are built from those totals when ``/metrics`` is scraped.

With several uvicorn workers, the serve command points ``STORE_METRICS_DIR``
at a private directory before the workers start; each worker writes its totals
there about once a second and ``/metrics`` (answered by any worker) adds them up.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.utils import floatToGoString

from common.asgi_watch import serve_metrics
from common.workers import FlushSoon
from store.audit import AuditLog, audit_event, caller, notes
from store.settings import StoreSettings

log = logging.getLogger("store.metrics")

METRICS_PATH = "/metrics"
# Request durations: the 304 path takes well under a millisecond, uploads seconds.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_FIXED_ROUTES = frozenset(
    {"/health", "/health/live", "/health/ready", "/openapi.yaml", "/auth/me", "/api/brains", "/api/keys",
     METRICS_PATH}
)
# /api/brains/{id}/<name>: the contract's and this project's (trash, members, audit).
_BRAIN_SUBROUTES = frozenset({"sync", "versions", "trash", "members", "audit"})
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
        if count == 2 and parts[1] in _BRAIN_SUBROUTES:
            return "/api/brains/{id}/" + parts[1]
        if count == 3 and parts[1] == "members" and parts[2]:
            return "/api/brains/{id}/members/{user}"
        if count == 4 and parts[1] == "versions" and parts[3] == "restore":
            return "/api/brains/{id}/versions/{name}/restore"
    elif path.startswith("/api/keys/"):
        prefix = path[10:]
        if prefix and "/" not in prefix:
            return "/api/keys/{prefix}"
    return "other"


def upload_outcome(status: int) -> str:
    """A short word for how an upload ended."""
    if status in _UPLOAD_OUTCOMES:
        return _UPLOAD_OUTCOMES[status]
    return "server_error" if status >= 500 else "refused"


def prepare_multiprocess_dir() -> tuple[dict[str, str], Callable[[], None]]:
    """A private directory for multi-worker metrics: the environment to export and a cleanup."""
    directory = tempfile.mkdtemp(prefix="brain-store-metrics-")  # 0700, ours alone
    return {"STORE_METRICS_DIR": directory}, lambda: shutil.rmtree(directory, ignore_errors=True)


# Per (method, route, status): [count, seconds, bucket 0..n (last: +Inf), bytes in, bytes out].
_Record = list[Any]
_NB = len(LATENCY_BUCKETS) + 1


class StoreMetrics:
    """The store's series, aggregated in plain Python and rendered on demand.

    The hot path touches one list in a dict (no locks: one event loop per process).
    With several workers each one writes its totals to ``<dir>/store-<pid>.json`` at
    most once a second (and within a second of its last request); ``/metrics`` adds
    up every worker's file. Totals only grow, so a worker that exits keeps counting
    in the sums, as Prometheus expects from counters.
    """

    FLUSH_SECONDS = 1.0

    def __init__(self, multiprocess_dir: Path | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir
        self.records: dict[tuple[str, str, int], _Record] = {}
        self._flush_soon = FlushSoon(self.flush, self.FLUSH_SECONDS)
        self._pid = os.getpid()

    def observe(self, method: str, route: str, status: int, seconds: float, bytes_in: int, bytes_out: int) -> None:
        """Record one finished request."""
        key = (method, route, status)
        record = self.records.get(key)
        if record is None:
            record = self.records[key] = [0, 0.0, *([0] * _NB), 0, 0]
        record[0] += 1
        record[1] += seconds
        record[2 + bisect_left(LATENCY_BUCKETS, seconds)] += 1
        if bytes_in:
            record[-2] += bytes_in
        if bytes_out:
            record[-1] += bytes_out
        if self.multiprocess_dir is not None:
            self._flush_soon.request()

    def flush(self) -> None:
        """Write this worker's totals to its file (multi-worker mode), atomically."""
        if self.multiprocess_dir is None:
            return
        rows = [[*key, *record] for key, record in self.records.items()]
        target = self.multiprocess_dir / f"store-{self._pid}.json"
        tmp = target.with_suffix(".tmp")
        try:
            tmp.write_bytes(msgspec.json.encode(rows))
            os.replace(tmp, target)
        except OSError as exc:  # metrics must never fail a request
            log.warning("cannot write metrics to %s: %s", target, exc)

    def totals(self) -> dict[tuple[str, str, int], _Record]:
        """Every worker's records added up (this process's own in single-worker mode)."""
        if self.multiprocess_dir is None:
            return self.records
        self.flush()
        merged: dict[tuple[str, str, int], _Record] = {}
        for path in self.multiprocess_dir.glob("store-*.json"):
            try:
                rows = msgspec.json.decode(path.read_bytes())
            except (OSError, msgspec.DecodeError):
                continue  # a worker is replacing its file right now; it is complete next time
            for row in rows:
                key = (row[0], row[1], int(row[2]))
                values = row[3:]
                if len(values) != _NB + 4:
                    continue
                into = merged.get(key)
                if into is None:
                    merged[key] = list(values)
                else:
                    for i, value in enumerate(values):
                        into[i] += value
        return merged

    def collect(self) -> Iterator[Metric]:
        """Prometheus metric families built from the totals (a custom collector)."""
        totals = self.totals()
        requests = CounterMetricFamily("brain_store_requests", "HTTP requests by method, route template and status",
                                       labels=("method", "route", "status"))
        latency = HistogramMetricFamily("brain_store_request_duration_seconds", "Time to answer a request",
                                        labels=("method", "route"))
        bytes_in = CounterMetricFamily("brain_store_request_bytes", "Request body bytes received", labels=("route",))
        bytes_out = CounterMetricFamily("brain_store_response_bytes", "Response body bytes sent", labels=("route",))
        uploads = CounterMetricFamily("brain_store_uploads", "Archive uploads by outcome", labels=("outcome",))
        conflicts = CounterMetricFamily("brain_store_precondition_failed",
                                        "Answers 412 (a conditional write lost a race)", labels=("route",))
        limited = CounterMetricFamily("brain_store_rate_limited", "Answers 429 (a rate limit was hit)",
                                      labels=("route",))
        per_route: dict[str, list[float]] = {}
        hist: dict[tuple[str, str], list[float]] = {}
        outcomes: dict[str, float] = {}
        status_counts: dict[tuple[int, str], float] = {}
        for (method, route, status), record in sorted(totals.items()):
            requests.add_metric((method, route, str(status)), record[0])
            h = hist.setdefault((method, route), [0.0] * (_NB + 1))
            h[0] += record[1]
            for i in range(_NB):
                h[1 + i] += record[2 + i]
            sizes = per_route.setdefault(route, [0, 0])
            sizes[0] += record[-2]
            sizes[1] += record[-1]
            if status in (412, 429):
                status_counts[(status, route)] = status_counts.get((status, route), 0) + record[0]
            if method == "PUT" and route == "/api/brains/{id}/sync":
                word = upload_outcome(status)
                outcomes[word] = outcomes.get(word, 0) + record[0]
        for (method, route), h in hist.items():
            cumulative, buckets = 0.0, []
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), h[1:], strict=True):
                cumulative += count
                buckets.append((floatToGoString(bound), cumulative))
            latency.add_metric((method, route), buckets, h[0])
        for route, (received, sent) in per_route.items():
            bytes_in.add_metric((route,), received)
            bytes_out.add_metric((route,), sent)
        for word, count in outcomes.items():
            uploads.add_metric((word,), count)
        for (status, route), count in status_counts.items():
            (conflicts if status == 412 else limited).add_metric((route,), count)
        yield from (requests, latency, bytes_in, bytes_out, uploads, conflicts, limited)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry)


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
        await serve_metrics(scope, send, self._token, self.metrics.render, CONTENT_TYPE_LATEST.encode())

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

        async def counting_send(message: Any) -> None:
            nonlocal status, sent
            kind = message["type"]
            if kind == "http.response.body":
                sent += len(message.get("body", b""))
            elif kind == "http.response.start":
                status = message["status"]
            await send(message)

        counter = ReceiveCounter(receive) if method in ("PUT", "POST") else None
        try:
            await self.app(scope, counter or receive, counting_send)
        finally:
            received = counter.count if counter is not None else 0
            self.record(scope, route_template(path), status or 500, time.perf_counter() - started, received, sent)

    def record(self, scope: Any, route: str, status: int, seconds: float, received: int, sent: int) -> None:
        """Count one finished request and write its audit entry (also called by the store's front
        door for the requests it answers itself, without this layer's ``send`` wrapper)."""
        if self.metrics is not None:
            self.metrics.observe(scope["method"], route, status, seconds, received, sent)
        if self.audit is not None:
            user_id, key = caller(scope)
            event = audit_event(scope["method"], route, scope["path"], status, user_id, notes(scope), key=key)
            if event is not None:
                event["client"] = self.address(scope)
                self.audit.write(event)


class ReceiveCounter:
    """An ASGI ``receive`` that counts the request-body bytes passing through it."""

    __slots__ = ("_receive", "count")

    def __init__(self, receive: Any) -> None:
        self._receive = receive
        self.count = 0

    async def __call__(self) -> Any:
        message = await self._receive()
        if message["type"] == "http.request":
            self.count += len(message.get("body", b""))
        return message


def observability_layer(app: Any, settings: StoreSettings, address: Callable[[Any], str]) -> Any:
    """Wrap the store's ASGI app with metrics and the audit log as configured (or return it as is)."""
    metrics = StoreMetrics(settings.metrics_dir) if settings.metrics else None
    audit_dir = settings.audit_dir
    audit = AuditLog(audit_dir, settings.audit_retention_days) if audit_dir is not None else None
    if metrics is None and audit is None:
        return app
    return ObservabilityMiddleware(app, settings, metrics, audit, address)
