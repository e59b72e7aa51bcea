"""Writes the store refuses for good: a brain deleted at the store, a store token rotated.

Real store and connector processes. A held write (store unreachable) whose brain is
then deleted must stop being retried, be dropped, and be told to the user on their
next tool call; a write refused at once says so in its own result. Neither the
connector's log nor any brain at the store keeps the dropped content.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.connector.conftest import RunningStore, auth, brains_of, download_brain, memory_ids, running_store, shared_store
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured
from tests.support.processes import free_port

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(180)

ALL = {"brain.read", "brain.write"}


class CuttableProxy:
    """A loopback TCP relay to the store that the test can cut (refuse and close everything) and restore."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cut = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.cut:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def set_cut(self, cut: bool) -> None:
        """Cut: new connections are closed at once and open ones are torn down."""
        self.cut = cut
        if cut:
            with self._lock:
                sockets, self._sockets = self._sockets, []
            for sock in sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def close(self) -> None:
        self._closed = True
        self.set_cut(True)
        self._listener.close()


@contextmanager
def proxy_to(store: RunningStore) -> Iterator[CuttableProxy]:
    relay = CuttableProxy(store.port)
    try:
        yield relay
    finally:
        relay.close()


def text_of(result: Any) -> str:
    return "\n".join(item.text for item in result.content if item.type == "text")


def all_stored_ids(store: RunningStore, token: str) -> set[str]:
    found: set[str] = set()
    for record in brains_of(store.url, token):
        if record.get("checksum"):
            brain, _ = download_brain(store.url, token, record["id"])
            found |= memory_ids(brain)
    return found


