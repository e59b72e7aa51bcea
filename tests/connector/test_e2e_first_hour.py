"""A new user's first hour through the official MCP client against real store and connector
processes: a welcome instead of a warning, and a brain_status that reports the brain as it is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.connector.conftest import RunningStore, brains_of
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured

pytestmark = pytest.mark.timeout(300)


def test_a_new_user_is_welcomed_and_status_follows_each_write(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("newcomer")
    [brain] = brains_of(store.url, user.token)

    async def session(url: str) -> None:
        async with mcp_session(url, mint(url.removesuffix("/mcp"), user, {"brain.read", "brain.write"})) as client:
            first = await client.call_tool("brain_status", {})
            status = structured(first)
            # A brain that exists and is empty: a welcome saying what to do next, no warning.
            assert status["identity"]["status"] == "ok"
            note = status["identity"]["note"]
            assert "is ready and empty" in note and "brain_memorize" in note
            text = first.content[0].text
            assert "different account" not in text and "no-cloud-brain" not in text
            empty = structured(await client.call_tool("brain_recall", {"query": "anything at all"}))
            assert "is ready and empty" in empty.get("note", "")

            for n in range(1, 4):
                saved = await client.call_tool("brain_memorize", {"content": f"Fact number {n} about kettles."})
                assert "synced" in saved.content[0].text.lower(), saved.content[0].text
                now = structured(await client.call_tool("brain_status", {}))
                assert now["memory_count"] == n
                [listed] = now["brains"]
                record = brains_of(store.url, user.token)[0]
                # As the store has it now, not as it was listed before the first write.
                assert listed["size_bytes"] == record["size_bytes"] > 0
                assert listed["last_synced_at"] is not None
                assert now["identity"] == {"status": "ok"}
                status_text = (await client.call_tool("brain_status", {})).content[0].text
                assert "never synced" not in status_text and " 0 bytes" not in status_text

    with connector(tmp_path, store) as server:
        asyncio.run(session(server.base_url + "/mcp"))
    assert brain["checksum"] is None
