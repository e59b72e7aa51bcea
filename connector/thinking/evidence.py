"""The evidence pack: recalled memories, grouped by theme (their type) and ordered by time inside a
group, superseded ones marked, each memory's text quoted inside a delimited block whose marker
carries a random nonce, so text inside a memory cannot close its block and pass for instructions.

Memories whose validity ended are marked ``expired``. Pure: built from recall hits (content
attached) and the brain's index entries, within a budget in characters that bounds the whole
quoted text.
"""

from __future__ import annotations

import re
import secrets
from copy import copy
from dataclasses import dataclass, field, replace
from typing import Any

from connector.engine.format.tokens import Budget, count_tokens, too_little_of

_SAFE_ATTR = re.compile(r"[^A-Za-z0-9_.:-]")


@dataclass(frozen=True)
class EvidenceItem:
    """One memory as quoted."""

    id: str
    title: str
    type: str
    date: str
    content: str
    truncated: bool
    superseded_by: str | None = None
    expired: bool = False  # its validity window has ended

    def as_dict(self) -> dict[str, Any]:
        """The item for a tool's structured result."""
        data: dict[str, Any] = {"id": self.id, "title": self.title, "type": self.type, "date": self.date,
                                "content": self.content}
        if self.truncated:
            data["content_truncated"] = True
        if self.superseded_by:
            data["superseded_by"] = self.superseded_by
        if self.expired:
            data["expired"] = True
        return data


@dataclass
class EvidencePack:
    """Groups of quoted memories and their rendering, within ``budget_chars``."""

    nonce: str
    budget_chars: int
    budget_tokens: int | None = None
    groups: list[tuple[str, list[EvidenceItem]]] = field(default_factory=list)
    left_out: int = 0  # recalled memories the budget had no room for

    @property
    def ids(self) -> list[str]:
        """The quoted memories' ids, in the order shown."""
        return [item.id for _, items in self.groups for item in items]

    @property
    def marker(self) -> str:
        """The tag name delimiting each memory (``memory-<nonce>``)."""
        return f"memory-{self.nonce}"

    def render(self) -> str:
        """The quoted evidence: a heading per theme, one delimited block per memory."""
        return "".join(_group_header(theme) + "".join(_block(item, self.marker) for item in items)
                       for theme, items in self.groups)

    def as_dict(self) -> dict[str, Any]:
        """The groups for a structured result."""
        return {
            "groups": [{"theme": theme, "memories": [item.as_dict() for item in items]} for theme, items in self.groups],
            "count": len(self.ids),
            "evidence_chars": len(self.render()),
            "budget_chars": self.budget_chars,
            "evidence_tokens": count_tokens(self.render()),
            **({"budget_tokens": self.budget_tokens} if self.budget_tokens is not None else {}),
            **({"left_out": self.left_out} if self.left_out else {}),
        }


def _attr(value: Any, limit: int = 80) -> str:
    return _SAFE_ATTR.sub("", str(value or ""))[:limit]


def _group_header(theme: str) -> str:
    return f"\n## {theme}\n"


def _block(item: EvidenceItem, marker: str) -> str:
    superseded = f' superseded_by="{item.superseded_by}"' if item.superseded_by else ""
    cut = ' truncated="true"' if item.truncated else ""
    expired = ' expired="true"' if item.expired else ""
    return (f'<{marker} id="{item.id}" type="{item.type}" date="{item.date}"{superseded}{expired}{cut}>\n'
            f"title: {item.title}\n{item.content}\n</{marker}>\n")


def _one_line(text: str, limit: int) -> str:
    return " ".join(text.split())[:limit]


def build_pack(
    hits: list[dict[str, Any]], entries: dict[str, Any], budget_chars: int, *, budget_tokens: int | None = None,
    nonce: str | None = None,
) -> EvidencePack:
    """The evidence pack over recall ``hits`` (best first, with ``content``), within ``budget_chars``
    characters and ``budget_tokens`` tokens (counted by `connector.engine.format.tokens`: a Chinese or
    Japanese character about one token).

    Memories are taken best first while they fit (the last one's text cut to the room left,
    when that keeps at least `MIN_CUT_TOKENS` of it: 40 English characters, 10 Chinese or
    Japanese ones; a memory shorter than that only whole); the best one always, cut to the
    room left if it must be. Then
    grouped by type, groups in the order of their best memory, oldest first inside a group
    so a changed decision reads in order.
    """
    pack = EvidencePack(nonce=nonce or secrets.token_hex(6), budget_chars=budget_chars, budget_tokens=budget_tokens)
    budget = Budget(chars=budget_chars, tokens=budget_tokens)
    chosen: dict[str, list[EvidenceItem]] = {}
    for hit in hits:
        memory_id = _attr(hit.get("id"), 200)
        if not memory_id:
            continue
        entry = entries.get(memory_id) if isinstance(entries.get(memory_id), dict) else {}
        theme = _attr(hit.get("type") or entry.get("type") or "memory", 40) or "memory"
        superseded = hit.get("superseded_by") or entry.get("superseded_by")
        content = str(hit.get("content") or "").replace(pack.nonce, "")  # a block can never be closed from inside
        item = EvidenceItem(
            id=memory_id,
            title=_one_line(str(hit.get("title") or entry.get("title") or ""), 200).replace(pack.nonce, ""),
            type=theme,
            date=_attr(entry.get("created"), 24),
            content=content,
            truncated=bool(hit.get("content_truncated")),
            superseded_by=_attr(superseded, 200) or None,
            expired=hit.get("expired") is True,
        )
        # The room is counted as if the text were cut (the header then says so): never over the budget.
        cut = replace(item, content="", truncated=True)
        frame = ("" if theme in chosen else _group_header(theme)) + _block(cut, pack.marker)
        best = not chosen
        room = 0
        if budget.fits(frame):
            after = copy(budget)
            after.spend(frame)
            room = after.room(content)
        if not best and (not budget.fits(frame) or too_little_of(content[:room], content)):
            pack.left_out += 1
            continue
        if len(content) > room:
            item = replace(item, content=content[:room], truncated=True)
        chosen.setdefault(theme, []).append(item)
        budget.spend(("" if len(chosen[theme]) > 1 else _group_header(theme)) + _block(item, pack.marker))
    pack.groups = [(theme, sorted(items, key=lambda item: item.date)) for theme, items in chosen.items()]
    return pack
