"""Archive transfer: GET/HEAD (download, conditional) and PUT (streamed upload) of /sync."""

from __future__ import annotations

from functools import partial
from typing import Any
from urllib.parse import parse_qs

from litestar import Request, put, route
from litestar.types import ASGIApp

from store.auth.authenticate import Principal, bearer_token
from store.conditional import Preconditions, etag, parse_tag_list
from store.context import AppContext
from store.errors import ServiceError
from store.http import GZIP_TYPE, ChunksResponse, FileResponse, RawResponse, json_response
from store.routes.common import ctx, header, query_flag
from store.service import parse_brain_id
from store.sharing.access import NOT_FOUND
from store.upload import BodyReader, multipart_boundary, receive_upload

# After refusing an upload part-way we keep reading (and discarding) at most this much
# of the body, so ordinary clients get to see the error instead of a reset connection.
DRAIN_LIMIT = 256 * 1024 * 1024


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


async def serve_download(c: AppContext, scope: Any, brain_id: str) -> Any:
    """GET/HEAD of /sync from the raw ASGI scope (also used by the front door in store.app)."""
    p = c.authenticate_now(scope) or await c.authenticate_waiting(scope)
    bid = parse_brain_id(brain_id)
    owner = c.sharing.authorize(p, bid, "download")
    version = query_value(scope, "version")
    inm = header(scope, b"if-none-match")
    if inm is not None or scope["method"] == "HEAD":
        if c.backend.blocking:
            archive = await c.run(c.service.resolve, owner, bid, version)
        else:  # local disk: a cached metadata lookup, no need for a coroutine
            archive = c.service.resolve(owner, bid, version)
        if inm is not None and _none_match(inm, archive.checksum):
            checksum = archive.checksum.encode()
            return RawResponse(304, b"", [(b"etag", b'"' + checksum + b'"'), (b"x-checksum", checksum)])
        if scope["method"] == "HEAD":
            return _HeadResponse([*_archive_headers(archive.checksum), (b"content-length", str(archive.size).encode())])
    if c.backend.blocking:
        dl = await c.run(c.service.open_download, owner, bid, version)
    else:
        dl = c.service.open_download(owner, bid, version)
    headers = _archive_headers(dl.archive.checksum)
    if dl.body is not None:
        return FileResponse(dl.body, headers)
    assert dl.chunks is not None
    return ChunksResponse(dl.chunks, dl.archive.size, headers, dl.close, in_thread=c.backend.blocking)


def _none_match(value: str, checksum: str) -> bool:
    """If-None-Match (weak comparison) against the current checksum; the usual single tag is
    compared directly, anything else goes through the full parser."""
    if len(value) == len(checksum) + 2 and value[0] == '"' and value[-1] == '"':
        return value[1:-1] == checksum
    tags = parse_tag_list(value)
    return tags is not None and tags.weak_match(checksum)


@route("/api/brains/{brain_id:str}/sync", http_method=["GET", "HEAD"])
async def download(request: Request[Any, Any, Any]) -> ASGIApp:
    """The current archive, or a snapshot with ``?version=``; 304 when If-None-Match matches."""
    return await serve_download(ctx(request), request.scope, request.path_params["brain_id"])


class _HeadResponse:
    """HEAD: the download's headers, no body."""

    __slots__ = ("headers",)

    status = 200

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.headers = headers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.send_to(scope, send)

    async def send_to(self, scope: Any, send: Any) -> int:
        """Send the headers and an empty body."""
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        await send({"type": "http.response.body", "body": b""})
        return 0


async def serve_upload(c: AppContext, scope: Any, brain_id: str, receive: Any) -> Any:
    """PUT of /sync from the raw ASGI scope and ``receive`` (also used by the front door)."""
    body = BodyReader(receive)
    try:
        p = c.authenticate_now(scope) or await c.authenticate_waiting(scope)
        bid = parse_brain_id(brain_id)
        owner = c.sharing.authorize(p, bid, "upload")
        c.check_upload_rate(p)
        cond = Preconditions.from_headers(header(scope, b"if-match"), header(scope, b"if-none-match"))
        force = query_flag(query_value(scope, "force"))
        await c.run(c.service.precheck_upload, owner, bid, cond)
        boundary = multipart_boundary(header(scope, b"content-type"))
        archive = await receive_upload(
            c.service, body, boundary, header(scope, b"content-length"), owner, bid, cond, force,
            partial(_still_authorized, c, p, bearer_token(header(scope, b"authorization")), bid, owner),
            c.sharing.acts_as_owner(p, bid),
        )
    except ServiceError as exc:
        # read what is left of the body so the client sees the answer, not a reset;
        # unauthenticated or rate-limited callers get little patience
        await body.drain(1024 * 1024 if exc.status in (401, 429) else DRAIN_LIMIT)
        raise
    # every write by someone other than the creator (or through an agent key) is audited,
    # even when the brain's last member left meanwhile
    others = owner != p.user_id or p.key is not None
    await c.run(partial(c.sharing.record, bid, p, "upload", always=others, checksum=archive.checksum))
    return json_response(
        200,
        {"size_bytes": archive.size, "file_count": archive.file_count, "checksum": archive.checksum},
        [(b"etag", etag(archive.checksum).encode()), (b"x-checksum", archive.checksum.encode())],
    )


def _still_authorized(c: AppContext, p: Principal, token: str | None, bid: str, owner: str) -> None:
    """Just before an upload commits (blocking): the caller may still upload to the brain, by the
    same permission table as at the start; a refusal is audited and no commit happens."""
    try:
        if c.sharing.reauthorize(p, token, bid, "upload") != owner:
            raise ServiceError(404, NOT_FOUND)
    except ServiceError as exc:
        c.sharing.record(bid, p, "upload_refused", always=True, status=exc.status, reason=exc.message)
        raise


@put("/api/brains/{brain_id:str}/sync")
async def upload(request: Request[Any, Any, Any]) -> ASGIApp:
    """Replace the archive with the ``brain`` field of a multipart body, streamed to disk."""
    return await serve_upload(ctx(request), request.scope, request.path_params["brain_id"], request.receive)  # type: ignore[no-any-return]


SYNC_ROUTES = [download, upload]
