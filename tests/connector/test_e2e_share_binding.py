"""A share never changes where an existing connection reads or writes (issue #35, item 1).

A real store (users and shares made with its CLI), a real connector process, the official MCP
client SDK. Alice, the oldest account, shares her `default` brain; the people she shares it with
keep reading and writing their own brains through `/mcp` (nothing chosen), `/mcp/brains/default`
and a token minted for that URL before the share; a brand-new account shared with at once writes
its first memory to its own brain; a viewer neither reads Alice's memories nor is refused its own
writes. A name several shared brains answer to is refused with the choices. A sign-in made
through the OAuth flow for a brain's URL stays on the brain the name had then (by id), through a
later share of another brain of that name, a new own brain of that name and a refresh. Alice's
archive at the store is checked to be untouched."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.connector.conftest import (
    RunningStore,
    StoreUser,
    auth,
    brains_of,
    direct_memorize,
    download_brain,
    memory_ids,
    shared_store,
)
from tests.connector.oauth import live
from tests.connector.oauth.live import MemoryStorage
from tests.connector.test_e2e_sharing import share
from tests.connector.test_e2e_tools import mcp_session, mint, module_connector, structured
from tests.support.processes import ServerProcess

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")
# ... and one connector: none of them restarts it or changes its settings.
served = pytest.fixture(module_connector, scope="module", name="served")

pytestmark = pytest.mark.timeout(300)

RW = {"brain.read", "brain.write"}
PLANTED = "Alice keeps the office safe combination as 4-8-15-16"


def own_default(store: RunningStore, user: StoreUser) -> str:
    """The id of the `default` brain the store gave ``user`` at creation."""
    return next(b["id"] for b in brains_of(store.url, user.token) if b["name"] == "default" and b["role"] == "owner")


async def memorize(url: str, token: str, content: str) -> str:
    """The id of the memory ``content`` saved through ``url``."""
    async with mcp_session(url, token) as client:
        return str(structured(await client.call_tool("brain_memorize", {"content": content}))["stored"]["id"])


def new_brain(store: RunningStore, owner: StoreUser, name: str) -> str:
    """Create a brain named ``name`` for ``owner`` at the store; its id."""
    made = httpx.post(f"{store.url}/api/brains", headers=auth(owner.token), json={"name": name}, timeout=30)
    assert made.status_code in (200, 201), made.text
    return str(made.json()["id"])


def stored_in(store: RunningStore, user: StoreUser, brain_id: str) -> set[str]:
    """The memory ids of a brain as the store holds it."""
    return memory_ids(download_brain(store.url, user.token, brain_id)[0])


def test_a_share_moves_no_connection(store: RunningStore, served: ServerProcess) -> None:
    alice = store.add_user("alice")
    bob = store.add_user("bob")
    vic = store.add_user("vic")
    alice_default, bob_default, vic_default = (own_default(store, u) for u in (alice, bob, vic))
    direct_memorize(store.url, alice.token, alice_default, PLANTED)
    _, alice_before = download_brain(store.url, alice.token, alice_default)

    base = served.base_url
    bound_url = base + "/mcp/brains/default"
    # Minted for Bob's `/mcp/brains/default` before anything is shared, and used once.
    bound_token = mint(base, bob, RW, audience=bound_url)
    first = asyncio.run(memorize(bound_url, bound_token, "Bob's first note before any share"))
    assert first in stored_in(store, bob, bob_default)

    share(store, alice_default, bob, "editor")
    share(store, alice_default, vic, "viewer")
    # An account made after the share's brain and shared with at once.
    newbie = store.add_user("newbie")
    share(store, alice_default, newbie, "editor")
    newbie_default = own_default(store, newbie)

    async def bob_everywhere() -> list[str]:
        plain = mint(base, bob, RW)
        async with mcp_session(base + "/mcp", plain) as client:
            status = structured(await client.call_tool("brain_status", {}))
            assert status["active_brain"]["id"] == bob_default, status["active_brain"]
            recalled = structured(await client.call_tool("brain_recall", {"query": "office safe combination"}))
            assert not {hit["id"] for hit in recalled["results"]} & stored_in(store, alice, alice_default)
        return [
            await memorize(base + "/mcp", plain, "salary negotiation target 140k"),
            await memorize(bound_url, plain, "salary negotiation walk-away 120k"),
            await memorize(bound_url, bound_token, "salary negotiation start date in March"),
        ]

    saved = asyncio.run(bob_everywhere())
    newbie_saved = asyncio.run(memorize(base + "/mcp", mint(base, newbie, RW), "newbie's very first memory"))

    async def viewer() -> str:
        async with mcp_session(base + "/mcp", mint(base, vic, RW)) as client:
            recalled = structured(await client.call_tool("brain_recall", {"query": "office safe combination 4-8-15-16"}))
            assert recalled["results"] == [], recalled["results"]
            saved = await client.call_tool("brain_memorize", {"content": "Vic's own dentist is on Friday"})
            return str(structured(saved)["stored"]["id"])

    vic_saved = asyncio.run(viewer())

    # At the store: Alice's archive is exactly as before; every memory is in its writer's brain.
    _, alice_after = download_brain(store.url, alice.token, alice_default)
    assert alice_after == alice_before
    assert {first, *saved} <= stored_in(store, bob, bob_default)
    assert newbie_saved in stored_in(store, newbie, newbie_default)
    assert vic_saved in stored_in(store, vic, vic_default)


def test_a_name_several_shared_brains_answer_to_is_refused_with_the_choices(store: RunningStore, served: ServerProcess) -> None:
    alice, carol, erin = store.add_user("alice"), store.add_user("carol"), store.add_user("erin")
    teams = [{"id": new_brain(store, owner, "team")} for owner in (alice, carol)]
    for team in teams:
        share(store, team["id"], erin, "editor")
    erin_default = own_default(store, erin)

    base = served.base_url
    token = mint(base, erin, RW)
    refused = httpx.post(base + "/mcp/brains/team", headers={**auth(token), "Accept": "application/json, text/event-stream"},
                         json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert refused.status_code == 409, refused.text
    description = refused.json()["error_description"]
    for team, owner in zip(teams, (alice, carol), strict=True):
        assert f"({team['id']}, owned by {owner.name}, last change " in description

    async def by_name() -> None:
        async with mcp_session(base + "/mcp", token) as client:
            used = await client.call_tool("brain_use", {"brain": "team"})
            assert used.is_error
            message = used.content[0].text
            assert "Several brains are named 'team'" in message and all(t["id"] in message for t in teams)
            # Nothing was chosen: the connection still writes to Erin's own brain.
            saved = structured(await client.call_tool("brain_memorize", {"content": "Erin's note"}))
            assert saved["stored"]["id"] in stored_in(store, erin, erin_default)
            # By id, each is reachable.
            chosen = structured(await client.call_tool("brain_use", {"brain": teams[1]["id"]}))
            assert chosen["brain"]["id"] == teams[1]["id"]

    asyncio.run(by_name())
    by_id = asyncio.run(memorize(base + f"/mcp/brains/{teams[0]['id']}", token, "Erin writes to Alice's team"))
    assert by_id in stored_in(store, alice, teams[0]["id"])


def test_a_sign_in_for_a_brains_url_keeps_that_brain_by_id(store: RunningStore, served: ServerProcess) -> None:
    carol, alice, erin = store.add_user("carol"), store.add_user("alice"), store.add_user("erin")
    carols = new_brain(store, carol, "team")
    share(store, carols, erin, "editor")

    async def scenario(base: str) -> tuple[list[str], str, str]:
        url = base + "/mcp/brains/team"
        storage = MemoryStorage()
        provider = live.signed_in_provider(url, erin.token, storage, client_name="bound client")
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
                saved = [structured(await client.call_tool("brain_memorize", {"content": "Team retro on Fridays"}))]
                # Later another brain named "team" is shared with Erin, and Erin makes her own.
                share(store, new_brain(store, alice, "team"), erin, "editor")
                erins = new_brain(store, erin, "team")
                saved.append(structured(await client.call_tool("brain_memorize", {"content": "Team lunch on Tuesdays"})))
        # A refreshed access token of that sign-in keeps the brain too.
        assert storage.tokens is not None and storage.client is not None
        refreshed = httpx.post(base + "/token", timeout=30, data={
            "grant_type": "refresh_token", "refresh_token": storage.tokens.refresh_token,
            "client_id": storage.client.client_id})
        assert refreshed.status_code == 200, refreshed.text
        saved_ids = [str(s["stored"]["id"]) for s in saved]
        saved_ids.append(await memorize(url, refreshed.json()["access_token"], "Team offsite in June"))
        # A token for /mcp at that URL names the brain now: Erin's own "team" comes first, once
        # the connector has listed her brains again (here at most CONNECTOR_REPULL_TTL_MS = 500 ms
        # apart; docs/sharing.md): her brain was made at the store, behind the connector's back.
        await asyncio.sleep(0.6)
        by_name = await memorize(url, mint(base, erin, RW), "Erin's own team note")
        return saved_ids, by_name, erins

    saved, by_name, erins = asyncio.run(scenario(served.base_url))
    assert set(saved) <= stored_in(store, carol, carols)
    assert by_name in stored_in(store, erin, erins)


def test_a_shared_brain_whose_name_differs_only_in_case_takes_no_connection(store: RunningStore,
                                                                            served: ServerProcess) -> None:
    """Bob's own brain is `Work`, reached as `work` (names match ignoring case). Alice then shares
    her brain named exactly `work`: the name still means Bob's own brain, at a brain's URL and in
    brain_use, and Alice's archive is untouched."""
    alice, bob = store.add_user("alice"), store.add_user("bob")
    bob_work = new_brain(store, bob, "Work")
    base = served.base_url
    token = mint(base, bob, RW)
    before_share = asyncio.run(memorize(base + "/mcp/brains/work", token, "Bob's quarterly goals draft"))
    assert before_share in stored_in(store, bob, bob_work)

    alice_work = new_brain(store, alice, "work")
    direct_memorize(store.url, alice.token, alice_work, PLANTED)
    _, alice_before = download_brain(store.url, alice.token, alice_work)
    share(store, alice_work, bob, "editor")
    asyncio.run(asyncio.sleep(1.0))  # past the connector's brain-list TTL (500 ms here)

    after_share = asyncio.run(memorize(base + "/mcp/brains/work", token, "Bob's performance review notes"))

    async def use_by_name() -> str:
        async with mcp_session(base + "/mcp", token) as client:
            return str(structured(await client.call_tool("brain_use", {"brain": "work"}))["brain"]["id"])

    assert asyncio.run(use_by_name()) == bob_work
    assert after_share in stored_in(store, bob, bob_work)
    _, alice_after = download_brain(store.url, alice.token, alice_work)
    assert alice_after == alice_before
