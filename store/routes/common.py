"""Helpers shared by the route modules."""

from __future__ import annotations

from typing import Any

from litestar import Request

from store.context import AppContext


def ctx(request: Request[Any, Any, Any]) -> AppContext:
    """The per-process AppContext."""
    return request.app.state.ctx  # type: ignore[no-any-return]


def header(scope: Any, name: bytes) -> str | None:
    """The first value of a request header (lower-case name), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")  # type: ignore[no-any-return]
    return None


def query_flag(value: str | None) -> bool:
    """Interpret ``?force=true`` style flags."""
    return value is not None and value.strip().lower() in {"1", "true", "yes", "on"}
