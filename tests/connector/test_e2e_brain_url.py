"""The URL of one brain, ``/mcp/brains/{name-or-id}``, through the official MCP client SDK against
a real connector and store: the connection is bound to that brain (no brain_use), a member uses a
shared brain through it, a brain the account cannot use is a 404 whether it exists or not, and the
OAuth metadata, the token's audience and the sign-in page are about that brain."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

from tests.connector.conftest import RunningStore, auth, direct_memorize, download_brain, memory_ids, shared_store
from tests.connector.oauth.live import MemoryStorage, flat_query, login_id_of, signed_in_provider
from tests.connector.test_e2e_sharing import share
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(300)
ALL = {"brain.read", "brain.write"}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def post(url: str, token: str | None = None) -> httpx.Response:
    extra = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(url, json=LIST, headers={**HEADERS, **extra}, timeout=30)


def text(result: Any) -> str:
    return result.content[0].text


def test_a_member_uses_a_shared_brain_through_its_url(store: RunningStore, tmp_path: Path) -> None:
    alice, bob, carol = store.add_user("alice"), store.add_user("bob"), store.add_user("carol")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "team notes"},
                      timeout=30).json()
    direct_memorize(store.url, alice.token, team["id"], "The team deploys the billing service on Thursdays")
    bob_own = httpx.get(f"{store.url}/api/brains", headers=auth(bob.token), timeout=30).json()[0]["id"]
    direct_memorize(store.url, bob.token, bob_own, "Bob's private note: the billing password hint is a bird")
    share(store, team["id"], bob, "editor")
    share(store, team["id"], carol, "viewer")

    async def as_members(base: str) -> None:
        by_name = f"{base}/mcp/brains/{quote('team notes', safe='')}"
        # Bob's token for /mcp works at any brain's URL of his; the connection serves that brain only.
        async with mcp_session(by_name, mint(base, bob, ALL)) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "brain_use" not in names and {"brain_recall", "brain_memorize", "search", "fetch"} <= names
            assert "serves one brain only" in (client.instructions or "")
            refused = await client.call_tool("brain_use", {"brain": bob_own})
            assert refused.is_error and "Unknown tool 'brain_use'" in text(refused)
            status = structured(await client.call_tool("brain_status", {}))
            assert status["active_brain"]["id"] == team["id"]
            assert [brain["id"] for brain in status["brains"]] == [team["id"]]
            hits = structured(await client.call_tool("brain_recall", {"query": "billing"}))
            assert all("password hint" not in (hit.get("content") or "") for hit in hits["results"])
            assert any("Thursdays" in (hit.get("content") or "") for hit in hits["results"])
            # ChatGPT's search sees that brain only, too.
            searched = structured(await client.call_tool("search", {"query": "billing"}))
            assert [hit["id"] for hit in searched["results"]] == [hit["id"] for hit in hits["results"]]
            saved = structured(await client.call_tool("brain_memorize", {
                "content": "Release notes go to the team channel", "origin": "user"}))
            assert saved["synced"] is True
            written = saved["stored"]["id"]
        # By id too, and the write landed in the team brain (not Bob's own).
        team_brain, _ = download_brain(store.url, alice.token, team["id"])
        assert written in memory_ids(team_brain)
        own_brain, _ = download_brain(store.url, bob.token, bob_own)
        assert written not in memory_ids(own_brain)
        async with mcp_session(f"{base}/mcp/brains/{team['id']}", mint(base, carol, ALL)) as client:
            hits = structured(await client.call_tool("brain_recall", {"query": "release notes team channel"}))
            assert written in [hit["id"] for hit in hits["results"]]
            viewer = await client.call_tool("brain_memorize", {"content": "Carol tries to write here"})
            assert viewer.is_error and "viewer" in text(viewer)
        # Plain /mcp still switches with brain_use, and bob's choice there is untouched by the bound URL.
        async with mcp_session(base + "/mcp", mint(base, bob, ALL)) as client:
            assert "brain_use" in {tool.name for tool in (await client.list_tools()).tools}
            assert structured(await client.call_tool("brain_status", {}))["active_brain"]["id"] == bob_own

    with connector(tmp_path, store) as server:
        base = server.base_url
        asyncio.run(as_members(base))

        # A brain the account cannot use: the same 404 whether it exists (alice's personal brain,
        # not shared) or not; nothing said about it.
        alice_own = httpx.get(f"{store.url}/api/brains", headers=auth(alice.token), timeout=30).json()
        private = next(brain["id"] for brain in alice_own if brain["id"] != team["id"])
        answers = [post(f"{base}/mcp/brains/{name}", mint(base, bob, ALL)) for name in
                   (private, "00000000-0000-4000-8000-000000000000", "nobody-has-this")]
        assert {answer.status_code for answer in answers} == {404}
        assert len({answer.text for answer in answers}) == 1 and private not in answers[0].text

        # A token for one brain's URL is good there only: not at /mcp, not at another brain's URL.
        bound_token = mint(base, bob, ALL, audience=f"{base}/mcp/brains/{team['id']}")
        assert post(f"{base}/mcp/brains/{team['id']}", bound_token).status_code == 200
        for elsewhere in (f"{base}/mcp", f"{base}/mcp/brains/{bob_own}", f"{base}/mcp/brains/team%20notes"):
            refused = post(elsewhere, bound_token)
            assert refused.status_code == 401 and 'error="invalid_token"' in refused.headers["www-authenticate"]

        # Without credentials: the challenge points at this brain URL's own metadata.
        probe = httpx.get(f"{base}/mcp/brains/team%20notes", timeout=30)
        assert probe.status_code == 401
        metadata_url = f"{base}/.well-known/oauth-protected-resource/mcp/brains/team%20notes"
        assert probe.headers["www-authenticate"] == (
            f'Bearer resource_metadata="{metadata_url}", scope="brain.read brain.write"')
        metadata = httpx.get(metadata_url, timeout=30).json()
        assert metadata["resource"] == f"{base}/mcp/brains/team%20notes"
        assert metadata["authorization_servers"] == [base]


def test_sign_in_for_a_brain_url_names_the_brain(store: RunningStore, tmp_path: Path) -> None:
    """The SDK's OAuth flow against a brain's URL: the page says which brain, the token is for it."""
    alice, bob = store.add_user("alice"), store.add_user("bob")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "team"}, timeout=30).json()
    direct_memorize(store.url, alice.token, team["id"], "Team rule: every release has a named owner")
    share(store, team["id"], bob, "viewer")
    pages: list[str] = []

    async def flow(base: str) -> None:
        url = f"{base}/mcp/brains/team"
        answers: dict[str, str] = {}

        async def redirect_handler(authorization_url: str) -> None:
            async with httpx.AsyncClient(timeout=30) as http:
                page = await http.get(authorization_url)
                assert page.status_code == 200, page.text
                pages.append(page.text)
                action = re.search(r'<form method="post" action="([^"]+)"', page.text)
                assert action
                done = await http.post(urljoin(str(page.url), action.group(1)), data={
                    "login_id": login_id_of(page.text), "token": bob.token, "action": "allow"})
                assert done.status_code == 303, done.text
                answers.update(flat_query(done.headers["location"]))

        async def callback_handler() -> AuthorizationCodeResult:
            return AuthorizationCodeResult(code=answers["code"], state=answers.get("state"), iss=answers.get("iss"))

        storage = MemoryStorage()
        provider = OAuthClientProvider(
            server_url=url,
            client_metadata=OAuthClientMetadata(
                redirect_uris=["http://127.0.0.1:1/callback"],  # type: ignore[list-item]
                client_name="Team agent", grant_types=["authorization_code", "refresh_token"],
                response_types=["code"], token_endpoint_auth_method="none",
            ),
            storage=storage, redirect_handler=redirect_handler, callback_handler=callback_handler,
        )
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
                hits = structured(await client.call_tool("brain_recall", {"query": "release owner"}))
                assert hits["results"] and "named owner" in hits["results"][0]["content"]
        assert storage.tokens is not None
        # The token is for this brain's URL: refused at /mcp.
        assert post(f"{base}/mcp", storage.tokens.access_token).status_code == 401
        assert post(url, storage.tokens.access_token).status_code == 200

    with connector(tmp_path, store) as server:
        asyncio.run(flow(server.base_url))
    assert len(pages) == 1
    assert re.search(r'asks to use your brain <strong class="brain">team</strong> \(only this brain\)', pages[0])


def test_a_brain_url_signs_in_however_its_name_is_percent_encoded(store: RunningStore, tmp_path: Path) -> None:
    """A name with characters a URL path may hold as they are ("c++", "Work (2024)"): the SDK
    compares the metadata's resource with the URL it was given, so the metadata must speak of the
    URL as the client wrote it (literal or escaped); the sign-in and its token then work for both."""
    alice = store.add_user("alice")
    ids = {}
    for name in ("c++", "Work (2024)"):
        ids[name] = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": name},
                               timeout=30).json()["id"]

    async def sign_in(url: str) -> dict[str, Any]:
        storage = MemoryStorage()
        provider = signed_in_provider(url, alice.token, storage, client_name="Encoded agent")
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
                status = structured(await client.call_tool("brain_status", {}))
        assert storage.tokens is not None and storage.tokens.refresh_token
        return {"active": status["active_brain"]["id"], "refresh": storage.tokens.refresh_token,
                "client": storage.client}

    with connector(tmp_path, store) as server:
        base = server.base_url
        for written, name in (("c++", "c++"), ("c%2B%2B", "c++"), ("Work%20(2024)", "Work (2024)"),
                              ("Work%20%282024%29", "Work (2024)")):
            url = f"{base}/mcp/brains/{written}"
            probe = httpx.get(url, timeout=30)
            metadata_url = f"{base}/.well-known/oauth-protected-resource/mcp/brains/{written}"
            assert f'resource_metadata="{metadata_url}"' in probe.headers["www-authenticate"], written
            assert httpx.get(metadata_url, timeout=30).json()["resource"] == url
            signed = asyncio.run(sign_in(url))
            assert signed["active"] == ids[name], written
            # A refresh naming the resource as the client wrote it is the same grant.
            refreshed = httpx.post(f"{base}/token", data={
                "grant_type": "refresh_token", "refresh_token": signed["refresh"],
                "client_id": signed["client"].client_id, "resource": url}, timeout=30)
            assert refreshed.status_code == 200, refreshed.text
            assert post(url, refreshed.json()["access_token"]).status_code == 200
