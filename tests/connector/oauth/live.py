"""Helpers for OAuth tests against real processes: the connector, and a headless sign-in."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import httpx2
from mcp.client import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from connector.oauth.pkce import s256
from tests.connector.conftest import StoreUser
from tests.support.processes import ServerProcess, console_script, free_port, run_server


@contextmanager
def running_connector(
    tmp_path: Path, store_url: str, *, state_dir: Path | None, port: int | None = None,
    extra_env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """`brain-connector serve` with the static provider on a free loopback port (``state_dir``
    None: the state is wherever ``extra_env`` says, e.g. CONNECTOR_STATE_URL, or in memory)."""
    port = port or free_port()
    env = {
        "CONNECTOR_STORE_URL": store_url,
        "CONNECTOR_IDP": "static",
        **({"CONNECTOR_STATE_DIR": str(state_dir)} if state_dir is not None else {}),
        "CONNECTOR_PORT": str(port),
        "CONNECTOR_HOST": "127.0.0.1",
        **(extra_env or {}),
    }
    with run_server([console_script("brain-connector"), "serve"], port=port, env=env,
                    log_path=tmp_path / f"connector-{port}.log", health_path="/health/live") as server:
        yield server


REDIRECT = "http://127.0.0.1:1/callback"  # never contacted: the hand-driven client reads the redirect itself


class HandClient:
    """An OAuth client driving the code flow by hand against a real connector; ``sent`` keeps
    every authorization code and PKCE verifier it sent (for tests checking they are never logged)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.sent: list[str] = []
        registered = httpx.post(base + "/register", json={"redirect_uris": [REDIRECT], "client_name": "t"}, timeout=30)
        assert registered.status_code == 201, registered.text
        self.client_id = registered.json()["client_id"]

    def sign_in(self, user: StoreUser) -> dict[str, str]:
        """Authorize with PKCE, sign in on the form with the user's store token, exchange the code: the tokens."""
        verifier = secrets.token_urlsafe(48)
        params = {"response_type": "code", "client_id": self.client_id, "redirect_uri": REDIRECT, "state": "s",
                  "code_challenge": s256(verifier), "code_challenge_method": "S256", "resource": self.base + "/mcp"}
        with httpx.Client(base_url=self.base, timeout=30) as http:
            page = http.get("/authorize", params=params)
            done = http.post("/authorize/complete",
                             data={"login_id": login_id_of(page.text), "token": user.token, "action": "allow"})
            code = flat_query(done.headers["location"])["code"]
            self.sent += [code, verifier]
            tokens = http.post("/token", data={"grant_type": "authorization_code", "code": code, "client_id": self.client_id,
                                               "redirect_uri": REDIRECT, "code_verifier": verifier,
                                               "resource": self.base + "/mcp"})
        assert tokens.status_code == 200, tokens.text
        return tokens.json()

    def refresh(self, refresh_token: str) -> httpx.Response:
        """The token endpoint's answer to a refresh with ``refresh_token``."""
        return httpx.post(self.base + "/token", timeout=30, data={
            "grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": self.client_id})


def mcp_status(base: str, access_token: str) -> int:
    """A bare JSON-RPC ping with the access token: the HTTP status."""
    return httpx.post(base + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30, headers={
        "Authorization": f"Bearer {access_token}", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25"}).status_code


def login_id_of(html: str) -> str:
    """The login id hidden in the sign-in page's form."""
    match = re.search(r'name="login_id" value="([^"]+)"', html)
    assert match, "no sign-in form in the page"
    return match.group(1)


def flat_query(url: str) -> dict[str, str]:
    """A URL's query as a flat dict."""
    return {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}


async def sign_in_with_form(authorization_url: str, token: str) -> dict[str, str]:
    """Do what a person does on the page (GET it, POST the token); the client's callback query."""
    async with httpx.AsyncClient(timeout=30) as http:
        page = await http.get(authorization_url)
        assert page.status_code == 200, page.text
        form = re.search(r'<form method="post" action="([^"]+)"', page.text)
        assert form, "no sign-in form in the page"
        action = urljoin(str(page.url), form.group(1))
        done = await http.post(action, data={"login_id": login_id_of(page.text), "token": token, "action": "allow"})
        assert done.status_code == 303, done.text
        return flat_query(done.headers["location"])


class MemoryStorage:
    """Token storage for the SDK's OAuth provider; ``history`` keeps every token set received."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None
        self.history: list[OAuthToken] = []

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens
        self.history.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def signed_in_provider(
    mcp_url: str, store_token: str, storage: MemoryStorage, *, client_name: str,
    redirect_uri: str = "http://127.0.0.1:1/callback", attempts: list[str] | None = None,
) -> OAuthClientProvider:
    """The SDK's OAuth client, with a headless 'browser' that signs in with ``store_token``.

    The redirect URI is never contacted (the 'browser' reads the redirect itself); every
    authorization URL opened is appended to ``attempts`` when given.
    """
    answers: dict[str, str] = {}

    async def redirect_handler(authorization_url: str) -> None:
        if attempts is not None:
            attempts.append(authorization_url)
        answers.clear()
        answers.update(await sign_in_with_form(authorization_url, store_token))

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=answers["code"], state=answers.get("state"), iss=answers.get("iss"))

    return OAuthClientProvider(
        server_url=mcp_url,
        client_metadata=OAuthClientMetadata(
            redirect_uris=[redirect_uri],  # type: ignore[list-item]
            client_name=client_name,
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )


async def memorize_and_recall(url: str, user: StoreUser, attack_done: asyncio.Event, signed_in: asyncio.Event,
                              outcomes: list[tuple[str, str, bool]]) -> list[str]:
    """Sign ``user`` in, then memorize and recall until ``attack_done`` and twice more; the ids stored.

    Each step is appended to ``outcomes`` as (user name, "memorize" or "recall", whether it worked):
    a write counts only when synced to the store, a recall only when it finds that write.
    """
    provider = signed_in_provider(url, user.token, MemoryStorage(), client_name=f"{user.name}'s app")
    stored: list[str] = []
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
            await client.list_tools()
            signed_in.set()
            after = 0
            for number in range(200):
                if attack_done.is_set():
                    after += 1
                    if after > 2:
                        break
                fact = f"{user.name} keeps note {number}: the {secrets.token_hex(4)} release ships on day {number}"
                saved = await client.call_tool("brain_memorize", {"content": fact, "origin": "user"})
                body: dict[str, Any] = saved.structured_content or {}
                ok = not saved.is_error and body.get("synced") is True
                outcomes.append((user.name, "memorize", ok))
                if not ok:
                    continue
                stored.append(body["stored"]["id"])
                hits = await client.call_tool("brain_recall", {"query": fact})
                found = [hit["id"] for hit in (hits.structured_content or {}).get("results", [])]
                outcomes.append((user.name, "recall", not hits.is_error and body["stored"]["id"] in found))
                await asyncio.sleep(0.2)
    return stored
