"""The recall index follows every change of a working copy (real store process).

After a write through the tools, after a write replayed on a newer brain (412),
and after a pull of a newer archive, the manager's index cache already holds the
index of the new content: the next recall builds nothing, and answers exactly as
recall over the store's archive does.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from connector.engine.recall.exact import recall
from connector.engine.recall.index import BrainIndex
from connector.engine.writes.ops import connector_memorize
from connector.mcp.tools import BrainTools, Caller
from connector.workcopy import sync as sync_module
from connector.workcopy.core import ManagerTuning
from connector.workcopy.manager import WorkingCopyManager
from connector.workcopy.model import Account
from connector.workcopy.store_client import PreconditionFailed, StoreClient
from tests.connector.conftest import RunningStore, direct_memorize, download_brain, shared_store, upload_brain
from tests.engine.writes_support import fixture_brain, require_fixtures

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

require_fixtures()

ALL = frozenset({"brain.read", "brain.write"})
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
QUERIES = [("kettle harbour notes", 10), ("project meeting", 5), ("family travel", 25)]


class Builds:
    """Counts full index builds (the real build runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = BrainIndex._build

        def counted(brain: Any) -> BrainIndex:
            self.count += 1
            return real(brain)

        monkeypatch.setattr(BrainIndex, "_build", staticmethod(counted))


def _setup(store: RunningStore, name: str) -> tuple[Any, str, Caller, WorkingCopyManager, BrainTools]:
    """A user with the brain-1-05 fixture: (user, brain id, a caller of all scopes, manager, tools)."""
    user = store.add_user(name)
    brain_id = upload_brain(store.url, user.token, fixture_brain("brain-1-05"))
    account = Account(subject=f"static:{user.id}", credential=user.token, kind="static", client_name="pytest")
    manager = WorkingCopyManager(
        StoreClient(store.url, timeout_s=10),
        tuning=ManagerTuning(repull_ttl_s=120.0, retry_base_s=0.01, retry_cap_s=0.05),
        clock=lambda: NOW,
    )
    # Exact mode, named (hybrid is the default): the answers are compared with the exact engine's.
    return user, brain_id, Caller(account, ALL), manager, BrainTools(manager, recall_mode="exact")


CONTENT_KEYS = ("content", "content_truncated", "content_length")


async def _recalls(tools: BrainTools, caller: Caller) -> list[Any]:
    answers = []
    for query, limit in QUERIES:
        result = await tools.call("brain_recall", {"query": query, "limit": limit}, caller)
        # The tool adds each hit's text; the engine's recall, compared with, does not.
        answers.append([{key: value for key, value in hit.items() if key not in CONTENT_KEYS}
                        for hit in result.structured_content["results"]])
    return answers


async def _settled(tools: BrainTools) -> None:
    """Wait (bounded) until the index builds that writes queued in the background (prewarm) are done."""
    for _ in range(1000):
        if not tools._background and not tools._prewarm_next:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("background index builds still running after 10 s")


def _store_answers(store: RunningStore, token: str, brain_id: str) -> list[Any]:
    stored, _ = download_brain(store.url, token, brain_id)
    return [recall(stored, query, top=limit, now=NOW) for query, limit in QUERIES]


def test_a_write_leaves_the_index_of_the_new_content_ready(store: RunningStore, monkeypatch: pytest.MonkeyPatch) -> None:
    user, brain_id, caller, manager, tools = _setup(store, "follow-write")
    builds = Builds(monkeypatch)

    async def scenario() -> None:
        await _recalls(tools, caller)
        assert builds.count == 1  # the first recall of the pulled brain builds its index
        written = await tools.call(
            "brain_memorize", {"content": "Kettle harbour notes for the family travel", "tags": ["travel", "family"]}, caller
        )
        assert not written.is_error
        new_id = written.structured_content["stored"]["id"]
        pinned = await tools.call("brain_pin", {"id": new_id}, caller)
        assert not pinned.is_error
        snapshot = await manager.snapshot(caller.account)
        assert manager.index_cache.peek(snapshot.key) is not None  # ready before any recall asks
        answers = await _recalls(tools, caller)
        assert builds.count == 1  # followed, never rebuilt
        assert new_id in [hit["id"] for hit in answers[0]]
        assert answers == _store_answers(store, user.token, brain_id)
        await manager.close()

    asyncio.run(scenario())


def test_a_replayed_write_and_a_pull_are_followed(store: RunningStore, monkeypatch: pytest.MonkeyPatch) -> None:
    user, brain_id, caller, manager, tools = _setup(store, "follow-replay")
    builds = Builds(monkeypatch)

    async def scenario() -> None:
        await _recalls(tools, caller)
        # Another device pushes after our pull: our push gets 412, the write is replayed on its brain.
        await asyncio.to_thread(direct_memorize, store.url, user.token, brain_id, "Project meeting moved to Tuesday")
        written = await tools.call("brain_memorize", {"content": "Family travel to the harbour in May"}, caller)
        assert not written.is_error and written.structured_content["synced"] is True
        replayed = await _recalls(tools, caller)
        assert builds.count == 1
        assert replayed == _store_answers(store, user.token, brain_id)
        # The write queued a background build of its index (prewarm), which finds the followed
        # one. Let it run first: asked after the pull below, it would build the replaced index.
        await _settled(tools)
        # And a newer archive pulled after the freshness interval.
        await asyncio.to_thread(direct_memorize, store.url, user.token, brain_id, "Kettle descaled, harbour notes filed")
        manager.tuning.repull_ttl_s = 0.001
        await asyncio.sleep(0.01)
        builds.count = 0
        pulled = await _recalls(tools, caller)
        assert builds.count == 0
        assert pulled == _store_answers(store, user.token, brain_id)
        await manager.close()

    asyncio.run(scenario())


class _HeldFollower:
    """An index follower that does not finish before ``release`` is set (a follow still running
    when the store answers), and notes the keys it was asked to follow."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.followed: list[tuple[str, str, bool]] = []  # (old key, new key, released by then)

    def follow(self, old_key: str, new_key: str, brain: Any, change: Any) -> None:
        self.followed.append((old_key, new_key, self.release.wait(timeout=10)))

    def rename(self, old_key: str, new_key: str) -> None:
        pass


def test_a_push_refused_while_the_index_follows_replays_the_write(
    store: RunningStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write's index follow does not finish before the store refused its push (412): the
    write is replayed on the store's brain (not lost) from that follow, and the index of the
    refused version is never the one recalled from: the next recall answers as the store's
    brain does, building nothing."""
    user, brain_id, caller, manager, tools = _setup(store, "follow-refused")
    builds = Builds(monkeypatch)
    refused = threading.Event()
    held = _HeldFollower(refused)
    manager.followers.append(held)
    real_upload = manager.store.upload

    async def upload(*args: Any, **kwargs: Any) -> Any:
        try:
            return await real_upload(*args, **kwargs)
        except PreconditionFailed:
            refused.set()
            raise

    monkeypatch.setattr(manager.store, "upload", upload)

    async def scenario() -> None:
        await _recalls(tools, caller)
        other = await asyncio.to_thread(direct_memorize, store.url, user.token, brain_id, "Project meeting moved to Tuesday")
        written = await tools.call("brain_memorize", {"content": "Family travel to the harbour in May"}, caller)
        assert not written.is_error and written.structured_content["synced"] is True
        assert refused.is_set()
        # The write's own follow ended after the 412 came; the replay followed from its index.
        (_, write_new, released), (replay_old, _, _) = held.followed
        assert released and write_new.startswith("local:") and replay_old == write_new
        stored, _ = download_brain(store.url, user.token, brain_id)
        new_id = written.structured_content["stored"]["id"]
        assert {other, new_id} <= set((stored.read_json("index.json") or {})["memories"])
        snapshot = await manager.snapshot(caller.account)
        assert manager.index_cache.peek(write_new) is None  # the refused version's index is gone
        answers = await _recalls(tools, caller)
        assert builds.count == 1
        assert answers == _store_answers(store, user.token, brain_id)
        assert snapshot.key == download_brain(store.url, user.token, brain_id)[1]
        await manager.close()

    asyncio.run(scenario())


def test_a_write_whose_push_fails_before_packing_still_answers(
    store: RunningStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A push that ends before its archive was packed (here packing fails) never leaves the
    write waiting for its index follow (which starts once the archive is packed): the call
    ends with the failure, and the index of the written version was followed all the same."""
    _, _, caller, manager, tools = _setup(store, "follow-no-pack")
    builds = Builds(monkeypatch)

    def broken(brain: Any) -> Any:
        raise RuntimeError("packing failed")

    async def scenario() -> None:
        await _recalls(tools, caller)
        monkeypatch.setattr(sync_module, "pack_archive", broken)
        with pytest.raises(RuntimeError, match="packing failed"):
            await asyncio.wait_for(
                manager.write(caller.account, connector_memorize("Harbour kettle notes, unpacked"), "memorize"),
                timeout=30,
            )
        copy = next(iter(manager.copies.values()))
        assert copy.dirty and copy.key.startswith("local:")
        assert manager.index_cache.peek(copy.key) is not None  # followed although nothing was packed
        assert not manager._following and not manager._follow_gates
        assert builds.count == 1
        monkeypatch.undo()
        await manager.close()

    asyncio.run(scenario())
