"""What the web app's pages show, read from the same working copies the MCP tools use.

Plain classes over the working-copy manager and the tools' recall (same index
cache, same scoring as ``brain_recall``); no HTTP here. Every view reads one
snapshot of the user's active brain and its prepared recall index, so a page at
10,000 memories costs a few dictionary lookups once the index is warm.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from connector.engine.format.archive import ArchiveError, load_archive
from connector.engine.format.brain import Brain
from connector.engine.format.rules import MEMORY_TYPES
from connector.engine.format.text import memory_body
from connector.engine.format.views import ahead_of_higher_scores, cut_at_word
from connector.engine.format.titles import plain_title
from connector.engine.recall.hybrid import empty_recall_reason, memory_text
from connector.engine.recall.index import BrainIndex, RecallError
from connector.engine.recall.indexcache import index_for
from connector.engine.recall.pipeline import eligibility, instant_ms
from connector.engine.recall.textmatch import fold_traditional, normalise, query_words_in
from connector.engine.tending.similar import Incoming, Similar
from connector.engine.writes.memorize import MAX_CONTEXT_CHARS
from connector.engine.writes.restore import frontmatter_values
from connector.i18n import N_, Text
from connector.mcp.tools import BrainTools
from connector.webapp.graph import Graph, neighbourhood
from connector.webapp.history import BrainDiff, diff_brains
from connector.webapp.labels import ORIGIN_LABELS, origin_label, reason_label
from connector.webapp.markdown import render_markdown
from connector.workcopy.core import BrainUnavailable
from connector.workcopy.manager import WorkingCopyManager
from connector.workcopy.model import STATUS_MULTIPLE, STATUS_NO_BRAIN, Account, Identity, Snapshot
from connector.workcopy.store_client import StoreError, StoreNotFound, VersionRecord

SEARCH_LIMIT = 25
# Recall is asked for more than is shown so that type and tag filters still fill a page.
RECALL_POOL = 200
# The query's words a hybrid hit's explanation names at most (a long query may share dozens).
QUERY_WORDS_SHOWN = 8
BROWSE_LIMIT = 50
RECENT_PAGE = 20  # recent memories per page on the home page
TAG_CACHE_SIZE = 32
CACHED_TAG_CHARS = 300  # tags up to this long keep their filter key (`_tag_key`): at most ~4 MB for 4,096
TYPES = tuple(MEMORY_TYPES)
# The history's name for the brain as it is now (never a snapshot name: those start with digits).
CURRENT_VERSION = "current"
# The search page's names for brain_recall's modes, in engine.hybrid.MODES order (test_units checks).
MODE_LABELS = {"exact": N_("Exact words"), "hybrid": N_("Meaning and other languages (hybrid)")}


@dataclass(frozen=True)
class SimilarLine:
    """An existing memory the similar check flagged: which, how, how sure (percent)."""

    memory: MemoryLine
    relation: str
    percent: int
    exact: bool
    about: str = ""  # the new memory's title (an import lists several)


@dataclass(frozen=True)
class MemoryLine:
    """One memory in a list: enough to recognise and open it."""

    id: str
    title: str
    type: str
    tags: tuple[str, ...]
    pinned: bool = False
    pending: bool = False
    superseded_by: str | None = None
    expired: bool = False


@dataclass(frozen=True)
class SearchHit:
    """A recall result with a short explanation of its score."""

    line: MemoryLine
    score: float
    explanation: list[Text]  # the score in words, part by part (explain_parts)
    snippet_html: str
    low_trust: bool
    # Listed above a higher score: hybrid recall puts a strong exact hit (the query's own
    # words) first whatever its fused score (connector.engine.recall.hybrid); the page says so.
    ahead: bool = False


@dataclass
class SearchForm:
    """What the person asked for (all optional)."""

    query: str = ""
    type: str = ""
    tag: str = ""
    project: str = ""
    as_of: str = ""
    mode: str = ""  # brain_recall's mode; the route fills in the server's default

    @property
    def empty(self) -> bool:
        """Nothing asked yet (the mode alone asks nothing)."""
        return not (self.query or self.type or self.tag or self.project or self.as_of)


@dataclass
class SearchResult:
    """Hits (recall order), or the browse list when there was no query, plus any problem."""

    form: SearchForm
    hits: list[SearchHit] = field(default_factory=list)
    browse: list[MemoryLine] = field(default_factory=list)
    error: str | None = None
    tags: list[str] = field(default_factory=list)
    # Why the recall itself found nothing (hybrid.empty_recall_reason), shown above the empty list.
    empty_reason: str | None = None


@dataclass(frozen=True)
class BrainLine:
    """One brain of the account on the home page."""

    id: str
    name: str
    active: bool
    last_synced_at: str | None
    size_bytes: int


@dataclass
class Home:
    """The home page's facts."""

    brains: list[BrainLine]
    active_name: str | None
    memory_count: int
    archived_count: int
    last_updated: str | None
    pinned: list[MemoryLine]
    pending: list[MemoryLine]
    pending_writes: int
    note: str | None
    # The brain in use holds nothing yet: the page welcomes and says what to do next.
    empty: bool = False
    recent: list[MemoryLine] = field(default_factory=list)
    page: int = 1
    pages: int = 1


