"""The ``oidc`` provider: sign-in at an organisation's OpenID Connect issuer.

/authorize sends the browser to the issuer (authorization code + PKCE S256 +
nonce + state); /oidc/callback exchanges the code and verifies the ID token
exactly as the store does (the store's own verifier, store/auth/oidc.py) plus
the nonce. The ID token is the store credential; the issuer's refresh token is
the renewal secret. An issuer that cannot be reached is "unavailable" (the
session is kept); an issuer that says no (invalid_grant, a token that no
longer verifies, another subject) is "refused" (the session ends).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import httpx

from connector.identity.base import Identity, ProviderRefused, ProviderUnavailable, RedirectStart
from connector.oauth.pkce import s256
from common.oidc import (
    Fetcher,
    OidcConfig,
    OidcRejected,
    OidcUnavailable,
    OidcVerifier,
    check_url,
    normalise_issuer,
)

FETCH_TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 256 * 1024
# Authorization parameters the operator's OIDC_AUTH_PARAMS may never override.
_PROTECTED_PARAMS = frozenset(
    {"response_type", "client_id", "redirect_uri", "scope", "state", "nonce", "code_challenge", "code_challenge_method"}
)


def subject_for(issuer: str, sub: str) -> str:
    """The connector's subject for an issuer's user."""
    return f"oidc:{issuer}|{sub}"


class OidcProvider:
    """Sign-in and renewal against one OpenID Connect issuer."""

    kind = "oidc"
    mode = "redirect"

    def __init__(
        self,
        *,
        issuer: str,
        client_id: str,
        client_secret: str | None = None,
        scopes: str = "openid email profile offline_access",
        auth_params: Mapping[str, str] | None = None,
        allowed_domains: tuple[str, ...] = (),
        allowed_emails: tuple[str, ...] = (),
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        # Same validation as the store (https unless loopback, public issuers need an allow-list).
        self._config = OidcConfig.create(issuer, client_id, allowed_domains, allowed_emails)
        self._client_id = client_id
        self._client_secret = client_secret
        scope_words = scopes.split()
        if "openid" not in scope_words:
            scope_words.insert(0, "openid")
        self._scopes = " ".join(scope_words)
        self._auth_params = {k: v for k, v in (auth_params or {}).items() if k not in _PROTECTED_PARAMS}
        self._verifier = OidcVerifier(self._config, transport=transport)
        self._discovery = Fetcher(FETCH_TIMEOUT_S, MAX_RESPONSE_BYTES, transport)
        self._http = httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False, transport=transport)
        self._endpoints: tuple[str, str] | None = None

    async def _endpoints_of_issuer(self) -> tuple[str, str]:
        """The authorization and token endpoints from the discovery document."""
        if self._endpoints is not None:
            return self._endpoints
        try:
            document = await self._discovery.get_json(self._config.issuer + "/.well-known/openid-configuration")
        except OidcUnavailable as exc:
            raise ProviderUnavailable(str(exc)) from None
        issuer = document.get("issuer")
        authorize = document.get("authorization_endpoint")
        token = document.get("token_endpoint")
        if not isinstance(issuer, str) or normalise_issuer(issuer) != self._config.issuer:
            raise ProviderUnavailable("discovery document names another issuer")
        if not isinstance(authorize, str) or not isinstance(token, str):
            raise ProviderUnavailable("discovery document lacks endpoints")
        try:
            check_url(authorize, "authorization_endpoint")
            check_url(token, "token_endpoint")
        except ValueError as exc:
            raise ProviderUnavailable(str(exc)) from None
        self._endpoints = (authorize, token)
        return self._endpoints

    async def start(self, callback_url: str) -> RedirectStart:
        """The issuer's authorization URL for a new sign-in."""
        authorize, _ = await self._endpoints_of_issuer()
        state = secrets.token_urlsafe(24)
        nonce = secrets.token_urlsafe(24)
        verifier = secrets.token_urlsafe(48)
        params = {
            **self._auth_params,
            "response_type": "code",
            "client_id": self._client_id,
            "redirect_uri": callback_url,
            "scope": self._scopes,
            "state": state,
            "nonce": nonce,
            "code_challenge": s256(verifier),
            "code_challenge_method": "S256",
        }
        separator = "&" if "?" in authorize else "?"
        return RedirectStart(url=authorize + separator + urlencode(params), state=state,
                             keep={"nonce": nonce, "verifier": verifier})

    async def finish(self, code: str, callback_url: str, keep: dict[str, Any]) -> Identity:
        """Exchange the callback's code and verify the ID token with its nonce."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": callback_url,
            "code_verifier": str(keep.get("verifier", "")),
        }
        answer = await self._token_request(form)
        return await self._identity(answer, nonce=str(keep.get("nonce", "")), previous_refresh="")

    async def renew(self, subject: str, renewal_secret: str) -> Identity:
        """A new ID token from the issuer's refresh token; the subject must not change."""
        refresh_token = _unpack(renewal_secret)
        if not refresh_token:
            raise ProviderRefused("the issuer granted no refresh token; sign in again")
        answer = await self._token_request({"grant_type": "refresh_token", "refresh_token": refresh_token})
        identity = await self._identity(answer, nonce=None, previous_refresh=refresh_token)
        if identity.subject != subject:
            raise ProviderRefused("the issuer answered for another user")
        return identity

    async def _token_request(self, form: dict[str, str]) -> dict[str, Any]:
        _, token_endpoint = await self._endpoints_of_issuer()
        form = {**form, "client_id": self._client_id}
        if self._client_secret:
            form["client_secret"] = self._client_secret
        try:
            response = await self._http.post(token_endpoint, data=form, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise ProviderUnavailable(f"issuer unreachable ({type(exc).__name__})") from None
        if len(response.content) > MAX_RESPONSE_BYTES:
            raise ProviderUnavailable("issuer answer too large")
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code in (400, 401) and isinstance(body, dict):
            if body.get("error") in ("invalid_grant", "unauthorized_client", "access_denied"):
                raise ProviderRefused(f"issuer refused: {body.get('error')}")
        if response.status_code != 200 or not isinstance(body, dict):
            raise ProviderUnavailable(f"issuer token endpoint answered {response.status_code}")
        return body

    async def _identity(self, answer: dict[str, Any], *, nonce: str | None, previous_refresh: str) -> Identity:
        id_token = answer.get("id_token")
        if not isinstance(id_token, str):
            raise ProviderRefused("the issuer returned no ID token")
        try:
            verified = await self._verifier.authenticate(id_token, nonce=nonce)
        except OidcUnavailable as exc:
            raise ProviderUnavailable(str(exc)) from None
        except OidcRejected as exc:
            raise ProviderRefused(str(exc)) from None
        refresh = answer.get("refresh_token")
        refresh_token = refresh if isinstance(refresh, str) and refresh else previous_refresh
        return Identity(
            subject=subject_for(verified.issuer, verified.subject),
            store_credential=id_token,
            renewal_secret=json.dumps({"rt": refresh_token}),
            credential_expires_at=verified.expires_at,
        )

    async def aclose(self) -> None:
        """Close HTTP clients."""
        await self._http.aclose()
        await self._discovery.aclose()
        await self._verifier.aclose()


def _unpack(renewal_secret: str) -> str:
    try:
        value = json.loads(renewal_secret).get("rt", "")
    except (ValueError, AttributeError):
        return ""
    return value if isinstance(value, str) else ""
