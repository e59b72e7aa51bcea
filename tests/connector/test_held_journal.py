"""Held writes survive a connector restart: the journal in the state directory (issue 15, item 3).

Real store and connector processes, driven by the official MCP client SDK. The
store is stopped, a memory is written (held), the connector is killed (SIGKILL,
or stopped with SIGTERM), both are started again, and the memory must reach the
store's archive with the id the tool reported; the user is told on their next
call. Without a state directory the tool says plainly that the held write is not
saved; a journal sealed under another state key is left alone with a clear log line.
"""

from __future__ import annotations

import asyncio
import signal
import stat
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.connector.conftest import RunningStore, brains_of, direct_memorize, download_brain, memory_ids, start_store
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured

pytestmark = pytest.mark.timeout(240)

ALL = {"brain.read", "brain.write"}
HELD = "The staging database moved to the Frankfurt region in March"


def _text(result: Any) -> str:
    return "\n".join(item.text for item in result.content if item.type == "text")


def _stop(manager: Any) -> None:
    manager.__exit__(None, None, None)


def _journal_files(state: Path) -> list[Path]:
    return sorted((state / "held").glob("*.held")) if (state / "held").is_dir() else []


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_held_write_survives_a_restart_of_both_servers(tmp_path: Path, how: signal.Signals) -> None:
    running, store_manager = start_store(tmp_path)
    store: RunningStore = running
    user = store.add_user("journal")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    state = tmp_path / "connector-state"
    env = {"CONNECTOR_REPULL_TTL_MS": "200"}

    async def before(base: str) -> tuple[str, str]:
        async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
            first = structured(await client.call_tool("brain_memorize", {"content": "Saved while the store was up"}))
            assert first["synced"] is True
            _stop(store_manager)  # the store goes down
            await asyncio.sleep(0.3)  # past the freshness interval: the connector has to ask the store
            held = await client.call_tool("brain_memorize", {"content": HELD})
            body = structured(held)
            assert body["synced"] is False and "durable" not in body
            assert "pushed automatically" in _text(held) and "NOT saved" not in _text(held)
            return first["stored"]["id"], body["stored"]["id"]

    try:
        with connector(tmp_path / "first", store, env={**env, "CONNECTOR_STATE_DIR": str(state)}) as server:
            kept_id, held_id = asyncio.run(before(server.base_url))
            # Fsynced before the answer: the sealed file is there now, private, and shows no content.
            files = _journal_files(state)
            assert len(files) == 1
            assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
            assert stat.S_IMODE((state / "held").stat().st_mode) == 0o700
            assert HELD.encode() not in files[0].read_bytes() and user.token.encode() not in files[0].read_bytes()
            server.kill(how)
        assert _journal_files(state), "the journal must outlive the process"

        # Both come back; meanwhile another device wrote to the brain (the replay must keep it).
        running, store_manager = start_store(tmp_path, data=store.data, port=store.port)
        other_id = direct_memorize(store.url, user.token, brain_id, "Written by another device meanwhile")

        async def after(base: str) -> None:
            deadline = time.monotonic() + 60
            while True:
                brain, _ = download_brain(store.url, user.token, brain_id)
                if held_id in memory_ids(brain):
                    break
                assert time.monotonic() < deadline, "the held write never reached the store"
                await asyncio.sleep(0.2)
            assert {kept_id, other_id, held_id} <= memory_ids(brain)
            memories = brain.read_json("index.json")["memories"]
            assert HELD in brain.read_text(memories[held_id]["path"])
            # Written once: the replay kept the id the tool reported.
            assert sum(1 for entry in memories.values() if entry["title"].startswith("The staging database")) == 1
            async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
                told = await client.call_tool("brain_status", {})
                first = told.content[0].text
                assert first.startswith("Important:") and "restarted while 1 write(s) (1 memorize)" in first
                assert "now synced" in first
                assert told.structured_content["pending_writes"] == 0
                again = await client.call_tool("brain_status", {})
                assert "restarted" not in _text(again)

        # A new port: the old one may have gone to another test's server meanwhile.
        with connector(tmp_path / "second", store, env={**env, "CONNECTOR_STATE_DIR": str(state)}) as server:
            asyncio.run(after(server.base_url))
            assert _journal_files(state) == []  # removed once pushed
            log = server.log()
        assert "held writes recovered from the journal" in log and HELD not in log
    finally:
        _stop(store_manager)


