"""The e5 channel over MCP: a real connector and store, the official client SDK.

A brain whose e5 vectors are still being computed answers hybrid recall at once (on its
other channels); brain_status says how far the vectors are; once they are all there recall
fuses them in; after a restart they are read back, not computed again.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.connector.conftest import RunningStore, direct_memorize, shared_store, upload_brain
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured
from tests.engine.hybrid_support import MEMORIES, make_brain
from tests.support.fixtures import SHARED
from tests.support.tools import needs_tool

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(900)

# Sealed e5 segment: nonce 12 + tag 16 + header 6 + 8, then per vector 16 (key) + 4 (scale) + 384 (codes).
_E5_ROW = 16 + 4 + 384


def _e5_vectors_kept(state: Path) -> int:
    sizes = [path.stat().st_size - 12 - 16 - 6 - 8 for path in (state / "vectors" / "e5").glob("seg-*.bin")]
    assert all(size % _E5_ROW == 0 for size in sizes)
    return sum(size // _E5_ROW for size in sizes)


def _memories(count: int) -> list[dict[str, Any]]:
    """MEMORIES and ``count`` plain filler notes, enough to keep e5 busy for a while."""
    places = ["Lisbon", "Osaka", "Quito", "Tallinn", "Hobart", "Accra", "Bergen", "Cusco"]
    filler = [
        {"title": f"Trip note {n}", "content": f"Day {n} in {places[n % len(places)]}: walked {n % 9 + 2} km, "
         f"visited the market number {n} and wrote postcards to {n % 5 + 1} friends.", "tags": ["travel"]}
        for n in range(count)
    ]
    return MEMORIES + filler


@pytest.mark.slow
def test_recall_answers_while_e5_is_computed_and_keeps_its_vectors(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("e5user")
    brain, ids = make_brain(_memories(150))
    brain_id = upload_brain(store.url, user.token, brain)
    state = tmp_path / "connector-state"
    total = len(ids)

    async def first_run(base: str) -> None:
        token = mint(base, user, {"brain.read"})
        async with mcp_session(base + "/mcp", token) as client:
            before = structured(await client.call_tool("brain_status", {}))
            assert "recall_e5" not in before  # nothing asked for it yet
            found = structured(await client.call_tool("brain_recall", {"query": "疫苗", "limit": 3}))
            # Answered on the other channels while e5 is being computed.
            assert found["results"][0]["id"] == ids["猫的疫苗"]
            status = structured(await client.call_tool("brain_status", {}))
            assert status["recall_e5"]["state"] == "embedding" and status["recall_e5"]["total"] == total
            assert status["recall_e5"]["embedded"] < total
            # It goes on in the background: recall keeps answering, status shows progress, then ready.
            deadline = time.monotonic() + 600
            while status["recall_e5"]["state"] != "ready":
                assert time.monotonic() < deadline, status
                await asyncio.sleep(1.0)
                found = structured(await client.call_tool("brain_recall", {"query": "vaccine for the cat", "limit": 3}))
                assert found["results"][0]["id"] == ids["猫的疫苗"]
                status = structured(await client.call_tool("brain_status", {}))
            shown = status["recall_e5"]
            assert {key: shown[key] for key in ("state", "embedded", "total")} == {"state": "ready", "embedded": total, "total": total}
            # Where the int8 query kernels stand (the connector builds them in the background).
            assert shown["query_kernels"] in ("loading", "ready", "failed")
            # The memories' neighbours (their hubness) come first in the same background job.
            assert shown["neighbours"] == "ready"
            # With e5 fused in (the version's vectors handed over on the next recall).
            found = structured(await client.call_tool("brain_recall", {"query": "vaccine for the cat", "limit": 3}))
            assert found["results"][0]["id"] == ids["猫的疫苗"]
            assert "Recall model e5: ready" in (await client.call_tool("brain_status", {})).content[0].text

    with connector(tmp_path, store) as server:
        asyncio.run(first_run(server.base_url))
    kept = _e5_vectors_kept(state)
    assert kept == total
    files = sorted(path.name for path in (state / "vectors" / "e5").glob("seg-*.bin"))

    async def after_restart(base: str) -> None:
        token = mint(base, user, {"brain.read"})
        async with mcp_session(base + "/mcp", token) as client:
            structured(await client.call_tool("brain_recall", {"query": "vaccine for the cat", "limit": 3}))
            deadline = time.monotonic() + 120
            while True:
                status = structured(await client.call_tool("brain_status", {}))
                if status["recall_e5"]["state"] == "ready":
                    break
                assert time.monotonic() < deadline, status
                await asyncio.sleep(0.2)
            found = structured(await client.call_tool("brain_recall", {"query": "vaccine for the cat", "limit": 3}))
            assert found["results"][0]["id"] == ids["猫的疫苗"]

    with connector(tmp_path, store) as server:
        asyncio.run(after_restart(server.base_url))
    # Read back, not computed again: the same segment files, no new one.
    assert sorted(path.name for path in (state / "vectors" / "e5").glob("seg-*.bin")) == files
    assert _e5_vectors_kept(state) == total


# Queries of recall-quality's no-answer set whose answer decision the answer gate's cascade
# changes (bench/gate_cv.py --cascade: the first gate scores them within its band, and the second
# gate, reading the query as a passage, decides the other way).
CASCADE_QUERIES = ["Vue component library we picked", "iOS App Store review rejection", "陶芸教室の作品",
                   "GraphQL接口设计", "stamp collection appraisal"]
QUALITY_BRAIN = SHARED / "recall-quality" / "brain"


@pytest.mark.slow
@needs_tool(QUALITY_BRAIN.is_dir(), f"the recall-quality set is not in {SHARED}: no brain to run the cascade on")
def test_recall_over_mcp_decides_near_the_threshold_with_the_query_as_a_passage(store: RunningStore,
                                                                                 tmp_path: Path) -> None:
    """The connector hands hybrid recall the query's passage form: its answers are the engine's
    with the cascade, which differ from the first gate's alone."""
    from connector.engine.format.archive import load_directory
    from connector.engine.recall.hybrid import HybridIndex, hybrid_recall, recall_in_mode
    from connector.engine.recall.index import BrainIndex
    from connector.workcopy.vectors import VectorStore, e5_store

    user = store.add_user("cascade")
    brain = load_directory(QUALITY_BRAIN)
    upload_brain(store.url, user.token, brain)
    use, e5 = VectorStore().for_brain("b"), e5_store()
    assert e5 is not None, "the e5 engine does not load here"
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, use)

    def ids(hits: list[dict[str, Any]]) -> list[str]:
        return [hit["id"] for hit in hits]

    now = datetime.now(UTC)
    expected = {query: ids(recall_in_mode(brain, query, mode="hybrid", index=index, hybrid=hybrid, source=use,
                                          e5_source=e5.for_brain("b"), top=5, now=now))
                for query in CASCADE_QUERIES}
    first_gate_alone = {query: ids(hybrid_recall(brain, query, index=index, hybrid=hybrid, embed_query=use.embed_query,
                                                 e5=hybrid.e5, embed_e5_query=e5.embed_query, top=5, now=now))
                        for query in CASCADE_QUERIES}
    changed = [query for query in CASCADE_QUERIES if bool(expected[query]) != bool(first_gate_alone[query])]
    assert changed, (expected, first_gate_alone)

    async def ask(base: str) -> dict[str, list[str]]:
        token = mint(base, user, {"brain.read"})
        async with mcp_session(base + "/mcp", token) as client:
            deadline = time.monotonic() + 600
            while structured(await client.call_tool("brain_status", {})).get("recall_e5", {}).get("state") != "ready":
                assert time.monotonic() < deadline, "the brain's e5 vectors never became ready"
                structured(await client.call_tool("brain_recall", {"query": "warm-up", "limit": 1}))
                await asyncio.sleep(0.5)
            return {query: ids(structured(await client.call_tool("brain_recall", {"query": query, "limit": 5}))["results"])
                    for query in CASCADE_QUERIES}

    # The cascade without the judge (which decides these queries where it runs: tests/engine/test_judge.py).
    with connector(tmp_path, store, env={"CONNECTOR_RECALL_JUDGE": "false"}) as server:
        answered = asyncio.run(ask(server.base_url))
    assert {query: bool(found) for query, found in answered.items()} == {
        query: bool(found) for query, found in expected.items()}, (answered, expected, changed)


