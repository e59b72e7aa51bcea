"""Minimal ASGI responses for the hot paths (JSON, empty, streamed archives).

Route handlers return these objects directly (Litestar passes ASGI apps through), which
keeps per-request work small: one header list, one or two ``send`` calls. Archive
downloads read the immutable blob in large chunks and send them as they are read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, BinaryIO

import anyio.to_thread
import msgspec

from store.errors import ServiceError

_json = msgspec.json.Encoder()
JSON_TYPE = (b"content-type", b"application/json")
GZIP_TYPE = (b"content-type", b"application/gzip")
SMALL_FILE = 256 * 1024
FILE_CHUNK = 1024 * 1024

Headers = list[tuple[bytes, bytes]]


def encode_headers(headers: dict[str, str] | None) -> Headers:
    """ASGI header pairs from a dict."""
    if not headers:
        return []
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


class RawResponse:
    """A complete response with a small body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, body: bytes = b"", headers: Headers | None = None) -> None:
        self.status = status
        self.body = body
        self.headers = headers if headers is not None else []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = self.headers
        if self.status != 304 and self.status != 204:
            headers = [*headers, (b"content-length", str(len(self.body)).encode())]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        body = b"" if scope.get("method") == "HEAD" or self.status in (204, 304) else self.body
        await send({"type": "http.response.body", "body": body})


def json_response(status: int, data: Any, headers: Headers | None = None) -> RawResponse:
    """A JSON response."""
    return RawResponse(status, _json.encode(data), [JSON_TYPE, *(headers or [])])


def error_response(exc: ServiceError) -> RawResponse:
    """The ``{"error": ...}`` response of a ServiceError."""
    return json_response(exc.status, exc.body(), encode_headers(exc.headers))


async def _start_200(scope: Any, send: Any, headers: Headers, size: int) -> bool:
    """Send a 200 start with ``Content-Length: size``; for HEAD also the (empty) body.

    True when the caller should now send the body, False when the response is complete.
    """
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [*headers, (b"content-length", str(size).encode())],
        }
    )
    if scope.get("method") == "HEAD":
        await send({"type": "http.response.body", "body": b""})
        return False
    return True


class FileResponse:
    """Streams an open blob of known size; small files go out in one ``send``."""

    __slots__ = ("file", "headers", "size")

    def __init__(self, file: BinaryIO, size: int, headers: Headers) -> None:
        self.file = file
        self.size = size
        self.headers = headers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        fd = self.file.fileno()
        try:
            if not await _start_200(scope, send, self.headers, self.size):
                return
            remaining = self.size
            if remaining <= SMALL_FILE:
                data = os.pread(fd, remaining, 0)
                await send({"type": "http.response.body", "body": data})
                return
            offset = 0
            while remaining > 0:
                data = os.pread(fd, min(FILE_CHUNK, remaining), offset)
                if not data:
                    raise OSError("blob shorter than recorded")
                offset += len(data)
                remaining -= len(data)
                await send({"type": "http.response.body", "body": data, "more_body": remaining > 0})
        finally:
            self.file.close()


class ChunksResponse:
    """Streams chunks (decrypted archives, object-store blobs) of known total size.

    ``in_thread``: producing a chunk blocks (network reads), so each is pulled in a worker thread.
    """

    __slots__ = ("chunks", "close", "headers", "in_thread", "size")

    def __init__(
        self, chunks: Iterator[bytes], size: int, headers: Headers, close: Any, *, in_thread: bool = False
    ) -> None:
        self.chunks = chunks
        self.size = size
        self.headers = headers
        self.close = close
        self.in_thread = in_thread

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            if not await _start_200(scope, send, self.headers, self.size):
                return
            chunks = self.chunks
            while True:
                if self.in_thread:
                    chunk = await anyio.to_thread.run_sync(next, chunks, None)
                else:
                    chunk = next(chunks, None)
                if chunk is None:
                    break
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            self.close()
