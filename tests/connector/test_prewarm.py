"""Index builds after writes: one at a time per brain, a burst of writes costs at most two."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from connector.engine.brain import Brain
from connector.mcp import tools as tools_module
from connector.mcp.tools import BrainTools
from connector.workcopy.model import WriteOutcome


def outcome(brain_id: str, key: str) -> WriteOutcome:
    brain = Brain({"index.json": b'{"version": 2, "memories": {}}'})
    return WriteOutcome(result={}, synced=True, brain_id=brain_id, brain_name="default", brain=brain, key=key)


def test_a_burst_of_writes_builds_the_first_and_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    release = threading.Event()

    def slow_build(brain: Brain, key: str, cache: Any) -> None:
        release.wait(10)
        built.append(key)

    monkeypatch.setattr(tools_module, "index_for", slow_build)

    async def scenario() -> None:
        tools = BrainTools(manager=None)  # type: ignore[arg-type]
        for number in range(5):
            tools.prewarm(outcome("brain-a", f"a{number}"))
        tools.prewarm(outcome("brain-b", "b0"))  # another brain is built alongside
        await asyncio.sleep(0.05)
        release.set()
        for _ in range(200):
            if not tools._background and not tools._prewarm_next:
                break
            await asyncio.sleep(0.01)
        assert sorted(built) == ["a0", "a4", "b0"]
        assert {"a4", "b0"} <= set(tools._warm)

    asyncio.run(scenario())