@dataclass
class MemoryView:
    """Everything the memory page shows about one memory (live or archived)."""

    id: str
    title: str
    archived: bool
    content_html: str
    fields: dict[str, Any]
    tags: tuple[str, ...]
    provenance: list[tuple[str, str]]
    validity: list[tuple[str, str]]
    supersedes: list[MemoryLine]
    superseded_by: MemoryLine | None
    associations: list[tuple[MemoryLine, float]]
    pinned: bool
    pending: bool
    pending_reasons: list[str]
    body: str
    graph: Graph | None = None


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _tags(value: Any) -> tuple[str, ...]:
    return tuple(tag for tag in value if isinstance(tag, str)) if isinstance(value, list) else ()


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    return f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def line_of(memory_id: str, entry: dict[str, Any], *, expired: bool = False) -> MemoryLine:
    """A list line from an index entry."""
    return MemoryLine(
        id=memory_id,
        title=plain_title(_string(entry.get("title"))) or memory_id,
        type=_string(entry.get("type")),
        tags=_tags(entry.get("tags")),
        pinned=entry.get("pinned") is True,
        pending=bool(entry.get("quarantined")),
        superseded_by=entry.get("superseded_by") if isinstance(entry.get("superseded_by"), str) else None,
        expired=expired,
    )


def explain_parts(hit: dict[str, Any], query_words: list[str] | None = None) -> list[Text]:
    """The score in words, part by part (translated where shown): the parts recall combined
    (relevance, strength, context, association, meaning similarity).

    A hybrid hit the exact engine did not match (relevance 0: it reads ASCII words only, so every
    hit of a Chinese or Japanese query) was found by the other channels: ``query_words`` (the
    query's words the memory holds as the word channel reads them, `query_words_in`) say which,
    or that none did and its meaning found it. Without them (None) the relevance is shown."""
    if "similarity" in hit and not hit.get("relevance") and query_words is not None:
        found = (Text("words of the query in it: %(words)s", words=", ".join(query_words[:QUERY_WORDS_SHOWN]))
                 if query_words else Text("no word of the query in it: found by its meaning"))
    else:
        found = Text("relevance %(value)s", value=_number(hit.get("relevance", 0)) or "0")
    parts = [found, Text("strength %(value)s", value=_number(hit.get("decayed_strength", 0)) or "0")]
    if hit.get("context_match"):
        parts.append(Text("context %(value)s", value=_number(hit["context_match"])))
    if hit.get("spreading_bonus"):
        parts.append(Text("association %(value)s", value=_number(hit["spreading_bonus"])))
    if "similarity" in hit:  # hybrid recall: how close the meaning is (cosine, -1 to 1)
        parts.append(Text("meaning similarity %(value)s", value=_number(hit["similarity"]) or "0"))
    return parts


