"""The start-of-session payload of `brain session-start` (session-and-export.md section 1).

Pinned tier, skills index and context recall, each within what the token budgets
left, so the payload never floods a context window. Pure: a brain and a clock in, a
JSON-able dict out; recall is the engine's own (exact scoring).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from connector.engine.format.brain import Brain
from connector.engine.format.views import memory_content
from connector.engine.recall.exact import recall
from connector.engine.recall.indexcache import DEFAULT_CACHE, IndexCache

BUDGET_DEFAULTS = {
    "working_memory_budget_tokens": 3000,
    "pin_budget_tokens": 1500,
    "skills_index_budget_tokens": 800,
    "recall_budget_tokens": 700,
}
DEFAULT_TOP = 5


def _number(value: Any, default: float) -> float:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def budgets(brain: Brain) -> dict[str, float]:
    """``config.json``'s budgets merged over the defaults (missing or unreadable: the defaults)."""
    config = brain.read_json("config.json")
    config = config if isinstance(config, dict) else {}
    return {key: _number(config.get(key), default) for key, default in BUDGET_DEFAULTS.items()}


def memory_tokens(entry: Mapping[str, Any]) -> float:
    """The entry's ``token_estimate`` when a number, else ``ceil((len(title) + 8) / 4)``."""
    estimate = entry.get("token_estimate")
    if isinstance(estimate, (int, float)) and not isinstance(estimate, bool):
        return estimate
    title = entry.get("title")
    return math.ceil((len(title if isinstance(title, str) else "") + 8) / 4)


def take_within(items: Iterable[tuple[dict[str, Any], float]], cap: float) -> tuple[list[dict[str, Any]], float, int]:
    """Items in order while they fit in ``cap``; one that would not is skipped (excluded),
    unless nothing was taken yet. Returns (taken, tokens used, excluded count)."""
    taken: list[dict[str, Any]] = []
    used: float = 0
    excluded = 0
    for item, tokens in items:
        if taken and used + tokens > cap:
            excluded += 1
            continue
        taken.append(item)
        used += tokens
    return taken, used, excluded


def edge_order(items: list[Any]) -> list[Any]:
    """Even positions in order, then odd ones reversed: the best at both ends ([1,2,3,4,5] -> [1,3,5,4,2])."""
    return items[0::2] + items[1::2][::-1]


def pinned_candidates(
    brain: Brain, entries: Mapping[str, Any], project: str | None, *, every_scope: bool = False
) -> list[tuple[dict[str, Any], float]]:
    """Pinned entries in scope (global, or ``project:<project>``; any with ``every_scope``), best first,
    with their tokens."""
    chosen = []
    for memory_id, entry in entries.items():
        if not isinstance(entry, dict) or entry.get("pinned") is not True:
            continue
        scope = entry.get("pin_scope") or "global"
        if not every_scope and scope != "global" and not (project and scope == f"project:{project}"):
            continue
        chosen.append((memory_id, entry, scope))
    chosen.sort(key=lambda item: (
        -_number(item[1].get("pin_priority"), 0), -_number(item[1].get("strength"), 0), item[0],
    ))
    return [
        ({
            "id": memory_id,
            "title": entry.get("title"),
            "content": memory_content(brain, entry) or "",
            "scope": scope,
            "priority": entry.get("pin_priority", 0),
            "tokens": memory_tokens(entry),
        }, memory_tokens(entry))
        for memory_id, entry, scope in chosen
    ]


def _skills(brain: Brain) -> list[tuple[dict[str, Any], float]]:
    """Advertised skills from ``skills-index.json`` as ``{name, description}`` (read tolerantly)."""
    document = brain.read_json("skills-index.json")
    raw = document.get("skills", []) if isinstance(document, dict) else document
    if isinstance(raw, dict):
        raw = [{"name": name, **item} if isinstance(item, dict) else {"name": name} for name, item in raw.items()]
    skills = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict) or item.get("advertised", item.get("advertise", True)) is False:
            continue
        name, description = item.get("name"), item.get("description") or ""
        if isinstance(name, str) and isinstance(description, str):
            skills.append(({"name": name, "description": description},
                           math.ceil((len(name) + len(description) + 8) / 4)))
    return skills