def test_without_e5_status_says_nothing_of_it(store: RunningStore, tmp_path: Path) -> None:
    """CONNECTOR_RECALL_E5=false: hybrid recall on its other channels, no e5 segment, no status field."""
    user = store.add_user("noe5")
    brain, ids = make_brain()
    brain_id = upload_brain(store.url, user.token, brain)

    async def scenario(base: str) -> None:
        token = mint(base, user, {"brain.read"})
        async with mcp_session(base + "/mcp", token) as client:
            found = structured(await client.call_tool("brain_recall", {"query": "疫苗", "limit": 3}))
            assert found["results"][0]["id"] == ids["猫的疫苗"]
            status = structured(await client.call_tool("brain_status", {}))
            # No e5, no judge: the answer gate it serves decides only once e5 votes.
            assert "recall_e5" not in status and "recall_judge" not in status

    with connector(tmp_path, store, env={"CONNECTOR_RECALL_E5": "false"}) as server:
        asyncio.run(scenario(server.base_url))
    assert not list((tmp_path / "connector-state" / "vectors" / "e5").glob("seg-*.bin"))


def test_status_counts_the_memories_left_after_a_forget(store: RunningStore, tmp_path: Path) -> None:
    """A forget leaves a version whose e5 vectors are all the earlier one's: brain_status counted the
    forgotten memory still ("ready (N memories)" beside "Memories: N-1") until some later recall."""
    user = store.add_user("e5forget")
    brain, ids = make_brain()
    upload_brain(store.url, user.token, brain)

    async def e5_status(client: Any) -> tuple[int, dict[str, Any]]:
        status = structured(await client.call_tool("brain_status", {}))
        return status["memory_count"], status.get("recall_e5") or {}

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            structured(await client.call_tool("brain_recall", {"query": "疫苗", "limit": 3}))
            deadline = time.monotonic() + 120
            while (await e5_status(client))[1].get("state") != "ready":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
            structured(await client.call_tool("brain_recall", {"query": "vaccine for the cat", "limit": 3}))
            structured(await client.call_tool("brain_forget", {"id": ids["猫的疫苗"], "force": True}))
            deadline = time.monotonic() + 20
            count, e5 = await e5_status(client)
            while e5.get("total") != count:
                assert time.monotonic() < deadline, (count, e5)
                await asyncio.sleep(0.2)
                count, e5 = await e5_status(client)
            assert count == len(ids) - 1 and e5["state"] == "ready" and e5["embedded"] == count

    with connector(tmp_path, store) as server:
        asyncio.run(scenario(server.base_url))


