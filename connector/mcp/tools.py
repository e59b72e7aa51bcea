"""The brain tools (and ChatGPT's search and fetch over them): argument reading, scope
checks, calls into the working copies and the engine, and results as structured content
plus text.

A refusal (bad argument, unknown id, missing scope, store down) is a tool result
with ``isError: true`` and a clear message, never a protocol error or a crash.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, cast

import mcp_types as types
import numpy as np

from common.textsafety import has_unsafe_chars
from connector.engine.format.brain import DAMAGED_INDEX_ADVICE, Brain, index_damage
from connector.engine.format.jsvalues import datetime_ms, parse_iso_ms
from connector.engine.format.rules import not_an_instant
from connector.engine.format.tokens import Budget
from connector.engine.format.views import ahead_of_higher_scores, attach_content, read_memory
from connector.engine.recall.embedding import content_hash
from connector.engine.recall.exact import recall
from connector.engine.recall.hybrid import EXACT_CANNOT_READ, MODES, NO_GOOD_MATCH, HybridIndex, empty_recall_reason, hybrid_recall
from connector.engine.recall.index import BrainIndex, RecallError
from connector.engine.recall.indexcache import IndexCache, index_for
from connector.engine.recall.judge import JudgeEmbedder
from connector.engine.recall.pipeline import outdated
from connector.engine.tending.review import MemorizeFlagged, pending_count
from connector.engine.tending.similar import UPDATE, Incoming, Newer, Similar, exact_duplicates, find_similar
from connector.engine.writes.credentials import credential_refusal, credentials_in_memories
from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import MemoryInput, connector_memory
from connector.engine.writes.ops import Forget, Memorize, Pin, Unpin, Verify, connector_memorize
from connector.mcp import chatgpt, render
from connector.mcp.arguments import ArgumentError, Args, ignored_note, unused_note
from connector.mcp.definitions import (
    CHARS_PER_TOKEN,
    DEFAULT_RECALL_CHARS,
    MAX_CONTENT_CHARS,
    MAX_CONTEXT_CHARS,
    MAX_DATE_CHARS,
    MAX_ID_CHARS,
    MAX_LIST_ITEMS,
    MAX_QUERY_CHARS,
    MAX_READ_CHARS,
    MAX_RECALL_CHARS,
    MAX_RECALL_LIMIT,
    MAX_TITLE_CHARS,
    MEMORY_TYPES,
    MENTAL_ACTIONS,
    MENTAL_READ_ACTIONS,
    ORIGINS,
    TOOLS,
    WRITE_SCOPE,
    ToolSpec,
)
from connector.mcp.toolgroups import TOOL_GROUPS, ToolGroup
from connector.thinking.source import ModelSource
from connector.workcopy.accounts import UnknownBrain
from connector.workcopy.backfill import COMPUTING, READY, UNAVAILABLE, E5Backfill, Progress
from connector.workcopy.core import BrainUnavailable
from connector.workcopy.hybridfollow import HybridFollower
from connector.workcopy.indexdisk import IndexDisk
from connector.workcopy.manager import WorkingCopyManager
from connector.workcopy.model import STATUS_NO_BRAIN, Account, Snapshot, WriteOutcome
from connector.workcopy.store_client import BrainRecord, StoreError
from connector.workcopy.vectors import HybridCache, QueryVectors, VectorStore, WhenReady

log = logging.getLogger("connector.tools")

# Tools a connection bound to one brain (/mcp/brains/{brain}) does not have.
BOUND_EXCLUDED = frozenset({"brain_use"})
# ChatGPT's tools, whose answer is exactly OpenAI's shape (one JSON text item): they say nothing of
# arguments they ignore (their one argument is required, so a misspelt one is refused already).
EXACT_SHAPE = frozenset({"search", "fetch"})

# Background index builds after writes start once no write has been in flight for this
# long, and at the latest this long after the write that asked for them.
PREWARM_QUIET_S = 0.25
PREWARM_MAX_WAIT_S = 3.0
# The process counts as answering calls until this long after the last one answered: an agent's
# next call comes seconds later, a script's within milliseconds (the e5 background waits for a gap).
# Index builds wait for writes only (above): the recall right after a write wants its index soon.
CALLS_QUIET_S = 0.1
# brain_memorize's on_similar: report what the similar check found (default), or also
# supersede the memories it flagged as updates.
ON_SIMILAR = ["report", "supersede"]
# In exact recall mode the memorize check's hybrid index is rebuilt in the background only
# every this many writes (a build reads and tokenises every memory: ~3 s of CPU at 10,000);
# meanwhile the check uses the last one built plus the memories written since, embedded
# one by one (so nothing is missed; only their words' IDF comes from the older version).
SIMILAR_REBASE_WRITES = 100
# A brain never checked before is indexed for the check at once up to this many memories
# (embedding them: a few seconds); a larger one in the background, the first writes
# meanwhile checked for exact duplicates only.
SIMILAR_WAIT_MEMORIES = 1000


@dataclass(frozen=True)
class Caller:
    """Who is calling: the account, the scopes of their token and the connector's external base URL."""

    account: Account
    scopes: frozenset[str]
    # Where the connector is reached (CONNECTOR_PUBLIC_URL, else this request's): links to the web app.
    base_url: str = ""


class ToolFailure(Exception):
    """A tool refused the call; the message is shown to the model."""


def ok_result(structured: dict[str, Any], text: str) -> types.CallToolResult:
    """A successful result carrying both forms."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured, is_error=False
    )


def error_result(message: str) -> types.CallToolResult:
    """An error result (the model sees the message)."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def snapshot_entries(snapshot: Snapshot) -> dict[str, Any]:
    """index.json's memories of the snapshot's brain (empty when there is none or it is unreadable)."""
    if snapshot.brain is None:
        return {}
    index = snapshot.brain.read_json("index.json")
    memories = index.get("memories") if isinstance(index, dict) else None
    return memories if isinstance(memories, dict) else {}


def _noted(result: types.CallToolResult, note: str, text: str, *, first: bool) -> types.CallToolResult:
    """``result`` with ``note`` in its structured note (before or after the note it has) and ``text``
    as a text item of its own (the first or the last)."""
    item = types.TextContent(type="text", text=text)
    content = [item, *result.content] if first else [*result.content, item]
    structured = result.structured_content
    if structured is not None:
        held = structured.get("note")
        structured = {**structured, "note": (f"{note} {held}" if first else f"{held} {note}") if held else note}
    return types.CallToolResult(content=content, structured_content=structured, is_error=result.is_error)


def with_notices(result: types.CallToolResult, notices: list[str]) -> types.CallToolResult:
    """``result`` with messages about dropped writes put first in its text and in its note."""
    told = " ".join(notices)
    return _noted(result, told, f"Important: {told}", first=True)


def with_ignored(result: types.CallToolResult, note: str) -> types.CallToolResult:
    """``result`` with the note about arguments its tool ignored (`_ignored`) last in its text and
    its note: the call was answered, but not with what a misspelt argument meant (a budget, a limit)."""
    return _noted(result, note, f"Note: {note}", first=False)


def _ignored(spec: ToolSpec, args: Args) -> str | None:
    """What a call's result says about the arguments it ignored: those its action does not take
    (brain_verify's list given ids), then those its tool does not take (a misspelt one); None if none."""
    properties = spec.input_schema["properties"]
    notes = [_unused(spec, args), ignored_note(spec.name, args.names(), properties)]
    return " ".join(note for note in notes if note) or None


