"""The memorize check inside the connector: which version of a brain it checks against, and
that a large brain never indexed here is indexed in the background, not waited for."""

from __future__ import annotations

import time
from typing import Any

import pytest

from connector.engine.tending.similar import DUPLICATE, UPDATE, Incoming
from connector.engine.writes.ops import Memorize
from connector.mcp import tools as tools_module
from connector.mcp.tools import BrainTools
from connector.workcopy.model import Identity, Snapshot
from connector.workcopy.vectors import VectorStore
from tests.engine.hybrid_support import NOW
from tests.engine.similar_support import MEMORIES, governance_brain


class NoCopies:
    copies: dict[Any, Any] = {}


def snapshot(brain, key: str) -> Snapshot:  # type: ignore[no-untyped-def]
    return Snapshot(brain=brain, key=key, brain_id="b1", brain_name="default", identity=Identity(status="ok", note=None, brains=(), active_id="b1"))


@pytest.fixture(scope="module")
def vectors() -> VectorStore:
    return VectorStore()


def test_a_large_brain_is_indexed_in_the_background(monkeypatch: pytest.MonkeyPatch, vectors: VectorStore) -> None:
    monkeypatch.setattr(tools_module, "SIMILAR_WAIT_MEMORIES", 3)
    tools = BrainTools(manager=NoCopies(), vectors=vectors)  # type: ignore[arg-type]
    brain, ids = governance_brain()
    view = snapshot(brain, "k1")
    # First write: exact duplicates only, answered at once; the index is being built meanwhile.
    moved = Incoming("The dentist appointment is on 21 May at 3 pm at the clinic near Ikebukuro station.")
    assert tools.similar_for(view, moved) == []
    exact = tools.similar_for(view, Incoming(MEMORIES[6]["content"]))
    assert [(item.id, item.relation, item.exact) for item in exact] == [(ids["Bread baking"], DUPLICATE, True)]
    for _ in range(600):
        if "b1" in tools._similar_base:
            break
        time.sleep(0.05)
    # Once built, the whole check.
    assert [(item.id, item.relation) for item in tools.similar_for(view, moved) if item.flagged] == [
        (ids["Dentist appointment"], UPDATE)]


def test_after_a_write_the_check_uses_the_indexed_version_and_the_newer_memories(vectors: VectorStore) -> None:
    tools = BrainTools(manager=NoCopies(), vectors=vectors)  # type: ignore[arg-type]
    brain, ids = governance_brain()
    assert tools.similar_for(snapshot(brain, "k1"), Incoming("anything at all")) is not None
    later = brain.copy()
    stored = Memorize.from_request([{"title": "Piano lessons", "type": "learning", "path": "notes/",
                                     "content": "Piano lessons are on Wednesdays at 7 pm with Ms. Tanaka."}]
                                   ).apply(later, NOW)["stored"][0]
    view = snapshot(later, "k2")  # no hybrid index for k2: the check does not build one
    found = tools.similar_for(view, Incoming("Piano lessons are on Fridays at 7 pm with Ms. Tanaka."))
    assert [(item.id, item.relation) for item in found if item.flagged] == [(stored["id"], UPDATE)]
    again = tools.similar_for(view, Incoming("Piano lessons are on Wednesdays at 7 pm with Ms. Tanaka."))
    assert again[0].id == stored["id"] and again[0].exact
    assert "k2" not in tools.hybrid_cache and tools._similar_base["b1"][0] == "k1"
    assert ids["Dentist appointment"] in [item.id for item in tools.similar_for(view, Incoming(MEMORIES[0]["content"]))]


def test_the_checked_memory_is_not_embedded_again_after_its_write() -> None:
    """Issue 28: the check embeds the new memory's text once; the next version's index finds that vector."""
    from connector.engine.recall.index import BrainIndex
    from connector.engine.writes.ops import connector_memorize
    from tests.engine.hybrid_support import CountingEmbedder

    embedder = CountingEmbedder()
    store = VectorStore(embedder)
    tools = BrainTools(manager=NoCopies(), vectors=store)  # type: ignore[arg-type]
    brain, _ = governance_brain()
    assert tools.similar_for(snapshot(brain, "k1"), Incoming("warm up")) is not None
    known = len(store)
    op = connector_memorize("  The bakery on Elm Street now opens at 6:30.\n", title="Bakery hours", tags=["food", "town"])
    memory = op.memories[0]
    tools.similar_for(snapshot(brain, "k1"), Incoming(memory.content, memory.title, memory.tags, memory.type))
    assert len(store) == known + 1
    after = brain.copy()
    op.apply(after, NOW)
    embedded = embedder.embedded
    tools.hybrid_index(after, "k2", BrainIndex.build(after), "b1")
    assert embedder.embedded == embedded, "the new memory was embedded again"
