"""Index builds after writes: deferred while writes are in flight, one at a time per brain, a burst costs one or two;
and the calls being answered, which the e5 background waits for."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from connector.engine.format.brain import Brain
from connector.engine.recall.index import BrainIndex
from connector.mcp import tools as tools_module
from connector.mcp.tools import BrainTools
from connector.workcopy.model import WriteOutcome


class Holding:
    """A manager whose working copies hold the given content keys (what a prewarm checks)."""

    def __init__(self, *keys: str) -> None:
        self.keys = set(keys)

    @property
    def copies(self) -> dict[tuple[str, str | None], Any]:
        return {(key, None): SimpleNamespace(key=key) for key in self.keys}

    def take_notices(self, subject: str) -> list[str]:
        return []


def outcome(brain_id: str, key: str) -> WriteOutcome:
    brain = Brain({"index.json": b'{"version": 2, "memories": {}}'})
    return WriteOutcome(result={}, synced=True, brain_id=brain_id, brain_name="default", brain=brain, key=key)


async def settle(tools: BrainTools) -> None:
    """Until the background builds are done (bounded)."""
    for _ in range(500):
        if not tools._background and not tools._prewarm_next:
            return
        await asyncio.sleep(0.01)


def test_a_burst_of_writes_builds_only_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    release = threading.Event()

    def slow_build(brain: Brain, key: str, cache: Any) -> None:
        release.wait(10)
        built.append(key)
        cache.put(key, object())

    monkeypatch.setattr(tools_module, "index_for", slow_build)

    async def scenario() -> None:
        tools = BrainTools(manager=Holding("a4", "b0"))  # type: ignore[arg-type]
        for number in range(5):
            tools.prewarm(outcome("brain-a", f"a{number}"))
        tools.prewarm(outcome("brain-b", "b0"))  # another brain is built alongside
        release.set()
        for _ in range(300):
            if not tools._background and not tools._prewarm_next:
                break
            await asyncio.sleep(0.01)
        assert sorted(built) == ["a4", "b0"]
        assert all(tools._index_ready(key, "exact") for key in ("a4", "b0"))

    asyncio.run(scenario())


def test_builds_wait_while_a_write_is_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    monkeypatch.setattr(tools_module, "index_for", lambda brain, key, cache: built.append(key))
    monkeypatch.setattr(tools_module, "PREWARM_QUIET_S", 0.02)
    monkeypatch.setattr(tools_module, "PREWARM_MAX_WAIT_S", 0.5)

    async def scenario() -> None:
        tools = BrainTools(manager=Holding("a0", "a1"))  # type: ignore[arg-type]
        tools._writes_in_flight = 1  # another write is running
        tools.prewarm(outcome("brain-a", "a0"))
        await asyncio.sleep(0.2)
        assert built == []  # deferred
        tools._writes_in_flight = 0
        for _ in range(100):
            if built:
                break
            await asyncio.sleep(0.01)
        assert built == ["a0"]
        tools._writes_in_flight = 1  # writes that never stop do not defer a build forever
        tools.prewarm(outcome("brain-a", "a1"))
        for _ in range(200):
            if len(built) == 2:
                break
            await asyncio.sleep(0.01)
        assert built == ["a0", "a1"]

    asyncio.run(scenario())


def test_a_version_replaced_before_its_build_is_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    monkeypatch.setattr(tools_module, "index_for", lambda brain, key, cache: built.append(key))
    monkeypatch.setattr(tools_module, "PREWARM_QUIET_S", 0.02)

    async def scenario() -> None:
        holding = Holding("a0")
        tools = BrainTools(manager=holding)  # type: ignore[arg-type]
        tools.prewarm(outcome("brain-a", "a0"))
        holding.keys = {"pulled"}  # a pull replaced the written version before its build began
        await asyncio.sleep(0.2)
        assert built == [] and not tools._prewarm_next and not tools._background

    asyncio.run(scenario())


def test_hybrid_default_embeds_what_a_write_added_in_the_background(monkeypatch: pytest.MonkeyPatch) -> None:
    from connector.engine.writes.ops import Memorize
    from connector.workcopy.vectors import VectorStore
    from tests.engine.hybrid_support import NOW, CountingEmbedder, make_brain

    monkeypatch.setattr(tools_module, "PREWARM_QUIET_S", 0.01)
    brain, ids = make_brain()
    embedder = CountingEmbedder()

    async def scenario() -> None:
        tools = BrainTools(manager=Holding("k1", "k2"), recall_mode="hybrid", vectors=VectorStore(embedder))  # type: ignore[arg-type]
        first = WriteOutcome(result={}, synced=True, brain_id="b", brain_name="default", brain=brain, key="k1")
        tools.prewarm(first)
        await settle(tools)
        assert tools._index_ready("k1", "hybrid", "b") and embedder.embedded == len(ids)
        after = brain.copy()
        Memorize.from_request([{"title": "New", "type": "learning", "path": "notes/", "content": "x"}]).apply(after, NOW)
        tools.prewarm(WriteOutcome(result={}, synced=True, brain_id="b", brain_name="default", brain=after, key="k2"))
        await settle(tools)
        assert tools._index_ready("k2", "hybrid", "b") and embedder.embedded == len(ids) + 1

    asyncio.run(scenario())


def test_another_brain_never_hits_a_brains_vectors_or_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24 item 11: the same texts in another brain are embedded again, not found in the cache
    (a hit is several times faster than a miss, so a shared cache told who holds a text)."""
    from connector.workcopy.vectors import VectorStore
    from tests.engine.hybrid_support import CountingEmbedder, make_brain

    monkeypatch.setattr(tools_module, "PREWARM_QUIET_S", 0.01)
    brain, ids = make_brain()
    embedder = CountingEmbedder()
    store = VectorStore(embedder)

    async def scenario() -> None:
        tools = BrainTools(manager=Holding("same"), recall_mode="hybrid", vectors=store)  # type: ignore[arg-type]
        tools.prewarm(WriteOutcome(result={}, synced=True, brain_id="alice", brain_name="default", brain=brain, key="same"))
        await settle(tools)
        assert tools._index_ready("same", "hybrid", "alice") and embedder.embedded == len(ids)
        # Mallory's brain holds the very same texts, even the same archive (content key).
        assert not tools._index_ready("same", "hybrid", "mallory")
        tools.prewarm(WriteOutcome(result={}, synced=True, brain_id="mallory", brain_name="default", brain=brain.copy(), key="same"))
        await settle(tools)
        assert tools._index_ready("same", "hybrid", "mallory")
        assert embedder.embedded == 2 * len(ids), "every text of mallory's brain was a miss"
        alice = tools.hybrid_index(brain, "same", BrainIndex.build(brain), "alice")
        mallory = tools.hybrid_index(brain, "same", BrainIndex.build(brain), "mallory")
        assert alice is not mallory and alice.hashes == mallory.hashes and alice.text is not mallory.text
        # A new version of alice's brain with the same texts reuses her index's parts, never mallory's.
        again = tools.hybrid_index(brain, "same-texts-new-key", BrainIndex.build(brain), "alice")
        assert again.text is alice.text and again.vectors is alice.vectors
        assert embedder.embedded == 2 * len(ids)  # both cached now, each for its own brain
        digest = alice.hashes[0]
        assert store.for_brain("alice").get(digest) is not None and store.for_brain("mallory").get(digest) is not None
        assert store.for_brain("eve").get(digest) is None and store.get(digest) is None

    asyncio.run(scenario())


def test_the_tools_say_they_are_answering_during_a_call_and_a_short_gap_after(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the e5 background waits on (E5Backfill.answering, tests/connector/test_backfill_priority.py).
    monkeypatch.setattr(tools_module, "CALLS_QUIET_S", 1.0)

    async def scenario() -> None:
        tools = BrainTools(manager=Holding())  # type: ignore[arg-type]
        release = asyncio.Event()
        seen: list[bool] = []

        async def held_status(caller: Any, args: Any) -> Any:
            seen.append(tools.answering())
            await release.wait()
            return tools_module.ok_result({}, "")

        tools._handlers["brain_status"] = held_status
        assert not tools.answering()
        caller = tools_module.Caller(SimpleNamespace(brain=None, subject="someone"), frozenset())  # type: ignore[arg-type]
        call = asyncio.ensure_future(tools.call("brain_status", {}, caller))
        await asyncio.sleep(0.05)
        assert seen == [True] and tools.answering()
        release.set()
        await call
        assert tools.answering()  # the gap after it
        await asyncio.sleep(1.2)
        assert not tools.answering()

    asyncio.run(scenario())