def _unused(spec: ToolSpec, args: Args) -> str | None:
    """The note about the tool's own arguments that the call's action does not take (none for a tool
    without actions, or an action it refuses)."""
    if spec.actions is None:
        return None
    properties = spec.input_schema["properties"]
    try:
        action = args.choice("action", properties["action"]["enum"], default=properties["action"]["default"])
    except ArgumentError:
        return None
    takes = spec.actions.takes[action] | {"action"}
    unused = [name for name in args.names() if name in properties and name not in takes]
    return unused_note(action, not args.given("action"), unused, spec.actions.instead)


def _refused_for_good(outcome: WriteOutcome) -> None:
    """Raise the user's message when the store refused this write for good (nothing saved)."""
    if outcome.discarded:
        raise ToolFailure(f"Not saved. {outcome.discarded}")


def _sync_note(outcome: WriteOutcome) -> str | None:
    notes = []
    if not outcome.synced:
        reason = f" ({outcome.held_reason})" if outcome.held_reason else ""
        notes.append(f"The change is held here and not yet synced to the store{reason}; it will be retried.")
        if not outcome.durable:
            notes.append(
                "It is NOT saved: this connector keeps held writes in memory only (no state directory, or its "
                "journal could not be written), so a restart before the store is back loses it."
            )
    if outcome.dropped:
        notes.append("Some earlier held changes no longer applied after concurrent edits: " + "; ".join(outcome.dropped))
    return " ".join(notes) or None


def _sync_fields(outcome: WriteOutcome) -> dict[str, Any]:
    """``synced``, and ``durable: false`` when a held write lives in memory only."""
    if outcome.synced or outcome.durable:
        return {"synced": outcome.synced}
    return {"synced": False, "durable": False}


def _request_key(caller: Caller, idempotency_key: str | None) -> str | None:
    """A client's retry key made the caller's own: another person's same key names another write."""
    if not idempotency_key:
        return None
    return hashlib.sha256(f"{caller.account.subject}\0{idempotency_key}".encode()).hexdigest()


# A store checksum (SHA-256 hex): the content keys worth keeping on disk.
_CHECKSUM = re.compile(r"[0-9a-f]{64}")


def _hybrid_prefix(brain_id: str | None) -> str:
    """The start of every hybrid cache key of one brain."""
    return f"{brain_id or ''}\n"


def _hybrid_key(brain_id: str | None, key: str | None) -> str | None:
    """The hybrid cache's key: a content key within one brain (two brains never share an index)."""
    return None if key is None else _hybrid_prefix(brain_id) + key


