"""brain_memorize's similar check over MCP: a real connector and store, the official client SDK."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.connector.conftest import RunningStore, download_brain, memory_ids, upload_brain
from tests.connector.test_e2e_tools import connector, index_entry, mcp_session, mint, structured
from tests.engine.similar_support import MEMORIES, governance_brain

pytestmark = pytest.mark.timeout(300)


def test_memorize_reports_similar_memories(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("governed")
    brain, ids = governance_brain()
    brain_id = upload_brain(store.url, user.token, brain)

    def stored_ids() -> set[str]:
        return memory_ids(download_brain(store.url, user.token, brain_id)[0])

    async def scenario(base: str) -> None:
        token = mint(base, user, {"brain.read", "brain.write"})
        async with mcp_session(base + "/mcp", token) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            schema = tools["brain_memorize"].input_schema["properties"]
            assert schema["on_similar"]["enum"] == ["report", "supersede"] and "allow_duplicate" in schema
            assert "similar" in tools["brain_memorize"].output_schema["properties"]

            # Exactly the content of a memory (other spacing and case): not written, its id returned.
            baked = MEMORIES[6]["content"]
            again = await client.call_tool("brain_memorize", {"content": baked.upper(), "title": "Sourdough"})
            answer = structured(again)
            assert answer["written"] is False and answer["stored"]["id"] == ids["Bread baking"]
            assert answer["stored"]["path"] and answer["stored"]["type"] == "learning"
            assert answer["similar"][0] == {
                "id": ids["Bread baking"], "relation": "duplicate", "score": 1.0, "title": "Bread baking", "exact": True,
            }
            text = again.content[0].text
            assert "nothing written" in text and ids["Bread baking"] in text and "allow_duplicate" in text
            assert stored_ids() == set(ids.values())

            # allow_duplicate writes it anyway, and still says what it repeats.
            forced = structured(await client.call_tool(
                "brain_memorize", {"content": baked, "title": "Sourdough", "allow_duplicate": True}))
            assert "written" not in forced and forced["stored"]["id"] not in ids.values()
            assert forced["similar"][0]["id"] == ids["Bread baking"] and forced["similar"][0]["exact"] is True
            assert stored_ids() == {*ids.values(), forced["stored"]["id"]}

            # A changed value: written, the update named with what to do, nothing superseded on a guess.
            moved = await client.call_tool("brain_memorize", {
                "title": "Dentist appointment moved",
                "content": "The dentist appointment is on 21 May at 3 pm at the clinic near Ikebukuro station.",
            })
            moved_answer = structured(moved)
            flagged = [item for item in moved_answer["similar"] if item["relation"] != "related"]
            assert [(item["id"], item["relation"]) for item in flagged] == [(ids["Dentist appointment"], "update")]
            assert 0 < flagged[0]["score"] < 1 and flagged[0]["title"] == "Dentist appointment"
            text = moved.content[0].text
            assert "update of 'Dentist appointment'" in text and "supersedes" in text
            assert "superseded" not in moved_answer["stored"]
            assert "superseded_by" not in (index_entry(store, user, brain_id, ids["Dentist appointment"]) or {})

            # on_similar=supersede: the flagged update is superseded by the new memory.
            upgraded = structured(await client.call_tool("brain_memorize", {
                "title": "Work laptop",
                "content": "My work laptop is a ThinkPad X1 Carbon with 64 GB of memory and Ubuntu 24.04.",
                "on_similar": "supersede",
            }))
            new_id = upgraded["stored"]["id"]
            assert upgraded["stored"]["superseded"] == [ids["Work laptop"]]
            assert "on_similar=supersede" in upgraded["note"]
            assert (index_entry(store, user, brain_id, ids["Work laptop"]) or {}).get("superseded_by") == new_id

            # An explicit supersedes settles the pair: no advice to forget the new memory as a repeat.
            tabs = structured(await client.call_tool("brain_memorize", {"content": "Alice prefers tabs over spaces"}))
            spaces = structured(await client.call_tool("brain_memorize", {
                "content": "Alice now prefers spaces over tabs", "supersedes": [tabs["stored"]["id"]]}))
            assert spaces["stored"]["superseded"] == [tabs["stored"]["id"]]
            assert tabs["stored"]["id"] in [item["id"] for item in spaces["similar"] if item["relation"] != "related"]
            assert tabs["stored"]["id"] not in spaces.get("note", "")

            # The content of an old version (superseded) stated again is the current fact once more:
            # written, not "already in memory" pointing at what recall ranks down as outdated.
            back = structured(await client.call_tool("brain_memorize", {"content": "Alice prefers tabs over spaces"}))
            assert "written" not in back and back["stored"]["id"] != tabs["stored"]["id"]
            assert [item["id"] for item in back["similar"] if item.get("exact")] == [tabs["stored"]["id"]]
            again = structured(await client.call_tool("brain_memorize", {"content": "Alice prefers tabs over spaces"}))
            assert again["written"] is False and again["stored"]["id"] == back["stored"]["id"]
            # So is a fact whose validity ended.
            ended = structured(await client.call_tool("brain_memorize", {
                "content": "The lab is in room 12 of the west wing", "valid_until": "2020-01-01"}))
            reopened = structured(await client.call_tool("brain_memorize", {
                "content": "The lab is in room 12 of the west wing"}))
            assert "written" not in reopened and reopened["stored"]["id"] != ended["stored"]["id"]

            # Nothing similar: a plain write with an empty list.
            plain = structured(await client.call_tool(
                "brain_memorize", {"content": "Started cello lessons on Saturday mornings in Kichijoji."}))
            assert [item for item in plain["similar"] if item["relation"] != "related"] == []
            # Said again at once (the new version's index may still be building): not written twice.
            repeated = structured(await client.call_tool(
                "brain_memorize", {"content": "Started cello lessons on Saturday mornings in Kichijoji."}))
            assert repeated["written"] is False and repeated["stored"]["id"] == plain["stored"]["id"]

    with connector(tmp_path, store) as server:
        asyncio.run(scenario(server.base_url))
