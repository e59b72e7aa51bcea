"""Read views: content under a recall budget, one whole memory, and the session-start payload."""

from __future__ import annotations

import pytest
import json
from datetime import UTC, datetime

from connector.engine.format.brain import Brain
from connector.engine.format.frontmatter import body_text
from connector.engine.format.tokens import Budget
from connector.engine.format.views import attach_content, cut_at_word, read_memory
from connector.engine.recall.exact import recall
from connector.engine.recall.session import edge_order, pinned_tier, session_start, take_within
from connector.engine.writes.ops import Forget, Memorize, MemoryInput, Pin

# Dates inside: tests/test_clock_ahead.py runs this module again with the clock a year ahead.
pytestmark = pytest.mark.clock

NOW = datetime(2026, 1, 15, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


def _brain(*memories: MemoryInput, config: dict | None = None) -> tuple[Brain, list[str]]:
    brain = Brain({"config.json": json.dumps(config or {"quarantine_mode": "off"}).encode()})
    stored = Memorize(list(memories)).apply(brain, NOW)["stored"]
    return brain, [item["id"] for item in stored]


def _memory(title: str, content: str, **extra: object) -> MemoryInput:
    return MemoryInput(title=title, type="decision", content=content, path="notes/", **extra)  # type: ignore[arg-type]


def test_body_text_ends_front_matter_at_its_closing_line() -> None:
    assert body_text('---\ntitle: "a --- b"\n---\n\nBody --- with dashes\n') == "Body --- with dashes"
    assert body_text("no front matter\n") == "no front matter"


def test_content_is_given_best_first_within_the_budget() -> None:
    long_text = "alpha " * 40  # 240 characters
    brain, ids = _brain(_memory("alpha one", long_text.strip()), _memory("alpha two", "alpha short"),
                        _memory("alpha three", "alpha third"))
    hits = recall(brain, "alpha", top=3, now=NOW)
    attach_content(hits, brain, Budget(chars=100))
    first = hits[0]
    assert first["content_truncated"] is True and first["content_length"] == len(long_text.strip())
    assert len(first["content"]) <= 100 and not first["content"].endswith(" ")
    assert long_text.startswith(first["content"])
    spent = sum(len(hit["content"]) for hit in hits)
    assert spent <= 100
    plenty = recall(brain, "alpha", top=3, now=NOW)
    attach_content(plenty, brain, Budget(chars=10_000))
    assert all("content_truncated" not in hit for hit in plenty)
    assert {hit["id"]: hit["content"] for hit in plenty}[ids[1]] == "alpha short"


def test_cut_at_word_prefers_a_break_near_the_end() -> None:
    assert cut_at_word("one two three four", 12) == "one two"
    assert cut_at_word("abcdefghij", 4) == "abcd"
    assert cut_at_word("short", 100) == "short"


def test_read_memory_whole_with_links_and_archive() -> None:
    brain, ids = _brain(
        _memory("Rotation", "Keys rotate monthly.", tags=("keys", "ops"), origin="user",
                encoding_context={"project": "apollo", "agent": "claude"}, valid_from="2026-01-01"),
        _memory("Vault", "Keys live in the vault.", tags=("keys", "ops")),
    )
    memory = read_memory(brain, ids[0], now_ms=NOW_MS, max_chars=10_000)
    assert memory is not None
    assert memory["content"] == "Keys rotate monthly." and memory["archived"] is False
    assert memory["provenance"]["project"] == "apollo" and memory["provenance"]["origin"] == "user"
    assert memory["validity"]["valid_from"].startswith("2026-01-01") and memory["validity"]["expired"] is False
    assert [link["id"] for link in memory["associations"]] == [ids[1]]
    assert memory["front_matter"]["id"] == ids[0] and memory["fields"]["title"] == "Rotation"
    cut = read_memory(brain, ids[0], now_ms=NOW_MS, max_chars=5)
    assert cut is not None and cut["content_truncated"] and cut["content_length"] == len("Keys rotate monthly.")
    Forget(ids[1]).apply(brain, NOW)
    archived = read_memory(brain, ids[1], now_ms=NOW_MS, max_chars=10_000)
    assert archived is not None and archived["archived"] and archived["content"] == "Keys live in the vault."
    assert read_memory(brain, "mem_20200101_000000", now_ms=NOW_MS, max_chars=10) is None


def test_front_matter_aliases_are_not_expanded() -> None:
    brain, ids = _brain(_memory("Bomb", "x"))
    path = brain.read_json("index.json")["memories"][ids[0]]["path"]
    brain.write(path, b"---\na: &a [1, 2]\nb: [*a, *a, *a]\n---\nbody\n")
    memory = read_memory(brain, ids[0], now_ms=NOW_MS, max_chars=100)
    assert memory is not None and memory["front_matter"] == {} and memory["content"] == "body"


def test_a_front_matter_date_the_calendar_has_not_is_read_as_text() -> None:
    # Written by hand or by another client: brain_read and fetch failed on PyYAML's bare ValueError.
    brain, ids = _brain(_memory("Typo", "x"))
    path = brain.read_json("index.json")["memories"][ids[0]]["path"]
    brain.write(path, b"---\nsource: hand\nreviewed: 2024-02-30\n---\nbody\n")
    memory = read_memory(brain, ids[0], now_ms=NOW_MS, max_chars=100)
    assert memory is not None and memory["content"] == "body"
    assert memory["front_matter"] == {"source": "hand", "reviewed": "2024-02-30"}


def test_edge_order_and_skip_rule() -> None:
    assert edge_order([1, 2, 3, 4, 5]) == [1, 3, 5, 4, 2]
    assert edge_order([1, 2]) == [1, 2]
    taken, used, excluded = take_within([({"n": 1}, 50), ({"n": 2}, 60), ({"n": 3}, 40)], 100)
    assert [item["n"] for item in taken] == [1, 3] and used == 90 and excluded == 1
    # The first item is taken even when it alone exceeds the cap.
    assert take_within([({"n": 1}, 500)], 100)[0] == [{"n": 1}]


def test_session_start_tiers_budgets_and_alerts() -> None:
    config = {"quarantine_mode": "off", "working_memory_budget_tokens": 100, "pin_budget_tokens": 30,
              "recall_budget_tokens": 50}
    brain, ids = _brain(
        _memory("Low pin", "a" * 40, pinned=True, pin_priority=1),             # 10 tokens
        _memory("High pin", "b" * 40, pinned=True, pin_priority=5),            # 10 tokens
        _memory("Project pin", "c" * 40, pinned=True, pin_scope="project:api"),
        _memory("Other project pin", "d" * 40, pinned=True, pin_scope="project:web"),
        _memory("Big pin", "e" * 400, pinned=True),                            # 100 tokens: excluded
        _memory("testing api guide", "testing the api end to end"),
        _memory("testing notes", "more testing"),
        config=config,
    )
    index = brain.read_json("index.json")
    index["memories"][ids[6]].update(access_count=4, confidence=0.3)
    brain.write_json("index.json", index)
    brain.write_json("review-queue.json", {"version": 1, "items": [{"memory_id": ids[5]}, {"memory_id": ids[6]}]})
    payload = session_start(brain, now=NOW, project="api", topics="testing")
    assert [item["id"] for item in payload["pinned"]] == [ids[1], ids[0], ids[2]]
    assert payload["pinned"][0]["content"] == "b" * 40 and payload["pinned"][0]["scope"] == "global"
    budget = payload["budget"]
    assert (budget["cap"], budget["pin_cap"], budget["pinned_tokens"], budget["pinned_excluded"]) == (100, 30, 30, 1)
    assert budget["recall_cap"] == 50 and budget["skills_cap"] == 70
    recalled = [item["id"] for item in payload["context_recall"]]
    assert recalled and not set(recalled) & {ids[0], ids[1], ids[2]}
    assert set(payload["context_recall"][0]) == {"id", "title", "path", "type", "score", "token_estimate"}
    assert payload["due_for_review"] == 2
    assert payload["low_confidence_alerts"] == [{"id": ids[6], "title": "testing notes", "confidence": 0.3,
                                                 "access_count": 4}]
    assert budget["used"] == budget["pinned_tokens"] + budget["skills_tokens"] + budget["recall_used"]
    assert payload["memory_count"] == 7


def test_session_start_without_a_brain_is_empty() -> None:
    payload = session_start(Brain(), now=NOW)
    assert payload["memory_count"] == 0 and payload["pinned"] == [] and payload["context_recall"] == []
    assert payload["budget"]["cap"] == 3000 and payload["budget"]["included"] == 0


def test_pinned_tier_lists_every_scope() -> None:
    brain, ids = _brain(_memory("Global", "g"), _memory("Scoped", "s", pinned=True, pin_scope="project:x"))
    Pin(ids[0]).apply(brain, NOW)
    tier = pinned_tier(brain)
    assert {item["id"] for item in tier["pinned"]} == set(ids)
    assert pinned_tier(None)["pinned"] == []
