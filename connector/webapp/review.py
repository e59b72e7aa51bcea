"""The Review page's facts: pairs of similar memories waiting for a person, side by side.

Read from the brain's own queue file (`connector.engine.tending.review`, ``pair-review.json``)
and the same recall index the other pages use, so a page at 10,000 memories costs
the queue file's parse, two index lookups per pair and the two texts shown.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from connector.engine.format.text import memory_body
from connector.engine.tending.review import PendingPair, REVIEW_FILE, pending_pairs, review_document
from connector.webapp.markdown import render_markdown_in
from connector.webapp.views import BrainViews, MemoryLine, line_of
from connector.workcopy.model import Account

REVIEW_PAGE_SIZE = 20
@dataclass(frozen=True)
class ReviewSide:
    """One memory of a pair: its line, when it was written, its text."""

    line: MemoryLine
    created: str
    content_html: str
    body: str


@dataclass(frozen=True)
class ReviewItem:
    """A pair waiting for a decision."""

    new: ReviewSide
    old: ReviewSide
    relation: str
    score: float
    flagged_at: str
    via: str
    by: str
    merge_tags: str
    # Other waiting pairs with the same new / old memory: "Keep old" archives the new memory,
    # "Keep new" supersedes the old one, and a pair whose memory left closes with it.
    others_of_new: int = 0
    others_of_old: int = 0


@dataclass
class ReviewPage:
    """The pairs shown (oldest flag first), how many wait in all, and whether the
    signed-in person only views this brain (a viewer of a shared brain cannot decide)."""

    items: list[ReviewItem]
    total: int
    viewer: bool = False


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


class ReviewViews:
    """Read views of the review queue of the signed-in person's active brain."""

    def __init__(self, views: BrainViews) -> None:
        self.views = views

    async def _pending(self, account: Account) -> tuple[list[PendingPair], Any, bool, str]:
        """The open pairs, the brain, whether the person only views it, and the brain's
        cache scope (its id, or the copy's content key for a brain without one)."""
        snapshot = await self.views.manager.snapshot(account)
        brain = snapshot.brain
        viewer = any(record.id == snapshot.brain_id and record.read_only for record in snapshot.identity.brains)
        scope = snapshot.brain_id or f"{account.subject}\0{snapshot.key}"
        if brain is None or REVIEW_FILE not in brain:
            return [], None, viewer, scope
        index = await self.views._index(snapshot)
        if index is None:
            return [], None, viewer, scope

        def entry(memory_id: str) -> Any:
            position = index.positions.get(memory_id)
            return index.memories[position].entry if position is not None else None

        return pending_pairs(review_document(brain), entry), brain, viewer, scope

    async def open_pairs(self, account: Account) -> list[tuple[str, str]]:
        """Every waiting pair as (new, old) ids."""
        pairs, _, _, _ = await self._pending(account)
        return [(pair.new, pair.old) for pair in pairs]

    async def lines(self, account: Account, ids: list[str]) -> list[MemoryLine]:
        """The list lines of those of ``ids`` the brain holds live, in that order."""
        snapshot = await self.views.manager.snapshot(account)
        index = await self.views._index(snapshot)
        if index is None:
            return []
        found = [(memory_id, index.positions.get(memory_id)) for memory_id in ids]
        return [line_of(memory_id, dict(index.memories[position].entry)) for memory_id, position in found
                if position is not None]

    async def waiting(self, account: Account) -> int:
        """How many pairs wait for a decision."""
        pairs, _, _, _ = await self._pending(account)
        return len(pairs)

    async def page(self, account: Account) -> ReviewPage:
        """The first `REVIEW_PAGE_SIZE` pairs with both texts."""
        pairs, brain, viewer, scope = await self._pending(account)

        def side(memory_id: str, entry: Any) -> ReviewSide:
            body = memory_body(brain.read_text(_string(entry.get("path"))) or "")
            # Remembered per brain: the page shows the same 40 texts until a decision is made.
            return ReviewSide(line_of(memory_id, dict(entry)), _string(entry.get("created")),
                              render_markdown_in(scope, body), body)

        uses = Counter(memory_id for pair in pairs for memory_id in (pair.new, pair.old))
        items = []
        for pair in pairs[:REVIEW_PAGE_SIZE]:
            new, old = side(pair.new, pair.new_entry), side(pair.old, pair.old_entry)
            tags = (*new.line.tags, *old.line.tags)
            items.append(ReviewItem(
                new=new, old=old, relation=pair.relation,
                score=pair.score,
                flagged_at=pair.flagged_at, via=pair.via, by=pair.by, merge_tags=", ".join(dict.fromkeys(tags)),
                others_of_new=uses[pair.new] - 1, others_of_old=uses[pair.old] - 1,
            ))
        return ReviewPage(items=items, total=len(pairs), viewer=viewer)
