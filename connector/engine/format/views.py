"""Read views of memories: their content, recall hits with content under a budget, one whole memory.

Pure functions over a `Brain`; nothing here writes. Recall scoring is untouched: content
is added to hits the engine already ranked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from connector.engine.format.brain import ARCHIVE_INDEX, Brain
from connector.engine.format.frontmatter import FrontMatterLoader, body_text, frontmatter_text
from connector.engine.format.graphemes import boundary_at_or_before
from connector.engine.format.jsvalues import parse_iso_ms
from connector.engine.format.tokens import Budget, is_wide, too_little_of

# Front matter bigger than this is not parsed for display (the index has the fields).
MAX_FRONTMATTER_CHARS = 64 * 1024
MAX_ASSOCIATIONS_SHOWN = 20
# A cut may move back to a word break this close to the budget's end (characters, or share of it).
_WORD_CUT_CHARS = 20
_WORD_CUT_SLACK = 0.2


def memory_content(brain: Brain, entry: Mapping[str, Any]) -> str | None:
    """The content of the memory file an index entry (or a recall hit) points to, front matter left out."""
    path = entry.get("path")
    text = brain.read_text(path) if isinstance(path, str) else None
    return None if text is None else body_text(text)


def cut_at_word(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a word break when one is near the end.

    Chinese and Japanese are written without spaces: next to one of their characters the cut
    is already a break, and moving back to the last space would drop up to a budget's worth
    of text (a heading's ``#`` was all that was left of a Japanese memory). The cut never
    splits a character as shown (an emoji sequence, a flag, a kana and its sound mark)."""
    if len(text) <= limit:
        return text
    limit = boundary_at_or_before(text, limit)
    head = text[:limit]
    at_break = text[limit].isspace() or is_wide(text[limit]) or (limit > 0 and is_wide(text[limit - 1]))
    if not at_break:
        space = max(head.rfind(" "), head.rfind("\n"))
        if space > 0 and limit - space <= max(_WORD_CUT_CHARS, limit * _WORD_CUT_SLACK):
            head = head[:space]
    return head.rstrip()


def attach_content(hits: list[dict[str, Any]], brain: Brain, budget: Budget) -> None:
    """Give each hit its memory's content, best hits first, within ``budget`` in total
    (characters and tokens, a Chinese or Japanese character counting as about one token).

    A hit the budget cut gets ``content_truncated: true`` and ``content_length`` (the
    whole content's length); a hit after the first whose cut would keep less than
    `MIN_CUT_TOKENS` gets empty content instead, marked the same way (the budget it would
    have used stays for later hits). A hit whose file is missing gets empty content, not
    marked. Files are found by the hits' own ``path`` (no index parsing on the recall path).
    """
    for position, hit in enumerate(hits):
        content = memory_content(brain, hit) or ""
        shown = cut_at_word(content, budget.room(content))
        if position and too_little_of(shown, content):  # the best hit is still cut to whatever fits
            shown = ""
        hit["content"] = shown
        if len(shown) < len(content):
            hit["content_truncated"] = True
            hit["content_length"] = len(content)
        budget.spend(shown)


def ahead_of_higher_scores(scores: list[float]) -> list[int]:
    """Positions of the scores listed above a higher one (the order is not by score there):
    hybrid recall lists a strong exact hit (the query's own words) first whatever its fused
    score (connector.engine.recall.hybrid), and what shows the hits says so."""
    ahead, best_below = [], float("-inf")
    for position in range(len(scores) - 1, -1, -1):
        if scores[position] < best_below:
            ahead.append(position)
        best_below = max(best_below, scores[position])
    return sorted(ahead)


def _front_matter(text: str | None) -> dict[str, Any] | None:
    """The front matter as JSON-able values (dates as text); None when absent or unreadable."""
    raw = frontmatter_text(text) if text is not None else None
    if raw is None or len(raw) > MAX_FRONTMATTER_CHARS:
        return None
    try:
        parsed = yaml.load(raw, Loader=FrontMatterLoader)  # noqa: S506 - a SafeLoader without aliases
    except (yaml.YAMLError, ValueError, RecursionError):
        # PyYAML's constructors raise the last two past YAMLError: an integer of over 4,300
        # digits, lists nested thousands deep.
        return None
    if not isinstance(parsed, dict):
        return None
    return json.loads(json.dumps(parsed, default=str, ensure_ascii=False))


