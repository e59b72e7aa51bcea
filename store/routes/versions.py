"""Snapshots: listing and restore."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio.to_thread
from litestar import Request, get, post
from litestar.types import ASGIApp

from store.conditional import Preconditions, etag
from store.http import json_response
from store.routes.common import authorized_brain, ctx, header
from store.service import parse_brain_id


@get("/api/brains/{brain_id:str}/versions")
async def list_versions(request: Request[Any, Any, Any]) -> ASGIApp:
    """Snapshots newest first, with size, checksum and file count."""
    c, _, bid, owner = await authorized_brain(request, "snapshots")
    snaps = await c.run(c.service.versions, owner, bid)
    versions = [
        {
            "version": s.name,
            "date": s.date,
            "written_at": s.archive.synced_at,  # [extension] date is when a newer version replaced it
            "size": s.archive.size,
            "size_bytes": s.archive.size,
            "checksum": s.archive.checksum,
            "file_count": s.archive.file_count,
        }
        for s in snaps
    ]
    return json_response(200, {"versions": versions, "total": len(versions)})


@post("/api/brains/{brain_id:str}/versions/{name:str}/restore")
async def restore(request: Request[Any, Any, Any]) -> ASGIApp:
    """Make a snapshot current (the current archive becomes a snapshot first)."""
    brain_id, name = request.path_params["brain_id"], request.path_params["name"]
    c = ctx(request)
    scope = request.scope
    p = await c.authenticate(scope)
    bid = parse_brain_id(brain_id)
    cond = Preconditions.from_headers(header(scope, b"if-match"), header(scope, b"if-none-match"))
    owner = c.sharing.authorize(p, bid, "restore")
    archive = await anyio.to_thread.run_sync(c.service.restore, owner, bid, name, cond)
    await c.run(partial(c.sharing.record, bid, p, "restore", version=name))
    return json_response(
        200,
        {"restored_version": name, "checksum": archive.checksum, "size_bytes": archive.size,
         "file_count": archive.file_count},
        [(b"etag", etag(archive.checksum).encode()), (b"x-checksum", archive.checksum.encode())],
    )


VERSION_ROUTES = [list_versions, restore]