def explain(hit: dict[str, Any], query_words: list[str] | None = None) -> str:
    """The score in words, in English: the parts recall combined (`explain_parts`)."""
    return ", ".join(explain_parts(hit, query_words))


def _tag_key(tag: str) -> str:
    """A tag as search reads text (`normalise`, then traditional Chinese read as simplified)."""
    return _cached_tag_key(tag) if len(tag) <= CACHED_TAG_CHARS else fold_traditional(normalise(tag))


@lru_cache(maxsize=4096)
def _cached_tag_key(tag: str) -> str:
    # A brain's tags repeat, and folding a Chinese one costs ~20 µs: a filter reads every memory's.
    return fold_traditional(normalise(tag))


def _has_tag(value: Any, wanted: str) -> bool:
    """Whether a memory's tags hold ``wanted`` as search reads text: whatever the case and width
    (``redis`` finds Redis, アーキテクチャ finds ｱｰｷﾃｸﾁｬ, ＡＰＩ finds API), traditional and
    simplified Chinese alike (運維 finds 运维)."""
    key = _tag_key(wanted.strip())
    return any(_tag_key(tag) == key for tag in _tags(value))


def _snippet(text: str, limit: int = 280) -> str:
    # Cut as recall's budget cuts: at a word break near the end, between Chinese or Japanese
    # characters (the last space may be 260 characters back), never inside an emoji.
    shown = cut_at_word(text, limit)
    return text if shown == text else shown + " ..."


