"""Which redirect URIs a client may register, and loopback detection."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

MAX_URI_LENGTH = 2000
# Host names made of the characters DNS allows (or an IPv6 literal): nothing that could
# break out of a header or a Content-Security-Policy source expression.
_HOST = re.compile(r"[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\]")


def is_loopback_host(host: str | None) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1)."""
    if not host:
        return False
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def redirect_uri_problem(uri: str) -> str | None:
    """Why ``uri`` cannot be a redirect URI, or None when it can.

    Allowed: an absolute ``https`` URL, or ``http`` on a loopback host (native
    apps); never a fragment, user info, or anything that is not a URL.
    """
    if not isinstance(uri, str) or not uri:
        return "redirect URI must be a non-empty string"
    if len(uri) > MAX_URI_LENGTH:
        return "redirect URI is too long"
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in uri):
        return "redirect URI contains spaces or control characters"
    try:
        parts = urlsplit(uri)
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        return "redirect URI is not a valid URL"
    if parts.fragment or "#" in uri:
        return "redirect URI must not contain a fragment"
    if parts.username is not None or parts.password is not None:
        return "redirect URI must not contain user information"
    if not hostname:
        return "redirect URI must be absolute, with a host"
    netloc = parts.netloc
    host_only = netloc[: netloc.find("]") + 1] if netloc.startswith("[") else netloc.split(":", 1)[0]
    if not _HOST.fullmatch(host_only):
        return "redirect URI host has characters a host name cannot have"
    scheme = parts.scheme.lower()
    if scheme == "https":
        return None
    if scheme == "http":
        if is_loopback_host(hostname):
            return None
        return "http redirect URIs are allowed only on a loopback host"
    return "redirect URI must use https (or http on a loopback host)"
