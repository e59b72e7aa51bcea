"""`brain-connector serve --workers 2` end to end: real store and connector processes on
loopback, driven by the official MCP client SDK.

Two users write concurrently over several connections, which the kernel spreads over both
workers; every acknowledged memory reaches the store exactly once, and a recall over a new
connection right after a memorize sees it (the freshness interval is an hour here: only the
brain heads in the shared state directory can make that work). A worker killed while it holds
a write the store has not accepted loses nothing and pushes nothing twice; SIGTERM stops every
worker cleanly.

With worker affinity (the default), every /mcp (and /mcp/brains/...) request of a user ends on that user's worker,
whichever worker the connection reached; the owner sees the original client's address, and
a forged forwarding header from the network changes nothing. A killed owner's users are
served by the worker they reach.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import string
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from common.workers import pid_alive
from connector.affinity import owner_of
from connector.mcp.http import is_mcp_path
from tests.connector.conftest import RunningStore, StoreUser, brains_of, download_brain, start_store
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured
from tests.connector.webapp.conftest import sign_in
from tests.support.processes import ServerProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("connector-workers"), pytest.mark.timeout(300)]

ALL = {"brain.read", "brain.write"}
# An hour: a copy is never re-checked because its interval passed, only because a head moved.
WORKERS_ENV = {"CONNECTOR_WORKERS": "2", "CONNECTOR_REPULL_TTL_MS": "3600000", "CONNECTOR_MCP_RATE_PER_MIN": "0"}
ROUNDS = 8
WRITERS = 2  # long-lived connections per user


def _codeword() -> str:
    """A word no memory shares, so that a recall for it finds exactly one memory."""
    return "zq" + "".join(secrets.choice(string.ascii_lowercase) for _ in range(10))


def _log_lines(server: ServerProcess) -> list[dict[str, Any]]:
    """The JSON lines the server wrote so far; a last line still being written (no newline yet) is left for later."""
    lines = []
    for line in server.log().splitlines(keepends=True):
        if line.startswith("{") and line.endswith("\n"):
            lines.append(json.loads(line))
    return lines


def _worker_pids(server: ServerProcess) -> set[int]:
    return {line["pid"] for line in _log_lines(server) if line.get("msg", "").startswith("Started server process")}


def _alive(pid: int) -> bool:
    """Running, or still exiting (a zombie all of whose threads are gone counts as stopped).

    `pid_alive` alone is not enough: a killed process's main thread is a zombie while its
    other threads (uvicorn's, the model's) still exit, sharing its open files; the kernel
    keeps queueing new connections on its listening socket until the last one is gone, then
    resets them.
    """
    if pid_alive(pid):
        return True
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    threads = [line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Threads:")]
    return threads not in ([], ["1"])


def _stop_all(server: ServerProcess, workers: set[int]) -> None:
    """SIGTERM to the process group (the leader passes it on), then wait, bounded, for every worker."""
    leader_alive = server.process.poll() is None
    os.killpg(server.process.pid, signal.SIGTERM)
    if leader_alive:
        assert server.process.wait(timeout=30) == 0
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in workers):  # a worker orphaned by a killed leader is not our child
        assert time.monotonic() < deadline, "a worker did not stop on SIGTERM"
        time.sleep(0.1)


def _tool_calls(server: ServerProcess, tool: str) -> float:
    """brain_connector_tool_calls_total for ``tool`` (outcome ok) over a new connection."""
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "brain_connector_tool_calls_total" and sample.labels == {"tool": tool, "outcome": "ok"}:
                return sample.value
    return 0.0


def _texts(store: RunningStore, user: StoreUser, brain_id: str) -> list[str]:
    brain, _ = download_brain(store.url, user.token, brain_id)
    memories = (brain.read_json("index.json") or {}).get("memories", {})
    return [brain.read_text(entry["path"]) for entry in memories.values()]


def test_two_users_write_through_both_workers_and_read_their_writes_anywhere(store: RunningStore, tmp_path: Path) -> None:
    users = [store.add_user("alice"), store.add_user("bob")]

    async def writer(base: str, user: StoreUser, number: int) -> list[tuple[str, str]]:
        acknowledged: list[tuple[str, str]] = []
        async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
            for round_ in range(ROUNDS):
                word = _codeword()
                content = f"{user.name} writer {number} round {round_}: the codeword is {word}"
                saved = structured(await client.call_tool("brain_memorize", {"content": content}))
                assert saved["synced"] is True
                memory_id = saved["stored"]["id"]
                acknowledged.append((memory_id, content))
                # Right after the answer, over a new connection (either worker): the memory is there.
                async with mcp_session(base + "/mcp", mint(base, user, ALL)) as reader:
                    found = structured(await reader.call_tool("brain_recall", {"query": word}))
                assert memory_id in [hit["id"] for hit in found["results"]], (content, found)
        return acknowledged

    async def scenario(base: str) -> list[list[tuple[str, str]]]:
        return await asyncio.gather(*(writer(base, user, n) for user in users for n in range(WRITERS)))

    # Without affinity: both workers serve both users, through the shared state directory.
    with connector(tmp_path, store, env={**WORKERS_ENV, "CONNECTOR_WORKER_AFFINITY": "0"}) as server:
        results = asyncio.run(scenario(server.base_url))
        lines = _log_lines(server)
        # /metrics adds up both workers' series, whichever worker answers the scrape.
        calls = len(users) * WRITERS * ROUNDS
        deadline = time.monotonic() + 15
        for _ in range(8):  # each scrape over a new connection: either worker answers
            while (counted := (_tool_calls(server, "brain_memorize"), _tool_calls(server, "brain_recall"))) != (calls, calls):
                # the workers write their totals within a second of their last request
                assert time.monotonic() < deadline, f"/metrics counted {counted} memorize and recall calls, not {calls}"
                time.sleep(0.2)
    served = {line["pid"] for line in lines if line.get("msg") == "request" and line.get("path") == "/mcp"}
    assert len(served) == 2, f"both workers serve calls: {served}"
    # Left with SIGTERM to the process group: every worker finished cleanly, the leader last.
    assert server.process.returncode == 0
    finished = {line["pid"] for line in _log_lines(server) if line.get("msg", "").startswith("Finished server process")}
    assert finished == _worker_pids(server) == served
    assert "Traceback" not in server.log()

    for index, user in enumerate(users):
        brain_id = brains_of(store.url, user.token)[0]["id"]
        texts = _texts(store, user, brain_id)
        acknowledged = [item for n in range(WRITERS) for item in results[index * WRITERS + n]]
        assert len(acknowledged) == ROUNDS * WRITERS
        for _memory_id, content in acknowledged:
            assert sum(content in text for text in texts) == 1, content  # in the archive, once
        assert len(texts) == len(acknowledged)  # and nothing else (no duplicates, no other brain)
        assert len(brains_of(store.url, user.token)) == 1


def test_a_killed_worker_holding_a_write_loses_nothing_and_sigterm_stops_every_worker(tmp_path: Path) -> None:
    running, store_manager = start_store(tmp_path)
    store: RunningStore = running
    user = store.add_user("dora")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    state = tmp_path / "connector-state"
    env = {**WORKERS_ENV, "CONNECTOR_STATE_DIR": str(state)}
    port = free_port()
    held_content = "The backup generator is tested on the first Monday of each month"

    async def hold_a_write(base: str) -> str:
        async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
            structured(await client.call_tool("brain_memorize", {"content": "Saved while the store was up"}))
            store_manager.__exit__(None, None, None)  # type: ignore[attr-defined]
            held = structured(await client.call_tool("brain_memorize", {"content": held_content}))
            assert held["synced"] is False
            return held["stored"]["id"]

    try:
        with connector(tmp_path / "first", store, port=port, env=env) as server:
            held_id = asyncio.run(hold_a_write(server.base_url))
            holders = {line["pid"] for line in _log_lines(server) if line.get("msg") == "writes held, not yet synced"}
            assert len(holders) == 1
            holder = holders.pop()
            assert list((state / "held").glob("*.held"))
            os.kill(holder, signal.SIGKILL)  # the worker dies holding the write
            running, store_manager = start_store(tmp_path, data=store.data, port=store.port)
            # The other worker (or, if the leader died, its forked worker) takes the write over.
            deadline = time.monotonic() + 90
            while sum(held_content in text for text in _texts(store, user, brain_id)) == 0:
                assert time.monotonic() < deadline, "the held write of the killed worker never reached the store"
                time.sleep(0.3)
            survivors = _worker_pids(server) - {holder}
            assert len(survivors) == 1
            _stop_all(server, survivors)
            finished = {line["pid"] for line in _log_lines(server) if line.get("msg", "").startswith("Finished server process")}
            assert survivors <= finished  # stopped cleanly, not killed
            assert "Traceback" not in server.log()
        # A restart changes nothing: the write was pushed once and its journal file is gone.
        with connector(tmp_path / "second", store, port=port, env=env) as server:
            time.sleep(1.0)
            texts = _texts(store, user, brain_id)
            assert sum(held_content in text for text in texts) == 1
            assert sum("Saved while the store was up" in text for text in texts) == 1
            assert list((state / "held").glob("*.held")) == []
        brain, _ = download_brain(store.url, user.token, brain_id)
        assert held_id in (brain.read_json("index.json") or {}).get("memories", {})  # with the id the tool gave
    finally:
        store_manager.__exit__(None, None, None)  # type: ignore[attr-defined]


def _users_on_both_slots(store: RunningStore) -> list[StoreUser]:
    """Two store users whose requests belong to different workers (slot 0 first)."""
    by_slot: dict[int, StoreUser] = {}
    for number in range(32):
        user = store.add_user(f"user{number}")
        by_slot.setdefault(owner_of(f"static:{user.id}", 2), user)
        if len(by_slot) == 2:
            return [by_slot[0], by_slot[1]]
    raise AssertionError("32 users all hashed to one worker")


def _requests_logged(server: ServerProcess, skip: int, wanted: Callable[[str], bool], count: int) -> list[dict[str, Any]]:
    """The request lines logged after the first ``skip`` log lines whose path is ``wanted``, once
    there are ``count`` of them (the number of such requests sent meanwhile), bounded in time.

    A worker logs a request once its answer is sent: a client may have read the answer, and
    gone on to its next requests, before the line is written. Counting only what was logged
    when the client was done missed a late line, and the next count took it for one of its own.
    """
    deadline = time.monotonic() + 30
    while len(lines := [line for line in _log_lines(server)[skip:]
                        if line.get("msg") == "request" and wanted(line.get("path", ""))]) < count:
        assert time.monotonic() < deadline, f"{len(lines)} of the {count} requests sent were logged"
        time.sleep(0.05)
    assert len(lines) == count, f"{count} requests sent, {len(lines)} logged: {lines}"  # each once, by one worker
    return lines


def _mcp_pids(server: ServerProcess, skip: int, count: int) -> set[int]:
    """Pids of the processes that served the ``count`` /mcp requests sent after the first ``skip`` log lines."""
    return {line["pid"] for line in _requests_logged(server, skip, is_mcp_path, count)}


CALLS = 8  # per user, each over a new connection: the kernel places about half on the other worker


def _both_workers(server: ServerProcess) -> set[int]:
    """The pids of both workers, once both have started (health is answered by the first one up)."""
    deadline = time.monotonic() + 30
    while len(workers := _worker_pids(server)) < 2:
        assert time.monotonic() < deadline, "the second worker never started"
        time.sleep(0.1)
    return workers


def test_each_users_calls_end_on_one_worker_and_a_killed_owner_is_replaced(store: RunningStore, tmp_path: Path) -> None:
    users = _users_on_both_slots(store)

    async def calls(base: str, user: StoreUser) -> int:
        """The user's calls; how many HTTP requests they sent."""
        sent: list[str] = []
        word = _codeword()
        async with mcp_session(base + "/mcp", mint(base, user, ALL), sent=sent) as client:
            saved = structured(await client.call_tool("brain_memorize", {"content": f"{user.name}: the codeword is {word}"}))
        for number in range(CALLS):
            # Half through the URL of the user's brain (/mcp/brains/default): routed to the same worker.
            url = base + ("/mcp" if number % 2 else "/mcp/brains/default")
            async with mcp_session(url, mint(base, user, ALL), sent=sent) as client:
                # Exact mode: a word no other memory shares matches one memory by its words (hybrid
                # recall may also list the user's other codeword memories, alike in meaning).
                found = structured(await client.call_tool("brain_recall", {"query": word, "mode": "exact"}))
            assert [hit["id"] for hit in found["results"]] == [saved["stored"]["id"]], found
        assert all(is_mcp_path(path) for path in sent), sent
        return len(sent)

    # Where serve makes its private directories: a short path, as a unix socket's must be (under
    # xdist pytest's tmp_path is too long for one, and serve would use /tmp instead).
    with tempfile.TemporaryDirectory(prefix="bw-") as short:
        temporary = Path(short)
        with connector(tmp_path, store, env={**WORKERS_ENV, "TMPDIR": str(temporary)}) as server:
            workers = _both_workers(server)
            (runtime,) = temporary.glob("brain-run-*")
            assert runtime.stat().st_mode & 0o777 == 0o700
            assert sorted(path.name for path in runtime.iterdir()) == ["worker-0.sock", "worker-1.sock"]
            leader = server.process.pid  # slot 0; the fork is slot 1
            (forked,) = workers - {leader}
            for user, owner in zip(users, (leader, forked)):
                seen = len(_log_lines(server))
                sent = asyncio.run(calls(server.base_url, user))
                served = _mcp_pids(server, seen, sent)
                # What the workers said meanwhile (besides their request lines), should it fail.
                said = [line for line in _log_lines(server)[seen:] if line.get("msg") != "request"][-8:]
                assert served == {owner}, f"{user.name}'s calls were served by {served}; the workers said {said}"

            # The web app's pages of a signed-in session too (each request over a new connection).
            pages_sent: list[str] = []
            seen = len(_log_lines(server))
            with httpx.Client(base_url=server.base_url, headers={"Connection": "close"}, timeout=30,
                              event_hooks={"request": [lambda request: pages_sent.append(request.url.path)]}) as browser:
                sign_in(browser, users[1].token)  # its last request is the signed-in session's first /app
                for _ in range(CALLS):
                    assert browser.get("/app").status_code == 200
            page_lines = _requests_logged(server, seen, lambda path: path == "/app", pages_sent.count("/app"))
            assert len(page_lines) == CALLS + 1
            assert {line["pid"] for line in page_lines} == {forked}

            # The owner of the second user dies: the surviving worker serves that user itself.
            os.kill(forked, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while _alive(forked):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            seen = len(_log_lines(server))
            sent = asyncio.run(calls(server.base_url, users[1]))
            assert _mcp_pids(server, seen, sent) == {leader}
            assert "owner worker unreachable, serving here" in server.log()
            _stop_all(server, {leader})
        assert "Traceback" not in server.log()
        assert list(temporary.iterdir()) == []  # the sockets' and the metrics' directories are gone


def _ping(base: str, token: str, headers: dict[str, str]) -> int:
    """A bare JSON-RPC ping over a new connection: the HTTP status."""
    answer = httpx.post(
        base + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
            "Connection": "close",
            **headers,
        },
        timeout=30,
    )
    return answer.status_code