class BrainViews:
    """Read views of the signed-in person's active brain."""

    def __init__(self, manager: WorkingCopyManager, tools: BrainTools) -> None:
        self.manager = manager
        self.tools = tools
        self._tags: dict[str, list[str]] = {}

    async def _index(self, snapshot: Snapshot) -> BrainIndex | None:
        """The brain's recall index (shared with brain_recall's cache), or None without a brain."""
        if snapshot.brain is None or "index.json" not in snapshot.brain:
            return None
        cache = self.tools.index_cache
        brain, key = snapshot.brain, snapshot.key
        return await asyncio.to_thread(index_for, brain, key, cache)

    def _tags_of(self, key: str | None, index: BrainIndex) -> list[str]:
        """The brain's most used tags (for the filter's suggestions), once per brain version."""
        cached = self._tags.get(key) if key else None
        if cached is None:
            cached = _common_tags(index)
            if key:
                self._tags[key] = cached
                while len(self._tags) > TAG_CACHE_SIZE:
                    self._tags.pop(next(iter(self._tags)))
        return cached

    async def home(self, account: Account, page: int = 1) -> Home:
        """Brains, counts, last sync, pinned tier, memories waiting for verification and
        page ``page`` of the recent memories (newest first)."""
        records, active = await self.manager.brains(account)
        snapshot = await self.manager.snapshot(account)
        index = await self._index(snapshot)
        pinned: list[tuple[Any, ...]] = []
        pending: list[MemoryLine] = []
        if index is not None:
            for record in index.memories:
                if not (record.never_decays or record.quarantined):
                    continue  # neither pinned nor waiting: its entry need not be decoded
                entry = record.entry
                if entry.get("pinned") is True:
                    priority = entry.get("pin_priority") if isinstance(entry.get("pin_priority"), int) else 0
                    strength = record.strength or 0.0
                    pinned.append((-priority, -strength, record.id, line_of(record.id, entry)))
                if record.quarantined or entry.get("quarantined"):
                    pending.append(line_of(record.id, entry))
        pinned.sort(key=lambda item: item[:3])
        recent, page, pages = _recent(index, page) if index is not None else ([], 1, 1)
        last_updated = _last_updated(snapshot.brain.read("index.json")) if snapshot.brain is not None else None
        archived = snapshot.brain.read_json("_archived/index.json") if snapshot.brain is not None else None
        archived_count = len(archived.get("memories") or {}) if isinstance(archived, dict) and isinstance(archived.get("memories"), dict) else 0
        return Home(
            brains=[BrainLine(b.id, b.name, active is not None and b.id == active.id, b.last_synced_at, b.size_bytes)
                    for b in records],
            active_name=snapshot.brain_name,
            memory_count=len(index.memories) if index is not None else 0,
            archived_count=archived_count,
            last_updated=last_updated,
            pinned=[item[3] for item in pinned],
            pending=pending,
            pending_writes=snapshot.pending_writes,
            note=_home_note(snapshot.identity, snapshot.brain_name),
            empty=(index is None or not index.memories) and not archived_count,
            recent=recent,
            page=page,
            pages=pages,
        )

    async def search(self, account: Account, form: SearchForm) -> SearchResult:
        """Recall exactly as brain_recall does (in ``form.mode``), then the type and tag filters; or browse without a query."""
        result = SearchResult(form=form)
        snapshot = await self.manager.snapshot(account)
        index = await self._index(snapshot)
        if index is None:
            return result
        result.tags = self._tags_of(snapshot.key, index)
        if form.empty:
            return result
        if not form.query:
            result.browse = _browse(index, form)
            return result
        # Filters applied after recall need a deeper pool to still fill a page.
        pool = RECALL_POOL if (form.type or form.tag) else SEARCH_LIMIT
        try:
            hits = await asyncio.to_thread(
                self.tools.run_recall,
                snapshot,
                form.query,
                pool,
                form.project or None,
                form.as_of or None,
                None,
                form.mode or self.tools.recall_mode,  # as brain_recall: the server's default unless named
                account.subject,
            )
        except RecallError as exc:
            result.error = str(exc)
            return result
        brain = snapshot.brain
        assert brain is not None
        if not hits:
            result.empty_reason = empty_recall_reason(form.mode or self.tools.recall_mode, form.query)
        hybrid = (form.mode or self.tools.recall_mode) == "hybrid"
        for hit in hits:
            if form.type and hit.get("type") != form.type:
                continue
            if form.tag and not _has_tag(hit.get("tags"), form.tag):
                continue
            position = index.positions.get(hit["id"])
            entry = index.memories[position].entry if position is not None else {}
            path = entry.get("path")
            text = brain.read_text(path) if isinstance(path, str) else None
            result.hits.append(SearchHit(
                line=line_of(hit["id"], entry or hit, expired=bool(hit.get("expired"))),
                score=float(hit.get("score") or 0.0),
                explanation=explain_parts(hit, query_words_in(form.query, memory_text(brain, entry))
                                          if hybrid and entry and not hit.get("relevance") else None),
                snippet_html=render_markdown(_snippet(memory_body(text or ""))),
                low_trust=bool(hit.get("low_trust")),
            ))
            if len(result.hits) >= SEARCH_LIMIT:
                break
        if hybrid:
            for position in ahead_of_higher_scores([hit.score for hit in result.hits]):
                result.hits[position] = replace(result.hits[position], ahead=True)
        return result

    async def memory(self, account: Account, memory_id: str) -> MemoryView | None:
        """The memory page's facts, for a live memory or an archived one; None when unknown."""
        snapshot = await self.manager.snapshot(account)
        brain = snapshot.brain
        if brain is None:
            return None
        index = await self._index(snapshot)
        position = index.positions.get(memory_id) if index is not None else None
        if index is not None and position is not None:
            entry = index.memories[position].entry
            return self._view(memory_id, entry, brain.read_text(_string(entry.get("path"))) or "", index, archived=False)
        archive = brain.read_json("_archived/index.json")
        record = archive.get("memories", {}).get(memory_id) if isinstance(archive, dict) and isinstance(archive.get("memories"), dict) else None
        if not isinstance(record, dict):
            return None
        text = brain.read_text(_string(record.get("archived_path"))) or ""
        fields = {**frontmatter_values(text), **record}
        return self._view(memory_id, fields, text, index, archived=True)

    async def similar_to(self, account: Account, memory_id: str) -> list[SimilarLine]:
        """The memories a live memory repeats or updates (the check brain_memorize runs),
        leaving out the memory itself and those it already supersedes."""
        snapshot = await self.manager.snapshot(account)
        brain = snapshot.brain
        index = await self._index(snapshot)
        position = index.positions.get(memory_id) if index is not None else None
        if brain is None or index is None or position is None:
            return []
        entry = index.memories[position].entry
        incoming = Incoming(memory_body(brain.read_text(_string(entry.get("path"))) or ""),
                            _string(entry.get("title")) or None, _tags(entry.get("tags")), _string(entry.get("type")))
        found = await asyncio.to_thread(self.tools.similar_for, snapshot, incoming)
        return self._similar_lines(index, [item for item in found if item.id != memory_id], memory_id)

    async def similar_to_new(self, account: Account, memories: list[Incoming], limit: int = 50) -> list[SimilarLine]:
        """What the check finds for memories about to be written (an import's first ``limit``)."""
        snapshot = await self.manager.snapshot(account)
        index = await self._index(snapshot)
        if index is None:
            return []
        lines: list[SimilarLine] = []
        for incoming in memories[:limit]:
            found = await asyncio.to_thread(self.tools.similar_for, snapshot, incoming)
            lines += self._similar_lines(index, found, None, about=incoming.title or "")
        return lines

    @staticmethod
    def _similar_lines(index: BrainIndex, found: list[Similar], superseder: str | None, about: str = "") -> list[SimilarLine]:
        lines = []
        for item in found:
            position = index.positions.get(item.id)
            if not item.flagged or position is None:
                continue
            entry = index.memories[position].entry
            if superseder is not None and entry.get("superseded_by") == superseder:
                continue  # the memory an edit replaced
            lines.append(SimilarLine(line_of(item.id, entry), item.relation, round(100 * item.score), item.exact, about))
        return lines

    def _view(self, memory_id: str, entry: dict[str, Any], text: str, index: BrainIndex | None, *, archived: bool) -> MemoryView:
        front = frontmatter_values(text)
        fields = {**front, **entry}
        body = memory_body(text)

        def line(other: str) -> MemoryLine:
            position = index.positions.get(other) if index is not None else None
            other_entry = index.memories[position].entry if index is not None and position is not None else {}
            return line_of(other, other_entry) if other_entry else MemoryLine(other, other, "", ())

        # Recall only reads, as the reference's does (../shared/spec/recall.md): last_accessed and
        # access_count keep what the write set them to, so they show only when some tool moved them.
        last_used, recalled = _string(fields.get("last_accessed")), _number(fields.get("access_count"))
        origin = _string(fields.get("origin"))
        provenance = [(label, value) for label, value in (
            (N_("Origin"), Text(origin_label(origin)) if origin in ORIGIN_LABELS else origin or Text("not recorded")),
            (N_("Source"), _string(fields.get("source"))),
            (N_("Written by"), _string((fields.get("encoding_context") or {}).get("agent")) if isinstance(fields.get("encoding_context"), dict) else ""),
            (N_("Confidence"), _number(fields.get("confidence"))),
            (N_("Salience"), _number(fields.get("salience"))),
            (N_("Strength"), _number(fields.get("strength"))),
            (N_("Created"), _string(fields.get("created"))),
            (N_("Last used"), last_used if last_used != _string(fields.get("created")) else ""),
            (N_("Times recalled"), recalled if recalled != "0" else ""),
            (N_("File"), _string(fields.get("path"))),
        ) if value]
        if archived:
            provenance.append((N_("Archived"), f"{_string(entry.get('archived_date'))} ({_string(entry.get('archived_reason'))})"))
        validity = [(label, value) for label, value in (
            (N_("Valid from"), _string(fields.get("valid_from"))),
            (N_("Valid until"), _string(fields.get("valid_until"))),
        ) if value]
        superseded_by = fields.get("superseded_by")
        associations: list[tuple[MemoryLine, float]] = []
        if index is not None and index.edges is not None and not archived:
            for other, weight in sorted(index.edges.get(memory_id, []), key=lambda edge: -edge[1])[:20]:
                associations.append((line(other), weight))
        reasons = fields.get("quarantine_reasons")
        graph = None
        if associations and index is not None:
            titles = {memory_id: plain_title(_string(fields.get("title"))) or memory_id,
                      **{line.id: line.title for line, _ in associations if line.id in index.positions}}
            graph = neighbourhood(memory_id, titles, index.edges)
        return MemoryView(
            id=memory_id,
            title=plain_title(_string(fields.get("title"))) or memory_id,
            archived=archived,
            content_html=render_markdown(body),
            fields=fields,
            tags=_tags(fields.get("tags")),
            provenance=provenance,
            validity=validity,
            supersedes=[line(other) for other in _tags(fields.get("supersedes"))],
            superseded_by=line(superseded_by) if isinstance(superseded_by, str) else None,
            associations=associations,
            # The index entry decides, as for the home page's pinned tier and session start
            # (a file's front matter may still say pinned after a restore by an older connector).
            pinned=entry.get("pinned") is True and not archived,
            pending=bool(fields.get("quarantined")) and not archived,
            # Read as words, not the brain's codes ("origin:external" was shown as it is stored).
            pending_reasons=[reason_label(str(reason)) for reason in reasons] if isinstance(reasons, list) else [],
            body=body,
            graph=graph,
        )

    async def history(self, account: Account) -> tuple[str | None, list[VersionRecord]]:
        """The active brain's name and the store's snapshots of it, newest first."""
        snapshot = await self.manager.snapshot(account)
        if snapshot.brain_id is None:
            return None, []
        try:
            versions = await self.manager.store.list_versions(account.credential, snapshot.brain_id)
        except StoreError as exc:
            raise BrainUnavailable(Text("The store could not list the snapshots (%(reason)s).", reason=str(exc))) from None
        return snapshot.brain_name, versions

    async def current_version(self, account: Account) -> VersionRecord | None:
        """The brain as the store holds it now, as a history row (named `CURRENT_VERSION`); None
        before its first upload."""
        snapshot = await self.manager.snapshot(account)
        if snapshot.brain_id is None:
            return None
        try:
            records = await self.manager.store.list_brains(account.credential)
        except StoreError as exc:
            raise BrainUnavailable(Text("The store could not list the snapshots (%(reason)s).", reason=str(exc))) from None
        record = next((item for item in records if item.id == snapshot.brain_id), None)
        if record is None or record.last_synced_at is None:
            return None
        return VersionRecord(CURRENT_VERSION, "", record.size_bytes, record.file_count, record.last_synced_at)

    async def _snapshot_brain(self, account: Account, brain_id: str, version: str) -> Brain | None:
        """The store's snapshot ``version`` of the brain, read; None when the store has no such one."""
        try:
            download = await self.manager.store.download(account.credential, brain_id, version=version)
        except StoreNotFound:
            return None
        except StoreError as exc:
            raise BrainUnavailable(Text("The store could not send the snapshot (%(reason)s).", reason=str(exc))) from None
        assert download.data is not None
        try:
            return await asyncio.to_thread(load_archive, download.data, self.manager.tuning.archive_limits)
        except ArchiveError as exc:
            raise BrainUnavailable(Text("The snapshot could not be read safely (%(reason)s).", reason=str(exc))) from None

    async def diff(self, account: Account, version: str) -> BrainDiff | None:
        """What changed between the store's snapshot ``version`` and the brain now; None when unknown."""
        snapshot = await self.manager.snapshot(account)
        if snapshot.brain_id is None:
            return None
        then = await self._snapshot_brain(account, snapshot.brain_id, version)
        return None if then is None else await asyncio.to_thread(diff_brains, then, snapshot.brain)

    async def version_changes(self, account: Account, version: str, previous: str) -> BrainDiff | None:
        """What ``version`` (a snapshot, or `CURRENT_VERSION`: the brain now) changed from the
        version before it, ``previous``; None when the store has either no longer."""
        snapshot = await self.manager.snapshot(account)
        if snapshot.brain_id is None:
            return None
        then = await self._snapshot_brain(account, snapshot.brain_id, previous)
        now = snapshot.brain if version == CURRENT_VERSION else await self._snapshot_brain(account, snapshot.brain_id, version)
        if then is None or now is None:
            return None
        return await asyncio.to_thread(diff_brains, then, now)

    async def archive(self, account: Account) -> list[MemoryLine]:
        """Forgotten (and rejected) memories, most recently archived first."""
        snapshot = await self.manager.snapshot(account)
        archive = snapshot.brain.read_json("_archived/index.json") if snapshot.brain is not None else None
        if not isinstance(archive, dict) or not isinstance(archive.get("memories"), dict):
            return []
        records = [(memory_id, record) for memory_id, record in archive["memories"].items() if isinstance(record, dict)]
        records.sort(key=lambda item: _string(item[1].get("archived_date")), reverse=True)
        return [line_of(memory_id, record) for memory_id, record in records]


