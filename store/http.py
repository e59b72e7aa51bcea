"""Minimal ASGI responses for the hot paths (JSON, empty, archives).

Route handlers return these objects directly (Litestar passes ASGI apps through), which
keeps per-request work small: one header list, one or two ``send`` calls. Each response
knows its ``status`` and ``send_to`` returns the body bytes it sent, so the store's front
door (store.app) can record metrics without wrapping ``send``. A plain archive on local
disk goes out as one body: small ones read in one ``pread``, large ones as a view of a
read-only memory map of the immutable blob, which the server writes to the socket
straight from the page cache (no copy in Python, no per-chunk buffers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio.to_thread
import msgspec

from store.errors import ServiceError

_json = msgspec.json.Encoder()
JSON_TYPE = (b"content-type", b"application/json")
GZIP_TYPE = (b"content-type", b"application/gzip")

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
        await self.send_to(scope, send)

    async def send_to(self, scope: Any, send: Any) -> int:
        """Send the response; returns the body bytes sent."""
        status = self.status
        headers = self.headers
        if status == 304 or status == 204:
            body = b""
        else:
            headers = [*headers, (b"content-length", str(len(self.body)).encode())]
            body = b"" if scope["method"] == "HEAD" else self.body
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return len(body)


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
    if scope["method"] == "HEAD":
        await send({"type": "http.response.body", "body": b""})
        return False
    return True


class FileResponse:
    """A complete archive body (``store.storage.local.read_blob``) in one ``send``."""

    __slots__ = ("body", "headers")

    status = 200

    def __init__(self, body: bytes | memoryview, headers: Headers) -> None:
        self.body = body
        self.headers = headers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.send_to(scope, send)

    async def send_to(self, scope: Any, send: Any) -> int:
        """Send the response; returns the body bytes sent."""
        body, self.body = self.body, b""  # drop our reference: the server keeps what it still has to write
        if not await _start_200(scope, send, self.headers, len(body)):
            return 0
        await send({"type": "http.response.body", "body": body})
        return len(body)


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

    status = 200

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.send_to(scope, send)

    async def send_to(self, scope: Any, send: Any) -> int:
        """Send the response; returns the body bytes sent."""
        sent = 0
        try:
            if not await _start_200(scope, send, self.headers, self.size):
                return 0
            chunks = self.chunks
            while True:
                if self.in_thread:
                    chunk = await anyio.to_thread.run_sync(next, chunks, None)
                else:
                    chunk = next(chunks, None)
                if chunk is None:
                    break
                if chunk:
                    sent += len(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return sent
        finally:
            self.close()
