"""End to end: the official MCP client SDK signs in to a real connector process backed by a real
store process (register, authorize, sign in with a store token, token, refresh) and lists tools."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

from mcp.client import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from tests.support.processes import free_port

from ..conftest import RunningStore
from .live import MemoryStorage, running_connector, signed_in_provider

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]
REDIRECT = "http://127.0.0.1:1/callback"  # never contacted: the test reads the redirect itself
TOOLS = {"brain_recall", "brain_status", "brain_read", "brain_use", "brain_memorize", "brain_pin", "brain_unpin",
         "brain_forget", "brain_verify", "search", "fetch",
         "brain_reflect", "brain_extract", "brain_mental_model"}


def oauth_provider(mcp_url: str, store_token: str, storage: MemoryStorage, attempts: list[str]) -> OAuthClientProvider:
    """The SDK's OAuth provider, with a 'browser' that fills in the sign-in form."""
    return signed_in_provider(mcp_url, store_token, storage, client_name="E2E SDK client", redirect_uri=REDIRECT,
                              attempts=attempts)


async def list_tool_names(mcp_url: str, provider: OAuthClientProvider) -> set[str]:
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=60)) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http)) as client:
            listed = await client.list_tools()
            return {tool.name for tool in listed.tools}


async def test_sdk_client_full_flow_refresh_and_restart(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    state_dir = tmp_path / "connector-state"
    port = free_port()
    storage = MemoryStorage()
    attempts: list[str] = []
    with running_connector(tmp_path, store.url, state_dir=state_dir, port=port) as connector:
        mcp_url = connector.base_url + "/mcp"
        provider = oauth_provider(mcp_url, alice.token, storage, attempts)
        assert await list_tool_names(mcp_url, provider) == TOOLS
        assert len(attempts) == 1 and storage.client is not None and storage.tokens is not None
        first = storage.tokens
        assert first.scope == "brain.read brain.write" and first.refresh_token

        # Force a refresh: the SDK refreshes at the token endpoint, which rotates the refresh token.
        provider.context.token_expiry_time = time.time() - 1
        assert await list_tool_names(mcp_url, provider) == TOOLS
        assert len(attempts) == 1, "refresh must not need a new sign-in"
        assert storage.tokens is not first and storage.tokens.refresh_token != first.refresh_token

        # The rotated-out refresh token, replayed after the grace window, would revoke the family;
        # within it, it returns the same successor (a client retrying after a lost response).
        replay = httpx.post(connector.base_url + "/token", data={
            "grant_type": "refresh_token", "refresh_token": first.refresh_token,
            "client_id": storage.client.client_id})
        assert replay.status_code == 200 and replay.json()["refresh_token"] == storage.tokens.refresh_token

    # A restart (same state directory) keeps the session: the access token still works.
    with running_connector(tmp_path, store.url, state_dir=state_dir, port=port) as connector:
        mcp_url = connector.base_url + "/mcp"
        assert await list_tool_names(mcp_url, provider) == TOOLS
        assert len(attempts) == 1
        # And so does the refresh token.
        provider.context.token_expiry_time = time.time() - 1
        assert await list_tool_names(mcp_url, provider) == TOOLS
        assert len(attempts) == 1


def _mcp_post(base: str, token: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    return httpx.post(base + "/mcp", json=body, timeout=30, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25", **(headers or {})})


async def test_attacks_against_a_live_connector(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    storage = MemoryStorage()
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state",
                           extra_env={"CONNECTOR_REFRESH_GRACE_MS": "1000"}) as connector:
        base = connector.base_url
        provider = oauth_provider(base + "/mcp", alice.token, storage, [])
        assert await list_tool_names(base + "/mcp", provider) == TOOLS
        tokens = storage.tokens
        assert tokens is not None and storage.client is not None
        client_id = storage.client.client_id

        # A token is bound to its audience: the same connector reached under another name refuses it.
        other_name = base.replace("127.0.0.1", "localhost")
        assert _mcp_post(base, tokens.access_token).status_code != 401
        refused = _mcp_post(other_name, tokens.access_token)
        assert refused.status_code == 401
        assert 'resource_metadata="' in refused.headers["www-authenticate"]
        assert _mcp_post(base, tokens.access_token + "x").status_code == 401
        assert _mcp_post(base, "bst_" + "a" * 43).status_code == 401  # a store token is not an access token

        # Refresh reuse after the grace window revokes the whole family.
        rotated = httpx.post(base + "/token", data={"grant_type": "refresh_token", "client_id": client_id,
                                                    "refresh_token": tokens.refresh_token}).json()
        time.sleep(1.2)
        reuse = httpx.post(base + "/token", data={"grant_type": "refresh_token", "client_id": client_id,
                                                  "refresh_token": tokens.refresh_token})
        assert reuse.status_code == 400 and reuse.json()["error"] == "invalid_grant"
        assert _mcp_post(base, rotated["access_token"]).status_code == 401
        successor = httpx.post(base + "/token", data={"grant_type": "refresh_token", "client_id": client_id,
                                                      "refresh_token": rotated["refresh_token"]})
        assert successor.status_code == 400

        # Sign in again; then the user is removed at the store: the next refresh ends the session.
        storage.tokens = None
        provider.context.current_tokens = None
        provider.context.token_expiry_time = None
        assert await list_tool_names(base + "/mcp", provider) == TOOLS
        fresh = storage.tokens
        assert fresh is not None and fresh.refresh_token
        import subprocess

        from tests.support.processes import console_script

        subprocess.run([console_script("brain-store"), "user", "remove", "alice", "--data", str(store.data)],
                       check=True, capture_output=True, timeout=60)
        gone = httpx.post(base + "/token", data={"grant_type": "refresh_token", "client_id": client_id,
                                                 "refresh_token": fresh.refresh_token})
        assert gone.status_code == 400 and gone.json()["error"] == "invalid_grant"
        assert _mcp_post(base, fresh.access_token).status_code == 401


def _unused(*_: Any) -> None:
    return None