def test_the_owner_sees_the_original_client_and_a_forged_forwarding_header_is_ignored(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("erin")
    env = {**WORKERS_ENV, "CONNECTOR_MCP_RATE_PER_MIN": "3"}  # per client address, per worker
    with connector(tmp_path, store, env=env) as server:
        base = server.base_url
        token = mint(base, user, ALL)
        # Through a trusted proxy (loopback) each request names another client: none is limited,
        # forwarded or not, because the owner applies the proxy rules to the real peer.
        statuses = [_ping(base, token, {"X-Forwarded-For": f"198.51.100.{n}"}) for n in range(10)]
        assert statuses == [200] * 10
        # A client claiming to be forwarded, from other addresses: it is still 127.0.0.1, limited after 3.
        forged = [
            _ping(base, token, {"X-Brain-Connector-Forward": "guess", "X-Brain-Connector-Client": f"http 203.0.113.{n} 1"})
            for n in range(10)
        ]
        assert forged[:3] == [200] * 3
        assert set(forged[3:]) == {429}
        assert "forwarding header from the network ignored" in server.log()
        assert "Traceback" not in server.log()


def test_under_a_public_path_each_users_calls_end_on_their_worker(store: RunningStore, tmp_path: Path) -> None:
    # CONNECTOR_PUBLIC_URL with a path, and a proxy that passes the path on: /brain/mcp is routed
    # to the user's worker as /mcp is (docs/self-hosting.md, "Under a path of a shared domain").
    users = _users_on_both_slots(store)
    port = free_port()
    base = f"http://127.0.0.1:{port}/brain"

    async def calls(user: StoreUser) -> int:
        """The user's calls; how many HTTP requests they sent."""
        sent: list[str] = []
        for number in range(CALLS):
            url = base + ("/mcp" if number % 2 else "/mcp/brains/default")
            async with mcp_session(url, mint(base, user, ALL), sent=sent) as client:
                structured(await client.call_tool("brain_status", {}))
        assert all(path.startswith("/brain/mcp") for path in sent), sent
        return len(sent)

    with tempfile.TemporaryDirectory(prefix="bw-") as short:
        env = {**WORKERS_ENV, "TMPDIR": short, "CONNECTOR_PUBLIC_URL": base}
        with connector(tmp_path, store, port=port, env=env) as server:
            workers = _both_workers(server)
            leader = server.process.pid
            (forked,) = workers - {leader}
            for user, owner in zip(users, (leader, forked)):
                seen = len(_log_lines(server))
                sent = asyncio.run(calls(user))
                served = _mcp_pids(server, seen, sent)
                # What the workers said meanwhile (besides their request lines), should it fail.
                said = [line for line in _log_lines(server)[seen:] if line.get("msg") != "request"][-8:]
                assert served == {owner}, f"{user.name}'s calls were served by {served}; the workers said {said}"
            _stop_all(server, workers)
        assert "Traceback" not in server.log()
