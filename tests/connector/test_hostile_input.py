"""Hostile input against real processes (issue 24, items 10 and 11, the connector's parts;
deep JSON to the store's reader: tests/store/test_bad_text_input.py).

- A web app import whose memories have a list or an object as `title`/`content` is
  refused with 400 naming the memory, writing nothing.
- Memory ids taken from an archive (`../../signout`, `x?y#z`, `..`) reach the web
  app's links and form actions as one encoded path segment each.
- `brain_memorize` with an `idempotency_key`, sent again (a client retrying after
  a connection reset), answers the first save's id and writes nothing more.
- `brain_memorize` of content that shows nothing (a NUL, a zero-width space, bidi marks)
  is refused as empty, writing nothing.
- A request over the MCP endpoint's 1 MiB is refused with a JSON-RPC error saying the limit,
  which the client shows; a count sent with a fraction (`limit` 1.5) is refused, not cut.
- An argument a tool does not take (`max_token` for `max_tokens`) is ignored, and the result
  says so, naming the argument it probably meant; one its action does not take (`brain_verify`'s
  list given `ids`, `brain_mental_model`'s get given `text`) too, saying what to call instead.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from connector.engine.format.archive import pack_archive
from connector.engine.format.brain import Brain
from connector.engine.writes.memorize import MAX_CONTENT_CHARS
from connector.engine.writes.ops import connector_memorize
from tests.support.processes import ServerProcess

from .conftest import RunningStore, auth, brains_of, download_brain, memory_ids, shared_store, upload_raw
from .test_e2e_mental import models_at_store
from .test_e2e_tools import mcp_session, mint, module_connector, structured
from .webapp.conftest import csrf_of, signed_in_browser

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")
# ... and one connector: none of them restarts it or changes its settings.
served = pytest.fixture(module_connector, scope="module", name="served")

pytestmark = [pytest.mark.timeout(120)]

HOSTILE_IDS = ["../../signout", "evil?done=1#x", ".."]
ALL = {"brain.read", "brain.write"}


def test_a_web_import_with_a_list_or_object_as_title_or_content_is_refused(store: RunningStore, served: ServerProcess) -> None:
    alice = store.add_user("alice")
    browser = signed_in_browser(served.base_url, alice.token, "198.51.100.1")
    csrf = csrf_of(browser.get("/app/transfer").text)
    for bad in ({"title": ["a", "b"], "content": "text"}, {"title": "t", "content": {"nested": [1]}},
                {"title": {"x": 1}, "content": ["y"]}):
        document = {"format": "brain-store/memories", "version": 1, "memories": [bad]}
        answer = browser.post("/app/import", data={"csrf": csrf},
                              files={"file": ("m.json", json.dumps(document).encode(), "application/json")})
        assert answer.status_code == 400, answer.text
        assert "must be text" in answer.text and 'name="reference"' not in answer.text
    log = served.log()
    assert '"status": 500' not in log and "Traceback" not in log
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    never_written = httpx.get(f"{store.url}/api/brains/{brain_id}/sync", headers=auth(alice.token), timeout=30)
    assert never_written.status_code == 404


def _links(html: str) -> list[str]:
    return re.findall(r'(?:href|action)="([^"]*/memory/[^"]*)"', html)


def test_hostile_memory_ids_stay_inside_their_link_segment(store: RunningStore, served: ServerProcess) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    brain, now = Brain(), datetime.now(UTC)
    for number, hostile in enumerate(HOSTILE_IDS):
        stored = connector_memorize(f"Zebra note {number} about striped horses", agent="a").apply(brain, now)
        index = brain.read_json("index.json")
        index["memories"][hostile] = index["memories"].pop(stored["stored"][0]["id"])
        brain.write_json("index.json", index)
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(brain), {"If-None-Match": "*"}).status_code == 200
    browser = signed_in_browser(served.base_url, alice.token, "198.51.100.2")
    found = browser.get("/app/search", params={"query": "zebra striped horses"})
    links = _links(found.text)
    assert sorted(links) == ["/app/memory/%252E%252E", "/app/memory/..%2F..%2Fsignout",
                             "/app/memory/evil%3Fdone%3D1%23x"]
    page = browser.get("/app/memory/evil%3Fdone%3D1%23x")
    assert page.status_code == 200 and "Zebra note 1" in page.text
    links = _links(page.text)
    # The language switch leads to this very page (its id still one segment), the actions below it.
    languages = [link for link in links if "lang=" in link]
    actions = [link for link in links if "lang=" not in link]
    assert len(languages) == 3 and all(link.startswith("/app/memory/evil%3Fdone%3D1%23x?lang=") for link in languages)
    assert actions and all(link.startswith("/app/memory/evil%3Fdone%3D1%23x/") for link in actions), actions
    pinned = browser.post("/app/memory/evil%3Fdone%3D1%23x/pin", data={"csrf": csrf_of(page.text)})
    assert pinned.status_code == 303
    assert pinned.headers["location"].startswith("/app/memory/evil%3Fdone%3D1%23x?done=pin")


def test_memorize_with_an_idempotency_key_writes_once(store: RunningStore, served: ServerProcess) -> None:
    alice = store.add_user("alice")

    async def saves(base: str) -> list[dict]:
        token = mint(base, alice, ALL)
        answers = []
        for key in ("retry-1", "retry-1", "retry-2"):
            # A new connection each time, as a client retrying after a reset would open.
            async with mcp_session(base + "/mcp", token) as client:
                # allow_duplicate: the same content under another key is another save (without it,
                # content the brain already holds is not written again, whatever the key).
                result = await client.call_tool("brain_memorize", {
                    "content": "The release train leaves on Thursdays", "idempotency_key": key,
                    "allow_duplicate": True})
                answers.append(structured(result)["stored"])
        return answers

    first, again, other = asyncio.run(saves(served.base_url))
    assert again["id"] == first["id"] and again.get("already_present") is True
    assert other["id"] != first["id"]
    brain, _ = download_brain(store.url, alice.token, brains_of(store.url, alice.token)[0]["id"])
    assert memory_ids(brain) == {first["id"], other["id"]}


def test_a_retry_key_finds_the_first_save_also_across_midnight_and_never_another_memory() -> None:
    brain, now = Brain(), datetime.now(UTC)
    first = connector_memorize("Fact one here", request_key="k").apply(brain, now)["stored"][0]
    assert connector_memorize("Fact one here", request_key="k").prepare(brain, now) == [first["id"]]
    retried = connector_memorize("Fact one here", request_key="k").apply(brain, now + timedelta(days=1))["stored"][0]
    assert retried["id"] == first["id"] and retried["already_present"] is True
    # The same key with other content is another memory (the key's id is taken: a fresh one is drawn).
    other = connector_memorize("Another fact", request_key="k").apply(brain, now)["stored"][0]
    assert other["id"] != first["id"] and "already_present" not in other
    assert memory_ids(brain) == {first["id"], other["id"]}


def test_memorize_of_content_that_shows_nothing_is_refused(store: RunningStore, served: ServerProcess) -> None:
    """A content of a NUL, a zero-width space or bidi marks is empty to a reader, but str.strip()
    keeps those: brain_memorize saved it as a memory titled "Captured note" holding nothing."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
            for content in ("\x00", "\u200b", "\u202e\u202c", " \x00\t\ufeff\n", "\x1b\x07"):
                refused = await client.call_tool("brain_memorize", {"content": content})
                assert refused.is_error, content
                assert refused.content[0].text == (
                    "'content' must not be empty: it holds only invisible or control characters"), content
            kept = structured(await client.call_tool("brain_memorize", {"content": "\u200bZero-width before a word"}))
            assert kept["synced"] is True

    asyncio.run(scenario(served.base_url))
    brain, _ = download_brain(store.url, alice.token, brain_id)
    assert len(memory_ids(brain)) == 1


