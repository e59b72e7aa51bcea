"""What one client may cost a server before its request reaches the app: both servers use this.

uvicorn alone lets a client tie up a server without a proxy in front: its httptools
protocol has no limit on the size of a request head, and the cost of one grows with the
square of its size (here 8 / 16 / 32 MiB took 0.05 / 0.22 / 0.76 s of CPU; issue 15 saw
5.7 s for 64 MiB and 40 s for 160 MiB, all on the event loop), no timeout while a head or a body trickles in (300 connections
sending a header byte now and then were all still open after 80 s), and no cap on open
connections. ``guarded_protocol`` is uvicorn's protocol with those bounds
(:class:`HttpLimits`):

* **head size**: bytes received before a request's headers are complete are counted;
  past ``max_header_bytes`` the client gets ``431`` and the connection is closed. The
  parser never holds more than the limit plus one read of the socket.
* **head time**: a request's head must be complete ``header_timeout_s`` after its first
  byte (for a new connection: after it was accepted); else ``408`` and close.
* **body time**: a request body may pause for at most ``body_timeout_s``, and after that
  long it must have averaged ``body_min_rate`` bytes/s (Apache's ``mod_reqtimeout``
  rule: the deadline is ``start + timeout + received / rate``). Time during which the
  server itself stopped reading (the app is busy with the body already received) is not
  counted. A client that stops reading a response for ``body_timeout_s`` is cut off too.
* **connections**: beyond ``max_connections`` open connections, a new one is answered
  ``503`` (with ``Retry-After``) and closed at once.

Deadlines are checked by one timer per event loop (``_Sweeper``) that walks the open
connections once a second (a quarter of the shortest timeout if less) and stamps the
times itself; a request only sets a phase and counters, so the fast paths pay next to
nothing (a deadline may pass up to one tick late).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HttpLimits", "guarded_protocol"]

# What a connection is doing, as far as its limits go: receiving a request's head or body,
# answering it (or idle after the answer), or closed by us.
_HEAD, _BODY, _ANSWER, _CLOSED = range(4)


@dataclass(frozen=True)
class HttpLimits:
    """Bounds on what one client connection may hold (see the module doc); 0 turns a bound off."""

    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    body_min_rate: int = 1024
    max_connections: int = 512

    def __post_init__(self) -> None:
        for name in ("max_header_bytes", "header_timeout_s", "body_timeout_s", "body_min_rate", "max_connections"):
            if getattr(self, name) < 0:
                raise ValueError(f"HttpLimits.{name} must not be negative")

    @classmethod
    def from_settings(cls, settings: Any) -> HttpLimits:
        """From a server's settings object: its ``http_max_header_kb``, ``http_header_timeout_s``,
        ``http_body_timeout_s``, ``http_body_min_bytes_per_s`` and ``http_max_connections``."""
        return cls(
            max_header_bytes=settings.http_max_header_kb * 1024,
            header_timeout_s=settings.http_header_timeout_s,
            body_timeout_s=settings.http_body_timeout_s,
            body_min_rate=settings.http_body_min_bytes_per_s,
            max_connections=settings.http_max_connections,
        )

    @property
    def tick_s(self) -> float:
        """How often deadlines are checked: a quarter of the shortest timeout, at most every second."""
        timeouts = [t for t in (self.header_timeout_s, self.body_timeout_s) if t > 0]
        return min([1.0] + [t / 4 for t in timeouts])


def _response(status: int, reason: str, message: str, extra: bytes = b"") -> bytes:
    body = message.encode()
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
        b"connection: close\r\n%s\r\n%s" % (status, reason.encode(), len(body), extra, body)
    )


_TOO_LARGE = _response(431, "Request Header Fields Too Large", "request headers too large\n")
_TIMEOUT = _response(408, "Request Timeout", "request headers not received in time\n")
_BUSY = _response(503, "Service Unavailable", "too many open connections; try again\n", b"retry-after: 1\r\n")


def _head_size(url: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    """Bytes of a parsed request head, near enough (the request line's method and version aside)."""
    return len(url) + sum(len(name) + len(value) + 4 for name, value in headers)


async def _header_too_large(scope: Any, receive: Any, send: Any) -> None:
    """The ASGI answer to a request whose head is over the limit."""
    await send({
        "type": "http.response.start",
        "status": 431,
        "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")],
    })
    await send({"type": "http.response.body", "body": b"request headers too large\n"})


