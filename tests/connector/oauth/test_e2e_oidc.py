"""End to end with the oidc provider: the MCP client SDK signs in through the test issuer
(connector → issuer → /oidc/callback → client), lists tools, and refreshes (renewal at the issuer)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata
from tests.support.oidc_issuer import start_issuer

from ..conftest import RunningStore
from .live import flat_query, running_connector
from .test_e2e_mcp_client import REDIRECT, TOOLS, MemoryStorage, list_tool_names

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]
CLIENT_ID = "brain-connector-e2e"


@pytest.fixture
def issuer(tmp_path: Path) -> Iterator[Any]:
    with start_issuer(tmp_path, audience=CLIENT_ID) as running:
        yield running


async def follow_to_client(authorization_url: str) -> dict[str, str]:
    """A browser that is already signed in at the issuer: follow redirects until the client's callback."""
    url = authorization_url
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(6):
            response = await http.get(url, follow_redirects=False)
            assert response.status_code in (302, 303), response.text
            url = response.headers["location"]
            if url.startswith(REDIRECT):
                return flat_query(url)
    raise AssertionError("never reached the client's redirect URI")


def issuer_signed_in_provider(mcp_url: str, storage: MemoryStorage,
                              codes: list[str] | None = None) -> OAuthClientProvider:
    """The SDK's OAuth client, with a 'browser' already signed in at the connector's issuer (every
    authorization code the connector sends it back with is appended to ``codes`` when given)."""
    answers: dict[str, str] = {}

    async def redirect_handler(url: str) -> None:
        answers.clear()
        answers.update(await follow_to_client(url))
        if codes is not None:
            codes.append(answers["code"])

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=answers["code"], state=answers.get("state"), iss=answers.get("iss"))

    return OAuthClientProvider(
        server_url=mcp_url,
        client_metadata=OAuthClientMetadata(redirect_uris=[REDIRECT], client_name="OIDC e2e",  # type: ignore[list-item]
                                            token_endpoint_auth_method="none"),
        storage=storage, redirect_handler=redirect_handler, callback_handler=callback_handler,
    )


async def test_sdk_client_signs_in_through_the_issuer(store: RunningStore, issuer: Any, tmp_path: Path) -> None:
    env = {"CONNECTOR_IDP": "oidc", "OIDC_ISSUER": issuer.issuer, "OIDC_CLIENT_ID": CLIENT_ID,
           "OIDC_CLIENT_SECRET": "not-checked-by-the-test-issuer"}
    storage = MemoryStorage()
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state", extra_env=env) as connector:
        mcp_url = connector.base_url + "/mcp"
        provider = issuer_signed_in_provider(mcp_url, storage)
        assert await list_tool_names(mcp_url, provider) == TOOLS
        first = storage.tokens
        assert first is not None and first.refresh_token
        assert issuer.counts().get("/token", 0) == 1

        provider.context.token_expiry_time = time.time() - 1
        assert await list_tool_names(mcp_url, provider) == TOOLS
        assert storage.tokens is not None and storage.tokens.refresh_token != first.refresh_token
        assert issuer.counts().get("/token", 0) == 2  # the refresh renewed the identity at the issuer

        # The issuer revokes the session: the next refresh ends it.
        issuer.revoke_refresh_tokens()
        ended = httpx.post(connector.base_url + "/token", data={
            "grant_type": "refresh_token", "refresh_token": storage.tokens.refresh_token,
            "client_id": storage.client.client_id})  # type: ignore[union-attr]
        assert ended.status_code == 400 and ended.json()["error"] == "invalid_grant"
