"""Helpers shared by the route modules."""

from __future__ import annotations

from typing import Any

from litestar import Request

from store.auth.authenticate import Principal
from store.context import AppContext
from store.service import parse_brain_id


def ctx(request: Request[Any, Any, Any]) -> AppContext:
    """The per-process AppContext."""
    return request.app.state.ctx  # type: ignore[no-any-return]


async def authorized_brain(request: Request[Any, Any, Any], action: str) -> tuple[AppContext, Principal, str, str]:
    """(context, caller, brain id, creator id) once the caller may do ``action`` on the path's brain.

    Authenticates first, so a bad brain id is only reported to a caller the store knows.
    """
    c = ctx(request)
    p = await c.authenticate(request.scope)
    bid = parse_brain_id(request.path_params["brain_id"])
    return c, p, bid, c.sharing.authorize(p, bid, action)


def header(scope: Any, name: bytes) -> str | None:
    """The first value of a request header (lower-case name), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")  # type: ignore[no-any-return]
    return None


def query_flag(value: str | None) -> bool:
    """Interpret ``?force=true`` style flags."""
    return value is not None and value.strip().lower() in {"1", "true", "yes", "on"}
