"""Checks on what a model answered, before anything reaches the user or the brain.

- A synthesis may cite only memories of the evidence: other ``mem_...`` ids are removed from the
  text and listed, so a model cannot point the user at memories it was never shown.
- Extraction answers must be one JSON object of the documented shape; anything else (not JSON,
  other keys such as ids or paths, too many items, wrong types) is refused whole.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from common.textsafety import has_unsafe_chars, is_blank

CITATION = re.compile(r"\bmem_[A-Za-z0-9_-]+")
REMOVED = "[citation removed]"
MAX_TITLE = 200
MAX_CONTENT = 4000
MAX_TAGS = 10
MAX_TAG = 60
ITEM_KEYS = frozenset({"title", "type", "content", "tags"})
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```\s*$", re.DOTALL)
_TAG = re.compile(r"^[\w][\w .:+#-]*$")


class ExtractionRefused(ValueError):
    """The model's extraction answer is unusable; the message says why (nothing is written)."""


@dataclass(frozen=True)
class CheckedSynthesis:
    """A synthesis with only valid citations left."""

    text: str
    cited: list[str]
    removed: list[str]


def check_citations(text: str, evidence_ids: list[str]) -> CheckedSynthesis:
    """``text`` with every cited id outside ``evidence_ids`` replaced by a marker."""
    allowed = set(evidence_ids)
    cited: list[str] = []
    removed: list[str] = []

    def replace(match: re.Match[str]) -> str:
        found = match.group(0)
        if found in allowed:
            if found not in cited:
                cited.append(found)
            return found
        if found not in removed:
            removed.append(found)
        return REMOVED

    checked = CITATION.sub(replace, text)
    return CheckedSynthesis(text=checked.replace(f"[{REMOVED}]", REMOVED), cited=cited, removed=removed)


@dataclass(frozen=True)
class Candidate:
    """One memory the model proposes."""

    title: str
    type: str
    content: str
    tags: list[str]

    def as_dict(self) -> dict[str, Any]:
        """For results."""
        return {"title": self.title, "type": self.type, "content": self.content, "tags": self.tags}


def _text(item: dict[str, Any], key: str, number: int, limit: int, *, required: bool = True) -> str:
    value = item.get(key)
    if value is None and not required:
        return ""
    # is_blank, not strip(): a text of zero-width characters passed here and memorize then refused it.
    if not isinstance(value, str) or (required and is_blank(value)):
        raise ExtractionRefused(f"item {number}: '{key}' must be a non-empty string")
    if len(value) > limit:
        raise ExtractionRefused(f"item {number}: '{key}' is longer than {limit} characters")
    return value.strip()


def parse_candidates(answer: str, types: list[str], max_items: int) -> list[Candidate]:
    """The candidates in a model's JSON answer (one optional ```json fence allowed); strict."""
    text = answer.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise ExtractionRefused("the model's answer is not valid JSON") from None
    if not isinstance(data, dict) or set(data) != {"memories"} or not isinstance(data["memories"], list):
        raise ExtractionRefused('the model\'s answer is not of the shape {"memories": [...]}')
    items = data["memories"]
    if len(items) > max_items:
        raise ExtractionRefused(f"the model proposed {len(items)} memories; at most {max_items} are accepted")
    candidates = []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise ExtractionRefused(f"item {number} is not an object")
        extra = sorted(set(item) - ITEM_KEYS)
        if extra:
            # Ids, paths, file names...: a model chooses none of those; the normal write path does.
            raise ExtractionRefused(f"item {number} sets {', '.join(repr(k[:40]) for k in extra)}, which is not allowed "
                                    f"(only {', '.join(sorted(ITEM_KEYS))})")
        title = _text(item, "title", number, MAX_TITLE)
        if "/" in title or "\\" in title or ".." in title or has_unsafe_chars(title):
            raise ExtractionRefused(f"item {number}: the title must be plain text on one line, not a path")
        kind = _text(item, "type", number, 40).lower()
        if kind not in types:
            raise ExtractionRefused(f"item {number}: 'type' must be one of {', '.join(types)}")
        content = _text(item, "content", number, MAX_CONTENT)
        tags = item.get("tags", [])
        if not isinstance(tags, list) or len(tags) > MAX_TAGS:
            raise ExtractionRefused(f"item {number}: 'tags' must be a list of at most {MAX_TAGS} words")
        clean: list[str] = []
        for tag in tags:
            if not isinstance(tag, str) or not _TAG.match(tag.strip()) or len(tag) > MAX_TAG:
                raise ExtractionRefused(f"item {number}: each tag must be a short word or phrase")
            clean.append(tag.strip())
        candidates.append(Candidate(title=title, type=kind, content=content, tags=clean))
    return candidates
