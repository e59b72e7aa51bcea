"""HTTP facts about a request the connector needs: its external base URL and bearer token.

The base URL (issuer, resource ``<base>/mcp``) comes from ``CONNECTOR_PUBLIC_URL``
when set, else from the request's scheme and Host, trusting
``X-Forwarded-Proto`` / ``X-Forwarded-Host`` only when the peer is a configured
proxy. ``X-Forwarded-Prefix`` is never read, even from a trusted proxy: proxies set
those two themselves, but pass a client's own ``X-Forwarded-Prefix`` on (Caddy, nginx,
unless told otherwise), so anyone could choose the path of the issuer and endpoints in
the OAuth metadata; and the documents RFC 9728 and RFC 8414 place at the domain's root
arrive with no prefix at all. A path comes from the public URL only.
Plain functions over the ASGI scope, so any route can use them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from common.limits.address import TrustedProxies

log = logging.getLogger("connector.http")
_prefix_noted = False  # the warning about X-Forwarded-Prefix, once per process

# A Host value we are willing to echo into URLs: name or address, optional port.
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$")


@lru_cache(maxsize=32)
def _proxies(entries: tuple[str, ...]) -> TrustedProxies:
    return TrustedProxies.parse(entries)


def is_trusted_proxy(peer: str | None, entries: Iterable[str]) -> bool:
    """True when ``peer`` (an IP address) belongs to a configured proxy network
    (CONNECTOR_TRUST_PROXY, read as the store reads its own: ``TrustedProxies``)."""
    return bool(peer) and peer in _proxies(tuple(entries))


def header(scope: dict[str, Any], name: str) -> str | None:
    """The first value of a request header (latin-1 decoded), or None."""
    wanted = name.lower().encode("latin-1")
    for key, value in scope.get("headers", ()):
        if key.lower() == wanted:
            return value.decode("latin-1")
    return None


def peer_address(scope: dict[str, Any]) -> str | None:
    """The TCP peer's address."""
    client = scope.get("client")
    return client[0] if client else None


def request_base_url(scope: dict[str, Any], public_url: str | None, trust_proxy: Iterable[str]) -> str:
    """The connector's external base URL as seen by this request (no trailing slash)."""
    if public_url:
        return public_url.rstrip("/")
    scheme = scope.get("scheme", "http")
    host = header(scope, "host")
    if is_trusted_proxy(peer_address(scope), trust_proxy):
        forwarded_proto = (header(scope, "x-forwarded-proto") or "").split(",")[0].strip().lower()
        if forwarded_proto in ("http", "https"):
            scheme = forwarded_proto
        forwarded_host = (header(scope, "x-forwarded-host") or "").split(",")[0].strip()
        if forwarded_host and _HOST_RE.match(forwarded_host):
            host = forwarded_host
        if not _prefix_noted and (prefix := header(scope, "x-forwarded-prefix")):
            _note_prefix(prefix)
    if scheme not in ("http", "https"):
        scheme = "https" if scheme == "wss" else "http"
    if not host or not _HOST_RE.match(host):
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scheme}://{host}"


def _note_prefix(prefix: str) -> None:
    """Say once that a proxy sends a path the connector's URLs will lack (see the module docstring)."""
    global _prefix_noted
    _prefix_noted = True
    log.warning("a proxy sends X-Forwarded-Prefix %r, which is not read (through most proxies a client can "
                "set it, and choose the paths in the OAuth metadata): the connector's URLs lack that path. "
                "Set CONNECTOR_PUBLIC_URL to its public URL, path included (https://host/brain; "
                "docs/self-hosting.md)", prefix[:100])


def last_segment_as_sent(scope: dict[str, Any]) -> str:
    """The last segment of the request's path as the client wrote it (still percent-encoded),
    from the ASGI ``raw_path``; "" when the server gives none."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes):
        return ""
    # (Some servers and test clients put the query in raw_path too: only the path is kept.)
    return raw.decode("latin-1").partition("?")[0].rpartition("/")[2]


def bearer_token(scope: dict[str, Any]) -> str | None:
    """The token of an ``Authorization: Bearer`` header, or None."""
    value = header(scope, "authorization")
    if not value:
        return None
    kind, _, token = value.strip().partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def is_mcp_path(path: str) -> bool:
    """``/mcp`` or the URL of one brain, ``/mcp/brains/{brain}``."""
    return path == "/mcp" or path.startswith("/mcp/brains/")


def path_segment(value: Any) -> str:
    """``value`` as one URL path segment: every reserved character percent-encoded.

    Memory ids come from archives anyone may have written: an id such as
    ``../../signout`` or ``x?y#z`` must stay inside its own segment of a link.
    """
    encoded = quote(str(value), safe="")
    # "." and ".." are dot segments however they are encoded: encode their "%" once more.
    return encoded.replace(".", "%252E") if encoded in (".", "..") else encoded
