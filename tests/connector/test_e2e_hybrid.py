"""Hybrid recall over MCP: a real connector and store, the official client SDK."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.connector.conftest import RunningStore, shared_store, upload_brain
from tests.connector.test_e2e_tool_content import text_of
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured
from tests.engine.hybrid_support import make_brain

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(300)


def test_recall_mode_over_mcp(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("hybrid")
    brain, ids = make_brain()
    brain_id = upload_brain(store.url, user.token, brain)

    async def scenario(base: str) -> None:
        token = mint(base, user, {"brain.read", "brain.write"})
        async with mcp_session(base + "/mcp", token) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert tools["brain_recall"].input_schema["properties"]["mode"]["enum"] == ["exact", "hybrid"]
            # Hybrid is the default (no CONNECTOR_RECALL_MODE set): it finds Chinese text and typos.
            found = structured(await client.call_tool("brain_recall", {"query": "疫苗", "limit": 3}))
            assert found["results"][0]["id"] == ids["猫的疫苗"] and "nothing_matches_well" not in found
            typo = structured(await client.call_tool("brain_recall", {"query": "kubernetse clustr", "limit": 3}))
            assert ids["Cluster upgrade"] in [hit["id"] for hit in typo["results"]]
            # A topic the brain never mentions: nothing, and the answer says no memory matches well,
            # in English, Chinese and Japanese alike.
            for absent in ("saxophone lessons", "学习萨克斯", "サックスの練習"):
                answer = await client.call_tool("brain_recall", {"query": absent})
                nothing = structured(answer)
                assert nothing["count"] == 0 and nothing["results"] == [] and nothing["nothing_matches_well"] is True
                assert "No memory matches this query well" in nothing["note"]
                assert text_of(answer).startswith("No memory matches well.")
            # The caller can still ask for the exact engine, which sees no Chinese: it says hybrid would.
            exact = structured(await client.call_tool("brain_recall", {"query": "疫苗", "mode": "exact"}))
            assert exact["count"] == 0 and exact["results"] == [] and "nothing_matches_well" not in exact
            assert 'cannot search Chinese or Japanese text; hybrid mode (mode "hybrid") would search' in exact["note"]
            # An English exact query that finds nothing gets no such hint.
            plain = structured(await client.call_tool("brain_recall", {"query": "saxophone", "mode": "exact"}))
            assert plain == {"count": 0, "results": []}
            wrong = await client.call_tool("brain_recall", {"query": "疫苗", "mode": "fuzzy"})
            assert wrong.is_error and "'mode' must be one of: exact, hybrid" in wrong.content[0].text

    with connector(tmp_path, store) as server:
        asyncio.run(scenario(server.base_url))
    # The vectors were kept, sealed, in the connector's state directory (never in the brain).
    segments = list((tmp_path / "connector-state" / "vectors").glob("seg-*.bin"))
    assert segments and all(path.stat().st_mode & 0o777 == 0o600 for path in segments)


def _vectors_kept(state: Path) -> int:
    """Vectors in the sealed segments (count from sizes: nonce, tag, header, 532 bytes each)."""
    sizes = [path.stat().st_size - 12 - 16 - 6 - 8 for path in (state / "vectors").glob("seg-*.bin")]
    assert all(size % (16 + 4 + 512) == 0 for size in sizes)
    return sum(size // (16 + 4 + 512) for size in sizes)


def test_vectors_are_per_brain_and_survive_a_restart(store: RunningStore, tmp_path: Path) -> None:
    """Issue 24 item 11: another user's brain holding the same texts never finds them cached."""
    users = {name: store.add_user(name) for name in ("alice", "mallory")}
    ids = {}
    for name, user in users.items():
        brain, ids[name] = make_brain()  # the same texts in both brains
        brain_id = upload_brain(store.url, user.token, brain)
    state = tmp_path / "connector-state"

    async def recall(base: str, name: str) -> None:
        token = mint(base, users[name], {"brain.read"})
        async with mcp_session(base + "/mcp", token) as client:
            found = structured(await client.call_tool("brain_recall", {"query": "疫苗", "mode": "hybrid", "limit": 3}))
            assert found["results"][0]["id"] == ids[name]["猫的疫苗"]

    count = len(ids["alice"])
    with connector(tmp_path, store) as server:
        asyncio.run(recall(server.base_url, "alice"))
        assert _vectors_kept(state) == count
        asyncio.run(recall(server.base_url, "mallory"))
        assert _vectors_kept(state) == 2 * count, "mallory's texts were embedded for mallory, not found in alice's"
    with connector(tmp_path, store) as server:  # restarted: both read back, nothing computed again
        asyncio.run(recall(server.base_url, "alice"))
        asyncio.run(recall(server.base_url, "mallory"))
        assert _vectors_kept(state) == 2 * count


