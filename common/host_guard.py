"""Answer only for our own host names: the defence against DNS rebinding.

A page on another name (``evil.example``) can make that name resolve to this
server's address (127.0.0.1 on a developer's machine): the browser then treats the
server as the page's own origin, sends it requests with ``Host: evil.example`` and
reads the answers. A server that answers only for the names it is known by (its
public URL's host, names the operator adds, and the loopback names, which no other
site can own) leaves such a page nothing to read: every other ``Host`` gets
``421 Misdirected Request``. The health checks (``/health``...) answer for any name:
container and balancer probes address a server by its internal name, and say
nothing about anyone.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("common.host_guard")

_EXEMPT = ("/health",)


def host_name(value: str) -> str | None:
    """The lower-case host name of a ``Host`` value or URL netloc (port, brackets and trailing dot removed)."""
    value = value.strip().lower()
    if not value or any(ch in value for ch in "/@ \t\\"):
        return None
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 1 else None
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".") or None


def is_loopback_name(name: str) -> bool:
    """``localhost`` (and ``*.localhost``, RFC 6761) or a loopback IP address."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AllowedHosts:
    """The host names a server answers for (loopback names always)."""

    names: frozenset[str]

    @classmethod
    def of(cls, urls: Iterable[str | None] = (), hosts: Iterable[str] = ()) -> AllowedHosts:
        """From public URLs (their hosts) and host names (``name`` or ``name:port``)."""
        names = {host_name(urlsplit(url).netloc) for url in urls if url}
        names |= {host_name(host) for host in hosts if host}
        return cls(frozenset(name for name in names if name))

    def allows(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` header is for us (a request without one is)."""
        if host is None:
            return True
        name = host_name(host)
        return name is not None and (name in self.names or is_loopback_name(name))


def host_guard(app: Any, allowed: AllowedHosts, refusal: str) -> Any:
    """An ASGI layer answering 421 with ``refusal`` (one line, the host never echoed) to other hosts."""
    body = (refusal + "\n").encode("utf-8")

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and not scope.get("path", "").startswith(_EXEMPT):
            hosts = [value for key, value in scope.get("headers", []) if key.lower() == b"host"]
            host = hosts[0].decode("latin-1") if len(hosts) == 1 else None
            if len(hosts) > 1 or not allowed.allows(host):
                log.info("request for another host name refused", extra={"path": scope.get("path"), "status": 421})
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send({"type": "http.response.start", "status": 421, "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                    (b"cache-control", b"no-store"), (b"connection", b"close")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded
