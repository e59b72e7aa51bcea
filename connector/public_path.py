"""The connector served under a path of a shared domain (``CONNECTOR_PUBLIC_URL=https://host/brain``).

Every route keeps its own path (``/mcp``, ``/authorize``, ``/app``...); an ASGI layer (inside the
metrics layer, so ``/brain/metrics`` is never ``/metrics``) maps what a reverse proxy passes on:

- ``/brain/mcp`` to ``/mcp``: a proxy that keeps the path works like one that strips it;
- the well-known documents that RFC 9728 and RFC 8414 place at the domain's root for a URL
  with a path, ``/.well-known/oauth-protected-resource/brain/mcp[/brains/<b>]`` and
  ``/.well-known/oauth-authorization-server/brain``, to the documents of ``/mcp`` and of the
  issuer. MCP clients look there first (the SDK from the MCP URL alone).

The URLs the connector writes (issuer, endpoints, links, form actions, redirects) come from
the public URL itself (`connector.mcp.http.request_base_url`), so they carry the path already.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:  # the settings import this module: no web framework loaded for them
    from litestar.types import ASGIApp, Receive, Scope, Send

# The documents a client finds under "<name><path of the resource or issuer>".
WELL_KNOWN = ("/.well-known/oauth-protected-resource", "/.well-known/oauth-authorization-server")
# A path of plain segments (no percent-encoding, no dot segments, no empty segments).
_SEGMENT = re.compile(r"^[A-Za-z0-9_~-][A-Za-z0-9._~-]*$")
# The first names of the connector's own paths (its routes and /metrics; tests/ops/test_connector_under_a_path.py
# checks the list against the app). A public path may not begin with one: behind a proxy that strips
# ``/app``, ``/app/signin`` would be both the web app's page and ``/signin`` under the path.
OWN_NAMES = frozenset({"mcp", "app", "authorize", "token", "register", "revoke", "oidc", "health", "metrics"})


def public_path(public_url: str | None) -> str:
    """The path of ``public_url`` without its trailing slash: ``/brain``, or "" at a domain's root."""
    return urlsplit(public_url).path.rstrip("/") if public_url else ""


def path_problem(path: str) -> str | None:
    """Why ``path`` (a `public_path`) cannot be served under, or None."""
    segments = path.split("/")[1:]
    if any(not _SEGMENT.match(segment) or segment.strip(".") == "" for segment in segments):
        return "its path must be plain names separated by / (letters, digits, '-', '_', '.', '~'; no %-escapes)"
    if segments and segments[0] in OWN_NAMES:
        return f"its path cannot begin with /{segments[0]}, a path the connector serves itself (choose another, such as /brain)"
    return None


def local_path(path: str, prefix: str) -> str:
    """The connector's own path for ``path`` as requested under ``prefix`` (``path`` when it is not)."""
    if not prefix:
        return path
    if path == prefix or path.startswith(prefix + "/"):
        return path[len(prefix):] or "/"
    for name in WELL_KNOWN:
        if path == name + prefix or path.startswith(name + prefix + "/"):
            return name + path[len(name) + len(prefix):]
    return path


def served_under(app: ASGIApp, prefix: str) -> ASGIApp:
    """``app`` answering requests under ``prefix`` too (see the module's docstring); ``app`` itself when
    there is no prefix."""
    if not prefix:
        return app

    async def layer(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            path = local_path(scope["path"], prefix)
            if path != scope["path"]:
                # In place: the layers around this one (metrics, logs) name the route as served.
                scope["path"] = path
                raw: Any = scope.get("raw_path")
                if isinstance(raw, bytes):
                    sent = raw.decode("latin-1")
                    local = local_path(sent, prefix)
                    # A prefix written with %-escapes: the path as decoded, encoded again.
                    scope["raw_path"] = (local if local != sent else quote(path)).encode("latin-1")
        await app(scope, receive, send)

    return layer
