"""Request checks of the web app: which session, same-origin posts, cookie attributes.

CSRF has two layers. Every state-changing request carries a token in its form
(the session's secret; before sign-in, a double-submit value also set as a
cookie) compared in constant time, and a browser's own ``Origin`` and
``Sec-Fetch-Site`` headers, when sent, must say the request came from this app.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from litestar.datastructures import Cookie

from connector.mcp.http import request_base_url
from connector.webapp.sessions import WebSession, WebSessions


@dataclass(frozen=True)
class Site:
    """Where the app lives for one request: its origin, its path, whether it is https."""

    origin: str
    root: str  # path of the app, e.g. "/app" (or "/prefix/app" behind a path-prefixing proxy)
    secure: bool

    @property
    def session_cookie(self) -> str:
        """``__Host-`` cookies are bound to this exact origin; browsers allow them over https only."""
        return "__Host-brain-app" if self.secure else "brain-app"

    @property
    def signin_cookie(self) -> str:
        """The double-submit value of the sign-in form."""
        return "__Host-brain-app-signin" if self.secure else "brain-app-signin"

    def cookie(self, name: str, value: str, max_age: int) -> Cookie:
        """An HttpOnly, SameSite=Lax cookie for the whole origin (Secure over https)."""
        return Cookie(key=name, value=value, path="/", max_age=max_age, httponly=True, secure=self.secure,
                      samesite="lax")


def site_of(scope: Any, public_url: str | None, trust_proxy: tuple[str, ...]) -> Site:
    """The app's place as seen by this request (``CONNECTOR_PUBLIC_URL`` wins)."""
    base = request_base_url(scope, public_url, trust_proxy)
    parts = urlsplit(base)
    return Site(origin=f"{parts.scheme}://{parts.netloc}", root=parts.path.rstrip("/") + "/app",
                secure=parts.scheme == "https")


def same_origin(headers: Any, site: Site) -> bool:
    """False when the browser says the request came from another site."""
    fetch_site = (headers.get("sec-fetch-site") or "").lower()
    if fetch_site and fetch_site not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    if origin == "null":
        # Sent under a no-referrer policy (or from a sandboxed frame): only the browser's own
        # Sec-Fetch-Site can then say the request is same-origin.
        return fetch_site == "same-origin"
    return not origin or origin.rstrip("/") == site.origin


def tokens_match(presented: str | None, expected: str | None) -> bool:
    """Constant-time equality of two non-empty tokens."""
    if not presented or not expected:
        return False
    return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


def new_signin_token() -> str:
    """A fresh double-submit value for the sign-in form."""
    return secrets.token_urlsafe(24)


async def session_of(cookies: Any, site: Site, sessions: WebSessions) -> tuple[str | None, WebSession | None]:
    """The cookie value and its live session (None when signed out), read off the event loop."""
    value = cookies.get(site.session_cookie)
    return value, await sessions.find(value)


# Pages a sign-in never returns to: the sign-in itself, its callback, signing out.
_NO_RETURN = ("/signin", "/signout", "/oidc")
MAX_RETURN_CHARS = 2000


def return_target(site: Site, target: str | None) -> str | None:
    """``target`` when it is a page of this app to go back to after signing in, else None.

    Only a path under the app's own root (``/app/memory/<id>?q=...``) passes: no scheme or
    host, no ``//`` or backslash a browser could read as another host, no dot segments, no
    characters outside printable ASCII, not the sign-in pages. So the ``next`` parameter of
    the sign-in page cannot send anyone elsewhere (an open redirect)."""
    if not target or len(target) > MAX_RETURN_CHARS:
        return None
    if not all("\x21" <= ch <= "\x7e" for ch in target) or "\\" in target or "//" in target:
        return None
    path = target.split("?", 1)[0].split("#", 1)[0]
    if path != site.root and not path.startswith(site.root + "/"):
        return None
    rest = path[len(site.root):]
    segments = [segment.lower().replace("%2e", ".") for segment in rest.split("/")]
    if any(segment in (".", "..") for segment in segments):
        return None
    if any(rest == page or rest.startswith(page + "/") for page in _NO_RETURN):
        return None
    return target
