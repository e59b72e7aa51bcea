"""The oidc identity provider against the real test issuer process (tests/support/oidc_issuer.py)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from connector.identity.oidc import OidcProvider
from connector.oauth.clients import ClientRegistry, MetadataDocumentFetcher
from connector.oauth.grants import RefreshGrants
from connector.oauth.pkce import s256
from connector.oauth.server import AuthorizationServer, PageReply, RedirectReply
from connector.oauth.state import OAuthState
from connector.oauth.tokens import AccessTokenCodec
from tests.support.oidc_issuer import start_issuer

from .conftest import BASE, REDIRECT, RESOURCE, query_of

pytestmark = pytest.mark.anyio
CLIENT_ID = "brain-connector"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with start_issuer(tmp_path_factory.mktemp("issuer"), audience=CLIENT_ID) as running:
        yield running


@pytest.fixture
def server(issuer: Any, tmp_path: Path) -> Iterator[AuthorizationServer]:
    issuer.reset()
    key = secrets.token_bytes(32)
    state = OAuthState(tmp_path / "state", key)
    provider = OidcProvider(issuer=issuer.issuer, client_id=CLIENT_ID, client_secret="s3cret")
    yield AuthorizationServer(
        clients=ClientRegistry(state.clients),
        documents=MetadataDocumentFetcher(),
        grants=RefreshGrants(state, ttl_s=86400, grace_s=60),
        codec=AccessTokenCodec(key),
        provider=provider,
    )


def cookie_of(reply: Any) -> dict[str, str]:
    """The cookie a redirect reply sets, as the browser would send it back."""
    assert isinstance(reply, RedirectReply) and reply.cookie, reply
    name, _, rest = reply.cookie.partition("=")
    return {name: rest.split(";", 1)[0]}


async def _sign_in(server: AuthorizationServer) -> tuple[str, dict[str, Any]]:
    client_id = server.register({"redirect_uris": [REDIRECT]}).body["client_id"]
    verifier = secrets.token_urlsafe(48)
    params = {"client_id": client_id, "redirect_uri": REDIRECT, "response_type": "code", "state": "abc",
              "code_challenge": s256(verifier), "code_challenge_method": "S256", "resource": RESOURCE}
    start = await server.authorize(params, BASE)
    assert isinstance(start, RedirectReply)
    sent = query_of(start.location)
    assert sent["code_challenge_method"] == "S256" and sent["nonce"] and sent["state"]
    assert sent["redirect_uri"] == BASE + "/oidc/callback" and "openid" in sent["scope"].split()
    async with httpx.AsyncClient() as http:
        at_issuer = await http.get(start.location, follow_redirects=False)
    assert at_issuer.status_code == 302
    callback = query_of(at_issuer.headers["location"])
    cookie = cookie_of(start)
    assert "HttpOnly" in start.cookie and "SameSite=Lax" in start.cookie and "Path=/oidc/callback" in start.cookie  # type: ignore[operator]
    assert "abc" not in start.cookie and client_id not in start.cookie  # type: ignore[operator]  # sealed
    # Without the cookie of the browser that started it, the callback is refused.
    assert isinstance(await server.oidc_callback(callback), PageReply)
    back = await server.oidc_callback(callback, cookie)
    assert isinstance(back, RedirectReply), back
    assert back.cookie and "Max-Age=0" in back.cookie  # the cookie is removed
    answer = query_of(back.location)
    assert answer["iss"] == BASE and answer["state"] == "abc"
    tokens = await server.token({"grant_type": "authorization_code", "code": answer["code"], "client_id": client_id,
                                 "redirect_uri": REDIRECT, "code_verifier": verifier})
    assert tokens.status == 200, tokens.body
    return client_id, tokens.body


async def test_sign_in_refresh_and_issuer_revocation(server: AuthorizationServer, issuer: Any) -> None:
    client_id, tokens = await _sign_in(server)
    claims = server.verify_access(tokens["access_token"], BASE)
    assert claims is not None and claims.idp == "oidc"
    assert claims.sub == f"oidc:{issuer.issuer}|user-1"
    assert claims.store_credential.count(".") == 2  # the ID token is the store credential

    refreshed = await server.token({"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"],
                                    "client_id": client_id})
    assert refreshed.status == 200, refreshed.body
    new_claims = server.verify_access(refreshed.body["access_token"], BASE)
    assert new_claims is not None and new_claims.sub == claims.sub

    # Issuer outage: 503 and the tokens are kept.
    issuer.behave(status=500, targets=["token"])
    outage = await server.token({"grant_type": "refresh_token", "refresh_token": refreshed.body["refresh_token"],
                                 "client_id": client_id})
    assert outage.status == 503 and outage.body["error"] == "temporarily_unavailable"
    issuer.reset()

    # The issuer revokes its refresh tokens: the session ends.
    issuer.revoke_refresh_tokens()
    ended = await server.token({"grant_type": "refresh_token", "refresh_token": refreshed.body["refresh_token"],
                                "client_id": client_id})
    assert ended.status == 400 and ended.body["error"] == "invalid_grant"
    assert server.verify_access(refreshed.body["access_token"], BASE) is None


async def _through_issuer(server: AuthorizationServer) -> tuple[Any, dict[str, str]]:
    """A new client's sign-in sent to the issuer: the authorize reply, and the query the issuer
    sends the browser back to the callback with."""
    client_id = server.register({"redirect_uris": [REDIRECT]}).body["client_id"]
    params = {"client_id": client_id, "redirect_uri": REDIRECT, "response_type": "code", "state": "abc",
              "code_challenge": s256("v" * 43), "code_challenge_method": "S256", "resource": RESOURCE}
    start = await server.authorize(params, BASE)
    async with httpx.AsyncClient() as http:
        at_issuer = await http.get(start.location, follow_redirects=False)  # type: ignore[union-attr]
    return start, query_of(at_issuer.headers["location"])


async def test_denied_at_issuer_redirects_access_denied(server: AuthorizationServer, issuer: Any) -> None:
    issuer.login_as(deny=True)
    start, callback = await _through_issuer(server)
    back = await server.oidc_callback(callback, cookie_of(start))
    assert isinstance(back, RedirectReply) and query_of(back.location)["error"] == "access_denied"


async def test_callback_with_unknown_state_or_replayed_state(server: AuthorizationServer, issuer: Any) -> None:
    assert isinstance(await server.oidc_callback({"state": "forged", "code": "x"}), PageReply)
    start, callback = await _through_issuer(server)
    forged = {name: value[:-4] + "AAAA" for name, value in cookie_of(start).items()}
    assert isinstance(await server.oidc_callback(callback, forged), PageReply)
    assert isinstance(await server.oidc_callback({**callback, "state": "other"}, cookie_of(start)), PageReply)
    assert isinstance(await server.oidc_callback(callback, cookie_of(start)), RedirectReply)
    assert isinstance(await server.oidc_callback(callback, cookie_of(start)), PageReply)  # a state works once


async def test_wrong_nonce_is_refused(server: AuthorizationServer, issuer: Any) -> None:
    provider = server.provider
    start = await provider.start(BASE + "/oidc/callback")  # type: ignore[attr-defined]
    async with httpx.AsyncClient() as http:
        at_issuer = await http.get(start.url, follow_redirects=False)
    code = query_of(at_issuer.headers["location"])["code"]
    from connector.identity.base import ProviderRefused

    with pytest.raises(ProviderRefused):
        await provider.finish(code, BASE + "/oidc/callback", {**start.keep, "nonce": "other"})  # type: ignore[attr-defined]


async def test_issuer_outage_at_authorize_is_temporarily_unavailable(tmp_path: Path) -> None:
    key = secrets.token_bytes(32)
    state = OAuthState(None, key)
    provider = OidcProvider(issuer="http://127.0.0.1:9/nothing", client_id=CLIENT_ID)
    server = AuthorizationServer(clients=ClientRegistry(state.clients), documents=MetadataDocumentFetcher(),
                                 grants=RefreshGrants(state, ttl_s=60, grace_s=1), codec=AccessTokenCodec(key),
                                 provider=provider)
    client_id = server.register({"redirect_uris": [REDIRECT]}).body["client_id"]
    params = {"client_id": client_id, "redirect_uri": REDIRECT, "response_type": "code", "state": "abc",
              "code_challenge": s256("v" * 43), "code_challenge_method": "S256", "resource": RESOURCE}
    reply = await server.authorize(params, BASE)
    assert isinstance(reply, RedirectReply) and query_of(reply.location)["error"] == "temporarily_unavailable"


def test_public_issuer_without_allow_list_refused() -> None:
    with pytest.raises(ValueError):
        OidcProvider(issuer="https://accounts.google.com", client_id="x")