def session_start(
    brain: Brain | None,
    *,
    now: datetime,
    project: str | None = None,
    topics: str | None = None,
    task: str | None = None,
    top: int = DEFAULT_TOP,
    cache_key: str | None = None,
    cache: IndexCache = DEFAULT_CACHE,
) -> dict[str, Any]:
    """What `brain session-start` prints for this brain and context."""
    index = brain.read_json("index.json") if brain is not None else None
    entries = index.get("memories") if isinstance(index, dict) else None
    entries = entries if isinstance(entries, dict) else {}
    limits = budgets(brain) if brain is not None else dict(BUDGET_DEFAULTS)
    cap = limits["working_memory_budget_tokens"]
    pin_cap = min(limits["pin_budget_tokens"], cap)
    pinned: list[dict[str, Any]] = []
    skills: list[dict[str, Any]] = []
    context: list[dict[str, Any]] = []
    pinned_tokens = skills_tokens = recall_used = 0.0
    pinned_excluded = skills_excluded = recall_excluded = 0
    if brain is not None and isinstance(index, dict):
        pinned, pinned_tokens, pinned_excluded = take_within(pinned_candidates(brain, entries, project), pin_cap)
    skills_cap = min(limits["skills_index_budget_tokens"], max(0, cap - pinned_tokens))
    if brain is not None and isinstance(index, dict):
        skills, skills_tokens, skills_excluded = take_within(_skills(brain), skills_cap)
    recall_cap = max(0, min(limits["recall_budget_tokens"], cap - pinned_tokens - skills_tokens))
    if brain is not None and isinstance(index, dict) and entries:
        hits = recall(brain, None, top=top, project=project, task=task, topics=topics, context=True, now=now,
                      cache_key=cache_key, cache=cache)
        taken_ids = {item["id"] for item in pinned}
        ranked = []
        for hit in hits:
            if hit["id"] in taken_ids:
                continue
            tokens = memory_tokens(entries.get(hit["id"]) or {})
            ranked.append(({"id": hit["id"], "title": hit.get("title"), "path": hit.get("path"),
                            "type": hit.get("type"), "score": hit["score"], "token_estimate": tokens}, tokens))
        context, recall_used, recall_excluded = take_within(ranked, recall_cap)
        context = edge_order(context)
    review = brain.read_json("review-queue.json") if brain is not None else None
    review_items = review.get("items") if isinstance(review, dict) else None
    alerts = [
        {"id": memory_id, "title": entry.get("title"), "confidence": _number(entry.get("confidence"), 1),
         "access_count": entry.get("access_count")}
        for memory_id, entry in entries.items()
        if isinstance(entry, dict) and _number(entry.get("access_count"), 0) >= 3
        and _number(entry.get("confidence"), 1) < 0.5
    ]
    return {
        "memory_count": len(entries),
        "pinned": pinned,
        "skills_index": skills,
        "context_recall": context,
        "due_for_review": len(review_items) if isinstance(review_items, list) else 0,
        "low_confidence_alerts": alerts,
        "budget": {
            "cap": cap, "pin_cap": pin_cap, "skills_cap": skills_cap, "recall_cap": recall_cap,
            "used": pinned_tokens + skills_tokens + recall_used,
            "pinned_tokens": pinned_tokens, "skills_tokens": skills_tokens, "recall_used": recall_used,
            "included": len(pinned) + len(skills) + len(context),
            "excluded": pinned_excluded + skills_excluded + recall_excluded,
            "pinned_excluded": pinned_excluded, "skills_excluded": skills_excluded,
        },
    }


def pinned_tier(brain: Brain | None) -> dict[str, Any]:
    """Every pinned memory (any scope) with its content, ordered and bounded as session start's pinned tier."""
    index = brain.read_json("index.json") if brain is not None else None
    entries = index.get("memories") if isinstance(index, dict) else None
    if brain is None or not isinstance(entries, dict):
        return {"pinned": [], "budget": {"pin_cap": BUDGET_DEFAULTS["pin_budget_tokens"], "used": 0, "excluded": 0}}
    limits = budgets(brain)
    pin_cap = min(limits["pin_budget_tokens"], limits["working_memory_budget_tokens"])
    taken, used, excluded = take_within(pinned_candidates(brain, entries, None, every_scope=True), pin_cap)
    return {"pinned": taken, "budget": {"pin_cap": pin_cap, "used": used, "excluded": excluded}}
