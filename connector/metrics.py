"""Prometheus metrics of the connector, and the outermost ASGI layer that records requests.

Series: HTTP requests by route (fixed paths only; anything else is ``other``) and
status, request latency, tool calls by tool and outcome, pulls and pushes of
working copies by outcome, replays (a push that lost a race to another device, so
the pending writes are applied again on the newer brain), and the working copies
held in memory. Labels never carry user ids, brain ids, client ids or tokens.

The tool, pull and push counters are recorded by wrapping the components'
methods once at start-up (``instrument``), so the components themselves stay
unaware of metrics.

With several workers (`serve --workers N`) each worker writes its samples to
``<metrics_dir>/connector-<pid>.json`` within a second of a request, and ``/metrics``
(answered by whichever worker the scrape reaches) adds every worker's up: counters
and histograms of workers that stopped keep counting, as Prometheus expects from
counters; gauges count only workers still running.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

from common.asgi_watch import serve_metrics, watched
from common.files import write_atomic
from common.workers import FlushSoon, pid_alive

METRICS_PATH = "/metrics"
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ROUTES = frozenset({
    "/mcp", "/health", "/health/live", "/health/ready", "/register", "/authorize", "/authorize/complete",
    "/oidc/callback", "/token", "/revoke", METRICS_PATH,
    "/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
    "/.well-known/oauth-authorization-server", "/.well-known/oauth-authorization-server/mcp",
    "/.well-known/openid-configuration",
})


log = logging.getLogger("connector.metrics")
# How soon after a request a worker writes its totals for the others (several workers only).
FLUSH_SECONDS = 1.0


BRAIN_ROUTE = "/mcp/brains/{brain}"


def route_label(path: str) -> str:
    """The path when it is one of the connector's fixed routes, one label for every brain's URL, else ``other``."""
    if path.startswith("/mcp/brains/"):
        return BRAIN_ROUTE
    return path if path in ROUTES else "other"


class ConnectorMetrics:
    """The connector's series in their own registry (one per app), added up over ``shared_dir``'s workers."""

    def __init__(self, shared_dir: Path | None = None) -> None:
        self.shared_dir = shared_dir
        self._pid = os.getpid()
        self._flush_soon = FlushSoon(self.flush, FLUSH_SECONDS)
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("brain_connector_requests", "HTTP requests by method, route and status",
                                ("method", "route", "status"), registry=r)
        self.latency = Histogram("brain_connector_request_duration_seconds", "Time to answer a request",
                                 ("route",), buckets=LATENCY_BUCKETS, registry=r)
        self.tool_calls = Counter("brain_connector_tool_calls", "MCP tool calls by tool and outcome",
                                  ("tool", "outcome"), registry=r)
        self.tool_latency = Histogram("brain_connector_tool_duration_seconds", "Time to run a tool call",
                                      ("tool",), buckets=LATENCY_BUCKETS, registry=r)
        self.pulls = Counter("brain_connector_pulls", "Downloads of a brain from the store by outcome",
                             ("outcome",), registry=r)
        self.pushes = Counter("brain_connector_pushes", "Uploads of a brain to the store by outcome",
                              ("outcome",), registry=r)
        self.replays = Counter("brain_connector_replays",
                               "Pushes that lost a race (412), so pending writes are replayed on the newer brain",
                               registry=r)
        self.working_copies = Gauge("brain_connector_working_copies", "Working copies held in memory", registry=r)
        self.held_writes = Gauge("brain_connector_copies_with_unpushed_writes",
                                 "Working copies holding writes the store has not accepted yet", registry=r)

    def observe_request(self, method: str, path: str, status: int, seconds: float) -> None:
        """Record one finished HTTP request."""
        route = route_label(path)
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(route).observe(seconds)
        if self.shared_dir is not None:
            self._flush_soon.request()

    def render(self) -> bytes:
        """The Prometheus text exposition (every worker's series added up, with several)."""
        if self.shared_dir is None:
            return generate_latest(self.registry)
        self.flush()
        merged = CollectorRegistry(auto_describe=False)
        merged.register(_WorkerTotals(self.shared_dir))
        return generate_latest(merged)

    def flush(self) -> None:
        """Write this worker's samples to its file in the shared directory, atomically."""
        if self.shared_dir is None:
            return
        families = [
            {
                "name": family.name,
                "doc": family.documentation,
                "type": family.type,
                # "_created" samples are start times: adding them up would mean nothing
                "samples": [[s.name, s.labels, s.value] for s in family.samples if not s.name.endswith("_created")],
            }
            for family in self.registry.collect()
        ]
        try:
            write_atomic(self.shared_dir / f"connector-{self._pid}.json", json.dumps(families).encode(), fsync=False)
        except OSError as exc:  # metrics must never fail a request
            log.warning("cannot write metrics for the other workers", extra={"error": type(exc).__name__})


class _WorkerTotals:
    """A collector adding up the samples every worker left in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        sums: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        for path in sorted(self.directory.glob("connector-*.json")):
            try:
                written = json.loads(path.read_text())
                running = pid_alive(int(path.stem.split("-", 1)[1]))
            except (OSError, ValueError):
                continue  # a worker is replacing its file right now; it is complete next time
            for family in written:
                if family["type"] == "gauge" and not running:
                    continue  # what a stopped worker held is gone with it
                families.setdefault(family["name"], Metric(family["name"], family["doc"], family["type"]))
                into = sums.setdefault(family["name"], {})
                for name, labels, value in family["samples"]:
                    key = (name, tuple(sorted(labels.items())))
                    into[key] = into.get(key, 0.0) + value
        for name, family in families.items():
            for (sample, labels), value in sums[name].items():
                family.add_sample(sample, dict(labels), value)
            yield family



def _tool_outcome(result: Any) -> str:
    return "error" if getattr(result, "isError", None) or getattr(result, "is_error", None) else "ok"


def instrument(parts: Any, metrics: ConnectorMetrics) -> None:
    """Count tool calls, pulls, pushes and replays of ``parts`` (ConnectorParts); gauge its copies."""
    from connector.workcopy.store_client import PreconditionFailed

    tools, store, manager = parts.tools, parts.store, parts.manager
    call, download, upload = tools.call, store.download, store.upload

    @functools.wraps(call)
    async def counted_call(name: str, arguments: Any, caller: Any) -> Any:
        tool = name if name in parts.settings.tools else "unknown"
        started = time.perf_counter()
        try:
            result = await call(name, arguments, caller)
        except BaseException:
            metrics.tool_calls.labels(tool, "exception").inc()
            raise
        finally:
            metrics.tool_latency.labels(tool).observe(time.perf_counter() - started)
        metrics.tool_calls.labels(tool, _tool_outcome(result)).inc()
        return result

    @functools.wraps(download)
    async def counted_download(*args: Any, **kwargs: Any) -> Any:
        try:
            result = await download(*args, **kwargs)
        except Exception as exc:
            metrics.pulls.labels("not_found" if type(exc).__name__ == "StoreNotFound" else "error").inc()
            raise
        metrics.pulls.labels("not_modified" if result.not_modified else "downloaded").inc()
        return result

    @functools.wraps(upload)
    async def counted_upload(*args: Any, **kwargs: Any) -> Any:
        try:
            result = await upload(*args, **kwargs)
        except PreconditionFailed:
            metrics.pushes.labels("conflict").inc()
            metrics.replays.inc()
            raise
        except Exception:
            metrics.pushes.labels("error").inc()
            raise
        metrics.pushes.labels("stored").inc()
        return result

    tools.call = counted_call
    store.download = counted_download
    store.upload = counted_upload
    metrics.working_copies.set_function(lambda: len(manager.copies))
    metrics.held_writes.set_function(lambda: sum(1 for copy in list(manager.copies.values()) if copy.dirty))


class MetricsMiddleware:
    """Outermost layer: answers ``GET /metrics`` (optionally behind a bearer token), times every request."""

    def __init__(self, app: Any, metrics: ConnectorMetrics, token: str | None) -> None:
        self.app = app
        self.metrics = metrics
        self._token = token.encode() if token else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == METRICS_PATH and scope["method"] == "GET":
            await serve_metrics(scope, send, self._token, self.metrics.render, CONTENT_TYPE_LATEST.encode())
            return

        def record(status: int, seconds: float) -> None:
            self.metrics.observe_request(scope["method"], scope["path"], status or 500, seconds)

        await watched(self.app, scope, receive, send, record)


def observability_layer(app: Any, parts: Any) -> Any:
    """Instrument ``parts`` and wrap ``app`` with /metrics, unless metrics are off in the settings."""
    settings = parts.settings
    if not settings.metrics:
        return app
    metrics = ConnectorMetrics(settings.metrics_dir)
    instrument(parts, metrics)
    return MetricsMiddleware(app, metrics, settings.metrics_token)
