"""End to end: hybrid recall right after writes answers as a connector that never saw the writes.

The connector carries its hybrid index along each write (connector/workcopy/hybridfollow.py)
instead of rebuilding it. A real store, a real connector driven by the official MCP client
SDK: memorize (one superseding an older memory), forget, pin, each followed at once by
recalls; then a second connector process with its own state, which builds its index from
the pulled brain, must give the same hits, in the same order, with the same scores.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.connector.conftest import RunningStore
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured

pytestmark = pytest.mark.timeout(600)

RW = {"brain.read", "brain.write"}
MEMORIES = [
    ("Database choice", "We picked PostgreSQL for the shipment tracking service."),
    ("Cluster upgrade", "The Kubernetes cluster upgrade needs a maintenance window on Sunday."),
    ("Reading list", "Rereading Designing Data-Intensive Applications, chapter on replication."),
    ("猫的疫苗", "我家的猫每年三月去宠物医院打疫苗。"),
    ("週末の予定", "土曜日は鎌倉で友達と海辺を散歩する予定です。"),
    ("Coffee", "I drink one coffee in the morning and none after noon."),
]
QUERIES = ["postgres database", "kubernetse upgrade window", "DDIA replication", "猫 疫苗", "鎌倉", "coffee habits",
           "release day for the payments service"]


def _hits(found: dict[str, Any]) -> list[tuple[str, float, float]]:
    return [(hit["id"], hit["score"], hit["similarity"]) for hit in found["results"]]


async def settled(client: Any, queries: bool = False) -> None:
    """Until the brain version's e5 vectors are all there (or e5 cannot load here), and its
    judge vectors after them (the judge's channel, unless the judge cannot load): both
    connectors then answer with the same channels. A recall first, so the status is this
    version's (a version without them is queued, and says so, before the recall answers).
    ``queries``: also until queries are embedded by the int8 kernels (built in the background;
    the engine's query vectors differ from theirs by ~1e-4, enough to move a score's third
    decimal), so both connectors embed the measured queries the same way."""
    for _ in range(600):
        await client.call_tool("brain_recall", {"query": "settled", "mode": "hybrid"})
        status = structured(await client.call_tool("brain_status", {}))
        e5, judge = status.get("recall_e5"), status.get("recall_judge")
        if e5 is None or e5["state"] == "unavailable":
            return
        judged = judge is None or judge["state"] == "unavailable" or judge.get("channel") == "ready"
        if e5["state"] == "ready" and judged and (not queries or e5.get("query_kernels") not in ("unloaded", "loading")):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the e5 and judge vectors never got ready: {e5}, {judge}")


def test_recall_after_writes_equals_a_fresh_connector(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("follower")
    after: dict[str, list[Any]] = {}

    async def recall_all(client: Any) -> dict[str, list[Any]]:
        return {query: _hits(structured(await client.call_tool("brain_recall", {"query": query, "mode": "hybrid"})))
                for query in QUERIES}

    async def writes(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, RW)) as client:
            await client.call_tool("brain_memorize", {"content": "A first note, so the brain has vectors to settle.",
                                                      "title": "First note"})
            await settled(client, queries=True)  # every measured query below embedded by the same kernels
            ids = {}
            for title, content in MEMORIES:
                saved = structured(await client.call_tool("brain_memorize", {"content": content, "title": title}))
                ids[title] = saved["stored"]["id"]
            await recall_all(client)  # the index of this version is built
            new = structured(await client.call_tool("brain_memorize", {
                "content": "We release the payments service every Tuesday morning.", "title": "Release day",
                "supersedes": [ids["Coffee"]]}))["stored"]["id"]
            found = structured(await client.call_tool("brain_recall", {"query": "release day payments"}))
            assert found["results"][0]["id"] == new  # right after the write, the new memory is found
            structured(await client.call_tool("brain_forget", {"id": ids["Cluster upgrade"], "force": True}))
            gone = structured(await client.call_tool("brain_recall", {"query": "kubernetes cluster upgrade"}))
            assert ids["Cluster upgrade"] not in [hit["id"] for hit in gone["results"]]
            structured(await client.call_tool("brain_pin", {"id": ids["Reading list"]}))
            await settled(client)  # the memorize's one e5 vector is computed in the background
            after.update(await recall_all(client))

    async def fresh(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, RW)) as client:
            await settled(client, queries=True)  # a fresh connector computes the brain's e5 vectors first
            assert await recall_all(client) == after

    with connector(tmp_path / "first", store) as server:
        asyncio.run(writes(server.base_url))
    with connector(tmp_path / "second", store) as server:
        asyncio.run(fresh(server.base_url))