def _last_updated(raw: bytes | None) -> str | None:
    """``last_updated`` of index.json without parsing the whole (possibly large) file."""
    if raw is None:
        return None
    marker = raw.rfind(b'"last_updated"')
    if marker < 0:
        return None
    start = raw.find(b'"', raw.find(b":", marker) + 1)
    end = raw.find(b'"', start + 1)
    if start < 0 or end < 0 or end - start > 64:
        return None
    return raw[start + 1:end].decode("utf-8", errors="replace")


def _common_tags(index: BrainIndex, limit: int = 40) -> list[str]:
    counts: dict[str, int] = {}
    for record in index.memories:
        for tag in _tags(record.entry.get("tags")):
            if len(tag) <= MAX_CONTEXT_CHARS:  # longer ones (an archive another client wrote) are no suggestion to type
                counts[tag] = counts.get(tag, 0) + 1
    return [tag for tag, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]]


def _recent(index: BrainIndex, page: int) -> tuple[list[MemoryLine], int, int]:
    """One page of the memories, newest first; the page (clamped to those there are) and the page count."""
    ordered = sorted(index.memories, key=lambda record: (-(record.created_ms or 0), record.id))
    pages = max(1, -(-len(ordered) // RECENT_PAGE))
    page = min(max(1, page), pages)
    chosen = ordered[(page - 1) * RECENT_PAGE:page * RECENT_PAGE]
    return [line_of(record.id, record.entry) for record in chosen], page, pages


def _browse(index: BrainIndex, form: SearchForm) -> list[MemoryLine]:
    """Memories matching the filters, newest first (no query: nothing to rank by)."""
    # "Remember as of" keeps what a recall as of that moment may list (the validity window), as with a query.
    eligible = eligibility(index, instant_ms(form.as_of or None), None)
    chosen = []
    for position, record in enumerate(index.memories):
        if eligible is not None and not eligible[position]:
            continue
        entry = record.entry
        if form.type and entry.get("type") != form.type:
            continue
        if form.tag and not _has_tag(entry.get("tags"), form.tag):
            continue
        if form.project and record.ctx_project != form.project:
            continue
        chosen.append((record.created_ms or 0, record.id, entry))
    chosen.sort(key=lambda item: (-item[0], item[1]))
    return [line_of(memory_id, entry) for _, memory_id, entry in chosen[:BROWSE_LIMIT]]


def _home_note(identity: Identity, brain_name: str | None) -> Text | None:
    """The home page's word on which brain is shown, in the page's language (the tools' note,
    ``identity.note``, is English for the model). An empty brain gets the page's welcome instead."""
    if identity.status == STATUS_NO_BRAIN:
        return Text("This account has no brain at the store yet: the first memory you save creates one.")
    if identity.status == STATUS_MULTIPLE and brain_name:
        return Text("This account has %(count)s brains; this page shows '%(name)s'.",
                    count=len(identity.brains), name=brain_name)
    return None
