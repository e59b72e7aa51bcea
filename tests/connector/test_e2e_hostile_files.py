"""Values in a brain's files are hostile data (issue #35 items 3 and 6): an editor uploads, as the `brain`
command line can, an archive whose values the pages and tools cannot format or whose size would make
every call slow; real store and connector processes, the web pages through a signed-in 'browser',
the tools through the official MCP client SDK. Nothing answers 5xx or "failed unexpectedly"."""

from __future__ import annotations

import asyncio
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from connector.engine.format.archive import pack_archive
from connector.engine.format.brain import Brain
from connector.engine.tending.mental import MENTAL_FILE, CreateModel, SaveModel, new_model_id
from connector.engine.writes.ops import connector_memorize
from tests.connector.conftest import RunningStore, brains_of, device_write, shared_store, upload_raw
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured
from tests.connector.webapp.conftest import signed_in_browser

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(300)

ALL = {"brain.read", "brain.write"}
EARLY = "0001-01-01T00:00:00+14:00"  # before year 1 in UTC: no datetime holds it
LATE = "9999-12-31T23:59:59-14:00"  # after year 9999 in UTC
HUGE = 1e300


def hostile_values(brain: Brain) -> dict[str, str]:
    """Memories, a review pair and a mental model whose dates and score no page can format as given."""
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    old = connector_memorize("Deploys go out on Fridays after the standup", agent="cli").apply(brain, now)
    new = connector_memorize("Deploys go out on Fridays after standup", agent="cli").apply(brain, now)
    old_id, new_id = old["stored"][0]["id"], new["stored"][0]["id"]
    model_id = new_model_id()
    CreateModel(model_id, "Deploys", "When do deploys go out?").apply(brain, now)
    SaveModel(model_id, f"On Fridays [{old_id}].", [], "operator", "llama3.2").apply(brain, now)

    index = brain.read_json("index.json")
    for key, value in (("created", EARLY), ("last_accessed", LATE), ("valid_from", EARLY), ("valid_until", LATE),
                       ("vetted_at", LATE), ("strength", HUGE), ("salience", HUGE)):
        index["memories"][old_id][key] = value
    index["memories"][new_id]["created"] = LATE
    index["memories"][new_id]["confidence"] = -HUGE
    brain.write_json("index.json", index)
    # Front matter PyYAML cannot construct: a date that is no date (brain_read failed "unexpectedly").
    path = index["memories"][new_id]["path"]
    brain.write(path, brain.read_text(path).replace("---\n", "---\nreviewed: 2024-13-45\n", 1).encode())
    brain.write_json("pair-review.json", {
        "version": 1, "checked_until": LATE, "checked": [],
        "pairs": [{"new": new_id, "old": old_id, "relation": "duplicate", "score": HUGE, "flagged_at": EARLY,
                   "via": "pull", "by": "cli", "status": "pending"}],
    })
    models = brain.read_json(MENTAL_FILE)
    models["models"][0].update(created=EARLY, refreshed_at=LATE)
    brain.write_json(MENTAL_FILE, models)
    return {"old": old_id, "new": new_id, "model": model_id}


