"""Helpers for the write tests: fixture brains in memory, and whole-brain consistency checks."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from connector.engine.format.archive import load_directory
from connector.engine.format.brain import Brain, dump_json
from connector.engine.format.frontmatter import frontmatter_text
from connector.engine.format.text import document_text, memory_body, term_counts
from tests.support.fixtures import project_parity_dir

NOW = datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
NOW_ISO = "2026-03-01T12:00:00.123Z"


OUR_JSON = {"index.json", "associations.json", "search-index.json", "pinned.json", "_archived/index.json"}


# The write tests name particular fixture brains and memories, so they always use the
# project's own fixture set (RECALL_PARITY_DIR may point the parity test elsewhere): the
# full set in ../shared, else the subset in tests/fixtures (brains it lacks skip).
FIXTURES = project_parity_dir() / "brains"


def require_fixtures() -> None:
    """Skip the calling test module when no fixture brains are found (a damaged checkout)."""
    if not (FIXTURES / "brain-1-00" / "index.json").is_file():
        pytest.skip(f"fixture brains not found at {FIXTURES}", allow_module_level=True)


def fixture_brain(name: str) -> Brain:
    """A fixture brain loaded into memory (the fixture directory is never written); the calling
    test skips when ``name`` is not in the subset a bare clone has."""
    return load_directory(fixture_path(name))


def fixture_path(name: str) -> Path:
    """The directory of fixture brain ``name`` (skips the test when it is not there)."""
    path = FIXTURES / name
    if not (path / "index.json").is_file():
        pytest.skip(f"fixture brain {name} is only in the full set (../shared/fixtures/recall-parity)")
    return path


def index(brain: Brain) -> dict[str, Any]:
    value = brain.read_json("index.json")
    assert isinstance(value, dict)
    return value


def entries(brain: Brain) -> dict[str, Any]:
    return index(brain)["memories"]


def frontmatter(brain: Brain, path: str) -> dict[str, Any]:
    text = brain.read_text(path)
    assert text is not None, path
    parsed = yaml.safe_load(frontmatter_text(text) or "")
    assert isinstance(parsed, dict)
    return parsed


def edges(brain: Brain) -> dict[str, Any]:
    value = brain.read_json("associations.json") or {"edges": {}}
    return value["edges"]


def memory(title: str = "A fact", **fields: Any) -> dict[str, Any]:
    """A memorize request object with sensible defaults."""
    base: dict[str, Any] = {"title": title, "type": "learning", "path": "notes/", "content": f"{title} content"}
    base.update(fields)
    return base


def check_consistency(brain: Brain) -> None:
    """Cross-file invariants every write must keep."""
    for path, data in brain.files.items():
        if path in OUR_JSON or path.endswith("/_meta.json"):
            try:
                parsed = json.loads(data)
            except ValueError:
                continue  # a corrupt file someone else wrote: kept as it is
            assert dump_json(parsed) == data, f"{path} is not in the command line's JSON layout"
    idx = index(brain)
    memories = idx["memories"]
    assert idx["memory_count"] == len(memories)
    for memory_id, entry in memories.items():
        assert brain.read(entry["path"]) is not None, f"{memory_id}: file {entry['path']} missing"
        assert frontmatter(brain, entry["path"])["id"] == memory_id
    all_edges = edges(brain)
    for source, neighbours in all_edges.items():
        assert source in memories, f"edge from unknown {source}"
        assert neighbours, "empty neighbour maps are dropped"
        for target, edge in neighbours.items():
            assert target in memories, f"edge to unknown {target}"
            assert source in all_edges.get(target, {}), "edges are symmetric"
            assert 0 < edge["weight"] <= 1
    search = brain.read_json("search-index.json")
    if isinstance(search, dict) and "documents" in search:
        documents = search["documents"]
        assert set(documents) == set(memories)
        assert search["doc_count"] == len(documents)
        df: dict[str, int] = {}
        for document in documents.values():
            for term in document["tf"]:
                df[term] = df.get(term, 0) + 1
        assert search["df"] == df
    pinned = brain.read_json("pinned.json")
    if isinstance(pinned, dict):
        pinned_ids = [pin["id"] for pin in pinned["pins"]]
        assert len(pinned_ids) == len(set(pinned_ids))
        assert set(pinned_ids) <= {mid for mid, entry in memories.items() if entry.get("pinned")}
    archived = brain.read_json("_archived/index.json")
    if isinstance(archived, dict):
        assert archived["archived_count"] == len(archived["memories"])
        assert not set(archived["memories"]) & set(memories)
        for entry in archived["memories"].values():
            if entry.get("archived_path"):
                assert brain.read(entry["archived_path"]) is not None


def expected_document(brain: Brain, memory_id: str) -> dict[str, Any]:
    """The search-index document recall would rebuild for a memory from its file."""
    entry = entries(brain)[memory_id]
    body = memory_body(brain.read_text(entry["path"]) or "")
    tf, length = term_counts(document_text(entry.get("title"), entry.get("tags"), body))
    return {"tf": tf, "length": length}


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
