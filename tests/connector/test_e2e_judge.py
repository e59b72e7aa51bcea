"""The answer gate's judge over MCP: a real connector and store, the official client SDK.

brain_status says where the judge stands (``recall_judge``: its model, and its channel over this
brain) beside the e5 channel; once both are ready, brain_recall's answers are the engine's with
the judge (fused in, and read by the answer gate), which answers queries the gate alone refuses. With CONNECTOR_RECALL_JUDGE=false they are the engine's without it, and
brain_status says nothing of a judge.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.connector.conftest import RunningStore, shared_store, upload_brain
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured
from tests.support.fixtures import fixture_dir

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(900)

# 120 memories, in the repository: enough for the answer gate (30 eligible or more) and quick to embed.
BRAIN = fixture_dir("recall-parity-subset") / "brains" / "brain-1-08"
# Queries the first gate scores within the judge's band (answergate.JUDGED_CASCADE) on that brain: the
# first three the judge answers (its verdict 0.6-2.2 above its threshold here) where the gate alone
# refuses them, the next two it refuses too; the last two the first gate answers without asking it.
JUDGE_QUERIES = ["where did I go on holiday", "how do I know I'm overloaded",
                 "my boss's expectations for our biweekly chats", "what should I buy my boyfriend",
                 "xylophone quantum", "docker", "kids' school holiday plans"]
TOP = 5


def _engine_answers(brain: Any) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The ids the engine recalls for each of JUDGE_QUERIES in this process: with the judge, and without."""
    from connector.engine.recall.hybrid import HybridIndex, recall_in_mode
    from connector.engine.recall.index import BrainIndex
    from connector.workcopy.vectors import VectorStore, e5_store, judge_store

    e5, judge = e5_store(), judge_store()
    assert e5 is not None, "the e5 engine does not load here"
    assert judge is not None, "the judge does not load here"
    # Queries through the int8 kernels, as the connector embeds them once brain_status says they are ready.
    assert e5.embedder.prepare_queries(timeout=120), "the int8 e5 query kernels do not build here"
    use = VectorStore().for_brain("b")
    index = BrainIndex.build(brain)
    hybrid = HybridIndex.build(brain, index, use)
    now = datetime.now(UTC)

    def ids(judge_source: Any) -> dict[str, list[str]]:
        return {query: [hit["id"] for hit in recall_in_mode(
                    brain, query, mode="hybrid", index=index, hybrid=hybrid, source=use, e5_source=e5.for_brain("b"),
                    judge_source=judge_source, top=TOP, now=now)]
                for query in JUDGE_QUERIES}

    return ids(judge.for_brain("b")), ids(None)


async def _status_once_ready(client: Any, *, judged: bool) -> tuple[dict[str, Any], str]:
    """brain_status (structured, text) once the brain's e5 vectors and query kernels are ready, and
    the judge too when ``judged`` (a recall meanwhile starts the e5 vectors)."""
    deadline = time.monotonic() + 600
    while True:
        result = await client.call_tool("brain_status", {})
        status = structured(result)
        e5 = status.get("recall_e5") or {}
        if judged:
            # Idle until the first hybrid recall, loading, then ready: never unavailable (this process
            # loaded the same judge above).
            assert status["recall_judge"]["state"] in ("idle", "loading", "ready"), status["recall_judge"]
        # Ready, and this brain's memories all read with it (its channel fuses English queries then).
        judge_ready = not judged or status["recall_judge"] == {"state": "ready", "channel": "ready"}
        if e5.get("state") == "ready" and e5.get("query_kernels") == "ready" and judge_ready:
            return status, result.content[0].text
        assert time.monotonic() < deadline, status
        # A query the gate doubts: once e5 votes, it starts the judge loading.
        structured(await client.call_tool("brain_recall", {"query": JUDGE_QUERIES[1], "limit": 1}))
        await asyncio.sleep(0.5)


@pytest.mark.slow
def test_recall_over_mcp_asks_the_judge_once_status_says_it_is_ready(store: RunningStore, tmp_path: Path) -> None:
    """With the judge (the default) the connector's answers are the engine's with it, and differ
    from the gate's alone; with CONNECTOR_RECALL_JUDGE=false, the engine's without it."""
    from connector.engine.format.archive import load_directory

    user = store.add_user("judge")
    brain = load_directory(BRAIN)
    upload_brain(store.url, user.token, brain)
    judged, unjudged = _engine_answers(brain)
    opened = [query for query in JUDGE_QUERIES if judged[query] and not unjudged[query]]
    # The judge decides some of them: the test would hold with a connector that never asks it otherwise.
    assert opened, (judged, unjudged)

    async def ask(base: str, *, judged: bool) -> tuple[dict[str, Any], str, dict[str, list[str]]]:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read"})) as client:
            status, text = await _status_once_ready(client, judged=judged)
            found = {query: [hit["id"] for hit in structured(await client.call_tool(
                         "brain_recall", {"query": query, "limit": TOP}))["results"]]
                     for query in JUDGE_QUERIES}
            return status, text, found

    with connector(tmp_path, store) as server:
        status, text, answered = asyncio.run(ask(server.base_url, judged=True))
    assert status["recall_judge"] == {"state": "ready", "channel": "ready"}
    assert "Recall judge: ready; English queries are fused with it" in text
    assert answered == judged, (answered, judged, unjudged)

    # The same state directory: e5's vectors are read back; no judge.
    with connector(tmp_path, store, env={"CONNECTOR_RECALL_JUDGE": "false"}) as server:
        status, text, answered = asyncio.run(ask(server.base_url, judged=False))
    assert "recall_judge" not in status and "Recall judge" not in text
    assert answered == unjudged, (answered, judged, unjudged)


def test_status_says_why_the_judge_cannot_load(store: RunningStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge whose tokenizer does not load: brain_status says it is unavailable and why, without
    the loader's detail (a path, an exception's text), which stays in the log."""
    from connector.engine.recall import judge as judge_module
    from connector.engine.recall.judge import JudgeEmbedder, JudgeUnavailable
    from connector.mcp.tools import BrainTools, Caller
    from connector.workcopy.manager import WorkingCopyManager
    from connector.workcopy.store_client import StoreClient
    from connector.workcopy.vectors import VectorStore
    from tests.connector.test_workcopy import account_for, run

    user = store.add_user("nojudge")
    # The model's ONNX file read as a tokenizer: the package is there, the tokenizer refuses it.
    monkeypatch.setattr(judge_module, "_TOKENIZER", judge_module._MODEL)
    embedder = JudgeEmbedder()

    async def status(tools: BrainTools) -> tuple[dict[str, Any], str]:
        result = await tools.call("brain_status", {}, Caller(account_for(user), frozenset({"brain.read"})))
        return result.structured_content, result.content[0].text

    async def scenario() -> None:
        manager = WorkingCopyManager(StoreClient(store.url))
        tools = BrainTools(manager, judge=VectorStore(embedder))
        shown, text = await status(tools)
        assert shown["recall_judge"] == {"state": "idle"} and "Recall judge: loads at the first query the answer gate doubts" in text
        with pytest.raises(JudgeUnavailable, match="the judge's tokenizer cannot load: "):
            embedder.load()
        shown, text = await status(tools)
        assert shown["recall_judge"] == {"state": "unavailable", "reason": "the judge's tokenizer cannot load"}
        assert ("Recall judge: cannot load on this machine (the judge's tokenizer cannot load); the answer gate "
                "decides without it.") in text
        # A connector without a judge says nothing of one.
        shown, text = await status(BrainTools(manager))
        assert "recall_judge" not in shown and "Recall judge" not in text
        await manager.close()

    run(scenario())
