"""Archive transfer: GET/HEAD (download, conditional) and PUT (streamed upload) of /sync."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import anyio.to_thread
from litestar import Request, put, route
from litestar.types import ASGIApp

from store.archive.inspect import InspectLimits
from store.conditional import Preconditions, etag, parse_tag_list
from store.context import AppContext
from store.errors import ServiceError
from store.http import GZIP_TYPE, ChunksResponse, FileResponse, RawResponse, json_response
from store.routes.common import ctx, header, query_flag
from store.service import parse_brain_id
from store.storage.base import StorageFull
from store.storage.local import is_disk_full
from store.upload import BODY_SLACK, UploadSink, complete_upload, multipart_boundary

# After refusing an upload part-way we keep reading (and discarding) at most this much
# of the body, so ordinary clients get to see the error instead of a reset connection.
DRAIN_LIMIT = 256 * 1024 * 1024
# Body bytes collected before one hand-over to a worker thread.
FEED_BATCH = 512 * 1024


def _archive_headers(checksum: str) -> list[tuple[bytes, bytes]]:
    return [
        GZIP_TYPE,
        (b"etag", etag(checksum).encode()),
        (b"x-checksum", checksum.encode()),
        (b"cache-control", b"no-cache"),
    ]


def query_value(scope: Any, name: str) -> str | None:
    """One query parameter of the request (first occurrence), percent-decoded."""
    raw = scope.get("query_string")
    if not raw:
        return None
    values = parse_qs(raw.decode("latin-1"), keep_blank_values=True).get(name)
    return values[0] if values else None


async def serve_download(c: AppContext, scope: Any, brain_id: str) -> ASGIApp:
    """GET/HEAD of /sync from the raw ASGI scope (also used by the fast path in store.app)."""
    p = await c.authenticate(scope)
    bid = parse_brain_id(brain_id)
    version = query_value(scope, "version")
    archive = c.service.resolve(p.user_id, bid, version)
    inm = header(scope, b"if-none-match")
    if inm is not None:
        tags = parse_tag_list(inm)
        if tags is not None and tags.weak_match(archive.checksum):
            tag = etag(archive.checksum).encode()
            return RawResponse(304, b"", [(b"etag", tag), (b"x-checksum", archive.checksum.encode())])
    if scope["method"] == "HEAD":
        headers = [*_archive_headers(archive.checksum), (b"content-length", str(archive.size).encode())]
        return _HeadResponse(headers)
    dl = c.service.open_download(p.user_id, bid, version)
    headers = _archive_headers(dl.archive.checksum)
    if dl.file is not None:
        return FileResponse(dl.file, dl.archive.size, headers)
    assert dl.chunks is not None
    return ChunksResponse(dl.chunks, dl.archive.size, headers, dl.close)


@route("/api/brains/{brain_id:str}/sync", http_method=["GET", "HEAD"])
async def download(request: Request[Any, Any, Any]) -> ASGIApp:
    """The current archive, or a snapshot with ``?version=``; 304 when If-None-Match matches."""
    return await serve_download(ctx(request), request.scope, request.path_params["brain_id"])


class _HeadResponse:
    """HEAD: the download's headers, no body."""

    __slots__ = ("headers",)

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.headers = headers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        await send({"type": "http.response.body", "body": b""})


async def _drain(receive: Any, limit: int) -> None:
    """Read and discard the rest of a request body (bounded)."""
    seen = 0
    while seen <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


@put("/api/brains/{brain_id:str}/sync")
async def upload(request: Request[Any, Any, Any]) -> ASGIApp:
    """Replace the archive with the ``brain`` field of a multipart body, streamed to disk."""
    brain_id = request.path_params["brain_id"]
    c = ctx(request)
    scope = request.scope
    receive = request.receive
    body_done = False
    try:
        p = await c.authenticate(scope)
        bid = parse_brain_id(brain_id)
        c.check_upload_rate(p)
        cond = Preconditions.from_headers(header(scope, b"if-match"), header(scope, b"if-none-match"))
        force = query_flag(query_value(scope, "force"))
        c.service.precheck_upload(p.user_id, bid, cond)
        boundary = multipart_boundary(header(scope, b"content-type"))
        length_text = header(scope, b"content-length")
        content_length = -1
        if length_text is not None:
            if not length_text.strip().isdigit():
                raise ServiceError(400, "invalid Content-Length")
            content_length = int(length_text)
        room = c.service.upload_room()
        if content_length > room + BODY_SLACK:
            raise ServiceError(413, "upload is larger than this store accepts")
        try:
            blob = c.backend.stage(p.user_id, bid)
        except StorageFull:
            raise ServiceError(507, "the store is out of disk space") from None
        settings = c.settings
        try:
            writer = c.service.sealer.writer(blob.file, p.user_id, bid) if c.service.sealer else None
            sink = UploadSink(
                boundary,
                blob,
                max_archive=room,
                inspect_limits=InspectLimits(
                    settings.inspect_max_inflated, settings.inspect_max_entries, settings.inspect_max_header
                ),
                writer=writer,
                content_length=content_length,
            )
        except BaseException:
            blob.discard()
            raise
        # The body is read on the event loop and handed to a worker thread in batches:
        # hashing, inflating and writing release the GIL, so concurrent uploads use
        # every core while the loop keeps serving other requests.
        pending: list[bytes] = []
        pending_size = 0
        try:
            while not body_done:
                message = await receive()
                if message["type"] == "http.disconnect":
                    body_done = True
                    raise ServiceError(400, "client disconnected during upload")
                body_done = not message.get("more_body", False)
                chunk = message.get("body", b"")
                if chunk:
                    pending.append(chunk)
                    pending_size += len(chunk)
                if pending_size >= FEED_BATCH and not body_done:
                    data = b"".join(pending)
                    pending.clear()
                    pending_size = 0
                    await anyio.to_thread.run_sync(sink.feed, data)
        except OSError as exc:
            blob.discard()
            if is_disk_full(exc):
                raise ServiceError(507, "the store is out of disk space; nothing was changed") from None
            raise
        except BaseException:
            blob.discard()
            raise
        archive = await anyio.to_thread.run_sync(
            complete_upload, c.service, sink, b"".join(pending), p.user_id, bid, cond, force
        )
    except ServiceError as exc:
        if not body_done:
            # unauthenticated callers get little patience; others see their error
            await _drain(receive, 1024 * 1024 if exc.status in (401, 429) else DRAIN_LIMIT)
        raise
    return json_response(
        200,
        {"size_bytes": archive.size, "file_count": archive.file_count, "checksum": archive.checksum},
        [(b"etag", etag(archive.checksum).encode()), (b"x-checksum", archive.checksum.encode())],
    )


SYNC_ROUTES = [download, upload]
