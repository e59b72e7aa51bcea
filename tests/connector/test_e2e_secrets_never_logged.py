"""Secrets are never logged, end to end: a real store (request log and audit log on) and two real
connectors (DEBUG logging; one signing in with store tokens, one at an OpenID Connect issuer)
go through every flow that handles a secret; then every line they wrote is searched for each.

The flows: an MCP client's OAuth 2.1 sign-in (registration, authorize with PKCE, the sign-in form
with the user's store token, code exchange, refresh, revoke, a code replayed), the web app's
sign-in (also with a wrong token) and sign-out, an agent key made, used at the connector and at
the store, deleted by mistake by its whole value, revoked and used again, a memorize whose content
holds credentials (refused), and an MCP client signing in through the issuer and refreshing."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.connector.conftest import RunningStore, StoreUser, auth, running_store
from tests.connector.oauth.live import REDIRECT, HandClient, MemoryStorage, mcp_status, running_connector
from tests.connector.oauth.test_e2e_oidc import issuer_signed_in_provider
from tests.connector.test_e2e_tools import mcp_session, structured
from tests.connector.webapp.conftest import csrf_of, signed_in_browser, web_sign_in
from tests.support.oidc_issuer import start_issuer
from tests.support.processes import ServerProcess

pytestmark = [pytest.mark.timeout(300)]

CLIENT_ID = "brain-connector-secrets"
# A JSON Web Token (an ID token) anywhere in a line: its header and payload, base64url of '{"'.
JWT = re.compile(r"eyJ[\w-]{8,}\.eyJ[\w-]{8,}")
Found = dict[str, str]  # what a secret is -> the secret


class Servers:
    """The store, the connector over store tokens, the connector over the issuer, and the issuer."""

    def __init__(self, tmp_path: Path, stack: ExitStack, found: Found) -> None:
        self.stack = stack
        found["the OIDC client secret"] = client_secret = secrets.token_urlsafe(24)
        self.issuer = stack.enter_context(start_issuer(tmp_path, audience=CLIENT_ID, client_secret=client_secret))
        self.store: RunningStore = stack.enter_context(running_store(tmp_path, env={
            "STORE_QUIET": "0", "STORE_AUDIT_LOG": "on", "STORE_OIDC_ISSUER": self.issuer.issuer,
            "STORE_OIDC_AUDIENCE": CLIENT_ID, "STORE_OIDC_ALLOWED_DOMAINS": "example.com"}))
        found["the static connector's state key"] = static_key = secrets.token_hex(32)
        found["the OIDC connector's state key"] = oidc_key = secrets.token_hex(32)
        debug = {"CONNECTOR_LOG_LEVEL": "debug"}
        self.static: ServerProcess = stack.enter_context(running_connector(
            tmp_path, self.store.url, state_dir=tmp_path / "static-state",
            extra_env={**debug, "CONNECTOR_STATE_KEY": static_key}))
        self.oidc: ServerProcess = stack.enter_context(running_connector(
            tmp_path, self.store.url, state_dir=tmp_path / "oidc-state",
            extra_env={**debug, "CONNECTOR_STATE_KEY": oidc_key, "CONNECTOR_IDP": "oidc",
                       "OIDC_ISSUER": self.issuer.issuer, "OIDC_CLIENT_ID": CLIENT_ID,
                       "OIDC_CLIENT_SECRET": client_secret}))

    def stop_and_read_logs(self) -> str:
        """Stop every server (so each has written its last line), then every line the store and both
        connectors wrote: their output (stderr), the audit logs."""
        self.stack.close()
        files = [self.store.log_path, self.static.log_path, self.oidc.log_path,
                 *sorted((self.store.data / "audit").glob("*")), *sorted((self.store.data / "sharing-audit").glob("*"))]
        return "\n".join(path.read_text(errors="replace") for path in files)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[Servers, Found]]:
    found: Found = {}
    with ExitStack() as stack:
        yield Servers(tmp_path, stack, found), found


def oauth_sign_in(base: str, user: StoreUser, found: Found) -> str:
    """An MCP client's whole OAuth life at the connector; a live access token of it."""
    client = HandClient(base)
    tokens = client.sign_in(user)
    assert mcp_status(base, tokens["access_token"]) == 200
    refreshed = client.refresh(tokens["refresh_token"])
    assert refreshed.status_code == 200, refreshed.text
    found.update({"the first access token": tokens["access_token"], "the first refresh token": tokens["refresh_token"],
                  "the refreshed access token": refreshed.json()["access_token"],
                  "the refreshed refresh token": refreshed.json()["refresh_token"]})
    assert mcp_status(base, refreshed.json()["access_token"]) == 200
    # A second sign-in, revoked; and its code replayed (which ends that sign-in too).
    other = client.sign_in(user)
    found.update({"a revoked access token": other["access_token"], "a revoked refresh token": other["refresh_token"]})
    revoked = httpx.post(base + "/revoke", timeout=30,
                         data={"token": other["refresh_token"], "client_id": client.client_id})
    assert revoked.status_code == 200 and mcp_status(base, other["access_token"]) == 401
    replay = httpx.post(base + "/token", timeout=30, data={
        "grant_type": "authorization_code", "code": client.sent[-2], "client_id": client.client_id,
        "redirect_uri": REDIRECT, "code_verifier": client.sent[-1], "resource": base + "/mcp"})
    assert replay.status_code == 400 and client.refresh(other["refresh_token"]).status_code == 400
    found.update({f"an authorization code or PKCE verifier ({n})": value for n, value in enumerate(client.sent)})
    found["a made-up bearer token"] = made_up = "bst_" + secrets.token_urlsafe(32)
    assert mcp_status(base, made_up) == 401
    return str(refreshed.json()["access_token"])


