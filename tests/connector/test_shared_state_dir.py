"""Processes sharing one state directory (`serve --workers N`, replicas): brain heads make a
write through one seen at once by a read through another, and each held-write journal file is
held by one process only, taken over when that process dies."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.docstore import open_document_store
from connector.mcp.tools import BrainTools, Caller
from connector.workcopy.core import ManagerTuning, MemoryBrainChoices
from connector.workcopy.heads import BrainHeads
from connector.workcopy.journal import HeldWriteJournal
from connector.workcopy.manager import WorkingCopyManager
from connector.workcopy.model import Account
from connector.workcopy.store_client import StoreClient
from tests.connector.conftest import RunningStore, auth, brains_of, direct_memorize, download_brain, shared_store
from tests.support.processes import REPO_ROOT
from tests.support.waiting import seconds_until

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

ALL = frozenset({"brain.read", "brain.write"})
KEY = bytes(range(32))


class CountingStore(StoreClient):
    """The real store client, counting downloads (conditional ones included) and the archives they transferred."""

    downloads = 0
    transfers = 0

    async def download(self, *args: Any, **kwargs: Any) -> Any:
        self.downloads += 1
        found = await super().download(*args, **kwargs)
        self.transfers += found.data is not None
        return found


def _account(user: Any) -> Account:
    return Account(subject=f"static:{user.id}", credential=user.token, kind="static", client_name="pytest")


def _manager(store: RunningStore, heads: BrainHeads | None) -> tuple[WorkingCopyManager, CountingStore]:
    client = CountingStore(store.url, timeout_s=10)
    # A long freshness interval: only the heads can make a copy look at the store again.
    return WorkingCopyManager(client, tuning=ManagerTuning(repull_ttl_s=3600.0), heads=heads), client


def _ids(result: Any) -> list[str]:
    return [hit["id"] for hit in result.structured_content["results"]]


# A remote state (S3) as the connector uses it: heads cached this long, read and published off the loop.
REMOTE_MAX_AGE_S = 0.3


@pytest.mark.parametrize("remote", [False, True], ids=["directory", "remote-cached"])
def test_a_write_through_one_process_is_recalled_at_once_through_another(store: RunningStore, tmp_path: Path,
                                                                        remote: bool) -> None:
    """At once on a state directory; within the cache's bound (1 s on S3) on a remote state."""
    alice = store.add_user(f"alice-{remote}")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    direct_memorize(store.url, alice.token, brain_id, "The office plants are watered on Mondays")
    state = tmp_path / "state"

    def heads() -> BrainHeads:
        if remote:
            return BrainHeads(open_document_store(state, fsync=False), max_age_s=REMOTE_MAX_AGE_S, inline=False)
        return BrainHeads(open_document_store(state))

    published = BrainHeads(open_document_store(state, fsync=False))  # uncached: what the state holds now

    async def settle(head: str | None) -> None:
        if remote:
            # The write's head is published off the loop after the tool answered: wait for it (a
            # busy host may be late by more than the bound), then for the bound: a head read is at
            # most this old.
            await asyncio.to_thread(seconds_until, lambda: published.read(brain_id) != head, 30, 0.01,
                                    "the write's head published")
            await asyncio.sleep(REMOTE_MAX_AGE_S + 0.05)

    async def scenario() -> None:
        (first, first_store), (second, second_store) = _manager(store, heads()), _manager(store, heads())
        caller = Caller(_account(alice), ALL)
        one, two = BrainTools(first), BrainTools(second)
        try:
            for tools in (one, two):  # both hold a clean copy now
                assert (await tools.call("brain_recall", {"query": "office plants"}, caller)).structured_content["count"] == 1
            before = second_store.downloads
            for _ in range(5):  # nothing changed: no process asks the store again
                await two.call("brain_recall", {"query": "office plants"}, caller)
            assert second_store.downloads == before

            for round_ in range(3):
                head = published.read(brain_id)
                saved = await one.call("brain_memorize", {"content": f"Deploy freeze number {round_} starts on Thursday"}, caller)
                new_id = saved.structured_content["stored"]["id"]
                await settle(head)
                found = await two.call("brain_recall", {"query": f"deploy freeze number {round_}"}, caller)
                assert new_id in _ids(found)  # within the hour-long interval: the head said so
                # and the other way round: a write through the second is seen by the first
                head = published.read(brain_id)
                saved = await two.call("brain_memorize", {"content": f"Release train {round_} leaves at nine"}, caller)
                other_id = saved.structured_content["stored"]["id"]
                await settle(head)
                assert other_id in _ids(await one.call("brain_recall", {"query": f"release train {round_}"}, caller))
            # A pushing copy takes its own head as seen: its next read asks the store nothing. On a
            # remote state the head is published off the loop: on a busy host its cached read may
            # expire before the publish lands, and the read then asks the store, which answers 304.
            before, transferred = first_store.downloads, first_store.transfers
            await one.call("brain_memorize", {"content": "Standup moves to half past nine"}, caller)
            await one.call("brain_recall", {"query": "standup"}, caller)
            assert first_store.transfers == transferred
            if not remote:
                assert first_store.downloads == before
        finally:
            await first.close()
            await second.close()

    asyncio.run(scenario())


