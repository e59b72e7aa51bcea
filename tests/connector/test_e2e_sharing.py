"""Shared brains through the connector, end to end: a real store (members and agent keys set
with its CLI), real connector processes, the official MCP client SDK.

A viewer sees the brain with its role and owner and reads it, but its writes are refused
before anything is attempted; an editor's memories name the editor; two editors writing at
once through two connectors lose nothing; a read agent key signs in on the sign-in page and
sees exactly its brain, and its writes are refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from connector.identity.static import StaticTokenProvider
from tests.connector.conftest import RunningStore, StoreUser, auth, brains_of, direct_memorize, download_brain, memory_ids, shared_store
from tests.connector.test_e2e_tools import connector, mcp_session, mint, module_connector, signed_in_provider, structured
from tests.support.processes import ServerProcess
from tests.support.store_cli import brain_store

# Every test here makes its own users and looks only at their brains: one store for the module,
store = pytest.fixture(shared_store, name="store")
# and, for the tests that need one connector, one: none of them restarts it or changes its settings.
served = pytest.fixture(module_connector, scope="module", name="served")

pytestmark = pytest.mark.timeout(300)


def store_cli(store: RunningStore, *args: str) -> str:
    """Run `brain-store ARGS --data <the store's data>` (in this process); its last output line."""
    return brain_store(*args, data=store.data).strip().splitlines()[-1].strip()


def share(store: RunningStore, brain_id: str, user: StoreUser, role: str) -> None:
    """`brain-store share BRAIN --with USER --role ROLE`."""
    store_cli(store, "share", brain_id, "--with", user.name, "--role", role)


def memory_file(store: RunningStore, token: str, brain_id: str, memory_id: str) -> str:
    """The stored Markdown file of one memory (front matter and content)."""
    brain, _ = download_brain(store.url, token, brain_id)
    path = (brain.read_json("index.json") or {})["memories"][memory_id]["path"]
    data = brain.read(path)
    assert data is not None
    return data.decode("utf-8")


def text(result: Any) -> str:
    return result.content[0].text


def test_viewer_reads_editor_writes_with_their_name(store: RunningStore, served: ServerProcess) -> None:
    alice, bob, carol = store.add_user("alice"), store.add_user("bob"), store.add_user("carol")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "team"}, timeout=30).json()
    first = direct_memorize(store.url, alice.token, team["id"], "The team deploys the billing service on Thursdays")
    share(store, team["id"], bob, "viewer")
    share(store, team["id"], carol, "editor")

    async def as_viewer(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, bob, {"brain.read", "brain.write"})) as client:
            status = structured(await client.call_tool("brain_status", {}))
            listed = {brain["id"]: brain for brain in status["brains"]}
            assert listed[team["id"]]["role"] == "viewer" and listed[team["id"]]["owner"] == alice.name
            assert listed[team["id"]]["read_only"] is True
            own = [brain for brain in status["brains"] if brain["id"] != team["id"]]
            assert own and all(brain["role"] == "owner" for brain in own)
            assert "team (" in text(await client.call_tool("brain_status", {}))
            assert f"viewer (read-only), owned by {alice.name}" in text(await client.call_tool("brain_status", {}))

            used = await client.call_tool("brain_use", {"brain": team["id"]})
            assert structured(used)["brain"] == {
                "id": team["id"], "name": "team", "role": "viewer", "read_only": True, "owner": alice.name,
            }
            assert f"viewer (read-only), owned by {alice.name}" in text(used)
            hits = structured(await client.call_tool("brain_recall", {"query": "billing service Thursdays"}))
            assert hits["results"][0]["id"] == first

            _, before = download_brain(store.url, alice.token, team["id"])
            refused = await client.call_tool("brain_memorize", {"content": "Bob thinks we should deploy on Mondays"})
            assert refused.is_error
            assert f"you are a viewer of the brain 'team', shared by {alice.name}" in text(refused)
            assert "nothing was changed" in text(refused)
            for tool, arguments in (
                ("brain_pin", {"id": first}),
                ("brain_unpin", {"id": first}),
                ("brain_forget", {"id": first}),
                ("brain_verify", {"action": "approve", "ids": [first]}),
            ):
                result = await client.call_tool(tool, arguments)
                assert result.is_error and "you are a viewer" in text(result), tool
            assert structured(await client.call_tool("brain_verify", {}))["total"] == 0  # listing is reading
            _, after = download_brain(store.url, alice.token, team["id"])
            assert after == before  # nothing reached the store
            # Still served after the refusals (the copy was not dropped).
            assert structured(await client.call_tool("brain_recall", {"query": "billing"}))["count"] >= 1

    async def as_editor(base: str) -> str:
        async with mcp_session(base + "/mcp", mint(base, carol, {"brain.read", "brain.write"})) as client:
            used = structured(await client.call_tool("brain_use", {"brain": team["id"]}))
            assert used["brain"]["role"] == "editor" and used["brain"]["read_only"] is False
            saved = structured(await client.call_tool("brain_memorize", {"content": "Carol moved the deploy to 10:00"}))
            assert saved["synced"] is True
            return saved["stored"]["id"]

    asyncio.run(as_viewer(served.base_url))
    carol_id = asyncio.run(as_editor(served.base_url))

    stored, _ = download_brain(store.url, alice.token, team["id"])
    assert {first, carol_id} <= memory_ids(stored)
    assert f'source: "brain-connector (MCP), written by {carol.name}"' in memory_file(store, alice.token, team["id"], carol_id)
    # The viewer sees the same attribution.
    assert f"written by {carol.name}" in memory_file(store, bob.token, team["id"], carol_id)


def test_two_editors_through_two_connectors_lose_nothing(store: RunningStore, tmp_path: Path) -> None:
    alice, carol, dave = store.add_user("alice"), store.add_user("carol"), store.add_user("dave")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "team"}, timeout=30).json()
    share(store, team["id"], carol, "editor")
    share(store, team["id"], dave, "editor")
    per_editor = 8

    async def editor(base: str, user: StoreUser) -> list[str]:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            structured(await client.call_tool("brain_use", {"brain": team["id"]}))

            async def one(n: int) -> str:
                result = await client.call_tool("brain_memorize", {"content": f"{user.name} decision number {n}"})
                return structured(result)["stored"]["id"]

            return list(await asyncio.gather(*(one(n) for n in range(per_editor))))

    async def both(first: str, second: str) -> list[list[str]]:
        return list(await asyncio.gather(editor(first, carol), editor(second, dave)))

    with connector(tmp_path / "one", store) as one, connector(tmp_path / "two", store) as two:
        acknowledged = asyncio.run(both(one.base_url, two.base_url))
        wanted = {memory_id for ids in acknowledged for memory_id in ids}
        assert len(wanted) == 2 * per_editor
        # Held writes (a lost race retried later) reach the store within a bounded wait.
        for _ in range(100):
            stored, _ = download_brain(store.url, alice.token, team["id"])
            if wanted <= memory_ids(stored):
                break
            asyncio.run(asyncio.sleep(0.1))
    assert wanted <= memory_ids(stored)
    sources = {memory_file(store, alice.token, team["id"], memory_id).count(f"written by {carol.name}") for memory_id in acknowledged[0]}
    assert sources == {1}


def test_a_read_agent_key_signs_in_and_reads_only_its_brain(store: RunningStore, served: ServerProcess) -> None:
    alice = store.add_user("alice")
    default_id = brains_of(store.url, alice.token)[0]["id"]
    other = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "private"}, timeout=30).json()
    first = direct_memorize(store.url, alice.token, default_id, "The staging database is refreshed every night")
    direct_memorize(store.url, alice.token, other["id"], "Something the key must not see")
    key = store_cli(store, "key", "create", "--user", alice.name, "--brain", default_id, "--scope", "read", "--label", "ci")
    assert key.startswith("bsk_")

    async def subjects() -> None:
        # The key is its own subject (it never shares the user's copies or brain list), and renews as itself.
        provider = StaticTokenProvider(store.url)
        try:
            by_key = await provider.sign_in(key)
            by_token = await provider.sign_in(alice.token)
            assert by_token.subject == f"static:{alice.id}"
            assert by_key.subject == f"static:{alice.id}/key:{key[:12]}"
            assert (await provider.renew(by_key.subject, key)).subject == by_key.subject
        finally:
            await provider.aclose()

    asyncio.run(subjects())

    async def session(url: str) -> None:
        provider = signed_in_provider(url, key)  # the sign-in page, with the agent key pasted
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
                status = structured(await client.call_tool("brain_status", {}))
                assert [brain["id"] for brain in status["brains"]] == [default_id]
                assert status["brains"][0]["role"] == "viewer"  # a read key views, whatever the user's role
                assert status["active_brain"]["id"] == default_id
                hits = structured(await client.call_tool("brain_recall", {"query": "staging database refreshed"}))
                assert [hit["id"] for hit in hits["results"]][:1] == [first]
                _, before = download_brain(store.url, alice.token, default_id)
                refused = await client.call_tool("brain_memorize", {"content": "The agent key tries to write"})
                assert refused.is_error
                # The owner's own brain through a read-only key: the key is the reason, not a role.
                assert "Not saved" in text(refused) and "read-only agent key" in text(refused)
                assert "viewer" not in text(refused) and "ask its owner" not in text(refused).lower()
                assert "--scope write" in text(refused)
                _, after = download_brain(store.url, alice.token, default_id)
                assert after == before
                # Reading still works after the refusal.
                assert structured(await client.call_tool("brain_recall", {"query": "staging"}))["count"] >= 1

    async def owner_session(base: str) -> None:
        # The user's own sessions are not the key's: they still see both brains.
        async with mcp_session(base + "/mcp", mint(base, alice, {"brain.read", "brain.write"})) as client:
            status = structured(await client.call_tool("brain_status", {}))
            assert {brain["id"] for brain in status["brains"]} == {default_id, other["id"]}

    asyncio.run(session(served.base_url + "/mcp"))
    asyncio.run(owner_session(served.base_url))


def test_a_removed_member_is_refused_at_the_next_call_on_every_replica(store: RunningStore, tmp_path: Path) -> None:
    """The owner removes a member at the store: the member's very next call through either of two
    replicas (one state directory) is refused saying why, though their brain lists are kept 30 s."""
    alice, bob = store.add_user("alice"), store.add_user("bob")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "team"}, timeout=30).json()
    direct_memorize(store.url, alice.token, team["id"], "The on-call rota of the team changes on Mondays")
    share(store, team["id"], bob, "viewer")
    bound_url = f"/mcp/brains/{team['id']}"
    tools_list = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    mcp_headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}

    def bound_post(base: str) -> httpx.Response:
        token = mint(base, bob, {"brain.read"})
        return httpx.post(base + bound_url, json=tools_list, headers={**mcp_headers, **auth(token)}, timeout=30)

    async def member(one: str, two: str) -> None:
        async with mcp_session(one + "/mcp", mint(one, bob, {"brain.read", "brain.write"})) as client:
            structured(await client.call_tool("brain_use", {"brain": team["id"]}))
            hits = structured(await client.call_tool("brain_recall", {"query": "on-call rota Mondays"}))
            assert hits["count"] >= 1
            assert bound_post(two).status_code == 200  # the other replica lists bob's brains too

            assert "no longer shares" in store_cli(store, "unshare", team["id"], "--with", bob.name)

            refused = await client.call_tool("brain_recall", {"query": "on-call rota Mondays"})
            assert refused.is_error, text(refused)
            assert f"You no longer have access to the brain 'team' ({team['id']}), shared by {alice.name}" in text(refused)
            assert "Mondays" not in text(refused)
            after = bound_post(two)
            assert after.status_code == 404
            assert "You no longer have access to the brain 'team'" in after.json()["error_description"]
            # Then the member's own brain, as for any chosen brain that is gone: never the team's.
            status = structured(await client.call_tool("brain_status", {}))
            assert status["active_brain"]["id"] != team["id"]
            assert team["id"] not in {brain["id"] for brain in status["brains"]}

    # The brain list kept 30 s, as in production (the tests' usual 500 ms would hide the wait).
    slow_lists = {"CONNECTOR_REPULL_TTL_MS": "60000"}
    with connector(tmp_path, store, env=slow_lists) as one, connector(tmp_path, store, env=slow_lists) as two:
        asyncio.run(member(one.base_url, two.base_url))