def _held_write(store_manager: Any, user: Any, base: str) -> Any:
    """Memorize once with the store up, stop the store, memorize again: the second write is held."""

    async def scenario() -> Any:
        async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
            structured(await client.call_tool("brain_memorize", {"content": "Saved while the store was up"}))
            _stop(store_manager)
            await asyncio.sleep(0.3)
            return await client.call_tool("brain_memorize", {"content": HELD})

    return asyncio.run(scenario())


def test_without_a_state_directory_the_held_write_is_said_to_be_not_saved(tmp_path: Path) -> None:
    running, store_manager = start_store(tmp_path)
    user = running.add_user("ephemeral")
    try:
        env = {"CONNECTOR_STATE_DIR": "", "CONNECTOR_REPULL_TTL_MS": "200"}
        with connector(tmp_path, running, env=env) as server:
            held = _held_write(store_manager, user, server.base_url)
            body = structured(held)
            assert body["synced"] is False and body["durable"] is False
            text = _text(held)
            assert "NOT saved" in text and "restart" in text and "pushed automatically" not in text
            assert "NOT saved" in body["note"]
    finally:
        _stop(store_manager)


def test_a_journal_sealed_under_another_state_key_is_left_alone(tmp_path: Path) -> None:
    running, store_manager = start_store(tmp_path)
    user = running.add_user("rekeyed")
    brain_id = brains_of(running.url, user.token)[0]["id"]
    state = tmp_path / "connector-state"
    env = {"CONNECTOR_STATE_DIR": str(state), "CONNECTOR_REPULL_TTL_MS": "200"}
    try:
        with connector(tmp_path / "first", running, env=env) as server:
            held_id = structured(_held_write(store_manager, user, server.base_url))["stored"]["id"]
            server.kill(signal.SIGKILL)
        [journal] = _journal_files(state)
        sealed = journal.read_bytes()
        running, store_manager = start_store(tmp_path, data=running.data, port=running.port)
        other_key = {**env, "CONNECTOR_STATE_KEY": "ab" * 32}
        with connector(tmp_path / "second", running, env=other_key) as server:
            assert httpx.get(server.base_url + "/health/live", timeout=10).status_code == 200
            log = server.log()
        assert "does not open with this connector's state key" in log and "Traceback" not in log
        assert journal.read_bytes() == sealed  # untouched: the right key can still replay it
        assert held_id not in memory_ids(download_brain(running.url, user.token, brain_id)[0])
        # With the right key again, the write is replayed.
        with connector(tmp_path / "third", running, env=env):
            deadline = time.monotonic() + 60
            while held_id not in memory_ids(download_brain(running.url, user.token, brain_id)[0]):
                assert time.monotonic() < deadline, "the held write was not replayed with the right key"
                time.sleep(0.2)
        assert _journal_files(state) == []
    finally:
        _stop(store_manager)


def test_a_repeated_memorize_while_writes_are_held_does_not_claim_a_sync(tmp_path: Path) -> None:
    """The same content again while the store is away: nothing is written, and the answer says
    the brain's earlier writes are still held instead of "Saved and synced to the store"."""
    running, store_manager = start_store(tmp_path)
    user = running.add_user("repeater")

    async def scenario(base: str) -> Any:
        async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
            structured(await client.call_tool("brain_memorize", {"content": "Saved while the store was up"}))
            _stop(store_manager)
            await asyncio.sleep(0.3)
            assert structured(await client.call_tool("brain_memorize", {"content": HELD}))["synced"] is False
            return await client.call_tool("brain_memorize", {"content": HELD})

    try:
        with connector(tmp_path, running, env={"CONNECTOR_REPULL_TTL_MS": "200"}) as server:
            again = asyncio.run(scenario(server.base_url))
        body = structured(again)
        assert body["written"] is False and body["synced"] is False
        text = _text(again)
        assert "nothing written" in text and "still held" in text
        assert "Saved" not in text and "synced to the store." not in text.replace("not yet synced to the store", "")
    finally:
        _stop(store_manager)