def test_a_request_over_the_limit_is_refused_saying_why(store: RunningStore, served: ServerProcess) -> None:
    """A brain_memorize of 2,000,000 characters is over the 1 MiB the connector reads: the SDK's
    plain-text 413 reached the client (and the model) as "Server returned an error response"."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    token = mint(served.base_url, alice, ALL)

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", token) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("brain_memorize", {"content": "y" * 2_000_000})
            message = str(refused.value)
            assert "larger than 1 MiB" in message and "nothing was done" in message, message
            assert f"at most {MAX_CONTENT_CHARS:,} characters of content" in message
            # The session goes on: the next call is answered.
            structured(await client.call_tool("brain_memorize", {"content": "A fact of ordinary length"}))

    asyncio.run(scenario(served.base_url))
    raw = httpx.post(served.base_url + "/mcp", content=b"{" + b" " * (1024 * 1024 + 1) + b"}", timeout=30,
                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                              "Accept": "application/json, text/event-stream"})
    assert raw.status_code == 413 and raw.headers["content-type"] == "application/json"
    assert raw.json()["error"]["message"].startswith("The request is larger than 1 MiB")
    brain, _ = download_brain(store.url, alice.token, brain_id)
    assert len(memory_ids(brain)) == 1  # only the ordinary one


def test_a_count_sent_with_a_fraction_is_refused_not_cut(store: RunningStore, served: ServerProcess) -> None:
    """int() cut 1.5 to 1 without a word, and a max_chars of 0.5 to 0: titles only, not asked for."""
    alice = store.add_user("alice")

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
            structured(await client.call_tool("brain_memorize", {"content": "The red car is parked on level 3"}))
            for tool, sent, shown in (("brain_recall", {"limit": 1.5}, "'limit' must be a whole number, not 1.5"),
                                      ("brain_recall", {"max_chars": 0.5}, "'max_chars' must be a whole number, not 0.5"),
                                      ("brain_recall", {"max_tokens": "99.9"}, "'max_tokens' must be a whole number, not 99.9"),
                                      ("brain_reflect", {"budget": 150.7}, "'budget' must be a whole number, not 150.7")):
                refused = await client.call_tool(tool, {"query": "red car", **sent})
                assert refused.is_error and refused.content[0].text == shown, (tool, sent)
            # A whole number written with a fraction of zero (2.0, "3.0") is that number.
            found = structured(await client.call_tool("brain_recall", {"query": "red car", "limit": 2.0, "max_chars": "3.0"}))
            assert found["results"][0]["content"] == "The" and "note" not in found

    asyncio.run(scenario(served.base_url))


def test_an_argument_a_tool_does_not_take_is_ignored_and_said(store: RunningStore, served: ServerProcess) -> None:
    """A model's `max_token` for `max_tokens` was dropped without a word: the budget it meant was not
    applied, and nothing told it so. The call is still answered (lenient), with a note naming it."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    fact = "The red car is parked on level 3 of the north garage, beside the lift, " * 3

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
            # A write: saved as asked, the misspelt tags left out, and said after memorize's own note.
            saved = await client.call_tool("brain_memorize", {"content": fact, "tag": "cars", "origin": "tool-output"})
            pending_id = structured(saved)["stored"]["id"]
            note = "Ignored an argument brain_memorize does not take: 'tag' (did you mean 'tags'?)."
            assert structured(saved)["note"].endswith(note) and saved.content[-1].text == f"Note: {note}"
            # What the typo meant is not applied: the whole memory comes back, not 5 tokens of it.
            typo = await client.call_tool("brain_recall", {"query": "red car garage", "max_token": 5})
            hit = structured(typo)["results"][0]
            assert hit["content"] == fact.strip() and "content_truncated" not in hit
            note = "Ignored an argument brain_recall does not take: 'max_token' (did you mean 'max_tokens'?)."
            assert structured(typo)["note"].endswith(note) and typo.content[-1].text == f"Note: {note}"
            meant = structured(await client.call_tool("brain_recall", {"query": "red car garage", "max_tokens": 5}))
            assert meant["results"][0]["content_truncated"] is True and "Ignored" not in meant.get("note", "")
            # An unknown argument sent as null (a host sending every key it knows) is noise, not a typo.
            nulls = structured(await client.call_tool("brain_recall", {"query": "red car garage", "reasoning": None, "notes": "", "tags_": []}))
            assert "Ignored" not in nulls.get("note", "")
            # Several: each named, the close ones with what they probably meant, the rest counted;
            # a name as long as the request shown cut; one sent beside the one it resembles not "meant".
            many = {"limt": 1, "Project": "x", "explanation": "why", "query ": "y", "n" * 10_000: 1,
                    **{f"extra{number}": number for number in range(3)}}
            noted = structured(await client.call_tool("brain_recall", {"query": "red car", **many}))["note"]
            assert noted.endswith("Ignored 8 arguments brain_recall does not take: 'limt' (did you mean 'limit'?), "
                                  "'Project' (did you mean 'project'?), 'explanation', 'query ', "
                                  f"'{'n' * 39}\u2026' and 3 more."), noted
            # A refused call says it too, after the refusal.
            refused = await client.call_tool("brain_recall", {"querry": "red car"})
            assert refused.is_error and refused.content[0].text == "'query' is required"
            assert refused.content[-1].text == (
                "Note: Ignored an argument brain_recall does not take: 'querry' (did you mean 'query'?).")
            # brain_verify's list takes no ids: it lists, says so, and approves nothing.
            for sent, default in (({"ids": [pending_id]}, " (the default)"), ({"action": "list", "ids": pending_id}, "")):
                listed = await client.call_tool("brain_verify", sent)
                assert [item["id"] for item in structured(listed)["pending"]] == [pending_id]
                said = (f"'ids' was ignored: action list{default} does not take it. To approve or reject these "
                        "ids, call brain_verify again with action approve or reject.")
                assert structured(listed)["note"] == said and listed.content[-1].text == f"Note: {said}"
            # ChatGPT's search answers exactly OpenAI's shape: one JSON text item, no note.
            searched = await client.call_tool("search", {"query": "red car", "limit": 3})
            assert len(searched.content) == 1 and set(structured(searched)) == {"results"}

    asyncio.run(scenario(served.base_url))
    brain, _ = download_brain(store.url, alice.token, brain_id)
    entry = brain.read_json("index.json")["memories"][next(iter(memory_ids(brain)))]
    # One memory, still pending, saved without the tags it was not sent.
    assert len(memory_ids(brain)) == 1 and entry["quarantined"] and not entry.get("tags")