def deeply_nested(brain: Brain) -> None:
    """A review file nested 100,000 deep (valid JSON; no recursive reader gets through it)."""
    connector_memorize("Standups are at nine", agent="cli").apply(brain, datetime(2026, 3, 1, tzinfo=UTC))
    deep = b'{"version": 1, "pairs": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"
    brain.write("pair-review.json", deep)
    brain.write(MENTAL_FILE, b'{"version": 1, "models": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")


def pages_answer(base: str, token: str, paths: list[str]) -> None:
    """Every page answers, none with a server error."""
    failed = []
    with closing(signed_in_browser(base, token, "203.0.113.7")) as browser:
        for path in paths:
            page = browser.get(path)
            if page.status_code != 200 or "Traceback" in page.text:
                failed.append((path, page.status_code))
    assert not failed, failed


async def tools_answer(client: Any, model_id: str | None) -> dict[str, Any]:
    """brain_status and brain_mental_model answer (no "failed unexpectedly"); brain_status's result."""
    status = structured(await client.call_tool("brain_status", {}))
    listing = structured(await client.call_tool("brain_mental_model", {"action": "list"}))
    if model_id:
        got = structured(await client.call_tool("brain_mental_model", {"action": "get", "id": model_id}))
        assert got["model"]["id"] == model_id
        assert [model["id"] for model in listing["models"]] == [model_id]
    for name, arguments in (("brain_recall", {"query": "deploys fridays"}), ("brain_verify", {"action": "list"}),
                            ("search", {"query": "deploys"})):
        result = await client.call_tool(name, arguments)
        assert not result.is_error, (name, result.content[0].text)
    return status


def test_hostile_values_in_uploaded_files_break_no_page_and_no_tool(store: RunningStore, tmp_path: Path) -> None:
    alice, bob = store.add_user("alice"), store.add_user("bob")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    ids = device_write(store.url, alice.token, brain_id, hostile_values)
    device_write(store.url, bob.token, brains_of(store.url, bob.token)[0]["id"], deeply_nested)

    with connector(tmp_path / "c", store) as server:
        base = server.base_url
        pages_answer(base, alice.token, ["/app", "/app/review", "/app/mental", f"/app/mental/{ids['model']}",
                                         f"/app/memory/{ids['old']}", f"/app/memory/{ids['new']}",
                                         f"/app/memory/{ids['old']}/edit", "/app/search?q=deploys", "/app/archive",
                                         "/app/history", "/app/transfer"])
        pages_answer(base, bob.token, ["/app", "/app/review", "/app/mental"])

        async def scenario() -> None:
            async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
                status = await tools_answer(client, ids["model"])
                assert status["memory_count"] == 2
                for memory_id in (ids["old"], ids["new"]):
                    read = structured(await client.call_tool("brain_read", {"id": memory_id}))
                    assert "Deploys go out" in str(read)
                # Input no datetime can hold is refused with a clear message, and nothing is written.
                for field, value in (("valid_from", EARLY), ("valid_until", LATE)):
                    refused = await client.call_tool("brain_memorize", {"content": "Launch is on Monday",
                                                                        field: value})
                    assert refused.is_error, refused.content[0].text
                    message = refused.content[0].text
                    assert field in message and "unexpectedly" not in message, message
                assert structured(await client.call_tool("brain_status", {}))["memory_count"] == 2
            async with mcp_session(base + "/mcp", mint(base, bob, ALL)) as client:
                status = await tools_answer(client, None)
                assert status["memory_count"] == 1

        asyncio.run(scenario())
        logs = "".join(path.read_text() for path in (tmp_path / "c").glob("connector-*.log"))
        assert "Traceback" not in logs and "request failed" not in logs


def test_a_brain_holding_ten_thousand_mental_models_costs_a_bounded_call(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]

    def many_models(brain: Brain) -> None:
        now = datetime(2026, 3, 1, 12, tzinfo=UTC)
        notes = [connector_memorize(f"Team note {n}: the platform team deploys on Thursdays", agent="cli")
                 .apply(brain, now)["stored"][0]["id"] for n in range(5)]
        first = notes[0]
        brain.write_json(MENTAL_FILE, {"version": 1, "models": [
            {"id": f"mm_{n:012x}", "name": f"Model {n}", "question": f"Which team deploys on Thursdays? {n}",
             "created": "2026-03-01T12:00:00.000Z", "created_by": "cli", "text": f"Platform [{first}].",
             "cited": [first], "refreshed_at": "2026-02-01T12:00:00.000Z",  # before the notes: each is stale
             "written_by": {"source": "operator", "model": "m"}, "updated_by": ""} for n in range(10_000)]})

    device_write(store.url, alice.token, brain_id, many_models)
    with connector(tmp_path / "c", store) as server:
        base = server.base_url

        async def scenario() -> None:
            async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
                status = structured(await client.call_tool("brain_status", {}))
                assert status["mental_models"]["count"] == 10_000
                assert status["mental_models"]["read"] == 50 and "10,000" in status["mental_models"]["note"]
                listing = structured(await client.call_tool("brain_mental_model", {"action": "list"}))
                assert len(listing["models"]) == 50 and listing["total"] == 10_000
                assert "stale" in {model["state"] for model in listing["models"]}  # they were checked
                assert "10,000" in listing["note"] and "first 50" in listing["note"]
                # A model past the bound is not read; one within it is.
                beyond = await client.call_tool("brain_mental_model", {"action": "get", "id": "mm_00000000270f"})
                assert beyond.is_error and "No mental model" in beyond.content[0].text
                assert structured(await client.call_tool("brain_mental_model", {"action": "get",
                                                                                "id": "mm_000000000031"}))

        asyncio.run(scenario())
        # How long each call takes is shown by bench/ (not asserted here): the bound above is what keeps it short.
        with closing(signed_in_browser(base, alice.token, "203.0.113.8")) as browser:
            page = browser.get("/app/mental")
            assert page.status_code == 200 and page.text.count('href="/app/mental/mm_') == 50
            assert "holds 10,000 mental models; only the first 50 are read" in page.text.replace("&#39;", "'")


def test_a_damaged_index_is_said_by_status_and_by_every_refusal(store: RunningStore, tmp_path: Path) -> None:
    """A device pushed a brain whose index.json is no brain index (here valid JSON, a list): recall
    refused with "index.json is not a valid brain index", a write with "is not valid JSON" (it is), and
    brain_status, where a model looks next, answered "Memories: 0 ... Identity: ok"."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    damaged = Brain({"index.json": b"[1, 2]\n", "notes/a.md": b"---\nid: x\n---\nA note\n"})
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(damaged), {"If-None-Match": "*"}).status_code == 200

    with connector(tmp_path / "c", store) as server:
        base = server.base_url

        async def scenario() -> dict[str, str]:
            async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
                said = {"status": structured(await client.call_tool("brain_status", {}))["note"]}
                for name, arguments in (("brain_recall", {"query": "note"}), ("brain_memorize", {"content": "A fact"})):
                    refused = await client.call_tool(name, arguments)
                    assert refused.is_error, name
                    said[name] = refused.content[0].text
                return said

        said = asyncio.run(scenario())
    assert said["status"].startswith("This brain's index (index.json) is damaged: recall finds nothing and writes")
    assert all("History page" in message and "damaged" in message for message in said.values()), said
    assert "not valid JSON" not in said["brain_memorize"]


def test_an_index_with_a_null_memories_map_is_not_called_damaged(store: RunningStore, tmp_path: Path) -> None:
    """`"memories": null` is read as no memories yet by recall and by writes (which fill it in), but
    brain_status said the index was damaged and that writes were refused, sending the user to the
    History page for a brain that works."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    empty = Brain({"index.json": b'{"version": 2, "memories": null}\n'})
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(empty), {"If-None-Match": "*"}).status_code == 200

    with connector(tmp_path / "c", store) as server:
        base = server.base_url

        async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
            async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
                before = structured(await client.call_tool("brain_status", {}))
                fact = {"content": "The spare key is under the mat."}
                saved = structured(await client.call_tool("brain_memorize", fact))
                return before, saved, structured(await client.call_tool("brain_status", {}))

        before, saved, after = asyncio.run(scenario())
    assert "damaged" not in before.get("note", ""), before["note"]
    assert saved["synced"] is True and after["memory_count"] == 1
