"""The review queue across processes: real store, two connector processes, the official MCP client SDK.

The queue lives in the brain (``pair-review.json``), so what one connector flags is
listed through another: a pair flagged by ``brain_memorize`` through one connector, and a
pair found on pull (a device writes, straight to the store, a memory that repeats one the
brain had; the connector that pulls it checks it and queues the pair through its normal
write path), are both counted by the other connector's ``brain_status``; a third (the web
app) lists the pair and decides it, and both connectors then count none.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from connector.engine.tending.review import review_document
from tests.connector.conftest import RunningStore, brains_of, direct_memorize, download_brain, upload_brain
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured
from tests.connector.webapp.conftest import app_client, sign_in
from tests.engine.similar_support import governance_brain
from tests.engine.writes_support import check_consistency

pytestmark = pytest.mark.timeout(300)

FACT = "The spare house key is under the blue flowerpot by the back door."


def test_a_duplicate_another_device_wrote_is_flagged_on_pull_and_seen_by_another_connector(
        store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("alice")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    original = direct_memorize(store.url, user.token, brain_id, FACT)
    direct_memorize(store.url, user.token, brain_id, "Our dentist is Dr. Okafor on Elm Street.")
    env = {"CONNECTOR_RECALL_MODE": "hybrid", "CONNECTOR_REPULL_TTL_MS": "1"}

    async def scenario(first: str, second: str) -> None:
        scopes = {"brain.read", "brain.write"}
        async with mcp_session(first + "/mcp", mint(first, user, scopes)) as a, \
                mcp_session(second + "/mcp", mint(second, user, scopes)) as b:
            # Connector A uses the brain with meaning matching (so its model is warm) ...
            found = structured(await a.call_tool("brain_recall", {"query": "where is the house key"}))
            assert found["results"][0]["id"] == original
            assert structured(await b.call_tool("brain_status", {}))["review_pending_count"] == 0
            # ... then another device writes the same fact again, straight to the store.
            copy = direct_memorize(store.url, user.token, brain_id, FACT)
            # A's next call pulls it; the check runs after the pull and queues the pair at the store.
            deadline = time.monotonic() + 120
            while True:
                structured(await a.call_tool("brain_status", {}))
                status = structured(await b.call_tool("brain_status", {}))
                if status["review_pending_count"] == 1:
                    break
                assert time.monotonic() < deadline, "the pulled duplicate was never queued"
                await asyncio.sleep(0.5)
            text = (await b.call_tool("brain_status", {})).content[0].text
            assert "1 pair of similar memories waiting for review" in text
            brain, _ = download_brain(store.url, user.token, brain_id)
            [pair] = review_document(brain)["pairs"]
            assert (pair["new"], pair["old"], pair["relation"], pair["via"], pair["status"]) == \
                (copy, original, "duplicate", "pull", "pending")
            # The copy counts as checked: listed in "checked", or created no later than "checked_until".
            doc, created = review_document(brain), json.loads(brain.read_text("index.json"))["memories"][copy]["created"]
            assert copy in doc["checked"] or (doc["checked_until"] is not None and created <= doc["checked_until"])
            check_consistency(brain)

    with connector(tmp_path / "a", store, env=env) as first, connector(tmp_path / "b", store, env=env) as second:
        asyncio.run(scenario(first.base_url, second.base_url))


def test_a_near_duplicate_memorized_through_one_connector_waits_in_the_queue_of_another(
        store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("bob")
    brain, ids = governance_brain()
    brain_id = upload_brain(store.url, user.token, brain)
    env = {"CONNECTOR_REPULL_TTL_MS": "1"}

    async def scenario(first: str, second: str) -> None:
        scopes = {"brain.read", "brain.write"}
        async with mcp_session(first + "/mcp", mint(first, user, scopes)) as a, \
                mcp_session(second + "/mcp", mint(second, user, scopes)) as b:
            assert structured(await b.call_tool("brain_status", {}))["review_pending_count"] == 0
            moved = await a.call_tool("brain_memorize", {
                "title": "Dentist appointment moved",
                "content": "The dentist appointment is on 21 May at 3 pm at the clinic near Ikebukuro station.",
            })
            answer = structured(moved)
            new_id = answer["stored"]["id"]
            assert answer["review_queued"] == [ids["Dentist appointment"]]
            assert "review queue" in moved.content[0].text
            assert structured(await a.call_tool("brain_status", {}))["review_pending_count"] == 1
            status = await b.call_tool("brain_status", {})
            assert structured(status)["review_pending_count"] == 1
            assert "1 pair of similar memories waiting for review" in status.content[0].text
            stored, _ = download_brain(store.url, user.token, brain_id)
            [pair] = review_document(stored)["pairs"]
            assert (pair["new"], pair["old"], pair["relation"], pair["via"], pair["status"], pair["by"]) == \
                (new_id, ids["Dentist appointment"], "update", "write", "pending", "pytest-e2e")
            # Nothing was superseded on the guess.
            assert "superseded_by" not in stored.read_json("index.json")["memories"][ids["Dentist appointment"]]
            check_consistency(stored)

    async def pending_through(base: str) -> int:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read"})) as client:
            return int(structured(await client.call_tool("brain_status", {}))["review_pending_count"])

    with connector(tmp_path / "a", store, env=env) as first, connector(tmp_path / "b", store, env=env) as second:
        asyncio.run(scenario(first.base_url, second.base_url))
        # A third connector (the web app, in process) lists the pair and decides it; the others see it decided.
        with app_client(store.url) as web:
            csrf = sign_in(web, user.token)
            page = web.get("/app/review")
            assert "1 pair waiting" in page.text and "Dentist appointment moved" in page.text
            [new_id] = re.findall(r'name="new" value="([^"]+)"', page.text)[:1]
            done = web.post("/app/review", data={"csrf": csrf, "new": new_id, "old": ids["Dentist appointment"],
                                                 "decision": "keep_new"})
            assert done.status_code == 303
        assert asyncio.run(pending_through(first.base_url)) == 0
        assert asyncio.run(pending_through(second.base_url)) == 0
    stored, _ = download_brain(store.url, user.token, brain_id)
    assert stored.read_json("index.json")["memories"][ids["Dentist appointment"]]["superseded_by"] == new_id