def test_the_hybrid_index_is_read_back_after_a_restart(store: RunningStore, tmp_path: Path) -> None:
    """Issue 28: a restarted connector reads the brain's hybrid index back from its own disk
    cache instead of rebuilding it; a damaged cache file is rebuilt."""
    user = store.add_user("restarts")
    brain, ids = make_brain()
    brain_id = upload_brain(store.url, user.token, brain)
    state = tmp_path / "connector-state"
    cache = state / "index-cache"

    async def recall(base: str) -> None:
        token = mint(base, user, {"brain.read"})
        async with mcp_session(base + "/mcp", token) as client:
            found = structured(await client.call_tool("brain_recall", {"query": "疫苗", "mode": "hybrid", "limit": 3}))
            assert found["results"][0]["id"] == ids["猫的疫苗"]

    with connector(tmp_path, store) as server:
        asyncio.run(recall(server.base_url))
    # Saved at shutdown at the latest: one sealed file, 0600.
    (saved,) = cache.glob("*.hix")
    assert saved.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700
    # Without its vector segments a rebuild would embed every memory again; read back, it embeds nothing.
    for segment in (state / "vectors").glob("seg-*.bin"):
        segment.unlink()
    with connector(tmp_path, store) as server:
        asyncio.run(recall(server.base_url))
    assert _vectors_kept(state) == 0, "the restarted connector rebuilt the index instead of reading it back"
    # A damaged file is ignored: the index is rebuilt (the vectors embedded again) and saved anew.
    whole = saved.stat().st_size
    saved.write_bytes(saved.read_bytes()[:-100])
    with connector(tmp_path, store) as server:
        asyncio.run(recall(server.base_url))
    assert _vectors_kept(state) == len(ids)
    assert [path.stat().st_size for path in cache.glob("*.hix")] == [whole]


def test_a_hit_listed_above_a_higher_score_is_marked_and_said(store: RunningStore, tmp_path: Path) -> None:
    # "habits" is the Track habit memory's own word (exact relevance 1.0), so hybrid recall lists it
    # first, although the Coffee memory (tagged habits) fuses to a higher score. The model read
    # "most relevant first" and scores that said otherwise, with nothing to reconcile them.
    user = store.add_user("ordering")
    brain, ids = make_brain()
    upload_brain(store.url, user.token, brain)

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read"})) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert "most relevant first" not in tools["brain_recall"].description
            assert "listed first whatever its score" in tools["brain_recall"].description
            answer = await client.call_tool("brain_recall", {"query": "habits", "mode": "hybrid", "limit": 3})
            found = structured(answer)
            first, second = found["results"][:2]
            assert first["id"] == ids["Track habit"] and second["id"] == ids["Coffee"]
            assert first["score"] < second["score"]
            assert first["above_higher_scores"] is True
            assert not any(hit.get("above_higher_scores") for hit in found["results"][1:])
            line = text_of(answer).split("\n")[1]
            assert line.startswith("1. Track habit (") and line.endswith(
                "[listed above higher scores: the query's own words match it closely, and such a match always comes first]")
            # In score order there is nothing to say.
            plain = structured(await client.call_tool("brain_recall", {"query": "疫苗", "mode": "hybrid", "limit": 3}))
            assert not any(hit.get("above_higher_scores") for hit in plain["results"])

    with connector(tmp_path, store) as server:
        asyncio.run(scenario(server.base_url))
