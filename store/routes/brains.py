"""Account and brain records: /auth/me, /api/brains, /api/brains/{id}."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import msgspec
from litestar import Request, delete, get, patch, post
from litestar.types import ASGIApp

from store.context import AppContext
from store.errors import ServiceError
from store.http import RawResponse, json_response
from store.routes.common import authorized_brain, ctx
from store.service import brain_record

MAX_JSON_BODY = 64 * 1024


@get("/auth/me")
async def me(request: Request[Any, Any, Any]) -> ASGIApp:
    """The caller and the bytes they store."""
    c = ctx(request)
    p = await c.authenticate(request.scope)
    user = {"id": p.user_id, "email": p.email or "", "name": p.name, "kind": p.kind}
    body: dict[str, Any] = {"user": user, "storage_used": await c.run(c.service.usage, p.user_id)}
    if p.key is not None:
        # What an agent key may do, so a client (the connector's /mcp) grants exactly that.
        body["key"] = {"prefix": p.key.prefix, "scope": p.key.scope, "brains": list(p.key.brains),
                       "label": p.key.label, "expires_at": p.key.expires_at or None}
    return json_response(200, body)


async def serve_list(c: AppContext, scope: Any) -> ASGIApp:
    """GET /api/brains from the raw ASGI scope (also used by the fast path in store.app)."""
    p = c.authenticate_now(scope) or await c.authenticate_waiting(scope)
    own = await c.run(c.service.list_brains, p.user_id)
    return json_response(200, await c.run(c.sharing.listing, p, own))


@get("/api/brains")
async def list_brains(request: Request[Any, Any, Any]) -> ASGIApp:
    """The caller's brains, oldest first."""
    return await serve_list(ctx(request), request.scope)


async def json_body(request: Request[Any, Any, Any]) -> Any:
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > MAX_JSON_BODY:
            raise ServiceError(413, "request body too large")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return None
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # RecursionError: nested deeper than any request needs
        raise ServiceError(400, "request body is not valid JSON") from None


@post("/api/brains")
async def create_brain(request: Request[Any, Any, Any]) -> ASGIApp:
    """Create a brain (optional body {"name": ...}, default "default")."""
    c = ctx(request)
    p = await c.authenticate(request.scope)
    if p.key is not None:
        raise ServiceError(403, "an agent key cannot create brains")
    body = await json_body(request)
    name = "default"
    if body is not None:
        if not isinstance(body, dict):
            raise ServiceError(400, "request body must be a JSON object")
        if "name" in body and body["name"] is not None:
            name = body["name"]
            if not isinstance(name, str):
                raise ServiceError(400, "name must be a string")
    # writes lock and fsync (or wait on S3): always in a worker thread
    meta = await anyio.to_thread.run_sync(c.service.create, p.user_id, name)
    return json_response(201, brain_record(meta))


@get("/api/brains/{brain_id:str}")
async def get_brain(request: Request[Any, Any, Any]) -> ASGIApp:
    """One brain record."""
    c, p, bid, owner = await authorized_brain(request, "list")
    meta = await c.run(c.service.get, owner, bid)
    return json_response(200, c.sharing.record_of(p, meta))


@delete("/api/brains/{brain_id:str}", status_code=200)
async def delete_brain(request: Request[Any, Any, Any]) -> ASGIApp:
    """Remove a brain with its archive and snapshots."""
    c, _, bid, owner = await authorized_brain(request, "delete")
    await anyio.to_thread.run_sync(c.service.delete, owner, bid)
    await anyio.to_thread.run_sync(c.sharing.forget, bid)
    return RawResponse(204)


@patch("/api/brains/{brain_id:str}")
async def rename_brain(request: Request[Any, Any, Any]) -> ASGIApp:
    """[extension] Rename a brain (owners): body {"name": ...}; 200 with the record."""
    c, p, bid, owner = await authorized_brain(request, "rename")
    body = await json_body(request)
    if not isinstance(body, dict) or "name" not in body:
        raise ServiceError(400, 'request body must be a JSON object with a "name"')
    meta = await anyio.to_thread.run_sync(c.service.rename, owner, bid, body["name"])
    await anyio.to_thread.run_sync(lambda: c.sharing.record(bid, p, "rename", name=meta.name))
    return json_response(200, c.sharing.record_of(p, meta))


@post("/api/brains/{brain_id:str}/trash", status_code=200)
async def trash_brain(request: Request[Any, Any, Any]) -> ASGIApp:
    """[extension] Delete a brain for every client, keeping its archive and snapshots in the
    store until the operator brings it back or purges it (owners; 204)."""
    c, p, bid, owner = await authorized_brain(request, "delete")
    await anyio.to_thread.run_sync(c.service.trash, owner, bid)
    await anyio.to_thread.run_sync(lambda: c.sharing.record(bid, p, "delete_kept"))
    return RawResponse(204)


BRAIN_ROUTES = [me, list_brains, create_brain, get_brain, delete_brain, rename_brain, trash_brain]
