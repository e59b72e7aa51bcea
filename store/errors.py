"""Errors that carry an HTTP status; raised by the service layer, rendered by the app."""

from __future__ import annotations

from typing import Any

# How long a client waits before retrying a request the storage could not serve (a bucket gone).
STORAGE_RETRY_AFTER_SECONDS = 30


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


def storage_unavailable() -> ServiceError:
    """The 503 for a request the storage cannot serve now: the bucket (or the users and sharing
    documents in it) cannot be reached. The client retries after ``Retry-After``."""
    return ServiceError(
        503, "the store cannot reach its storage (object store bucket); retry later",
        extra={"code": "storage_unavailable"}, headers={"Retry-After": str(STORAGE_RETRY_AFTER_SECONDS)},
    )
