"""Errors that carry an HTTP status; raised by the service layer, rendered by the app."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """A refusal the client should see: ``status`` plus ``{"error": message, **extra}``."""

    def __init__(self, status: int, message: str, *, extra: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra or {}
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        return {"error": self.message, **self.extra}
