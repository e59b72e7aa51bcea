"""The scopes the connector grants: shared by registration, /authorize and the metadata documents."""

from __future__ import annotations

SCOPES: tuple[str, ...] = ("brain.read", "brain.write")


def known_scopes(raw: str | None) -> str:
    """The scopes in ``raw`` (space-separated) that the connector grants, once each, in its order."""
    asked = set((raw or "").split())
    return " ".join(scope for scope in SCOPES if scope in asked)