def test_write_to_a_brain_deleted_at_the_store_is_refused_and_said(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("deleted")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    secret = "The vault combination is 31-41-59"

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
            kept = structured(await client.call_tool("brain_memorize", {"content": "A fact saved before the deletion"}))
            assert kept["synced"] is True
            # Another device deletes the brain; the connector's copy is fresh, so it does not know yet.
            deleted = httpx.delete(f"{store.url}/api/brains/{brain_id}", headers=auth(user.token), timeout=30)
            assert deleted.status_code in (200, 204)
            refused = await client.call_tool("brain_memorize", {"content": secret})
            assert refused.is_error
            message = text_of(refused)
            assert "Not saved" in message and "deleted at the store" in message and secret not in message
            # The next call is not told again, and a new write goes to a new brain (created for it).
            after = structured(await client.call_tool("brain_memorize", {"content": "A fact saved after the deletion"}))
            assert after["synced"] is True and "dropped" not in text_of(await client.call_tool("brain_status", {}))
            records = brains_of(store.url, user.token)
            assert [r["id"] for r in records] != [brain_id] and len(records) == 1
            assert after["stored"]["id"] in all_stored_ids(store, user.token)

    with connector(tmp_path, store, env={"CONNECTOR_REPULL_TTL_MS": "120000"}) as server:
        asyncio.run(scenario(server.base_url))
        log = server.log()
    assert "held writes dropped" in log and secret not in log


def test_held_write_of_a_brain_deleted_meanwhile_is_dropped_and_told_once(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("outage")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    held_content = "Written while the store was out of reach"

    async def scenario(server: Any, relay: CuttableProxy) -> None:
        base = server.base_url
        async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
            structured(await client.call_tool("brain_memorize", {"content": "A fact saved while all was well"}))
            relay.set_cut(True)
            held = structured(await client.call_tool("brain_memorize", {"content": held_content}))
            assert held["synced"] is False
            # While the connector cannot reach it, the brain is deleted at the store.
            assert httpx.delete(f"{store.url}/api/brains/{brain_id}", headers=auth(user.token), timeout=30).status_code in (200, 204)
            relay.set_cut(False)
            # The background retry meets 404: it drops the write instead of retrying forever.
            deadline = time.monotonic() + 60
            while "held writes dropped" not in server.log():
                assert time.monotonic() < deadline, "the held write was never given up"
                await asyncio.sleep(0.2)
            told = await client.call_tool("brain_status", {})
            assert not told.is_error
            first = told.content[0].text
            assert first.startswith("Important:") and "1 memorize" in first and "deleted at the store" in first
            assert "deleted at the store" in told.structured_content["note"]
            assert held_content not in text_of(told)
            again = await client.call_tool("brain_status", {})
            assert "deleted at the store" not in text_of(again)
            assert again.structured_content["pending_writes"] == 0

    with proxy_to(store) as relay:
        env = {
            "CONNECTOR_STORE_URL": relay.url,
            "CONNECTOR_REPULL_TTL_MS": "120000",
            # The default idle purge (15 minutes): a shorter one would drop the working copy between
            # two calls on a slow machine, and a write while the store is away needs it to be held.
            # Held writes are retried every five seconds, as in production.
        }
        with connector(tmp_path, store, env=env) as server:
            asyncio.run(scenario(server, relay))
            log = server.log()
    assert held_content not in log
    assert held_content not in str(all_stored_ids(store, user.token))
    # No retry after the drop: the log shows one drop and no later hold.
    assert log.count("held writes dropped") == 1
    assert "writes held" not in log.split("held writes dropped", 1)[1]


def test_write_after_the_store_token_was_rotated_is_refused_and_said(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("rotated")

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
            structured(await client.call_tool("brain_memorize", {"content": "Saved with the old token"}))
            store.rotate(user)
            refused = await client.call_tool("brain_memorize", {"content": "Saved after the rotation"})
            assert refused.is_error
            message = text_of(refused)
            assert "Not saved" in message and "no longer accepts this sign-in" in message

    with connector(tmp_path, store, port=free_port(), env={"CONNECTOR_REPULL_TTL_MS": "120000"}) as server:
        asyncio.run(scenario(server.base_url))


def test_a_write_the_store_rate_limits_is_held_and_said_as_a_limit_not_an_outage(tmp_path: Path) -> None:
    """The store's upload limit (429) read "the store is unavailable (429)", as if the store were down,
    when it only asked to slow down. The write is held (retried), and said so."""
    with running_store(tmp_path, env={"STORE_RATE_UPLOADS_PER_MIN": "2"}) as limited:
        user = limited.add_user("hasty")

        async def scenario(base: str) -> dict[str, Any]:
            async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
                for number in range(2):
                    saved = structured(await client.call_tool("brain_memorize", {
                        "content": f"Hasty fact number {number} about the {('north', 'south')[number]} garden"}))
                    assert saved["synced"] is True
                third = await client.call_tool("brain_memorize", {"content": "A third fact, about the compost heap"})
                return {"structured": structured(third), "text": text_of(third)}

        with connector(tmp_path / "c", limited) as server:
            third = asyncio.run(scenario(server.base_url))
    assert third["structured"]["synced"] is False
    assert "the store asked the connector to slow down (429: too many uploads)" in third["structured"]["note"]
    assert "unavailable" not in third["text"] and "held" in third["text"]


def test_status_says_when_the_store_cannot_be_reached(store: RunningStore, tmp_path: Path) -> None:
    """brain_status asks the store for the brain list; out of reach, it showed the last known list with
    its sync times and "Identity: ok", as if all were well."""
    user = store.add_user("offline")

    async def scenario(base: str, relay: CuttableProxy) -> tuple[dict[str, Any], dict[str, Any]]:
        async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
            structured(await client.call_tool("brain_memorize", {"content": "A fact saved while all was well"}))
            relay.set_cut(True)
            away = structured(await client.call_tool("brain_status", {}))
            relay.set_cut(False)
            # Bounded: the last known list is asked again after a few seconds, not on every call.
            deadline = time.monotonic() + 30
            while True:
                back = structured(await client.call_tool("brain_status", {}))
                if "cannot be reached" not in back.get("note", "") or time.monotonic() > deadline:
                    return away, back
                await asyncio.sleep(0.5)

    with proxy_to(store) as relay:
        with connector(tmp_path, store, env={"CONNECTOR_STORE_URL": relay.url}) as server:
            away, back = asyncio.run(scenario(server.base_url, relay))
    assert away["memory_count"] == 1 and len(away["brains"]) == 1
    assert away["note"].startswith("The store cannot be reached right now: the brains, sizes and sync times shown "
                                   "are the last known")
    assert "cannot be reached" not in back.get("note", "")
