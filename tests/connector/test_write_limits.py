"""Every way a memory is written holds it to the same limits (`over_limit` in the engine's
memorize.py), against a real store and a real connector process: `brain_memorize` over MCP with
the official client, and the web app's New memory and Edit forms (an import's are in
tests/connector/imports/test_import_cli.py). A memory past a limit is refused naming the field
and the limit, and nothing is written."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from connector.engine.writes.memorize import MAX_CONTEXT_CHARS, MAX_ID_CHARS, MAX_LIST_ITEMS
from tests.support.processes import ServerProcess

from .conftest import RunningStore, auth, brains_of, direct_memorize, download_brain, memory_ids, shared_store
from .test_e2e_tools import mcp_session, mint, module_connector, structured
from .webapp.conftest import csrf_of, signed_in_browser

store = pytest.fixture(shared_store, name="store")
served = pytest.fixture(module_connector, scope="module", name="served")

pytestmark = [pytest.mark.timeout(120)]

ALL = {"brain.read", "brain.write"}
LONG_TAG = "t" * (MAX_CONTEXT_CHARS + 1)


def _version(store: RunningStore, token: str, brain_id: str) -> str | None:
    """The brain's version at the store (its ETag), None before its first write."""
    answer = httpx.get(f"{store.url}/api/brains/{brain_id}/sync", headers=auth(token), timeout=30)
    return answer.headers.get("etag") if answer.status_code == 200 else None


def test_brain_memorize_refuses_what_an_import_refuses(store: RunningStore, served: ServerProcess) -> None:
    """A tag of 301 characters, a supersedes id of 201, more tags than 200 (counted after
    duplicates are dropped or not): refused naming the field and the limit; nothing written. At
    the limits the memory is saved."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    first = direct_memorize(store.url, alice.token, brain_id, "The boiler is serviced in October.")
    before = _version(store, alice.token, brain_id)
    over = [
        ({"tags": ["fine", LONG_TAG]}, f"'tags' holds an item longer than {MAX_CONTEXT_CHARS} characters"),
        ({"tags": f"fine, {LONG_TAG}"}, f"'tags' holds an item longer than {MAX_CONTEXT_CHARS} characters"),
        ({"supersedes": ["m" * (MAX_ID_CHARS + 1)]}, f"holds an item longer than {MAX_ID_CHARS} characters"),
        ({"tags": [f"t{n}" for n in range(MAX_LIST_ITEMS + 1)]}, f"at most {MAX_LIST_ITEMS}"),
    ]

    async def scenario(base: str) -> str:
        async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
            schema = next(tool for tool in (await client.list_tools()).tools if tool.name == "brain_memorize")
            properties = schema.input_schema["properties"]
            assert properties["tags"]["items"]["maxLength"] == MAX_CONTEXT_CHARS  # the model is told the limit
            assert properties["supersedes"]["items"]["maxLength"] == MAX_ID_CHARS
            for arguments, reason in over:
                refused = await client.call_tool("brain_memorize", {"content": "The tap drips.", **arguments})
                message = refused.content[0].text
                assert refused.is_error and reason in message, (arguments.keys(), message)
            assert _version(store, alice.token, brain_id) == before  # nothing reached the store
            kept = structured(await client.call_tool("brain_memorize", {
                "content": "The tap drips.", "tags": ["t" * MAX_CONTEXT_CHARS, *(f"t{n}" for n in range(MAX_LIST_ITEMS - 1))]}))
            return str(kept["stored"]["id"])

    kept = asyncio.run(scenario(served.base_url))
    brain, _ = download_brain(store.url, alice.token, brain_id)
    assert memory_ids(brain) == {first, kept}  # the refused calls wrote nothing
    entry = brain.read_json("index.json")["memories"][kept]
    assert len(entry["tags"]) == MAX_LIST_ITEMS and max(map(len, entry["tags"])) == MAX_CONTEXT_CHARS


def test_the_web_apps_new_memory_and_edit_refuse_an_over_long_tag(store: RunningStore, served: ServerProcess) -> None:
    """The New memory and Edit forms take tags as one comma-separated text: a tag of 301
    characters is refused with the reason, the form comes back as typed, the brain is unchanged."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    memory_id = direct_memorize(store.url, alice.token, brain_id, "The boiler is serviced in October.")
    before = _version(store, alice.token, brain_id)
    browser = signed_in_browser(served.base_url, alice.token, "198.51.100.7")
    csrf = csrf_of(browser.get("/app/new").text)
    reason = f"&#39;<bdi>tags</bdi>&#39; holds an item longer than {MAX_CONTEXT_CHARS} characters; nothing was saved."
    new = browser.post("/app/new", data={"csrf": csrf, "title": "Tap", "content": "The tap drips.",
                                         "type": "learning", "tags": f"house, {LONG_TAG}"})
    assert new.status_code == 400 and reason in new.text, new.text[-3000:]
    assert LONG_TAG in new.text  # the form as typed, to shorten the tag
    edit = browser.post(f"/app/memory/{memory_id}/edit", data={
        "csrf": csrf, "title": "Boiler", "content": "The boiler is serviced in November.", "type": "learning",
        "tags": ", ".join(f"t{n}" for n in range(MAX_LIST_ITEMS + 1))})
    assert edit.status_code == 409, edit.text[-3000:]
    assert f"&#39;<bdi>tags</bdi>&#39; has more than {MAX_LIST_ITEMS} items; nothing was saved." in edit.text
    assert _version(store, alice.token, brain_id) == before  # nothing reached the store
    shorter = browser.post("/app/new", data={"csrf": csrf, "title": "Tap", "content": "The tap drips.",
                                             "type": "learning", "tags": f"house, {LONG_TAG[1:]}"})
    assert shorter.status_code == 303, shorter.text[-3000:]
