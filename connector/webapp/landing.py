"""Pages for a person who lands where a program is expected: the connector's ``/``, an MCP
URL opened in a browser, and an unknown address under ``/app``.

Each says what the place is and where to go instead, in the person's language, instead of
the JSON a program gets. MCP clients never see these pages: they send no ``text/html`` in
``Accept`` (the MCP URL keeps answering them 401 with its ``WWW-Authenticate`` challenge).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response

from connector.i18n import N_, not_this_address
from connector.mcp.http import header, path_segment, request_base_url
from connector.webapp.guard import site_of
from connector.webapp.pages import page_headers, render


def wants_page(scope: dict[str, Any]) -> bool:
    """A browser asking to see an address (GET, HTML accepted, no bearer token), not a client."""
    accept = (header(scope, "accept") or "").lower()
    return scope.get("method") == "GET" and "text/html" in accept and header(scope, "authorization") is None


def _places(scope: dict[str, Any], settings: Any, brain: str | None = None) -> dict[str, Any]:
    base = request_base_url(scope, settings.public_url, tuple(settings.trust_proxy))
    mcp_url = f"{base}/mcp" + (f"/brains/{path_segment(brain)}" if brain else "")
    return {"root": site_of(scope, settings.public_url, tuple(settings.trust_proxy)).root, "mcp_url": mcp_url,
            "webapp": bool(settings.webapp), "session": None, "can_write": False, "sessions_on_disk": False}


def welcome_page(scope: dict[str, Any], settings: Any) -> Response[str]:
    """The connector's ``/``: what this is, the web app, how to connect an assistant."""
    return Response(render("welcome.html", **_places(scope, settings)), media_type="text/html; charset=utf-8",
                    headers=page_headers())


def assistants_page(scope: dict[str, Any], settings: Any, brain: str | None) -> bytes:
    """The body an MCP URL answers a browser with: the URL is for assistants, and how to use it."""
    return render("for_assistants.html", **_places(scope, settings, brain)).encode("utf-8")


def app_not_found(request: Request[Any, Any, Any], settings: Any, session: Any) -> Response[str]:
    """The web app's not-found page for an address under ``/app`` it has no page for."""
    not_this_address()
    places = _places(request.scope, settings)
    html = render("error.html", **{**places, "session": session, "can_write": session is not None
                                   and not session.read_only},
                  title=N_("Page not found"), message=N_("The web app has no page at this address."))
    return Response(html, status_code=404, media_type="text/html; charset=utf-8", headers=page_headers())