def web_app(base: str, user: StoreUser, found: Found) -> None:
    """Sign in to the web app with a wrong token, then the right one; look around; sign out."""
    found["a wrong token typed at the web sign-in"] = wrong = "bst_" + secrets.token_urlsafe(32)
    refused = web_sign_in(base, wrong, "198.51.100.7")
    assert refused.status_code == 401
    found.update({f"the cookie {name} of a sign-in form": morsel.value
                  for name, morsel in SimpleCookie(refused.request.headers["cookie"]).items()})
    with closing(signed_in_browser(base, user.token, "198.51.100.7")) as browser:
        home = browser.get("/app")
        assert home.status_code == 200
        found["the web session's CSRF token"] = csrf = csrf_of(home.text)
        found.update({f"the cookie {cookie.name} when signed in": str(cookie.value)
                      for cookie in browser.cookies.jar if cookie.value})
        assert browser.get("/app/search", params={"q": "release"}).status_code == 200
        assert browser.post("/app/signout", data={"csrf": csrf}).status_code == 303
        assert browser.get("/app").status_code == 303  # signed out


async def credentials_refused(base: str, access_token: str, found: Found) -> None:
    """A memorize of a fact, and of content holding credentials: refused, nothing of it kept."""
    found["an AWS access key in a memory"] = aws = "AKIA" + "".join(secrets.choice("ABCDEFGHJKLMNPQRSTUVWXYZ234567")
                                                                    for _ in range(16))
    found["a password in a memory"] = password = "Pw" + secrets.token_hex(10)
    async with mcp_session(base + "/mcp", access_token) as client:
        saved = structured(await client.call_tool("brain_memorize", {"content": "The release train leaves on Fridays"}))
        assert saved["synced"] is True
        for content in (f"My AWS access key is {aws}", f"Staging database: postgres://app:{password}@db.internal/app"):
            refused = await client.call_tool("brain_memorize", {"content": content})
            assert refused.is_error and "allow_secrets" in refused.content[0].text  # type: ignore[union-attr]