def _associations(brain: Brain, memory_id: str, entries: Mapping[str, Any]) -> list[dict[str, Any]]:
    graph = brain.read_json("associations.json")
    edges = graph.get("edges") if isinstance(graph, dict) else None
    neighbours = edges.get(memory_id) if isinstance(edges, dict) else None
    if not isinstance(neighbours, dict):
        return []
    links = []
    for other, edge in neighbours.items():
        if not isinstance(edge, dict):
            continue
        weight = edge.get("weight")
        other_entry = entries.get(other)
        links.append({
            "id": other,
            "title": other_entry.get("title") if isinstance(other_entry, dict) else None,
            "weight": weight if isinstance(weight, (int, float)) and not isinstance(weight, bool) else None,
            "origin": edge.get("origin"),
        })
    links.sort(key=lambda link: -(link["weight"] or 0))
    return links[:MAX_ASSOCIATIONS_SHOWN]


def locate(brain: Brain, memory_id: str) -> tuple[dict[str, Any], bool, str | None] | None:
    """A memory's entry, whether it is archived, and its file's path; live first, else archived, else None."""
    for index_path, path_key in (("index.json", "path"), (ARCHIVE_INDEX, "archived_path")):
        index = brain.read_json(index_path)
        entries = index.get("memories") if isinstance(index, dict) else None
        entry = entries.get(memory_id) if isinstance(entries, dict) else None
        if isinstance(entry, dict):
            path = entry.get(path_key)
            return entry, index_path == ARCHIVE_INDEX, path if isinstance(path, str) else None
    return None


def read_memory(brain: Brain, memory_id: str, *, now_ms: int, max_chars: int) -> dict[str, Any] | None:
    """One whole memory (live, else archived) for `brain_read`; None when the id is unknown.

    Content (cut at ``max_chars``, saying so), the index entry's fields, the parsed front
    matter, provenance, validity, supersession and the strongest associations.
    """
    found = locate(brain, memory_id)
    if found is None:
        return None
    entry, archived, path = found
    index = brain.read_json("index.json")
    entries = index.get("memories") if isinstance(index, dict) else None
    entries = entries if isinstance(entries, dict) else {}
    text = brain.read_text(path) if path is not None else None
    content = body_text(text) if text is not None else ""
    shown = cut_at_word(content, max_chars)
    front = _front_matter(text) or {}
    context = entry.get("encoding_context") if isinstance(entry.get("encoding_context"), dict) else \
        front.get("encoding_context") if isinstance(front.get("encoding_context"), dict) else {}
    until_ms = parse_iso_ms(entry.get("valid_until")) if entry.get("valid_until") else None
    result: dict[str, Any] = {
        "id": memory_id,
        "title": entry.get("title"),
        "path": path,
        "type": entry.get("type"),
        "tags": entry.get("tags") if isinstance(entry.get("tags"), list) else [],
        "archived": archived,
        "content": shown,
        "provenance": {
            "origin": entry.get("origin", front.get("origin")),
            "source": front.get("source"),
            "agent": context.get("agent"),
            "project": context.get("project"),
            "task_type": context.get("task_type"),
            "created": entry.get("created"),
            "last_accessed": entry.get("last_accessed"),
            "access_count": entry.get("access_count"),
            "vetted_at": entry.get("vetted_at"),
            **({"archived_date": entry.get("archived_date"), "archived_reason": entry.get("archived_reason")}
               if archived else {}),
        },
        "validity": {
            "valid_from": entry.get("valid_from"),
            "valid_until": entry.get("valid_until"),
            "expired": until_ms is not None and until_ms <= now_ms,
        },
        "supersession": {
            "supersedes": entry.get("supersedes") if isinstance(entry.get("supersedes"), list) else [],
            "superseded_by": entry.get("superseded_by"),
        },
        "associations": [] if archived else _associations(brain, memory_id, entries),
        "fields": entry,
        "front_matter": front,
    }
    if entry.get("quarantined"):
        result["quarantine_pending"] = True
    if len(shown) < len(content):
        result["content_truncated"] = True
        result["content_length"] = len(content)
    return result