def test_an_argument_a_mental_model_action_does_not_take_is_said(store: RunningStore, served: ServerProcess) -> None:
    """brain_mental_model's list given a name, get given a text: the argument went unused without a word
    (no model found by that name, no text saved). The call is still answered, with a note naming each
    argument and what to call instead, as brain_verify's list given ids."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    create = "To create a model, call brain_mental_model again with action create, 'name' and 'question'."
    update = "To save a model's text, call brain_mental_model again with action update, 'id', 'text' and 'cited'."
    by_name = "To find a model by its name, send the name as 'id'. " + create

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
            # create takes a name and a question: the id and text sent with them are not used.
            created = await client.call_tool("brain_mental_model", {"action": "create", "name": "Reviews",
                                                                    "question": "How do I like reviews?",
                                                                    "id": "mm_mine", "text": "Small ones."})
            said = ("'id' and 'text' were ignored: action create does not take them. 'id' is for a model that "
                    "exists: call brain_mental_model again with action get, refresh, update or delete. " + update)
            assert structured(created)["note"] == said and created.content[-1].text == f"Note: {said}"
            assert structured(created)["model"]["id"] != "mm_mine" and structured(created)["state"] == "empty"
            # list (the default) takes nothing: a name sent with it finds no model and creates none.
            listed = await client.call_tool("brain_mental_model", {"name": "Reviews"})
            said = f"'name' was ignored: action list (the default) does not take it. {by_name}"
            assert structured(listed)["note"] == said and listed.content[-1].text == f"Note: {said}"
            assert [model["name"] for model in structured(listed)["models"]] == ["Reviews"]
            # get given a text and a budget: both named, each hint once; and then a misspelt argument.
            got = await client.call_tool("brain_mental_model", {"action": "get", "id": "Reviews", "text": "New.",
                                                                "cited": ["mem_1"], "budget": 500, "questoin": "?"})
            said = ("'text', 'cited' and 'budget' were ignored: action get does not take them. " + update + " To "
                    "rewrite a model from that much memory, call brain_mental_model again with action refresh, 'id' "
                    "and 'budget'. Ignored an argument brain_mental_model does not take: 'questoin' (did you mean "
                    "'question'?).")
            assert structured(got)["note"] == said and got.content[-1].text == f"Note: {said}"
            assert structured(got)["state"] == "empty" and not structured(got)["model"]["text"]
            # A refusal says it too, after the refusal: get by 'name' needs the name as 'id'.
            refused = await client.call_tool("brain_mental_model", {"action": "get", "name": "Reviews"})
            assert refused.is_error and refused.content[0].text == "'id' is required"
            assert refused.content[-1].text == f"Note: 'name' was ignored: action get does not take it. {by_name}"
            # A host sending every key it knows, unset ones null, "" or [], hears nothing.
            quiet = await client.call_tool("brain_mental_model", {"action": "list", "id": None, "name": "",
                                                                  "cited": [], "text": None})
            assert "note" not in structured(quiet) and len(quiet.content) == 1

    asyncio.run(scenario(served.base_url))
    # One model, as created: no text from the create, the get or the list.
    assert [(model["name"], model.get("text")) for model in models_at_store(store, alice.token, brain_id)] == [
        ("Reviews", "")]
