"""Similar memories: which existing memories does an incoming memory repeat or update?

Pure logic (no I/O): vectors come from the hybrid index and a query embedder, text
from the brain in memory. Used on every write (MCP ``brain_memorize``, the web app,
the CLI) and by ``brain-connector similar``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from connector.engine.brain import Brain
from connector.engine.embedding import cosines, embedded_text
from connector.engine.hybrid import HybridIndex
from connector.engine.index import BrainIndex
from connector.engine.text import memory_body

__all__ = ["DUPLICATE", "UPDATE", "RELATED", "RELATIONS", "Incoming", "Similar", "find_similar", "normalised_content"]

DUPLICATE = "duplicate"
UPDATE = "update"
RELATED = "related"
RELATIONS = (DUPLICATE, UPDATE, RELATED)
# Memories listed at most (flags first, then the closest related ones).
LIMIT = 5


@dataclass(frozen=True)
class Incoming:
    """A memory about to be written."""

    content: str
    title: str | None = None
    tags: Sequence[str] = ()
    type: str | None = None


@dataclass(frozen=True)
class Similar:
    """One existing memory the incoming one relates to."""

    id: str
    relation: str  # DUPLICATE, UPDATE or RELATED
    score: float  # how sure, 0..1 (3 decimals): for a flag, the probability it is right
    title: str = ""
    exact: bool = False  # same normalised content: writing it again adds nothing
    flags: dict[str, Any] = field(default_factory=dict, compare=False)  # features, for benchmarks

    @property
    def flagged(self) -> bool:
        """A duplicate or an update (``related`` is not a flag)."""
        return self.relation != RELATED

    def to_json(self) -> dict[str, Any]:
        """``{"id", "relation", "score"}`` as the command prints it (title added when known)."""
        out: dict[str, Any] = {"id": self.id, "relation": self.relation, "score": self.score}
        if self.title:
            out["title"] = self.title
        if self.exact:
            out["exact"] = True
        return out


_SPACE = re.compile(r"\s+")


def normalised_content(text: str) -> str:
    """Content as compared for exact duplicates: NFKC, case-folded, whitespace collapsed."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def find_similar(
    brain: Brain,
    incoming: Incoming,
    *,
    index: BrainIndex,
    hybrid: HybridIndex,
    embed: Callable[[str], np.ndarray],
    limit: int = LIMIT,
) -> list[Similar]:
    """Existing memories ``incoming`` repeats (duplicate), changes (update) or is near (related).

    Best first: flags (highest score first), then related memories. ``hybrid`` must be
    the hybrid index of ``brain``'s version ``index`` describes; ``embed`` turns one
    text into a unit vector (``VectorSource.embed_query``).
    """
    if not index.memories:
        return []
    query = embed(embedded_text(incoming.title, list(incoming.tags), incoming.content))
    semantic = cosines(hybrid.vectors, query)
    order = np.argsort(-semantic)[:limit]
    wanted = normalised_content(incoming.content)
    found = []
    for position in order.tolist():
        record = index.memories[position]
        entry = record.entry
        path = entry.get("path")
        text = brain.read_text(path) if isinstance(path, str) else None
        body = memory_body(text) if text is not None else ""
        exact = normalised_content(body) == wanted
        cosine = float(semantic[position])
        relation = DUPLICATE if exact or cosine >= 0.8 else RELATED
        title = entry.get("title")
        found.append(Similar(record.id, relation, round(cosine, 3), title if isinstance(title, str) else "", exact))
    return found