def test_without_heads_a_copy_waits_for_its_interval(store: RunningStore) -> None:
    """What the heads fix: one process's copy does not see another's push before its interval."""
    bob = store.add_user("bob")

    async def scenario() -> None:
        (first, _), (second, _) = _manager(store, None), _manager(store, None)
        caller = Caller(_account(bob), ALL)
        try:
            await BrainTools(second).call("brain_recall", {"query": "anything"}, caller)
            saved = await BrainTools(first).call("brain_memorize", {"content": "Invoices go out on the first"}, caller)
            found = await BrainTools(second).call("brain_recall", {"query": "invoices"}, caller)
            assert saved.structured_content["stored"]["id"] not in _ids(found)
        finally:
            await first.close()
            await second.close()

    asyncio.run(scenario())


def test_a_brain_chosen_through_one_process_is_written_through_another(store: RunningStore, tmp_path: Path) -> None:
    """The choice is shared (the OAuth state); a process whose cached brain list lacks it lists again."""
    erin = store.add_user("erin")
    choices = MemoryBrainChoices()  # stands for the shared, file-backed OAuth state

    async def scenario() -> None:
        first = WorkingCopyManager(StoreClient(store.url, timeout_s=10), choices=choices)
        second = WorkingCopyManager(StoreClient(store.url, timeout_s=10), choices=choices)
        caller = Caller(_account(erin), ALL)
        try:
            assert not (await BrainTools(second).call("brain_memorize", {"content": "Home notes go here"}, caller)).is_error
            work = httpx.post(store.url + "/api/brains", json={"name": "work"}, headers=auth(erin.token), timeout=30).json()
            used = await BrainTools(first).call("brain_use", {"brain": "work"}, caller)
            assert not used.is_error
            saved = await BrainTools(second).call("brain_memorize", {"content": "Work notes go here"}, caller)
            assert saved.structured_content["synced"] is True
            brain, _ = download_brain(store.url, erin.token, work["id"])  # in the chosen brain, not the oldest
            assert saved.structured_content["stored"]["id"] in (brain.read_json("index.json") or {})["memories"]
        finally:
            await first.close()
            await second.close()

    asyncio.run(scenario())


