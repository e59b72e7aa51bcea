"""Health, readiness and the OpenAPI document (no authentication)."""

from __future__ import annotations

from typing import Any

from litestar import Request, get
from litestar.types import ASGIApp

from store.http import RawResponse, json_response
from store.routes.common import ctx

CONTRACT_VERSION = "1.1"


@get("/health")
async def health(request: Request[Any, Any, Any]) -> ASGIApp:
    """Contract health document with capabilities."""
    c = ctx(request)
    return json_response(
        200,
        {"status": "ok", "contract": CONTRACT_VERSION, "capabilities": c.capabilities(),
         "encryption": c.settings.encryption},
    )


@get("/health/live")
async def live(request: Request[Any, Any, Any]) -> ASGIApp:
    """The process is running."""
    return json_response(200, {"status": "ok"})


@get("/health/ready")
async def ready(request: Request[Any, Any, Any]) -> ASGIApp:
    """Storage can serve: the data directory is writable (disk) or the bucket answers (S3).

    A damaged users or sharing file is served from its last good copy, so the store stays
    ready; the answer then says ``"status": "degraded"`` and names the file in ``damaged``.
    """
    c = ctx(request)
    problem = await c.ready()
    if problem is not None:
        return json_response(503, {"status": "unavailable", "error": problem})
    damaged = await c.run(c.damaged)
    if damaged:
        return json_response(200, {"status": "degraded", "damaged": damaged})
    return json_response(200, {"status": "ready"})


@get("/openapi.yaml")
async def openapi(request: Request[Any, Any, Any]) -> ASGIApp:
    """contract/openapi.yaml, served verbatim."""
    doc = ctx(request).openapi
    if doc is None:
        return json_response(404, {"error": "no OpenAPI document installed"})
    return RawResponse(200, doc, [(b"content-type", b"application/yaml")])


HEALTH_ROUTES = [health, live, ready, openapi]