class BrainTools:
    """Dispatches tool calls for one connector process."""

    def __init__(
        self,
        manager: WorkingCopyManager,
        *,
        allowed: Iterable[str] | None = None,
        index_cache: IndexCache | None = None,
        recall_mode: str = "hybrid",
        vectors: VectorStore | None = None,
        model: ModelSource | None = None,
        index_disk: IndexDisk | None = None,
        e5: E5Backfill | None = None,
        judge: VectorStore | None = None,
    ) -> None:
        self.manager = manager
        self.recall_mode = recall_mode
        # Hybrid recall's vectors (one store, keyed per brain and content: never shared between
        # brains, see workcopy/vectors.py) and, per brain and content key, its text index and
        # vector matrix. Both are made on first hybrid use.
        self._vectors = vectors
        self.hybrid_cache = HybridCache()
        # Recent queries' vectors per brain and model: a query asked again is not embedded again.
        self.query_vectors = QueryVectors()
        # The second model's vectors (e5), computed in the background per brain version: recall
        # fuses them in once a version has them all (None: hybrid recall without e5).
        self.e5 = e5
        # The answer gate's judge (workcopy/vectors.judge_store), asked about the queries it doubts.
        self.judge = judge
        # Those indexes also on this replica's disk, by brain and archive checksum: a restart or
        # an eviction reads one back instead of rebuilding it (connector/workcopy/indexdisk.py).
        self.index_disk = index_disk
        # Per brain, the newest version whose hybrid index is built: a memorize right after
        # another checks against it (plus exact duplicates among the newer memories) rather
        # than waiting for the new version's index (seconds at 10,000 memories).
        self._similar_base: dict[str, tuple[str, Brain, BrainIndex, HybridIndex]] = {}
        self._writes_since_base: dict[str, int] = {}
        self._similar_building: set[str] = set()
        self._similar_lock = threading.Lock()
        names = set(allowed) if allowed is not None else {tool.name for tool in TOOLS}
        self.specs: dict[str, ToolSpec] = {tool.name: tool for tool in TOOLS if tool.name in names}
        # The manager's cache: its writes keep the indexes there current (see IndexFollower).
        if index_cache is None:
            index_cache = getattr(manager, "index_cache", None)
        self.index_cache = IndexCache(capacity=64) if index_cache is None else index_cache
        # Writes carry the hybrid indexes along (only what each changed), as they do the exact ones.
        followers = getattr(manager, "followers", None)
        if isinstance(followers, list):
            followers.append(HybridFollower(
                self.hybrid_cache, self.index_cache, lambda: self.vectors, _hybrid_prefix, index_disk,
                lambda key: _CHECKSUM.fullmatch(key) is not None,
                self._e5_follow if e5 is not None else None,
            ))
        self._tool_list: list[types.Tool] | None = None
        self._background: set[asyncio.Task[None]] = set()
        # Index builds after writes: the brain being built, and the newest one waiting, per brain.
        self._prewarm_busy: set[str] = set()
        self._prewarm_next: dict[str, tuple[Brain, str, float, str | None]] = {}
        self._writes_in_flight = 0
        self._calls_in_flight = 0
        self._last_answered = 0.0
        if e5 is not None:
            e5.answering = self.answering  # its jobs start in a gap between the calls answered here
        # Per user, the lock of brain_memorize's check-and-write (`_memorize_lock`); an entry
        # goes when no call holds or waits for it.
        self._memorize_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._handlers: dict[str, Callable[[Caller, Args], Awaitable[types.CallToolResult | types.InputRequiredResult]]] = {
            "brain_recall": self._recall,
            "brain_status": self._status,
            "brain_read": self._read,
            "brain_use": self._use,
            "brain_memorize": self._memorize,
            "brain_pin": self._pin,
            "brain_unpin": self._unpin,
            "brain_forget": self._forget,
            "brain_verify": self._verify,
            "search": self._search,
            "fetch": self._fetch,
        }
        # The tools of the modules built on this class (thinking.py, mental.py), from the table
        # they register into (toolgroups.py): this module imports none of them.
        self.groups: dict[str, ToolGroup] = {}
        for group_name, build in TOOL_GROUPS.items():
            group = build(self, model, self.groups)
            self.groups[group_name] = group
            self._handlers.update(group.handlers())

    @property
    def mental(self) -> Any:
        """The mental models' group (`connector.mcp.mental.MentalModels`), which its module registers."""
        return self.groups["mental"]

    def prewarm(self, outcome: WriteOutcome) -> None:
        """Build the recall index of a just-written brain in the background.

        A write changes the content key, so the next recall would build the index
        first; doing it soon after, off the event loop, keeps "remember, then recall"
        fast. The build waits while writes are in flight (up to PREWARM_MAX_WAIT_S):
        at 10,000 memories it takes about a second of CPU, which a burst of writes
        would otherwise share. One build per brain at a time; a newer write replaces
        the queued one, so a burst costs one or two builds, not one each.
        """
        brain, key = outcome.brain, outcome.key
        if brain is None or key is None or "index.json" not in brain:
            return
        slot = outcome.brain_id or key
        self._writes_since_base[slot] = self._writes_since_base.get(slot, 0) + 1
        if self._index_ready(key, self._prewarm_mode(slot), outcome.brain_id):
            return
        queued = self._prewarm_next.get(slot)
        now = time.monotonic()
        self._prewarm_next[slot] = (brain, key, queued[2] if queued else now, outcome.brain_id)
        if slot not in self._prewarm_busy and queued is None:
            asyncio.get_running_loop().call_later(PREWARM_QUIET_S, self._maybe_start_prewarm, slot)

    def _prewarm_mode(self, slot: str) -> str:
        """Which indexes a background build after a write makes: the hybrid one in hybrid mode,
        and in exact mode once SIMILAR_REBASE_WRITES writes were made since the memorize check's
        base version was indexed (before that the check uses the base plus exact duplicates)."""
        if self.recall_mode == "hybrid" or self._writes_since_base.get(slot, 0) >= SIMILAR_REBASE_WRITES:
            return "hybrid"
        return "exact"

    def _set_similar_base(self, slot: str, key: str, brain: Brain, index: BrainIndex, hybrid: HybridIndex) -> None:
        self._similar_base[slot] = (key, brain, index, hybrid)
        self._writes_since_base[slot] = 0

    def _maybe_start_prewarm(self, slot: str) -> None:
        queued = self._prewarm_next.get(slot)
        if queued is None or slot in self._prewarm_busy:
            return
        if self._writes_in_flight and time.monotonic() - queued[2] < PREWARM_MAX_WAIT_S:
            asyncio.get_running_loop().call_later(PREWARM_QUIET_S, self._maybe_start_prewarm, slot)
            return
        self._start_prewarm(slot)

    def _start_prewarm(self, slot: str) -> None:
        brain, key, _, brain_id = self._prewarm_next.pop(slot)
        hybrid_too = self._prewarm_mode(slot) == "hybrid"
        if self._index_ready(key, "hybrid" if hybrid_too else "exact", brain_id) or not self._current(key):
            return  # followed meanwhile, or a pull replaced that version: a build would be wasted
        self._prewarm_busy.add(slot)

        def build() -> None:
            try:
                index = index_for(brain, key, self.index_cache)
                if hybrid_too:
                    hybrid = self.hybrid_index(brain, key, index, brain_id)  # embeds what the write added
                    self._set_similar_base(slot, key, brain, index, hybrid)
            except Exception:  # a brain recall cannot read: the next recall reports it
                return

        task = asyncio.get_running_loop().create_task(asyncio.to_thread(build))
        self._background.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._background.discard(finished)
            self._prewarm_busy.discard(slot)
            if not finished.cancelled() and finished.exception() is None:
                self._loaded()
            if slot in self._prewarm_next:
                self._maybe_start_prewarm(slot)

        task.add_done_callback(done)

    async def _write(self, caller: Caller, op: Any, label: str) -> WriteOutcome:
        """The manager's write, counted as in flight (background index builds wait for it)."""
        self._writes_in_flight += 1
        try:
            return await self.manager.write(caller.account, op, label)
        finally:
            self._writes_in_flight -= 1

    async def write_op(self, caller: Caller, op: Any, label: str) -> WriteOutcome:
        """Any other operation's write (e.g. a mental model's), refused for good -> ToolFailure;
        the next recall index is built in the background as after a memorize."""
        outcome = await self._write(caller, op, label)
        _refused_for_good(outcome)
        self.prewarm(outcome)
        return outcome

    def _loaded(self) -> None:
        """A recall index was built: keep the collector off its objects (see workcopy/longlived.py)."""
        long_lived = getattr(self.manager, "long_lived", None)
        if long_lived is not None:
            long_lived.loaded()

    def _current(self, key: str) -> bool:
        """Whether some working copy still holds the content ``key`` names."""
        return any(copy.key == key for copy in self.manager.copies.values())

    def similar_for(self, snapshot: Snapshot, incoming: Incoming) -> list[Similar]:
        """The memories of the snapshot's brain ``incoming`` duplicates, updates or is near
        (connector/engine/tending/similar.py), on the indexes cached for its content key.

        When this version's hybrid index is not built yet (a write just changed the brain)
        the check runs on the newest version whose index is built together with the
        memories written since (their vectors computed once and kept by content). A brain
        never checked before is indexed at once up to SIMILAR_WAIT_MEMORIES memories, a
        larger one in the background (exact duplicates only until then). A brain the check
        cannot read gives no findings: the check never stops a write.
        """
        brain, key = snapshot.brain, snapshot.key
        if brain is None or "index.json" not in brain:
            return []
        slot = snapshot.brain_id or key or ""
        try:
            index = index_for(brain, key, self.index_cache)
            if not index.memories:
                return []
            base = self._similar_base.get(slot)
            brain_id = snapshot.brain_id
            ready = self._index_ready(key, "hybrid", brain_id) or base is not None and base[0] == key
            if base is None and not ready and len(index.memories) > SIMILAR_WAIT_MEMORIES:
                # A large brain never indexed here: index it in the background (embedding every
                # memory takes minutes of CPU at 10,000) and check exact duplicates meanwhile.
                self._build_similar_base(slot, brain, key, index, brain_id)
                return exact_duplicates(brain, index, incoming.content)
            embed = self._embed_keeping(brain_id)
            if base is None or ready:
                hybrid = self.hybrid_index(brain, key, index, brain_id)
                self._set_similar_base(slot, key or "", brain, index, hybrid)
                return find_similar(brain, incoming, index=index, hybrid=hybrid, embed=embed)
            _, base_brain, base_index, base_hybrid = base
            newer_ids = [memory_id for memory_id in index.positions if memory_id not in base_index.positions]
            entries = [index.memories[index.positions[memory_id]].entry for memory_id in newer_ids]
            texts = Newer.texts(brain, entries)
            # Each newer memory is embedded once (the vector store keeps it by content).
            source = self.vectors.for_brain(brain_id)
            vectors = source.vectors([content_hash(source.model_id, text) for text in texts], texts)
            gone = {memory_id for memory_id in base_index.positions if memory_id not in index.positions}
            found = find_similar(base_brain, incoming, index=base_index, hybrid=base_hybrid,
                                 embed=embed, newer=Newer(brain, newer_ids, entries, vectors),
                                 skip=gone)
            exact = exact_duplicates(brain, index, incoming.content, among=newer_ids)
            return exact + [item for item in found if item.id not in {e.id for e in exact}]
        except (RecallError, BrainError, ValueError, RecursionError):
            log.warning("similar check skipped: the brain could not be indexed")
            return []

    def _embed_keeping(self, brain_id: str | None) -> Callable[[str], np.ndarray]:
        """The similar check's embedder: the text it embeds is the new memory's own, as the
        brain's next index embeds it (title, tags, body), so its vector is kept for that
        index (by content, in this brain) instead of being computed again after the write
        (kept in memory: the write's path writes no file for it)."""
        source = self.vectors.for_brain(brain_id)

        def embed(text: str) -> np.ndarray:
            vector = source.embed_query(text)
            source.keep_text(text, vector)
            return vector

        return embed

    def _build_similar_base(
        self, slot: str, brain: Brain, key: str | None, index: BrainIndex, brain_id: str | None
    ) -> None:
        """Build the similar check's hybrid index of a brain in a background thread (once at a time)."""
        with self._similar_lock:
            if slot in self._similar_building:
                return
            self._similar_building.add(slot)

        def build() -> None:
            try:
                self._set_similar_base(slot, key or "", brain, index, self.hybrid_index(brain, key, index, brain_id))
            except Exception:  # a brain the check cannot index: the next write tries again
                log.warning("similar check: the brain could not be indexed")
            finally:
                with self._similar_lock:
                    self._similar_building.discard(slot)

        threading.Thread(target=build, name="similar-index", daemon=True).start()

    def _index_ready(self, key: str | None, mode: str, brain_id: str | None = None) -> bool:
        """Whether a recall of this content in ``mode`` finds its indexes built (so runs in a few ms).

        Asked of the caches themselves: an index dropped with its copy, or pushed out,
        must be built again off the event loop, never on it.
        """
        if key is None or self.index_cache.peek(key) is None:
            return False
        return mode == "exact" or _hybrid_key(brain_id, key) in self.hybrid_cache

    def list_tools(self, *, bound: bool = False) -> list[types.Tool]:
        """The declared tools (only those allowed; without brain_use on a connection ``bound`` to one
        brain); built once, they never change."""
        if self._tool_list is None:
            self._tool_list = [spec.to_tool() for spec in self.specs.values()]
        return [tool for tool in self._tool_list if not (bound and tool.name in BOUND_EXCLUDED)]

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema of an allowed tool."""
        spec = self.specs.get(name)
        return spec.input_schema if spec else None

    def answering(self) -> bool:
        """Whether calls are being answered (or one was, less than CALLS_QUIET_S ago); any thread."""
        return self._calls_in_flight > 0 or time.monotonic() - self._last_answered < CALLS_QUIET_S

    async def call(
        self, name: str, arguments: Any, caller: Caller
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Run one tool call; every failure becomes an error result."""
        spec = self.specs.get(name)
        bound = bool(caller.account.brain)
        if spec is None or (bound and name in BOUND_EXCLUDED):
            available = [known for known in self.specs if not (bound and known in BOUND_EXCLUDED)]
            return error_result(f"Unknown tool {name!r}. Available: {', '.join(available)}.")
        args = Args(arguments)
        needs_write = not spec.read_only and not (name == "brain_verify" and _is_list(args)) and not (
            name == "brain_extract" and not _saves(args)
        ) and not (name == "brain_mental_model" and _reads_models(args))
        if needs_write and WRITE_SCOPE not in caller.scopes:
            return error_result(
                f"{name} changes the brain and needs the '{WRITE_SCOPE}' permission, which this sign-in did not "
                "grant (read-only access). Ask the user to reconnect with write access."
            )
        self._calls_in_flight += 1
        try:
            result = await self._run(name, caller, args)
        finally:
            self._calls_in_flight -= 1
            self._last_answered = time.monotonic()
        if not isinstance(result, types.CallToolResult):
            return result  # an interim result (the host's model is asked first): notices wait for the final one
        ignored = None if name in EXACT_SHAPE else _ignored(spec, args)
        if ignored:
            result = with_ignored(result, ignored)
        # Writes dropped for good (brain deleted, access lost) are told on the next call, whatever it is.
        notices = self.manager.take_notices(caller.account.subject)
        return with_notices(result, notices) if notices else result

    async def _run(self, name: str, caller: Caller, args: Args) -> types.CallToolResult | types.InputRequiredResult:
        """The tool's handler, with every refusal or failure turned into an error result."""
        try:
            return await self._handlers[name](caller, args)
        except (ArgumentError, BrainError, RecallError, ToolFailure, BrainUnavailable, UnknownBrain) as exc:
            return error_result(str(exc))
        except StoreError as exc:
            # Store failures outside the working-copy paths (e.g. listing brains for brain_use).
            return error_result(f"The store could not complete this request ({exc}). Nothing was changed; try again.")
        except RecursionError:
            # A hostile brain (e.g. JSON nested 100,000 deep) must not take the process down.
            return error_result(
                "The brain holds a file the connector cannot read safely (nested too deeply); nothing was changed."
            )
        except Exception:
            log.exception("tool failed", extra={"tool": name})
            return error_result(f"{name} failed unexpectedly; nothing was changed. Try again.")

    # ----- read tools -------------------------------------------------------

    async def _recall(self, caller: Caller, args: Args) -> types.CallToolResult:
        query = args.string("query", required=True, max_length=MAX_QUERY_CHARS)
        limit, clamped = args.clamped_integer("limit", default=10, minimum=1, maximum=MAX_RECALL_LIMIT)
        budget, budget_notes = _content_budget(args)
        titles_only = budget.empty
        project = args.string("project", max_length=MAX_CONTEXT_CHARS)
        as_of = _instant(args, "as_of")
        as_known_of = _instant(args, "as_known_of")
        mode = args.choice("mode", list(MODES), default=self.recall_mode)
        snapshot = await self.manager.snapshot(caller.account)
        hits: list[dict[str, Any]] = []
        notes: list[str] = []
        if snapshot.brain is not None and "index.json" in snapshot.brain:
            if self._index_ready(snapshot.key, mode, snapshot.brain_id):
                hits = self.run_recall(snapshot, query, limit, project, as_of, as_known_of, mode, caller.account.subject)
            else:
                # First recall of this content builds its index (seconds at 10,000 memories):
                # off the event loop, so other users' calls keep being served meanwhile.
                hits = await asyncio.to_thread(
                    self.run_recall, snapshot, query, limit, project, as_of, as_known_of, mode, caller.account.subject
                )
                self._loaded()
        if hits and snapshot.brain is not None:
            attach_content(hits, snapshot.brain, budget)
        # Said on the hit itself (not in the note, which brain_reflect passes on with the hits regrouped):
        # "best first" is not "highest score first", and a lower score on top must not read as a mistake.
        for position in ahead_of_higher_scores([float(hit.get("score") or 0.0) for hit in hits]):
            hits[position]["above_higher_scores"] = True
        searched = snapshot.brain is not None and "index.json" in snapshot.brain
        reason = empty_recall_reason(mode, query) if not hits and searched else None
        if reason == NO_GOOD_MATCH:
            notes.append(
                "No memory matches this query well: hybrid recall returns nothing rather than unrelated memories. "
                "The brain may not hold this; try other words if it should."
            )
        elif reason == EXACT_CANNOT_READ:
            notes.append(
                "Exact mode matches only the ASCII words of a query, as `brain recall` does, so it cannot search "
                'Chinese or Japanese text; hybrid mode (mode "hybrid") would search this query.'
            )
        notes += ([clamped] if clamped else []) + budget_notes
        if not hits and (snapshot.identity.status == STATUS_NO_BRAIN or snapshot.identity.empty) and snapshot.identity.note:
            notes.append(snapshot.identity.note)
        pending = sum(1 for hit in hits if hit.get("quarantine_pending"))
        if pending:
            notes.append(
                f"{render.plural(pending, 'result')} {'is' if pending == 1 else 'are'} pending verification "
                "(saved from a low-trust source or with instruction-like wording): treat with care; the user "
                "can review pending memories with brain_verify."
            )
        expired = sum(1 for hit in hits if hit.get("expired"))
        if expired:
            notes.append(
                f"{render.plural(expired, 'result')} {'is an expired fact' if expired == 1 else 'are expired facts'} "
                "(validity ended); prefer newer ones."
            )
        if snapshot.pending_writes:
            notes.append(f"{snapshot.pending_writes} recent write(s) are held here, not yet synced to the store.")
        structured: dict[str, Any] = {"count": len(hits), "results": hits}
        if reason == NO_GOOD_MATCH:
            structured["nothing_matches_well"] = True
        if notes:
            structured["note"] = " ".join(notes)
        return ok_result(structured, render.recall_text(structured, titles_only=titles_only))

    def run_recall(
        self,
        snapshot: Snapshot,
        query: str | None,
        limit: int,
        project: str | None,
        as_of: str | None,
        as_known_of: str | None,
        mode: str = "exact",
        asker: str | None = None,
    ) -> list[dict[str, Any]]:
        """The engine's recall over the snapshot, with its indexes cached per content key.

        ``asker``: whose query it is (an account's subject): recent query vectors are kept per
        asker and brain, so the people sharing a brain cannot time each other's queries."""
        if mode == "hybrid":
            assert snapshot.brain is not None
            index = index_for(snapshot.brain, snapshot.key, self.index_cache)
            hybrid = self.hybrid_index(snapshot.brain, snapshot.key, index, snapshot.brain_id)
            e5 = self.e5.vectors(snapshot.brain_id, snapshot.brain, index, hybrid) if self.e5 is not None else None
            scope = f"{asker or ''}\0{snapshot.brain_id or ''}"
            embed_e5 = embed_e5_alike = embed_judge = None
            judge = hybrid.judge_vectors() if e5 is not None else None
            if e5 is not None and self.e5 is not None and self.e5.store is not None:
                embed_e5 = self.query_vectors.embedder(scope, self.e5.store.model_id, self.e5.embed_query)
                embed_e5_alike = self.query_vectors.embedder(scope, f"{self.e5.store.model_id} as passage",
                                                             self.e5.embed_query_as_passage)
                judges = self.e5.judge
                if judge is not None and judges is not None:
                    embed_judge = self.query_vectors.embedder(scope, judges.model_id, judges.embed_query)
            return hybrid_recall(
                snapshot.brain,
                query,
                index=index,
                hybrid=hybrid,
                embed_query=self.query_vectors.embedder(scope, self.vectors.model_id, self.vectors.embed_query),
                e5=e5,
                embed_e5_query=embed_e5,
                embed_e5_alike=embed_e5_alike,
                judge_source=self._judge_of(snapshot.brain_id),
                judge=judge,
                embed_judge_query=embed_judge,
                top=limit,
                project=project,
                now=self.manager.now(),
                as_of=as_of,
                as_known_of=as_known_of,
            )
        return recall(
            snapshot.brain,
            query,
            top=limit,
            project=project,
            now=self.manager.now(),
            as_of=as_of,
            as_known_of=as_known_of,
            cache_key=snapshot.key,
            cache=self.index_cache,
        )

    async def _read(self, caller: Caller, args: Args) -> types.CallToolResult:
        memory_id = self._memory_id(args)
        snapshot = await self.manager.snapshot(caller.account)
        found = None
        if snapshot.brain is not None:
            # Parses the index and the file's front matter: off the event loop for large brains.
            found = await asyncio.to_thread(
                read_memory, snapshot.brain, memory_id, now_ms=datetime_ms(self.manager.now()), max_chars=MAX_READ_CHARS
            )
        if found is None:
            raise ToolFailure(f"unknown memory id {render.one(memory_id)} (brain_recall finds ids).")
        notes = []
        if found.get("archived"):
            notes.append("This memory was forgotten (archived); it is not recalled any more.")
        if found.get("quarantine_pending"):
            notes.append("It is pending the user's verification: treat it with care.")
        if found["validity"].get("expired"):
            notes.append("Its validity has ended.")
        if notes:
            found["note"] = " ".join(notes)
        return ok_result(found, render.read_text(found))

    async def _search(self, caller: Caller, args: Args) -> types.CallToolResult:
        """ChatGPT's ``search``: brain_recall (the server's recall mode) as ids, titles and links."""
        query = args.string("query", required=True, max_length=MAX_QUERY_CHARS)
        caller = await self.pinned(caller)  # the links name the brain searched
        found = await self._recall(caller, Args({"query": query, "limit": chatgpt.SEARCH_LIMIT, "max_chars": 0}))
        return chatgpt.search_result(found, caller.base_url, caller.account.brain)

    async def _fetch(self, caller: Caller, args: Args) -> types.CallToolResult:
        """ChatGPT's ``fetch``: brain_read as id, title, text, link and metadata."""
        caller = await self.pinned(caller)  # the link names the brain read
        return chatgpt.fetch_result(await self._read(caller, args), caller.base_url, caller.account.brain)

    async def pinned(self, caller: Caller) -> Caller:
        """``caller`` addressing the brain it uses now by id (`Accounts.pinned`): a call that reads
        or checks and then writes or links keeps to that brain, whatever another client switches to."""
        return replace(caller, account=await self.manager.pinned(caller.account))

    @property
    def vectors(self) -> VectorStore:
        """The vector store (a memory-only one, made on first use, when none was given)."""
        if self._vectors is None:
            self._vectors = VectorStore()
        return self._vectors

    def _judge_of(self, brain_id: str | None) -> WhenReady | None:
        """The judge's vectors of one brain, which never wait for its model (it starts loading at
        the first query the gate doubts); those its channel's store keeps are read from it."""
        if self.judge is None:
            return None
        return WhenReady(self.judge, brain_id, self.e5.judge if self.e5 is not None else None)

    def _judge_status(self) -> dict[str, str] | None:
        """Where the answer gate's judge stands, as brain_status shows it: ``idle`` (it loads at
        the first query the gate doubts), ``loading``, ``ready``, or ``unavailable`` with the
        reason (None: the connector runs without one)."""
        if self.judge is None:
            return None
        model = cast(JudgeEmbedder, self.judge.embedder)
        if model.failed is not None:
            # The reason's summary only: the detail after it (an exception's text, a path) stays in the log.
            return {"state": "unavailable", "reason": model.failed.split(": ", 1)[0]}
        return {"state": "ready" if model.ready else "loading" if model.started else "idle"}

    def _judge_channel(self, snapshot: Snapshot) -> str | None:
        """The judge's channel for the brain version ``snapshot`` shows: ``ready`` once every memory
        has its judge vector (recall fuses it in), ``reading`` until then (the background reads them
        after e5's), None without the channel (worker thread; the index is the cached one)."""
        if self.e5 is None or self.e5.judge is None or snapshot.brain is None:
            return None
        try:
            index = index_for(snapshot.brain, snapshot.key, self.index_cache)
            hybrid = self.hybrid_index(snapshot.brain, snapshot.key, index, snapshot.brain_id)
        except RecallError:
            return None
        return "ready" if hybrid.judge_vectors() is not None else "reading"

    def _e5_follow(self, brain_id: str | None, brain: Brain, index: BrainIndex, hybrid: HybridIndex) -> None:
        """After a write: the e5 vectors of its new memories are computed in the background (only
        when the version before had its e5 vectors: the engine is loaded, and nothing else of the
        brain is embedded again), once no call is being answered (`answering`): embedding takes a
        core for tens of ms, which the write's packing, push and the store's validation, and the
        calls after it, need (the vector may follow the answer; recall uses the other channels
        meanwhile). A forget or a pin embeds nothing: brain_status's count follows."""
        if self.e5 is not None and hybrid.e5 is not None:
            self.e5.vectors(brain_id, brain, index, hybrid)

    def _e5_progress(self, snapshot: Snapshot) -> Progress | None:
        """How far the e5 vectors of the brain version ``snapshot`` shows are (worker thread).

        The backfill counts the last version a recall or a write handed it. A pull (another
        writer's memories) is not followed by the hybrid index, so brain_status showed the
        version before's count until the next recall. Once e5 is in use for the brain, the
        shown version is handed over here as recall does: a cache hit when recall or a write
        saw it already, else its index is made now and serves the next recall (nothing twice)."""
        assert self.e5 is not None
        progress = self.e5.progress(snapshot.brain_id)
        if progress is None or progress.state == UNAVAILABLE or snapshot.brain is None:
            return progress
        try:
            index = index_for(snapshot.brain, snapshot.key, self.index_cache)
            hybrid = self.hybrid_index(snapshot.brain, snapshot.key, index, snapshot.brain_id)
        except RecallError:  # a brain recall cannot read: recall reports it, status keeps the last count
            return progress
        self.e5.vectors(snapshot.brain_id, snapshot.brain, index, hybrid)
        progress = self.e5.progress(snapshot.brain_id)
        if progress is None or progress.state == UNAVAILABLE:
            return progress
        return replace(progress, neighbours=COMPUTING if hybrid.needs_neighbours else READY)

    def hybrid_index(self, brain: Brain, key: str | None, index: BrainIndex, brain_id: str | None = None) -> HybridIndex:
        """The hybrid index of one version of brain ``brain_id``, cached under that brain and its content key.

        Its vectors are that brain's own (`VectorStore.for_brain`): pass the brain id, or a
        recall could find another brain's cached vectors and time that.
        """
        source = self.vectors.for_brain(brain_id)
        cache_key = _hybrid_key(brain_id, key)
        # Only a store checksum names content that comes back (after a pull, a restart); the
        # keys of local versions ("local:...", "empty:...") are never seen again.
        disk = self.index_disk if key is not None and _CHECKSUM.fullmatch(key) else None

        def build() -> HybridIndex:
            if disk is not None and cache_key is not None:
                kept = disk.load(cache_key, index, source.model_id)
                if kept is not None:
                    return kept
            # The brain's last index is reused when this version changed no memory's text.
            previous = self.hybrid_cache.newest(_hybrid_prefix(brain_id))
            built = HybridIndex.build(brain, index, source, previous)
            if disk is not None and cache_key is not None:
                disk.save_later(_hybrid_prefix(brain_id), cache_key, built, source.model_id)
            return built

        return self.hybrid_cache.get_or_build(cache_key, build)

    async def _status(self, caller: Caller, args: Args) -> types.CallToolResult:
        # The brain list asked anew: status reports the brains as they are now (size, last sync),
        # also after writes made through other workers, replicas or the store's own clients.
        snapshot = await self.manager.snapshot(caller.account, fresh_list=True)
        entries = snapshot_entries(snapshot)
        index = snapshot.brain.read_json("index.json") if snapshot.brain is not None else None
        last_updated = index.get("last_updated") if isinstance(index, dict) else None
        valid = [entry for entry in entries.values() if isinstance(entry, dict)]
        identity = snapshot.identity
        structured: dict[str, Any] = {
            "memory_count": len(entries),
            "last_updated": last_updated if isinstance(last_updated, str) else None,
            "pinned_count": sum(1 for entry in valid if entry.get("pinned") is True),
            "pending_verification_count": sum(1 for entry in valid if entry.get("quarantined")),
            # Pairs of similar memories waiting for a person (the web app's Review page).
            "review_pending_count": pending_count(snapshot.brain, entries) if snapshot.brain is not None else 0,
            # Standing answers kept in the brain, and which newer memories made stale (brain_mental_model).
            "mental_models": await self.mental.summary(caller.account),
            "active_brain": (
                {"id": snapshot.brain_id, "name": snapshot.brain_name or ""} if snapshot.brain_id else None
            ),
            "brains": [
                {
                    "id": brain.id,
                    "name": brain.name,
                    "size_bytes": brain.size_bytes,
                    "file_count": brain.file_count,
                    "last_synced_at": brain.last_synced_at,
                    "active": brain.id == snapshot.brain_id,
                    **sharing_fields(brain),
                }
                for brain in identity.brains
            ],
            "identity": {"status": identity.status, **({"note": identity.note} if identity.note else {})},
            "pending_writes": snapshot.pending_writes,
        }
        e5 = await asyncio.to_thread(self._e5_progress, snapshot) if self.e5 is not None else None
        if e5 is not None:
            # How far the second model's vectors are (hybrid recall fuses them in once all are there).
            structured["recall_e5"] = e5.to_json()
        judge = self._judge_status()
        if judge is not None:
            # Whether the judge is loaded yet (the answer gate asks it about the queries it doubts once it
            # is), and whether this brain's memories are all read with it (its channel: English queries).
            channel = await asyncio.to_thread(self._judge_channel, snapshot)
            structured["recall_judge"] = judge if channel is None else {**judge, "channel": channel}
        notes = []
        if _damaged_index(snapshot, index):
            # Said here, where a model looks when recall and writes refuse: "0 memories" read as an empty brain.
            notes.append(f"This brain's index (index.json) is damaged: recall finds nothing and writes are refused. "
                         f"{DAMAGED_INDEX_ADVICE}")
        if snapshot.brains_stale:
            # Said, or a status read as all well while nothing could reach the store.
            notes.append("The store cannot be reached right now: the brains, sizes and sync times shown are the "
                         "last known; recall answers from the copy held here.")
        if snapshot.pending_writes:
            reason = f" ({snapshot.held_reason})" if snapshot.held_reason else ""
            notes.append(f"{snapshot.pending_writes} write(s) are held, not yet synced to the store{reason}.")
        if notes:
            structured["note"] = " ".join(notes)
        return ok_result(structured, render.status_text(structured))

    # ----- writes -----------------------------------------------------------

    async def _use(self, caller: Caller, args: Args) -> types.CallToolResult:
        wanted = args.string("brain", required=True, max_length=MAX_CONTEXT_CHARS)
        assert wanted is not None
        record, identity = await self.manager.use_brain(caller.account, wanted)
        snapshot = await self.manager.snapshot(caller.account)
        structured: dict[str, Any] = {
            "brain": {"id": record.id, "name": record.name, **sharing_fields(record)},
            "persisted": True,
            "memory_count": len(snapshot_entries(snapshot)),
        }
        if identity.status == STATUS_NO_BRAIN and identity.note:
            structured["note"] = identity.note
        return ok_result(structured, render.use_text(structured))

    async def _memorize(self, caller: Caller, args: Args) -> types.CallToolResult:
        content = args.string("content", required=True, max_length=MAX_CONTENT_CHARS)
        assert content is not None
        title = args.string("title", max_length=MAX_TITLE_CHARS)
        tags = args.string_list("tags", max_items=MAX_LIST_ITEMS)
        allow_duplicate = args.boolean("allow_duplicate")
        on_similar = args.choice("on_similar", ON_SIMILAR, default="report")
        options: dict[str, Any] = {
            "title": title,
            "type": args.choice("type", MEMORY_TYPES, default="learning"),
            "tags": tags,
            "origin": args.choice("origin", ORIGINS, default="agent-inferred"),
            "valid_from": args.string("valid_from", max_length=MAX_DATE_CHARS),
            "valid_until": args.string("valid_until", max_length=MAX_DATE_CHARS),
            "supersedes": args.string_list("supersedes", max_items=MAX_LIST_ITEMS),
            "agent": caller.account.client_name,
            "project": args.string("project", max_length=MAX_CONTEXT_CHARS) or "",
            "task": args.string("task", max_length=MAX_CONTEXT_CHARS) or "",
            "writer": await self.manager.writer(caller.account),
            "request_key": _request_key(caller, args.string("idempotency_key", max_length=MAX_ID_CHARS)),
        }
        op = connector_memorize(content, **options)
        if not args.boolean("allow_secrets"):
            _refuse_credentials(op.memories)
        # One check-and-write at a time per user here: two assistants saving the same fact at
        # once each checked the brain before the other's write and both wrote it.
        async with self._memorize_lock(caller.account.subject):
            return await self._checked_memorize(caller, op, content, options, allow_duplicate, on_similar)

    def _memorize_lock(self, subject: str) -> asyncio.Lock:
        """The lock serialising one user's brain_memorize calls in this process (kept while in use)."""
        lock = self._memorize_locks.get(subject)
        if lock is None:
            lock = self._memorize_locks[subject] = asyncio.Lock()
        return lock

    async def _checked_memorize(self, caller: Caller, op: Memorize, content: str, options: dict[str, Any],
                                allow_duplicate: bool, on_similar: str) -> types.CallToolResult:
        """brain_memorize's similar check on the brain as it is now, then its write (or the memory
        already holding this content)."""
        memory = op.memories[0]
        # The check runs on the brain as it is before the write, off the event loop (it may
        # build the brain's indexes), and decides before anything is written: the operation
        # that is written (and replayed after a 412) carries its outcome, so a replay is
        # deterministic and keeps its id.
        try:
            snapshot: Snapshot | None = await self.manager.snapshot(caller.account)
        except BrainUnavailable:
            snapshot = None  # no check: the write below says why nothing could be saved
        found = await self._similar_checked(snapshot, memory)
        exact = self._exact_current(snapshot, found)
        if exact is not None and snapshot is not None and not allow_duplicate:
            return self._duplicate_result(snapshot, exact, found)
        superseding: list[str] = []
        if on_similar == "supersede":
            superseding = [item.id for item in found if item.relation == UPDATE and item.id not in memory.supersedes]
            if superseding:
                op = connector_memorize(content, **{**options, "supersedes": [*memory.supersedes, *superseding]})
        # Flags not settled by this write wait for the person in the review queue (docs/review.md),
        # queued in the same write.
        flagged = [item.to_json() for item in found if item.flagged and item.id not in op.memories[0].supersedes]
        if flagged:
            op = MemorizeFlagged.of(op, flagged, by=caller.account.client_name)
        outcome = await self._write(caller, op, "memorize")
        _refused_for_good(outcome)
        self.prewarm(outcome)
        stored = dict(outcome.result["stored"][0])
        structured: dict[str, Any] = {
            "stored": stored, **_sync_fields(outcome), "similar": [item.to_json(detail=True) for item in found],
        }
        # What the caller superseded itself is settled: no "it seems to repeat ..., forget the new one".
        advised = [item for item in found if item.id not in memory.supersedes]
        advice = render.similar_advice(advised, superseded=superseding, stored_id=stored.get("id"))
        queued = outcome.result.get("review_queued")
        if queued:
            structured["review_queued"] = list(queued)
        review = "The user also sees the pair in their review queue and may decide there." if queued else ""
        note = " ".join(part for part in (advice, review, _sync_note(outcome)) if part)
        if note:
            structured["note"] = note
        return ok_result(structured, render.memorize_text(structured))

    async def with_review_flags(self, snapshot: Snapshot | None, op: Memorize, *, by: str,
                                limit: int | None = None) -> Memorize:
        """``op`` with what brain_memorize's similar check flags for its memories (the first
        ``limit`` of them) against the brain as it is before the write: the pairs are queued
        for review in the same write (`MemorizeFlagged`). Memories a memory supersedes are
        not flagged against it. The web app's writes (new memory, edit, import) run this."""
        flagged: list[dict[str, Any]] = []
        for position, memory in enumerate(op.memories[:limit]):
            found = await self._similar_checked(snapshot, memory)
            flagged += [{**item.to_json(), "of": position} for item in found
                        if item.flagged and item.id not in memory.supersedes]
        return MemorizeFlagged.of(op, flagged, by=by) if flagged else op

    async def _similar_checked(self, snapshot: Snapshot | None, memory: MemoryInput) -> list[Similar]:
        """`similar_for` of one memory about to be written (off the event loop when indexes must be built)."""
        if snapshot is None:
            return []
        incoming = Incoming(memory.content, memory.title, memory.tags, memory.type)
        if self._index_ready(snapshot.key, "hybrid", snapshot.brain_id):
            return self.similar_for(snapshot, incoming)
        return await asyncio.to_thread(self.similar_for, snapshot, incoming)

    def _exact_current(self, snapshot: Snapshot | None, found: list[Similar]) -> Similar | None:
        """The memory holding this content word for word as a current fact, if any. An old version
        (superseded) or a fact whose validity ended does not hold it (recall ranks it down as
        `outdated`): the fact stated again now is written, or "already in memory" would point at it."""
        exact = [item for item in found if item.exact]
        if not exact or snapshot is None or snapshot.brain is None:
            return None  # the usual case: nothing held word for word
        index = index_for(snapshot.brain, snapshot.key, self.index_cache)  # the similar check's, cached
        now_ms = datetime_ms(self.manager.now())
        for item in exact:
            position = index.positions.get(item.id)
            if position is None or not outdated(index.memories[position], now_ms):
                return item
        return None

    def _duplicate_result(self, snapshot: Snapshot, exact: Similar, found: list[Similar]) -> types.CallToolResult:
        """The answer to a memorize of content the brain already holds word for word: nothing written."""
        entry = snapshot_entries(snapshot).get(exact.id)
        entry = entry if isinstance(entry, dict) else {}
        structured: dict[str, Any] = {
            "stored": {
                "id": exact.id,
                "title": exact.title,
                "path": entry.get("path") if isinstance(entry.get("path"), str) else "",
                "type": entry.get("type") if isinstance(entry.get("type"), str) else "",
                "already_present": True,
            },
            "written": False,
            # Nothing was written now, but earlier writes of this brain may still be held here.
            "synced": snapshot.pending_writes == 0,
            "similar": [item.to_json(detail=True) for item in found],
            "note": (
                f"Not written: memory {exact.id} already holds this content. Use that id; call brain_memorize "
                "again with allow_duplicate=true only if the user wants a second copy."
            ),
        }
        return ok_result(structured, render.memorize_text(structured))

    async def _simple_write(self, caller: Caller, op: Any, label: str, verb: str) -> types.CallToolResult:
        outcome = await self._write(caller, op, label)
        _refused_for_good(outcome)
        self.prewarm(outcome)
        structured = {**outcome.result, **_sync_fields(outcome)}
        note = _sync_note(outcome)
        if note:
            structured["note"] = f"{structured['note']}. {note}" if structured.get("note") else note
        return ok_result(structured, render.write_text(verb, structured))

    def _memory_id(self, args: Args) -> str:
        memory_id = args.string("id", required=True, max_length=MAX_ID_CHARS)
        assert memory_id is not None
        if has_unsafe_chars(memory_id.strip()):
            # Ids are echoed in results and errors: they stay on one line.
            raise ArgumentError("'id' must be a memory id such as mem_20250108_032187 (from brain_recall)")
        return memory_id.strip()

    async def _pin(self, caller: Caller, args: Args) -> types.CallToolResult:
        return await self._simple_write(caller, Pin(self._memory_id(args)), "pin", "Pinned")

    async def _unpin(self, caller: Caller, args: Args) -> types.CallToolResult:
        return await self._simple_write(caller, Unpin(self._memory_id(args)), "unpin", "Unpinned")

    async def _forget(self, caller: Caller, args: Args) -> types.CallToolResult:
        op = Forget(self._memory_id(args), force=args.boolean("force"))
        return await self._simple_write(caller, op, "forget", "Forgot (archived)")

    async def _verify(self, caller: Caller, args: Args) -> types.CallToolResult:
        action = args.choice("action", ["list", "approve", "reject"], default="list")
        ids = args.string_list("ids", max_items=MAX_LIST_ITEMS, max_item_length=MAX_ID_CHARS)
        if action == "list":
            snapshot = await self.manager.snapshot(caller.account)
            listing: dict[str, Any] = {"pending": [], "total": 0}
            if snapshot.brain is not None:
                listing = await asyncio.to_thread(Verify("list").apply, snapshot.brain.copy(), self.manager.now())
            # Ids sent with the list are said to be ignored by `_unused`, as any action's unused arguments.
            structured = {"action": "list", **listing}
            return ok_result(structured, render.verify_text(structured))
        if not ids:
            raise ToolFailure(f"'{action}' needs 'ids': the memory ids to {action} (see brain_verify with action list).")
        outcome = await self._write(caller, Verify(action, ids), f"verify-{action}")
        _refused_for_good(outcome)
        if not outcome.result.get("results"):
            # None could be approved or rejected: a refusal, as the CLI's verify exits 1, not a result a
            # model may read as done. Verify writes nothing then.
            raise ToolFailure(_verify_refusal(action, outcome.result.get("errors") or []))
        self.prewarm(outcome)
        structured = {**outcome.result, **_sync_fields(outcome)}
        note = _sync_note(outcome)
        if note:
            structured["note"] = note
        return ok_result(structured, render.verify_text(structured))

    # ----- for other tools (connector/mcp/thinking.py) ----------------------------

    async def recall_structured(self, caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
        """brain_recall's own recall (mode, budget, notes), its structured result; a refusal raises ToolFailure."""
        result = await self._recall(caller, Args(arguments))
        if result.is_error or result.structured_content is None:
            raise ToolFailure(result.content[0].text if result.content else "recall failed")
        return result.structured_content

    async def memorize_many(self, caller: Caller, items: list[dict[str, Any]], *, task: str) -> dict[str, Any]:
        """Several memories (``content``, ``title``, ``type``, ``tags``, optional ``origin`` each) in ONE write: one
        transaction, one push, all or nothing. Each goes through brain_memorize's checks: one that
        looks like a credential refuses the whole batch; one the brain holds word for word already
        is not written again (listed in ``already_present``); memories it may repeat or update are
        queued for review in the same write. A refusal raises (ToolFailure, BrainError,
        BrainUnavailable) with nothing written."""
        writer = await self.manager.writer(caller.account)
        memories = [connector_memory(item["content"], title=item.get("title"), type=item.get("type", "learning"),
                                     tags=item.get("tags", ()), origin=item.get("origin", "agent-inferred"),
                                     agent=caller.account.client_name, task=task, writer=writer) for item in items]
        _refuse_credentials(memories)
        snapshot = await self.manager.snapshot(caller.account)
        kept: list[MemoryInput] = []
        present: list[dict[str, Any]] = []
        flagged: list[dict[str, Any]] = []
        for memory in memories:
            found = await self._similar_checked(snapshot, memory)
            exact = self._exact_current(snapshot, found)
            if exact is not None:
                present.append({"id": exact.id, "title": memory.title})
                continue
            flagged += [{**item.to_json(), "of": len(kept)} for item in found if item.flagged]
            kept.append(memory)
        if not kept:
            # Nothing written now; earlier writes of this brain may still be held here.
            return {"stored": [], "already_present": present, "synced": snapshot.pending_writes == 0}
        op: Memorize = Memorize(kept, pins_follow=True)
        if flagged:
            op = MemorizeFlagged.of(op, flagged, by=caller.account.client_name)
        outcome = await self._write(caller, op, "memorize")
        _refused_for_good(outcome)
        self.prewarm(outcome)
        result: dict[str, Any] = {"stored": list(outcome.result["stored"]), "already_present": present,
                                  **_sync_fields(outcome)}
        if outcome.result.get("review_queued"):
            result["review_queued"] = list(outcome.result["review_queued"])
        note = _sync_note(outcome)
        if note:
            result["note"] = note
        return result


def sharing_fields(record: BrainRecord) -> dict[str, Any]:
    """``role`` and ``owner`` of a brain record, when the store shares brains (contract 4.8)."""
    fields: dict[str, Any] = {}
    if record.role is not None:
        fields["role"] = record.role
        fields["read_only"] = record.read_only
    if record.owner is not None:
        fields["owner"] = record.owner
    return fields


def _content_budget(args: Args) -> tuple[Budget, list[str]]:
    """Recall's content budget: ``max_chars`` characters (default DEFAULT_RECALL_CHARS unless
    ``max_tokens`` is given), ``max_tokens`` tokens as `connector.engine.format.tokens` counts them;
    both bound it when both are given. Also notes for any value that was clamped."""
    chars, chars_note = args.clamped_integer(
        "max_chars", default=DEFAULT_RECALL_CHARS, minimum=0, maximum=MAX_RECALL_CHARS
    )
    notes = [chars_note] if chars_note else []
    if not args.given("max_tokens"):
        return Budget(chars=chars), notes
    tokens, tokens_note = args.clamped_integer(
        "max_tokens", default=0, minimum=0, maximum=MAX_RECALL_CHARS // CHARS_PER_TOKEN
    )
    notes += [tokens_note] if tokens_note else []
    return Budget(chars=chars if args.given("max_chars") else None, tokens=tokens), notes


def _verify_refusal(action: str, errors: list[dict[str, Any]]) -> str:
    """Why none of the ids could be approved or rejected, each id under its reason."""
    by_reason: dict[str, list[str]] = {}
    for error in errors:
        by_reason.setdefault(str(error.get("error")), []).append(render.one(error.get("id")))
    reasons = "; ".join(f"{reason}: {', '.join(ids)}" for reason, ids in by_reason.items())
    verb = "approved" if action == "approve" else "rejected"
    return (f"Nothing was {verb}, nothing was changed ({reasons}). brain_verify with action list shows the "
            "memories pending verification.")


def _damaged_index(snapshot: Snapshot, index: Any) -> bool:
    """Whether the snapshot's brain has an index.json (parsed: ``index``) that is no brain index:
    recall and writes refuse such a brain."""
    return snapshot.brain is not None and "index.json" in snapshot.brain and index_damage(index) is not None


def _instant(args: Args, name: str) -> str | None:
    """An ISO 8601 date or time argument (``as_of``, ``as_known_of``), checked before recall: the
    engine's refusal named only the value, and a brain with no memories yet refused nothing."""
    value = args.string(name, max_length=MAX_DATE_CHARS)
    if value is None:
        return None
    text = value.strip()
    if parse_iso_ms(text) is None:
        raise ArgumentError(not_an_instant(name, value))
    return text


def _refuse_credentials(memories: list[Any]) -> None:
    """Refuse a write whose text (any field) looks like it holds a credential, naming the kinds, never the values."""
    kinds = credentials_in_memories(memories)
    if kinds:
        raise ToolFailure(
            f"{credential_refusal(kinds)} "
            "Leave the secret out (say where it is kept instead), or, only if the user explicitly confirms they "
            "want it stored, call brain_memorize again with allow_secrets=true."
        )


def _is_list(args: Args) -> bool:
    try:
        return args.choice("action", ["list", "approve", "reject"], default="list") == "list"
    except ArgumentError:
        return False


def _reads_models(args: Args) -> bool:
    """Whether a brain_mental_model call only reads (list, get): then it needs no write scope."""
    try:
        return args.choice("action", MENTAL_ACTIONS, default="list") in MENTAL_READ_ACTIONS
    except ArgumentError:
        return False


def _saves(args: Args) -> bool:
    """Whether a brain_extract call asks to save (then it needs the write scope); unreadable counts as yes."""
    try:
        return args.boolean("save")
    except ArgumentError:
        return True