def test_status_counts_the_version_a_pull_brought(store: RunningStore, tmp_path: Path) -> None:
    """Another writer adds a memory at the store; the connector pulls it. brain_status counted the e5
    vectors of the version before ("ready" with the old total beside the new memory count) until
    some later recall; it now reports them for the version it shows."""
    user = store.add_user("e5pull")
    brain, ids = make_brain()
    brain_id = upload_brain(store.url, user.token, brain)

    async def e5_status(client: Any) -> tuple[int, dict[str, Any]]:
        status = structured(await client.call_tool("brain_status", {}))
        return status["memory_count"], status.get("recall_e5") or {}

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read"})) as client:
            structured(await client.call_tool("brain_recall", {"query": "疫苗", "limit": 3}))
            deadline = time.monotonic() + 120
            while (await e5_status(client))[1].get("state") != "ready":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
            assert (await e5_status(client))[1]["total"] == len(ids)
            direct_memorize(store.url, user.token, brain_id, "The boiler is serviced every October")
            # No recall from here on: the copy is re-checked (CONNECTOR_REPULL_TTL_MS 500) and pulled.
            deadline = time.monotonic() + 30
            count, e5 = await e5_status(client)
            while count == len(ids):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
                count, e5 = await e5_status(client)
            assert count == len(ids) + 1
            assert e5["total"] == count, e5  # the version shown, in the same answer
            deadline = time.monotonic() + 120
            while e5["state"] != "ready":
                assert time.monotonic() < deadline, e5
                await asyncio.sleep(0.2)
                count, e5 = await e5_status(client)
            assert e5["embedded"] == e5["total"] == count

    with connector(tmp_path, store) as server:
        asyncio.run(scenario(server.base_url))
