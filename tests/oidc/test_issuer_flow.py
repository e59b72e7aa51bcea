"""The test issuer's authorization-code flow (PKCE S256 + nonce), as the connector will use it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from common.oidc import OidcConfig, OidcRejected, OidcVerifier
from tests.support.oidc_issuer import IssuerClient, start_issuer

pytestmark = pytest.mark.timeout(60)

REDIRECT = "http://127.0.0.1:9/callback"


def pkce() -> tuple[str, str]:
    """A code verifier and its S256 challenge."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def authorize(issuer: IssuerClient, **params: str) -> dict[str, str]:
    """Follow /authorize once and return the query of the redirect back to the client."""
    query = {"response_type": "code", "client_id": issuer.audience, "redirect_uri": REDIRECT, "scope": "openid email",
             **params}
    response = httpx.get(f"{issuer.issuer}/authorize?{urlencode(query)}", timeout=10)
    assert response.status_code == 302
    location = response.headers["location"]
    assert location.startswith(REDIRECT + "?")
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


def token_request(issuer: IssuerClient, **form: str) -> httpx.Response:
    """POST the token endpoint, form-encoded."""
    return httpx.post(f"{issuer.issuer}/token", data=form, timeout=10)


def test_code_flow_with_pkce_nonce_and_refresh(issuer: IssuerClient) -> None:
    issuer.login_as(sub="flow-user", email="flow@corp.example", email_verified=True)
    verifier, challenge = pkce()
    answer = authorize(issuer, state="st-1", nonce="n-1", code_challenge=challenge, code_challenge_method="S256")
    assert answer["state"] == "st-1" and answer["iss"] == issuer.issuer
    tokens = token_request(issuer, grant_type="authorization_code", code=answer["code"], redirect_uri=REDIRECT,
                           client_id=issuer.audience, code_verifier=verifier)
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    oidc = OidcVerifier(OidcConfig.create(issuer.issuer, issuer.audience, ["corp.example"]))
    identity = asyncio.run(oidc.authenticate(body["id_token"], nonce="n-1"))
    assert identity.subject == "flow-user" and identity.email == "flow@corp.example"
    with pytest.raises(OidcRejected):
        asyncio.run(oidc.authenticate(body["id_token"], nonce="another"))

    # The code is single use.
    again = token_request(issuer, grant_type="authorization_code", code=answer["code"], redirect_uri=REDIRECT,
                          client_id=issuer.audience, code_verifier=verifier)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"

    # Refresh rotates: the new refresh token works, the used one does not.
    refreshed = token_request(issuer, grant_type="refresh_token", refresh_token=body["refresh_token"],
                              client_id=issuer.audience)
    assert refreshed.status_code == 200
    asyncio.run(oidc.authenticate(refreshed.json()["id_token"]))
    reused = token_request(issuer, grant_type="refresh_token", refresh_token=body["refresh_token"],
                           client_id=issuer.audience)
    assert reused.status_code == 400
    issuer.revoke_refresh_tokens()
    revoked = token_request(issuer, grant_type="refresh_token", refresh_token=refreshed.json()["refresh_token"],
                            client_id=issuer.audience)
    assert revoked.status_code == 400


def test_wrong_code_verifier_is_refused(issuer: IssuerClient) -> None:
    _, challenge = pkce()
    answer = authorize(issuer, state="s", nonce="n", code_challenge=challenge, code_challenge_method="S256")
    wrong = token_request(issuer, grant_type="authorization_code", code=answer["code"], redirect_uri=REDIRECT,
                          client_id=issuer.audience, code_verifier="not-the-verifier")
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"


def test_authorize_refusals(issuer: IssuerClient) -> None:
    _, challenge = pkce()
    assert authorize(issuer, state="s", code_challenge=challenge, code_challenge_method="plain")["error"] == \
        "invalid_request"
    assert authorize(issuer, state="s")["error"] == "invalid_request"
    issuer.login_as(deny=True)
    assert authorize(issuer, state="s", code_challenge=challenge, code_challenge_method="S256")["error"] == \
        "access_denied"


def test_confidential_client_must_authenticate(tmp_path: Path) -> None:
    with start_issuer(tmp_path, client_secret="s3cret") as issuer:
        for auth in ("none", "post", "basic", "wrong"):
            verifier, challenge = pkce()
            answer = authorize(issuer, state="s", nonce="n", code_challenge=challenge, code_challenge_method="S256")
            form = {"grant_type": "authorization_code", "code": answer["code"], "redirect_uri": REDIRECT,
                    "client_id": issuer.audience, "code_verifier": verifier}
            headers = {}
            if auth == "post":
                form["client_secret"] = "s3cret"
            elif auth == "wrong":
                form["client_secret"] = "guess"
            elif auth == "basic":
                headers["Authorization"] = "Basic " + base64.b64encode(f"{issuer.audience}:s3cret".encode()).decode()
            response = httpx.post(f"{issuer.issuer}/token", data=form, headers=headers, timeout=10)
            assert response.status_code == (200 if auth in ("post", "basic") else 401), (auth, response.text)