def test_a_publisher_takes_its_token_as_seen_only_when_it_missed_nothing(tmp_path: Path) -> None:
    one, two = BrainHeads(open_document_store(tmp_path)), BrainHeads(open_document_store(tmp_path))
    assert one.read("brain-a") == ""  # nothing published yet
    mine = one.publish("brain-a", "")
    assert mine and two.read("brain-a") == mine and one.read("brain-b") == ""
    theirs = two.publish("brain-a", "stale")  # the other process had not seen ``mine``
    assert theirs is None and one.read("brain-a") not in ("", mine)
    assert one.publish("brain-a", mine) is None  # ``mine`` was replaced meanwhile: ask the store
    current = two.read("brain-a")
    assert two.publish("brain-a", current) is not None
    names = {path.name for path in (tmp_path / "heads").iterdir()}
    assert not any("brain" in name for name in names)  # file names do not show brain ids
    assert (tmp_path / "heads").stat().st_mode & 0o777 == 0o700


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from datetime import UTC, datetime
    from pathlib import Path
    from connector.engine.writes.ops import connector_memorize
    from common.docstore import open_document_store
    from connector.workcopy.journal import HeldWriteJournal
    from connector.workcopy.model import Account, PendingWrite

    directory, subject, token, brain_id = sys.argv[1:5]
    journal = HeldWriteJournal(open_document_store(Path(directory)), bytes(range(32)))
    pending = [PendingWrite(connector_memorize("Held by a worker that dies"), datetime.now(UTC), "memorize")]
    journal.record("f" * 32, Account(subject, token), brain_id, "default", None, pending)
    print("holding", flush=True)
    time.sleep(120)
    """
)


def _holder(state: Path, subject: str, token: str, brain_id: str) -> Any:
    """Another process holding one journal document ("f" * 32) in the state ``state`` until it is killed."""
    return holding(_HOLDER, str(state), subject, token, brain_id)


@contextlib.contextmanager
def holding(script: str, *args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """A Python process running ``script`` with ``args``, once it printed "holding"; killed at the end."""
    process = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, cwd=REPO_ROOT, text=True,
                               env={**os.environ, **env} if env else None)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "holding"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def test_a_journal_file_is_held_by_one_process_and_taken_over_when_it_dies(tmp_path: Path) -> None:
    held = tmp_path / "held"
    with _holder(tmp_path, "static:u1", "token-1", "brain-1") as holder:
        other = HeldWriteJournal(open_document_store(tmp_path), KEY)
        assert other.load() == []  # the holder is alive: its writes are not replayed twice
        holder.kill()
        holder.wait(timeout=30)
        taken = other.load()
        assert [entry.name for entry in taken] == ["f" * 32] and taken[0].pending[0].label == "memorize"
        assert other.load() == []  # taken once
        assert HeldWriteJournal(open_document_store(tmp_path), KEY).load() == []  # and no third process takes it too
        other.remove("f" * 32)
        assert sorted(path.name for path in held.iterdir()) == []  # the file and its lock are gone


def test_a_live_process_takes_over_held_writes_of_a_dead_one(store: RunningStore, tmp_path: Path) -> None:
    """The maintenance pass adopts an orphaned journal file and pushes its write exactly once."""
    carol = store.add_user("carol")
    brain_id = brains_of(store.url, carol.token)[0]["id"]
    held = tmp_path / "held"

    async def scenario(holder: subprocess.Popen[str]) -> None:
        client = StoreClient(store.url, timeout_s=10)
        tuning = ManagerTuning(held_retry_s=0.05, repull_ttl_s=3600.0)
        manager = WorkingCopyManager(client, tuning=tuning, journal=HeldWriteJournal(open_document_store(tmp_path), KEY))
        tools, caller = BrainTools(manager), Caller(_account(carol), ALL)
        try:
            # This process serves carol too: a clean copy of the same brain, without the held write.
            assert (await tools.call("brain_recall", {"query": "worker dies"}, caller)).structured_content["count"] == 0
            await manager.maintain()  # its holder is alive: left alone
            assert not any(copy.dirty for copy in manager.copies.values())
            holder.kill()
            holder.wait(timeout=30)
            await manager.maintain()  # taken over into that copy and pushed in the same pass
            assert len(manager.copies) == 1 and not any(copy.dirty for copy in manager.copies.values())
            found = await tools.call("brain_recall", {"query": "worker dies"}, caller)
            assert found.structured_content["count"] == 1
            await manager.maintain()
        finally:
            await manager.close()

    with _holder(tmp_path, f"static:{carol.id}", carol.token, brain_id) as holder:
        asyncio.run(scenario(holder))
    brain, _ = download_brain(store.url, carol.token, brain_id)
    texts = [brain.read_text(entry["path"]) for entry in brain.read_json("index.json")["memories"].values()]
    assert sum("Held by a worker that dies" in text for text in texts) == 1
    assert sorted(held.iterdir()) == []