async def agent_key(store: RunningStore, base: str, user: StoreUser, found: Found) -> str:
    """An agent key made at the store, used at the connector and at the store, deleted by mistake by
    its whole value, revoked, used again; its prefix."""
    brain = httpx.get(store.url + "/api/brains", headers=auth(user.token), timeout=30).json()[0]["id"]
    made = httpx.post(store.url + "/api/keys", headers=auth(user.token), timeout=30,
                      json={"brains": [brain], "scope": "write", "label": "nightly"})
    assert made.status_code == 201, made.text
    key, prefix = made.json()["key"], made.json()["prefix"]
    found.update({"the agent key": key, "the agent key past its listed prefix": key[len(prefix):]})
    async with mcp_session(base + "/mcp", key) as client:
        assert structured(await client.call_tool("brain_memorize", {"content": "Nightly build 412 passed"}))["synced"]
    assert httpx.get(f"{store.url}/api/brains/{brain}", headers=auth(key), timeout=30).status_code == 200
    for gone, status in ((key, 404), (prefix, 204)):
        assert httpx.delete(f"{store.url}/api/keys/{gone}", headers=auth(user.token), timeout=30).status_code == status
    assert mcp_status(base, key) == 401
    assert httpx.get(f"{store.url}/api/brains/{brain}", headers=auth(key), timeout=30).status_code == 401
    return str(prefix)


async def oidc_sign_in(base: str, found: Found) -> list[str]:
    """An MCP client signing in through the issuer, calling a tool (the ID token goes to the store)
    and refreshing (the identity renewed at the issuer); the codes the connector gave it."""
    storage, codes = MemoryStorage(), list[str]()
    provider = issuer_signed_in_provider(base + "/mcp", storage, codes)
    for refresh in (False, True):
        if refresh:
            provider.context.token_expiry_time = time.time() - 1
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
            async with Client(streamable_http_client(base + "/mcp", http_client=http)) as client:  # type: ignore[arg-type]
                assert structured(await client.call_tool("brain_status", {}))["identity"]["status"] == "ok"
        assert storage.tokens is not None and storage.tokens.refresh_token
        found[f"an OIDC sign-in's access token ({refresh})"] = storage.tokens.access_token
        found[f"an OIDC sign-in's refresh token ({refresh})"] = storage.tokens.refresh_token
    found.update({f"an OIDC sign-in's code ({n})": code for n, code in enumerate(codes)})
    return codes


def test_no_secret_of_any_flow_is_logged_by_the_store_or_the_connectors(servers: tuple[Servers, Found]) -> None:
    running, found = servers
    alice = running.store.add_user("alice")
    found["the user's store token"] = alice.token

    access_token = oauth_sign_in(running.static.base_url, alice, found)
    web_app(running.static.base_url, alice, found)

    async def mcp_flows() -> tuple[str, list[str]]:
        await credentials_refused(running.static.base_url, access_token, found)
        prefix = await agent_key(running.store, running.static.base_url, alice, found)
        return prefix, await oidc_sign_in(running.oidc.base_url, found)

    prefix, codes = asyncio.run(mcp_flows())
    found.update({f"what the issuer handed out or was sent ({n})": value
                  for n, value in enumerate(running.issuer.secrets_seen())})

    logged = running.stop_and_read_logs()
    # The flows were logged where the settings say (else this test could not fail): the sign-ins,
    # the request lines (a whole key deleted by mistake cut to its prefix), the key's audit lines.
    assert '"sign-in completed"' in logged and '"web sign-in"' in logged and '"idp": "oidc"' in logged
    assert f'"path":"/api/keys/{prefix}\u2026"' in logged
    audit = [json.loads(line) for path in (running.store.data / "audit").glob("*")
             for line in path.read_text().splitlines()]
    assert {"upload", "get_brain"} <= {e["action"] for e in audit if e.get("key") == prefix}
    assert len(codes) == 1 and len(found) > 30
    leaked = sorted(what for what, secret in found.items() if secret and secret in logged)
    assert leaked == [], f"logged: {leaked}"
    assert JWT.search(logged) is None, f"an ID token was logged: {JWT.search(logged)}"
    assert "Traceback" not in logged and '"status": 500' not in logged and '"status":500' not in logged
