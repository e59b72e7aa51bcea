"""A brain's name, end to end: a real store, a real connector process, the official MCP client SDK.

A name is one name however its letters are encoded and whatever spaces surround it: "café"
typed on macOS (NFD: "e" and a combining accent) and in a browser (NFC: "é") look the same,
so they must name the same brain, and a name nobody can see ("\\u200b", " ") names none."""

from __future__ import annotations

import asyncio
import unicodedata
from urllib.parse import quote

import httpx
import pytest

from tests.connector.conftest import RunningStore, auth, brains_of, direct_memorize, shared_store
from tests.connector.test_e2e_tools import mcp_session, mint, module_connector, structured
from tests.support.processes import ServerProcess
from tests.support.store_cli import brain_store

store = pytest.fixture(shared_store, name="store")
served = pytest.fixture(module_connector, scope="module", name="served")

pytestmark = pytest.mark.timeout(180)

NFC = unicodedata.normalize("NFC", "Café")
NFD = unicodedata.normalize("NFD", "Café")


def test_a_name_is_the_same_name_in_nfc_and_nfd_and_with_surrounding_spaces(store: RunningStore,
                                                                            served: ServerProcess) -> None:
    alice = store.add_user("alice")
    assert NFC != NFD and len(NFD) == len(NFC) + 1
    # Made from a Mac's terminal: the store keeps the name as every other client will write it.
    made = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": NFD}, timeout=30)
    assert made.status_code == 201 and made.json()["name"] == NFC
    garden = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "  Garden "}, timeout=30)
    assert garden.status_code == 201 and garden.json()["name"] == "Garden"
    renamed = httpx.patch(f"{store.url}/api/brains/{garden.json()['id']}", headers=auth(alice.token),
                          json={"name": unicodedata.normalize("NFD", "Gärten ")}, timeout=30)
    assert renamed.status_code == 200 and renamed.json()["name"] == "Gärten"
    for invisible in (" ", "\u200b", "\ufeff", "\u200b \u200d"):
        for answer in (httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": invisible},
                                  timeout=30),
                       httpx.patch(f"{store.url}/api/brains/{garden.json()['id']}", headers=auth(alice.token),
                                   json={"name": invisible}, timeout=30)):
            assert answer.status_code == 400, (invisible, answer.text)
    names = {brain["name"] for brain in brains_of(store.url, alice.token)}
    assert names == {"default", NFC, "Gärten"}
    # The store's command line finds it under either spelling too.
    assert made.json()["id"] in brain_store("brain", "rename", NFD, "Bistro", "--user", alice.name, data=store.data)
    assert made.json()["id"] in brain_store("brain", "rename", "bistro ", NFC, "--user", alice.name, data=store.data)

    async def scenario(base: str) -> None:
        token = mint(base, alice, {"brain.read", "brain.write"})
        async with mcp_session(base + "/mcp", token) as client:
            for typed in (NFD, NFC, f" {NFD} ", NFD.lower()):
                used = await client.call_tool("brain_use", {"brain": typed})
                assert structured(used)["brain"]["id"] == made.json()["id"], typed
        # The brain's URL, written by a client that sends the name decomposed.
        url = f"{base}/mcp/brains/{quote(NFD, safe='')}"
        async with mcp_session(url, mint(base, alice, {"brain.read", "brain.write"}, audience=url)) as client:
            status = structured(await client.call_tool("brain_status", {}))
            assert status["active_brain"] == {"id": made.json()["id"], "name": NFC}

    asyncio.run(scenario(served.base_url))


def test_two_brains_whose_names_differ_only_in_encoding_are_refused_as_ambiguous(store: RunningStore,
                                                                                 served: ServerProcess) -> None:
    """Named as one name: brain_use never picks one of two brains a person cannot tell apart
    by the bytes an assistant happened to send; each is still used by its id."""
    alice = store.add_user("alice")
    first = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": NFC}, timeout=30).json()
    second = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": NFD}, timeout=30).json()

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, alice, {"brain.read", "brain.write"})) as client:
            for typed in (NFC, NFD):
                refused = await client.call_tool("brain_use", {"brain": typed})
                assert refused.is_error and "Several brains are named" in refused.content[0].text, typed
                assert first["id"] in refused.content[0].text and second["id"] in refused.content[0].text
            assert structured(await client.call_tool("brain_use", {"brain": second["id"]}))["brain"]["id"] == second["id"]

    asyncio.run(scenario(served.base_url))


def test_one_owners_two_brains_of_one_name_are_told_apart_by_last_change_and_size(store: RunningStore,
                                                                                   served: ServerProcess) -> None:
    """Two brains of Alice's named "work" were listed by name, id and owner: the same owner twice, so
    only the ids differed. Each now comes with its last change and archive size, as the store's
    command line lists them (from the brain list the connector holds: no further request)."""
    alice = store.add_user("alice")
    made = [httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "work"}, timeout=30).json()
            for _ in range(2)]
    direct_memorize(store.url, alice.token, made[1]["id"], "The quarterly plan lives in the shared drive")
    listed = {brain["id"]: brain for brain in brains_of(store.url, alice.token)}
    first, second = (listed[brain["id"]] for brain in made)
    assert first["last_synced_at"] is None and second["last_synced_at"] and second["size_bytes"] > 0
    expected = [f"work ({first['id']}, owned by {alice.name}, last change {first['created_at']}, 0 bytes)",
                f"work ({second['id']}, owned by {alice.name}, last change {second['last_synced_at']}, "
                f"{second['size_bytes']} bytes)"]
    token = mint(served.base_url, alice, {"brain.read", "brain.write"})

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", token) as client:
            refused = await client.call_tool("brain_use", {"brain": "work"})
            assert refused.is_error and "; ".join(expected) in refused.content[0].text, refused.content[0].text
            # Nothing was used: still Alice's first brain.
            assert structured(await client.call_tool("brain_status", {}))["active_brain"]["name"] == "default"

    asyncio.run(scenario(served.base_url))
    bound = httpx.post(served.base_url + "/mcp/brains/work", headers={**auth(token), "Accept": "application/json"},
                       json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert bound.status_code == 409 and "; ".join(expected) in bound.json()["error_description"], bound.text
