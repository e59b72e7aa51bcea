"""The ``static`` provider: the person signs in with their store token (``bst_...``) or
with an agent key (``bsk_...``, see docs/sharing.md).

The token is checked with the store's ``GET /auth/me``: 401/403 means refused,
429 means the store is limiting the person's address (also a refusal, so it is
never a free retry), anything else that is not a clean 200 means the store could
not be asked. A sign-in check names the person's address in ``X-Forwarded-For``:
with the connector among the store's trusted proxies (``STORE_TRUST_PROXY``) the
store counts wrong tokens against that address, not against the connector, whose
own requests carry every signed-in user's traffic. The
token itself is both the store credential and the renewal secret, so a refresh
re-checks it and a rotated or removed user loses the session.
"""

from __future__ import annotations

import logging

import httpx

from common.limits import parse_ip
from connector.identity.base import Identity, ProviderRefused, ProviderThrottled, ProviderUnavailable

log = logging.getLogger("connector.identity")

MAX_TOKEN_CHARS = 4096
_ME_MAX_BYTES = 64 * 1024


def subject_for(user_id: str, token: str) -> str:
    """The connector subject of a sign-in: ``static:<user id>`` for the user's own token;
    an agent key is a subject of its own (``static:<user id>/key:<its 12-character prefix>``,
    the prefix the store lists it by), so its sessions never share the user's working
    copies, brain list or chosen brain: it sees exactly the key's brains, with its scope."""
    if token.startswith("bsk_"):
        return f"static:{user_id}/key:{token[:12]}"
    return f"static:{user_id}"


class StaticTokenProvider:
    """Checks store tokens against one explicitly configured store."""

    kind = "static"
    mode = "page"

    def __init__(self, store_url: str, *, timeout_s: float = 10.0, client: httpx.AsyncClient | None = None) -> None:
        self._me_url = store_url.rstrip("/") + "/auth/me"
        self._client = client or httpx.AsyncClient(timeout=timeout_s, follow_redirects=False)
        self._owns_client = client is None

    async def sign_in(self, token: str | None, client_address: str | None = None) -> Identity:
        """The identity of the user ``token`` belongs to, typed by someone at ``client_address``."""
        token = (token or "").strip()
        if not token or len(token) > MAX_TOKEN_CHARS or any(ch.isspace() for ch in token) or not token.isascii():
            raise ProviderRefused("not a store token")
        address = parse_ip(client_address)
        user_id = await self._user_id(token, None if address is None else str(address))
        return Identity(subject=subject_for(user_id, token), store_credential=token, renewal_secret=token)

    async def renew(self, subject: str, renewal_secret: str) -> Identity:
        """Re-check the token; refused when it no longer names the same user."""
        try:
            identity = await self.sign_in(renewal_secret)
        except ProviderThrottled:
            # The store is busy limiting, which says nothing about the token: keep the session.
            raise ProviderUnavailable("the store is rate limiting; try again") from None
        if identity.subject != subject:
            raise ProviderRefused("the token now belongs to another user")
        return identity

    def _unavailable(self, reason: str) -> ProviderUnavailable:
        """The error for a token the store could not check, logged with why (never the token):
        the person sees only "cannot be reached", the operator needs the reason."""
        log.warning("a sign-in could not be checked at the store: %s", reason, extra={"url": self._me_url})
        return ProviderUnavailable(reason)

    async def _user_id(self, token: str, forwarded_for: str | None = None) -> str:
        headers = {"Authorization": f"Bearer {token}"}
        if forwarded_for is not None:
            # A parsed address only: nothing the person sent reaches the header verbatim.
            headers["X-Forwarded-For"] = forwarded_for
        try:
            response = await self._client.get(self._me_url, headers=headers)
        except httpx.HTTPError as exc:
            raise self._unavailable(f"store unreachable at {self._me_url} ({type(exc).__name__}: {exc})") from None
        if response.status_code in (401, 403):
            raise ProviderRefused("the store did not accept the token")
        if response.status_code == 429:
            raise ProviderThrottled("the store is limiting wrong tokens from this address")
        if response.status_code != 200 or len(response.content) > _ME_MAX_BYTES:
            raise self._unavailable(f"store answered {response.status_code} to GET {self._me_url}")
        try:
            user = response.json().get("user") or {}
            user_id = user.get("id")
        except (ValueError, AttributeError):
            raise self._unavailable("store answered something that is not a user") from None
        if not isinstance(user_id, str) or not user_id or len(user_id) > 255:
            raise self._unavailable("store answered a user without an id")
        return user_id

    async def aclose(self) -> None:
        """Close the HTTP client if this provider made it."""
        if self._owns_client:
            await self._client.aclose()
