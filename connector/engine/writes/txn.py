"""One write's view of a brain: parse each JSON file once, stage changes, commit at the end.

Operations read and change parsed copies and staged file bytes; nothing reaches the
`Brain` until `commit()`. An operation that raises half-way therefore leaves the
brain exactly as it was, without copying the whole brain first.
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat
from typing import Any

import msgspec

from connector.engine.format.brain import (
    ARCHIVE_INDEX,
    ASSOCIATIONS,
    CONFIG,
    DAMAGED_INDEX_ADVICE,
    INDEX,
    PINNED,
    REVIEW_QUEUE,
    SEARCH_INDEX,
    Brain,
    dump_json,
    index_damage,
)
from connector.engine.format.change import BrainChange
from connector.engine.format.frontmatter import edit_frontmatter
from connector.engine.format.jsonpieces import Pieces, split, serialise
from connector.engine.format.rules import (
    REINFORCE_STEP,
    iso_ms,
    set_entry_fields,
    without_keys,
)
from connector.engine.format.text import document_text, js_key_order, term_counts
from connector.engine.writes.errors import BrainError

_MISSING = object()
# The top-level maps of the large documents whose entries a write re-encodes one by
# one (see `connector.engine.format.jsonpieces`): the rest of each map is joined as it was.
KEPT_MAPS = {INDEX: ("memories",), ASSOCIATIONS: ("edges",), SEARCH_INDEX: ("documents", "df")}


_ENCODER = msgspec.json.Encoder()


def maybe_special_float(value: Any) -> bool:
    """True for a float msgspec might print unlike `dump_json` (integral, or tiny/huge)."""
    return isinstance(value, float) and (value.is_integer() or abs(value) < 1e-3 or abs(value) >= 1e15)


def _parse_json(data: bytes) -> tuple[Any, bool]:
    """(parsed JSON, whether its floats are all plain), or (None, False) if not strict JSON.

    Strict means what JavaScript's JSON.parse accepts: NaN, Infinity, bad UTF-8 are refused.
    """
    plain = True

    def hook(text: str) -> float:
        nonlocal plain
        value = float(text)
        # Inlined `maybe_special_float`: this runs once per float of large documents.
        if plain and (value.is_integer() or not 1e-3 <= abs(value) < 1e15):
            plain = False
        return value

    # Large documents create millions of objects; the cyclic GC would run many
    # times during the decode for nothing (JSON values hold no cycles).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return msgspec.json.Decoder(float_hook=hook).decode(data), plain
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None, False
    finally:
        if collecting:
            gc.enable()


@dataclass
class Derived:
    """What a write derived from a document and kept current, for the next write of it."""

    pieces: Pieces | None = None  # the entries' text of its `KEPT_MAPS`
    tag_index: dict[str, list[str]] | None = None  # index.json only: tag -> memory ids
    positions: dict[str, int] | None = None  # index.json only: memory id -> position


class _ParsedDocuments:
    """The parsed form of large JSON documents a write just produced, for the next write.

    A write parses index.json, associations.json and search-index.json, changes them
    and serialises them again; at 10,000 memories the parsing alone is most of a
    memorize. The document a commit serialised is kept here with the exact bytes
    object it became, and the next write of that brain (which reads those very bytes)
    takes it instead of parsing. Taking removes it: the taker mutates it, and a write
    that fails half-way leaves nothing stale behind. Bounded (a few documents, the
    most recent), thread-safe.
    """

    def __init__(self, capacity: int = 6, min_bytes: int = 64 * 1024) -> None:
        self._capacity = capacity
        self.min_bytes = min_bytes
        self._held: OrderedDict[int, tuple[bytes, Any, bool, Derived | None]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, data: bytes) -> tuple[Any, bool, Derived | None] | None:
        """(document, plain, derived) for exactly this bytes object, removed from the cache; else None."""
        with self._lock:
            held = self._held.get(id(data))
            if held is None or held[0] is not data:
                return None
            del self._held[id(data)]
        return held[1], held[2], held[3]

    def keep(self, data: bytes, value: Any, plain: bool, derived: Derived | None = None) -> None:
        """Remember that ``data`` is the serialisation of ``value`` (and what the writer
        derived from it and kept current: its entries' text, index.json's tag index)."""
        if len(data) < self.min_bytes:
            return
        with self._lock:
            self._held[id(data)] = (data, value, plain, derived)  # the bytes are held: their id stays theirs
            self._held.move_to_end(id(data))
            while len(self._held) > self._capacity:
                self._held.popitem(last=False)


PARSED = _ParsedDocuments()


def _parsed(data: bytes) -> tuple[Any, bool, Derived | None]:
    """(document, plain, derived) in ``data``: from the last write's cache when it made
    these bytes, else parsed (derived None)."""
    kept = PARSED.take(data)
    return kept if kept is not None else (*_parse_json(data), None)


def fast_dump_json(value: Any, *, plain_floats: bool = False) -> bytes:
    """The same bytes as `dump_json`, much faster for large documents.

    msgspec encodes and indents; its output equals `dump_json`'s except for floats
    that are integral or printed differently (``1.0``, ``1e-7`` vs ``1e-07``, ``0.00001``
    vs ``1e-05``, ``-0.0``). Unless the caller knows every float is plain
    (``plain_floats``), a scan of the encoded floats looks for those, and then
    `dump_json` itself is used. Values never hold NaN or infinities here: reads refuse
    them and writes validate numbers.
    """
    try:
        compact = _ENCODER.encode(value)
    except (TypeError, ValueError, OverflowError):
        return dump_json(value)
    if not plain_floats:
        special = False

        def check(text: str) -> None:
            nonlocal special
            number = float(text)
            # `dump_json` prints integral floats as integers and others with repr().
            if number.is_integer() or text != repr(number):
                special = True

        msgspec.json.Decoder(float_hook=check).decode(compact)
        if special:
            return dump_json(value)
    return msgspec.json.format(compact, indent=2) + b"\n"


class WriteTxn:
    """Staged changes to one brain, applied together by `commit`."""

    def __init__(self, brain: Brain, now: datetime) -> None:
        self.brain = brain
        self.now = now
        self.now_iso = iso_ms(now)
        self._parsed: dict[str, Any] = {}
        self._dirty: set[str] = set()
        self._writes: dict[str, bytes] = {}
        self._removed: set[str] = set()
        self._written_dirs: set[str] = set()  # parents of the files this write staged
        self._brain_dirs: dict[str, bool] = {}
        self._tag_index: dict[str, list[str]] | None = None
        self._unplain: set[str] = set()  # documents that may hold floats msgspec prints differently
        self._positions: dict[str, int] = {}
        # What this write changed, for the brain's journal (see `BrainChange`); None = not known.
        self._changed_memories: set[str] = set()
        self._changed_nodes: set[str] | None = set()
        self._changed_documents: set[str] | None = set()
        self._changed_terms: set[str] | None = set()  # search-index.json's df entries
        self._pieces: dict[str, Pieces] = {}  # documents' entry texts, from the write that made them

    # -- files -------------------------------------------------------------------
    def read(self, path: str) -> bytes | None:
        """Current bytes of ``path`` including staged changes."""
        if path in self._removed:
            return None
        if path in self._writes:
            return self._writes[path]
        return self.brain.read(path)

    def read_text(self, path: str) -> str | None:
        data = self.read(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def write(self, path: str, data: bytes) -> None:
        self._removed.discard(path)
        self._writes[path] = data
        self._add_parents(self._written_dirs, path)

    def remove(self, path: str) -> None:
        self._writes.pop(path, None)
        self._parsed.pop(path, None)
        self._pieces.pop(path, None)
        self._dirty.discard(path)
        if path in self.brain.files:
            self._removed.add(path)

    def exists(self, path: str) -> bool:
        """A file, or a directory implied by some file, at ``path``."""
        return self.read(path) is not None or path in self._written_dirs or self._brain_directory(path)

    def is_file(self, path: str) -> bool:
        return self.read(path) is not None

    def _brain_directory(self, path: str) -> bool:
        """Whether some file of the brain (as it was before this write) lies below ``path``.

        One scan per asked path, not a set of every directory built first: a write
        asks about one or two paths, and the brain may hold 10,000 files."""
        known = self._brain_dirs.get(path)
        if known is None:
            prefix = path + "/"
            # The loop in C (map): a Python generator over 10,000 names cost ~1.5 ms per write.
            known = self._brain_dirs[path] = any(map(str.startswith, self.brain.files, repeat(prefix)))
        return known

    @staticmethod
    def _add_parents(dirs: set[str], path: str) -> None:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:depth]))

    # -- JSON documents --------------------------------------------------------------
    def json(self, path: str, default: Callable[[], Any] | None = None, *, valid: Callable[[Any], bool] | None = None) -> Any:
        """The parsed JSON at ``path`` (a private copy, cached for this write).

        When the file is missing, or fails ``valid``, ``default()`` is returned (and
        cached), or None without a default.
        """
        if path in self._parsed:
            return self._parsed[path]
        data = self.read(path)
        value: Any = _MISSING
        plain = True
        if data is not None:
            value, plain, derived = _parsed(data)
            if value is None or (valid is not None and not valid(value)):
                value = _MISSING
            elif derived is not None and derived.pieces is not None:
                self._pieces[path] = derived.pieces
        if value is _MISSING:
            if data is not None:
                self._replaced_whole(path)  # an unreadable document starts over from the default
            value, plain = (default() if default is not None else None), True
        self._parsed[path] = value
        if not plain:
            self._unplain.add(path)
        return value

    def note_numbers(self, path: str, *values: Any) -> None:
        """Record numbers put into the document at ``path`` (see `fast_dump_json`)."""
        if any(maybe_special_float(value) for value in values):
            self._unplain.add(path)

    def _replaced_whole(self, path: str) -> None:
        if path == ASSOCIATIONS:
            self._changed_nodes = None
        elif path == SEARCH_INDEX:
            self._changed_documents = self._changed_terms = None

    def mark(self, path: str) -> None:
        """Write the cached document at ``path`` back on commit."""
        self._dirty.add(path)

    def commit(self) -> None:
        """Apply every staged change to the brain."""
        committed: dict[str, bytes] = {}
        for path in self._dirty:
            plain = path not in self._unplain
            data, pieces = self._serialise(path, plain)
            before = self.brain.read(path)
            if before is not None and before == data:
                # Marked but serialised to the same bytes (a memorize that added no edge): the brain
                # keeps its bytes object, so packing and the indexes see the file as untouched.
                data = before
                if pieces is not None:
                    pieces.source = before
                self._writes.pop(path, None)
            else:
                self._writes[path] = data
            committed[path] = data
            derived = Derived(pieces=pieces)
            if pieces is not None:
                self._pieces[path] = pieces
            if path == INDEX and self._tag_index is not None:
                # index.json's tag index stays valid for the next write of this document.
                derived.tag_index, derived.positions = self._tag_index, self._positions
            PARSED.keep(data, self._parsed[path], plain, derived)
        if self.brain.journal is not None:
            self.brain.journal.append(BrainChange(
                paths=set(self._writes) | self._removed,
                memories=set(self._changed_memories),
                edge_nodes=None if self._changed_nodes is None else set(self._changed_nodes),
                documents=None if self._changed_documents is None else set(self._changed_documents),
                parsed={path: (data, self._parsed[path]) for path, data in committed.items()},
            ))
        for path in self._removed:
            self.brain.remove(path)
        for path, data in self._writes.items():
            self.brain.write(path, data)
        self._dirty.clear()
        self._writes.clear()
        self._removed.clear()

    def _serialise(self, path: str, plain: bool) -> tuple[bytes, Pieces | None]:
        """The staged document at ``path`` as bytes, and its entries' text for the next write.

        A large document whose floats are all plain is joined from the previous write's
        pieces with only the entries this write changed encoded again; else it is
        serialised in full (and, when large, cut into pieces for the next write).
        """
        value = self._parsed[path]
        names = KEPT_MAPS.get(path)
        if names is None or not plain or not isinstance(value, dict):
            return fast_dump_json(value, plain_floats=plain), None
        pieces = self._pieces.pop(path, None)
        if pieces is not None:
            try:
                data = serialise(value, pieces, self._changed_entries(path))
            except (TypeError, ValueError, OverflowError):
                data = None
            if data is not None:
                return data, pieces
        data = fast_dump_json(value, plain_floats=True)
        return data, split(data, value, names) if len(data) >= PARSED.min_bytes else None

    def _changed_entries(self, path: str) -> dict[str, Collection[str] | None]:
        """The entries of ``path``'s `KEPT_MAPS` this write changed (None: not known)."""
        if path == INDEX:
            return {"memories": self._changed_memories}
        if path == ASSOCIATIONS:
            return {"edges": self._changed_nodes}
        return {"documents": self._changed_documents, "df": self._changed_terms}

    # -- index.json ----------------------------------------------------------------
    def index(self, *, create: bool = False) -> dict[str, Any]:
        """``index.json`` (created empty when ``create``; missing or corrupt -> BrainError)."""
        if INDEX in self._parsed:
            return self._parsed[INDEX]
        data = self.read(INDEX)
        if data is None:
            if not create:
                raise BrainError("brain not initialized (no index.json)")
            value: Any = {"version": 2, "memory_count": 0, "memories": {}, "last_updated": self.now_iso}
        else:
            value, plain, derived = _parsed(data)
            if derived is not None:
                if derived.tag_index is not None and derived.positions is not None:
                    self._tag_index, self._positions = derived.tag_index, derived.positions
                if derived.pieces is not None:
                    self._pieces[INDEX] = derived.pieces
            if not plain:
                self._unplain.add(INDEX)
            if (damage := index_damage(value)) is not None:
                raise BrainError(f"{damage}; refusing to write over it. {DAMAGED_INDEX_ADVICE}")
            if value.get("memories") is None:
                value["memories"] = {}
        self._parsed[INDEX] = value
        return value

    def memories(self) -> dict[str, Any]:
        return self.index()["memories"]

    def entry(self, memory_id: str) -> dict[str, Any] | None:
        entry = self.memories().get(memory_id)
        return entry if isinstance(entry, dict) else None

    def tag_overlaps(self, tags: set[str], minimum: int) -> list[str]:
        """Ids of memories sharing at least ``minimum`` of ``tags``, in index order.

        Uses an inverted tag index built once per write, so a batch of memorizes
        does not rescan every memory for each new one.
        """
        if self._tag_index is None:
            self._tag_index = {}
            self._positions = {}
            for position, (memory_id, entry) in enumerate(self.memories().items()):
                self._positions[memory_id] = position
                self._index_tags(memory_id, entry)
        counts: dict[str, int] = {}
        for tag in tags:
            for memory_id in self._tag_index.get(tag, ()):
                counts[memory_id] = counts.get(memory_id, 0) + 1
        found = [memory_id for memory_id, count in counts.items() if count >= minimum]
        return sorted(found, key=self._positions.__getitem__)

    def _index_tags(self, memory_id: str, entry: Any) -> None:
        assert self._tag_index is not None
        tags = entry.get("tags") if isinstance(entry, dict) else None
        if isinstance(tags, list):
            for tag in dict.fromkeys(tag for tag in tags if isinstance(tag, str)):
                self._tag_index.setdefault(tag, []).append(memory_id)

    def add_entry(self, memory_id: str, entry: dict[str, Any]) -> None:
        """Append a new index entry (last in index order)."""
        memories = self.memories()
        memories[memory_id] = entry
        self._changed_memories.add(memory_id)
        if self._tag_index is not None:
            self._positions[memory_id] = len(self._positions)
            self._index_tags(memory_id, entry)
        self.touch_index()

    def remove_entry(self, memory_id: str) -> None:
        """Drop an index entry."""
        del self.memories()[memory_id]
        self._changed_memories.add(memory_id)
        self._tag_index = None
        self.touch_index()

    def update_entry(self, memory_id: str, updates: dict[str, Any], remove: tuple[str, ...] = ()) -> dict[str, Any]:
        """Set and remove index entry fields (canonical key placement); returns the entry."""
        memories = self.memories()
        entry = without_keys(memories[memory_id], *remove)
        entry = set_entry_fields(entry, updates)
        memories[memory_id] = entry
        self._changed_memories.add(memory_id)
        if "tags" in updates or "tags" in remove:
            self._tag_index = None  # built again when next needed
        self.touch_index()
        return entry

    def touch_index(self) -> None:
        """``last_updated`` = now and ``memory_count`` = number of entries."""
        index = self.index()
        index["memory_count"] = len(index["memories"])
        index["last_updated"] = self.now_iso
        self.mark(INDEX)

    def archive_index(self) -> dict[str, Any]:
        value = self.json(
            ARCHIVE_INDEX,
            lambda: {"version": 1, "archived_count": 0, "memories": {}},
            valid=lambda doc: isinstance(doc, dict) and isinstance(doc.get("memories", {}), dict),
        )
        value.setdefault("memories", {})
        return value

    def archived_ids(self) -> Collection[str]:
        """Ids in ``_archived/index.json`` (a live view, cheap to call repeatedly)."""
        value = self.json(ARCHIVE_INDEX)
        if isinstance(value, dict) and isinstance(value.get("memories"), dict):
            return value["memories"].keys()
        return ()

    def config(self) -> Any:
        return self.json(CONFIG)

    # -- memory files -------------------------------------------------------------
    def edit_memory_file(self, memory_id: str, set_fields: dict[str, Any] | None = None, remove: tuple[str, ...] = ()) -> None:
        """Replace, append or drop frontmatter lines of a memory's file (if it exists)."""
        entry = self.entry(memory_id)
        path = entry.get("path") if entry else None
        if not isinstance(path, str):
            return
        text = self.read_text(path)
        if text is None:
            return
        edited = edit_frontmatter(text, set_fields, remove)
        if edited != text:
            self.write(path, edited.encode("utf-8"))

    # -- associations.json ----------------------------------------------------------
    def edges(self) -> dict[str, Any]:
        doc = self.json(
            ASSOCIATIONS,
            lambda: {"version": 1, "edges": {}},
            valid=lambda value: isinstance(value, dict) and isinstance(value.get("edges", {}), dict),
        )
        doc.setdefault("edges", {})
        return doc["edges"]

    def link(self, a: str, b: str, weight: float, origin: str) -> str:
        """Add or reinforce the edge a<->b in both directions; 'created' or 'reinforced'."""
        edges = self.edges()
        outcome = "created"
        self._note_nodes(a, b)
        for source, target in ((a, b), (b, a)):
            neighbours = edges.get(source)
            if not isinstance(neighbours, dict):
                neighbours = {}
                edges[source] = neighbours
            edge = neighbours.get(target)
            if isinstance(edge, dict):
                outcome = "reinforced"
                current = edge.get("weight")
                current = current if isinstance(current, (int, float)) and not isinstance(current, bool) else 0.0
                co = edge.get("co_retrievals")
                co = co if isinstance(co, int) and not isinstance(co, bool) else 0
                edge["weight"] = current + REINFORCE_STEP * (1 - current)
                self.note_numbers(ASSOCIATIONS, edge["weight"])
                edge["co_retrievals"] = co + 1
                edge["last_activated"] = self.now_iso
            else:
                self.note_numbers(ASSOCIATIONS, weight)
                neighbours[target] = {
                    "weight": weight,
                    "co_retrievals": 0,
                    "last_activated": self.now_iso,
                    "origin": origin,
                }
        self.mark(ASSOCIATIONS)
        return outcome

    def unlink_all(self, memory_id: str) -> None:
        """Drop every edge touching ``memory_id``; neighbour maps left empty go too."""
        if self.read(ASSOCIATIONS) is None:
            return
        edges = self.edges()
        changed = edges.pop(memory_id, None) is not None
        self._note_nodes(memory_id)
        for source in list(edges):
            neighbours = edges[source]
            if isinstance(neighbours, dict) and memory_id in neighbours:
                del neighbours[memory_id]
                self._note_nodes(source)
                changed = True
                if not neighbours:
                    del edges[source]
        if changed:
            self.mark(ASSOCIATIONS)

    def _note_nodes(self, *nodes: str) -> None:
        if self._changed_nodes is not None:
            self._changed_nodes.update(nodes)

    # -- search-index.json -------------------------------------------------------------
    def _search_index(self) -> dict[str, Any] | None:
        if self.read(SEARCH_INDEX) is None:
            return None
        doc = self.json(SEARCH_INDEX)
        if not isinstance(doc, dict) or not isinstance(doc.get("documents"), dict):
            return None  # unusable: recall rebuilds; leave the file as it is
        if not isinstance(doc.get("df"), dict):
            doc["df"] = {}
            self._changed_documents = self._changed_terms = None  # every term's frequency changed
        return doc

    def _note_document(self, memory_id: str) -> None:
        if self._changed_documents is not None:
            self._changed_documents.add(memory_id)

    def index_document(self, memory_id: str, title: str, tags: list[str], body: str) -> None:
        """Add (or replace) a memory's document in ``search-index.json`` when present."""
        doc = self._search_index()
        if doc is None:
            return
        self._drop_document(doc, memory_id)
        self._note_document(memory_id)
        tf, length = term_counts(document_text(title, tags, body))
        doc["documents"][memory_id] = {"tf": tf, "length": length}
        df = doc["df"]
        self._note_terms(tf)
        # A new integer-like term ("2025") sorts before the others in a JavaScript
        # object; only then is the whole map re-ordered (it can hold many terms).
        reorder = False
        for term in tf:
            count = df.get(term)
            if count is None and term.isdigit():
                reorder = True
            df[term] = (count if isinstance(count, int) else 0) + 1
        if reorder:
            doc["df"] = js_key_order(df)
        doc["doc_count"] = len(doc["documents"])
        self.mark(SEARCH_INDEX)

    def unindex_document(self, memory_id: str) -> None:
        """Remove a memory's document from ``search-index.json`` when present."""
        doc = self._search_index()
        if doc is None or memory_id not in doc["documents"]:
            return
        self._drop_document(doc, memory_id)
        self._note_document(memory_id)
        doc["doc_count"] = len(doc["documents"])
        self.mark(SEARCH_INDEX)

    def _note_terms(self, terms: Collection[str]) -> None:
        if self._changed_terms is not None:
            self._changed_terms.update(terms)

    def _drop_document(self, doc: dict[str, Any], memory_id: str) -> None:
        old = doc["documents"].pop(memory_id, None)
        if not isinstance(old, dict) or not isinstance(old.get("tf"), dict):
            return
        df = doc["df"]
        self._note_terms(old["tf"])
        for term in old["tf"]:
            count = df.get(term)
            if isinstance(count, int) and count > 1:
                df[term] = count - 1
            else:
                df.pop(term, None)

    # -- pinned.json ---------------------------------------------------------------------
    def pins(self) -> list[Any]:
        doc = self.json(
            PINNED,
            lambda: {"version": 1, "pins": []},
            valid=lambda value: isinstance(value, dict) and isinstance(value.get("pins", []), list),
        )
        doc.setdefault("pins", [])
        return doc["pins"]

    def set_pin(self, memory_id: str, scope: str, priority: int, tokens: Any) -> None:
        pins = [pin for pin in self.pins() if not (isinstance(pin, dict) and pin.get("id") == memory_id)]
        pins.append({"id": memory_id, "scope": scope, "priority": priority, "token_estimate": tokens})
        self.note_numbers(PINNED, tokens)
        self._parsed[PINNED]["pins"] = pins
        self.mark(PINNED)

    def drop_pin(self, memory_id: str) -> None:
        if self.read(PINNED) is None:
            return
        pins = self.pins()
        kept = [pin for pin in pins if not (isinstance(pin, dict) and pin.get("id") == memory_id)]
        if len(kept) != len(pins):
            self._parsed[PINNED]["pins"] = kept
            self.mark(PINNED)

    # -- review-queue.json ----------------------------------------------------------------
    def drop_review_items(self, memory_id: str) -> None:
        doc = self.json(REVIEW_QUEUE)
        if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
            return
        kept = [item for item in doc["items"] if not (isinstance(item, dict) and item.get("memory_id") == memory_id)]
        if len(kept) != len(doc["items"]):
            doc["items"] = kept
            self.mark(REVIEW_QUEUE)

    # -- _meta.json ---------------------------------------------------------------------------
    def count_in_directories(self, path: str) -> None:
        """Each ancestor directory's ``_meta.json``: count + 1, next segment listed."""
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            directory = "/".join(parts[:depth])
            meta_path = f"{directory}/_meta.json"
            meta = self.json(
                meta_path,
                lambda d=directory: {"description": d, "memory_count": 0, "subcategories": []},
                valid=lambda value: isinstance(value, dict),
            )
            count = meta.get("memory_count")
            meta["memory_count"] = (count if isinstance(count, int) and not isinstance(count, bool) else 0) + 1
            subcategories = meta.get("subcategories")
            if not isinstance(subcategories, list):
                subcategories = []
            meta["subcategories"] = subcategories
            if depth < len(parts) and parts[depth] not in subcategories:
                subcategories.append(parts[depth])
            self.mark(meta_path)