class _Sweeper:
    """One timer per event loop that checks every guarded connection's deadline."""

    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Sweeper] = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop, connections: set[Any], tick: float) -> None:
        self._loop = loop
        self._connections = connections
        self._tick = tick
        self._last = loop.time()
        loop.call_later(tick, self._run)

    @classmethod
    def ensure(cls, loop: asyncio.AbstractEventLoop, connections: set[Any], tick: float) -> None:
        """Start this loop's sweeper unless it runs already."""
        if loop not in cls._by_loop:
            cls._by_loop[loop] = cls(loop, connections, tick)

    def _run(self) -> None:
        now = self._loop.time()
        elapsed, self._last = now - self._last, now
        for protocol in list(self._connections):
            check = getattr(protocol, "guard_check", None)
            if check is not None:
                check(now, elapsed)
        if not self._loop.is_closed():
            self._loop.call_later(self._tick, self._run)


def guarded_protocol(limits: HttpLimits, base: type[HttpToolsProtocol] | None = None) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol (or ``base``, a subclass of it) bounded by ``limits``."""
    if base is None:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base  # noqa: N813

    max_header = limits.max_header_bytes or math.inf
    header_timeout = limits.header_timeout_s or math.inf
    body_timeout = limits.body_timeout_s or math.inf
    min_rate = limits.body_min_rate
    max_connections = limits.max_connections or math.inf
    tick = limits.tick_s

    class GuardedHttpToolsProtocol(base):  # type: ignore[misc, valid-type]
        # Per request only a phase and counters change; the sweep stamps the times (to
        # its tick's precision), so the fast paths make no clock calls.
        _phase = _HEAD
        _since = -1.0  # when the phase began (head) or the body started; < 0: not stamped yet
        _header_bytes = 0  # received since the last request ended (or the connection opened)
        _body_bytes = 0
        _body_seen = 0  # _body_bytes at the previous sweep
        _body_last = 0.0  # when body bytes last arrived (to the sweep's precision)
        _stalled_since = math.inf  # when writing to the client last got stuck

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                self._refuse(_BUSY)
                return
            self._since = self.loop.time()  # a new connection's head is due from now
            _Sweeper.ensure(self.loop, self.connections, tick)

        def data_received(self, data: bytes) -> None:
            phase = self._phase
            if phase == _BODY:
                self._body_bytes += len(data)
            elif phase != _CLOSED:
                if phase == _ANSWER and (self.cycle is None or self.cycle.response_complete):
                    self._phase = _HEAD  # the next request begins (or idle bytes come)
                    self._since = -1.0
                # Counted while answering too: a pipelined head arriving meanwhile is bounded alike.
                self._header_bytes += len(data)
            super().data_received(data)
            phase = self._phase
            if phase != _BODY and phase != _CLOSED and self._header_bytes > max_header:
                self._refuse(_TOO_LARGE)

        def on_headers_complete(self) -> None:
            self._phase = _BODY
            self._since = -1.0
            self._body_bytes = 0
            # A head that came in whole within one read may still be too large (what was
            # counted may include body bytes: measure the head itself, only then).
            if self._header_bytes > max_header and _head_size(self.url, self.headers) > max_header:
                app, self.app = self.app, _header_too_large  # this request only; nothing else runs
                try:
                    super().on_headers_complete()
                finally:
                    self.app = app
                self.cycle.keep_alive = False
                return
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._phase = _ANSWER  # until the response is complete: the app's time, no deadline
            self._header_bytes = 0
            super().on_message_complete()

        def guard_check(self, now: float, elapsed: float) -> None:
            """Close the connection if it is past a deadline (called by the sweeper)."""
            phase = self._phase
            if phase == _CLOSED:
                return
            if phase == _HEAD:
                if self._since < 0:
                    self._since = now
                elif now > self._since + header_timeout:
                    self._refuse(_TIMEOUT if self._header_bytes else b"")
                    return
            elif phase == _BODY:
                if self._since < 0:
                    self._since = self._body_last = now
                    self._body_seen = self._body_bytes
                elif self.flow.read_paused:
                    # We stopped reading (the app has not taken what came): not the client's time.
                    self._since += elapsed
                    self._body_last = now
                elif self._body_bytes != self._body_seen:
                    self._body_seen = self._body_bytes
                    self._body_last = now
                # Apache mod_reqtimeout's rule: due at start + timeout + received / rate, and
                # never more than a timeout after the last bytes.
                due = min(self._body_last, self._since + self._body_bytes / min_rate if min_rate else math.inf)
                if now > due + body_timeout:
                    self._close()
                    return
            if self.flow.write_paused:
                # The client stopped reading what we send: free the connection after as long.
                if self._stalled_since == math.inf:
                    self._stalled_since = now
                elif now - self._stalled_since > body_timeout:
                    self._close()
            else:
                self._stalled_since = math.inf

        def _refuse(self, answer: bytes) -> None:
            """Answer (only if no response is under way on this connection) and close."""
            cycle = self.cycle
            if answer and (cycle is None or cycle.response_complete):
                self.transport.write(answer)
            self._close()

        def _close(self) -> None:
            self._phase = _CLOSED  # no more checks or counting; connection_lost follows
            self.transport.close()

    return GuardedHttpToolsProtocol
