"""What every identity provider gives the authorization server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class ProviderUnavailable(Exception):
    """The provider (or the store) could not be asked right now; try again later."""


class ProviderRefused(Exception):
    """The provider says no: wrong token, user removed, session revoked."""


class ProviderThrottled(ProviderRefused):
    """The store refuses to check more tokens from this address for now (429).

    A refusal, not an outage: it counts as a wrong token, so an attacker the store
    has blocked does not get free retries.
    """


@dataclass(frozen=True)
class Identity:
    """A signed-in user as the connector sees them.

    ``subject`` is stable per user (``static:<user id>``, ``oidc:<iss>|<sub>``,
    ``dev:local``); ``store_credential`` is the bearer the connector presents to
    the store; ``renewal_secret`` is what the provider needs to renew the
    identity later (sealed at rest); ``credential_expires_at`` bounds access
    tokens when the store credential itself expires (an ID token).
    """

    subject: str
    store_credential: str
    renewal_secret: str
    credential_expires_at: float | None = None


@dataclass(frozen=True)
class RedirectStart:
    """Where to send the browser, and what to keep for the callback."""

    url: str
    state: str
    keep: dict[str, Any]


class IdentityProvider(Protocol):
    """The operations the authorization server needs from a provider.

    ``kind`` is ``static``, ``oidc`` or ``dev``; ``mode`` is ``page`` (the
    connector's own sign-in page completes the sign-in) or ``redirect`` (the
    browser goes to an issuer and comes back to /oidc/callback).
    """

    kind: str
    mode: str

    async def renew(self, subject: str, renewal_secret: str) -> Identity:
        """A fresh identity for a refresh; ProviderUnavailable or ProviderRefused."""
        ...

    async def aclose(self) -> None:
        """Release network clients."""
        ...


class PageProvider(IdentityProvider, Protocol):
    """A provider whose sign-in completes on the connector's page."""

    async def sign_in(self, token: str | None, client_address: str | None = None) -> Identity:
        """The identity for what the person typed from ``client_address``; ProviderRefused
        (ProviderThrottled when the store is limiting that address) or ProviderUnavailable."""
        ...


class RedirectProvider(IdentityProvider, Protocol):
    """A provider whose sign-in happens at an external issuer."""

    async def start(self, callback_url: str) -> RedirectStart:
        """The issuer URL to send the browser to, and what to keep for the callback."""
        ...

    async def finish(self, code: str, callback_url: str, keep: dict[str, Any]) -> Identity:
        """Exchange the callback's code; ProviderUnavailable or ProviderRefused."""
        ...
