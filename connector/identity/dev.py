"""Development mode: everyone is one fixed local user. Never for a real deployment."""

from __future__ import annotations

from connector.identity.base import Identity
from connector.webapp.i18n import N_

DEV_SUBJECT = "dev:local"
DEV_WARNING = N_(
    "DEVELOPMENT MODE: every sign-in becomes the same local user without any check. "
    "Never expose this connector to anyone else."
)


class DevProvider:
    """Signs every request in as ``dev:local`` with the configured store token."""

    kind = "dev"
    mode = "page"

    def __init__(self, store_token: str | None) -> None:
        self._store_token = store_token or ""

    async def sign_in(self, token: str | None, client_address: str | None = None) -> Identity:
        """The fixed local identity, whatever was typed."""
        return Identity(subject=DEV_SUBJECT, store_credential=self._store_token, renewal_secret="")

    async def renew(self, subject: str, renewal_secret: str) -> Identity:
        """The same fixed identity."""
        return await self.sign_in(None)

    async def aclose(self) -> None:
        """Nothing to release."""
