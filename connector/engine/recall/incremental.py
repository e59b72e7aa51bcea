"""Follow a write with the recall index instead of rebuilding it.

`apply_change(index, brain, change)` returns the `BrainIndex` of ``brain`` given
the index of the brain before ``change`` (a `BrainChange`). Parsed memories,
documents, postings of untouched terms, adjacency lists and column rows that did
not change are reused; the older index is never modified (recalls of the older
brain may still be running on it). What depends on the whole brain is recomputed
exactly as `BrainIndex.build` computes it: average document length (summed in
document order), every document's norm, the idf caches.

Recall from the result is identical to recall from a fresh build, bit for bit
(tests/engine/test_incremental.py checks it over random write sequences). Some
internal numbering may differ from a fresh build where it cannot change an
answer: encoding-context groups keep their numbers (a group no memory uses any
more stays, unused), and the lists of nodes linking to a node keep their order
(spreading takes the best over them).
"""

from __future__ import annotations

from itertools import islice
from typing import Any

import numpy as np

from connector.engine.format.brain import ASSOCIATIONS, CONFIG, INDEX, SEARCH_INDEX, Brain
from connector.engine.format.change import ABSENT, BrainChange
from connector.engine.format.gcpause import gc_paused
from connector.engine.format.jsvalues import is_number
from connector.engine.recall.columns import DocTerms, Postings
from connector.engine.recall.index import (
    BrainIndex,
    MemoryRecord,
    document_links,
    document_norms,
    edge_lists,
    js_object_order,
    memory_array,
    memory_document,
    neighbour_list,
    neighbour_map,
    read_json,
    record,
    share_context,
    stored_df,
    stored_document,
    usable_count,
)


class _Rebuild(Exception):
    """This change is better (or only) handled by a full build."""


def apply_change(old: BrainIndex, brain: Brain, change: BrainChange) -> BrainIndex:
    """The index of ``brain`` from ``old`` (the index of the brain before ``change``)."""
    try:
        with gc_paused():
            return _apply(old, brain, change)
    except _Rebuild:
        return BrainIndex.build(brain)


def _parsed(brain: Brain, change: BrainChange, path: str) -> Any:
    value = change.document(brain, path)
    return read_json(brain, path) if value is ABSENT else value


def _apply(old: BrainIndex, brain: Brain, change: BrainChange) -> BrainIndex:
    paths = change.paths
    if INDEX not in brain.files:
        raise _Rebuild  # the build says why recall cannot run
    if not paths:
        return old
    index_changed = INDEX in paths
    edges_file_changed = ASSOCIATIONS in paths
    search_changed = SEARCH_INDEX in paths
    # Rebuilt statistics read the memory files: any other file may be one.
    if not (index_changed or edges_file_changed or search_changed or CONFIG in paths or old.stats_rebuilt):
        return old

    # --- memories -------------------------------------------------------------
    memories, source, groups = old.memories, None, old.ctx_groups
    if index_changed:
        memories, source, groups = _memories(old, _parsed(brain, change, INDEX), change.memories)
    moved = memories is not old.memories and (
        len(memories) != len(old.memories) or any(a.id != b.id for a, b in zip(memories, old.memories))
    )
    positions = old.positions
    if moved:
        count = len(old.memories)
        if len(memories) > count and memories[:count] == old.memories:  # entries only added: same objects first
            positions = dict(old.positions)
            positions.update((item.id, i) for i, item in enumerate(memories[count:], count))
        else:
            positions = {item.id: i for i, item in enumerate(memories)}

    # --- documents and statistics ------------------------------------------------
    documents = _documents(old, brain, change, memories, source, positions, moved, search_changed)

    # --- association edges ---------------------------------------------------------
    edges, changed_nodes = old.edges, set()
    if edges_file_changed:
        edges, changed_nodes = _edges(old, _parsed(brain, change, ASSOCIATIONS), change.edge_nodes)
    edges_changed = edges is not old.edges

    enforce = old.quarantine_enforce
    if CONFIG in paths:
        config = read_json(brain, CONFIG)
        enforce = isinstance(config, dict) and config.get("quarantine_mode") == "enforce"

    columns = old.columns
    groups_changed = groups is not old.ctx_groups
    if memories is not old.memories or edges_changed:
        columns = None
        if old.columns is not None:
            try:
                columns = old.columns.updated(
                    memories,
                    np.arange(len(memories), dtype=np.int64) if source is None else np.array(source, dtype=np.int64),
                    positions,
                    groups,
                    groups_changed,
                    edges,
                    edges_changed,
                    moved,
                    old.positions,
                    changed_nodes if edges_changed else set(),
                    old.ctx_groups,
                )
            except (OverflowError, ValueError):
                columns = None  # values beyond int64/float64: recall takes the scalar path
        else:
            raise _Rebuild  # columns never built for the older brain: let the build decide

    doc_count, doc_ids, doc_tfs, lengths, df, stats_rebuilt, postings, norms, avgdl = documents
    if doc_ids is old.doc_ids and not moved:
        doc_memory, doc_positions = old.doc_memory, old.doc_positions
    else:
        doc_ids, doc_memory, doc_positions = document_links(doc_ids, memories, positions)
    index = BrainIndex(
        memories=memories,
        positions=positions,
        doc_count=doc_count,
        avgdl=avgdl,
        df=df,
        postings=postings,
        doc_tfs=doc_tfs,
        doc_norms=norms,
        doc_memory=doc_memory,
        doc_memory_array=old.doc_memory_array if doc_memory is old.doc_memory else memory_array(doc_memory),
        doc_ids=doc_ids,
        doc_lengths=lengths,
        doc_positions=doc_positions,
        edges=edges,
        quarantine_enforce=enforce,
        stats_rebuilt=stats_rebuilt,
        ctx_groups=groups,
        columns=columns,
    )
    if postings is old.postings and doc_count == old.doc_count and (df is old.df or df == old.df):
        # Same statistics: what queries prepared stays valid.
        index._idf_cache, index._term_cache, index._contrib_cache = old._idf_cache, old._term_cache, old._contrib_cache
    _carry_edge_maps(old, index, changed_nodes)
    return index


def _memories(
    old: BrainIndex, document: Any, hint: set[str] | None
) -> tuple[list[MemoryRecord], list[int], list[tuple[Any, Any, Any]]]:
    """(records in index order, where each was in ``old`` or -1 when new or changed, context groups)."""
    if not isinstance(document, dict):
        raise _Rebuild
    entries = document.get("memories")
    entries = js_object_order(entries) if isinstance(entries, dict) else {}
    old_positions, old_records = old.positions, old.memories
    memories: list[MemoryRecord] = []
    source: list[int] = []
    groups = old.ctx_groups
    group_of: dict[tuple[Any, Any, Any], int] | None = None
    items: Any = entries.items()
    kept_count = _appended_only(entries, [record.id for record in old_records], old_positions, hint)
    if kept_count:
        # Only entries added after the unchanged ones (a memorize): those are read, not every entry.
        memories, source = list(old_records), list(range(kept_count))
        items = islice(items, kept_count, None)
    for memory_id, entry in items:
        at = old_positions.get(memory_id)
        if at is not None:
            kept = old_records[at]
            if memory_id not in hint if hint is not None else kept.entry == (entry if isinstance(entry, dict) else {}):
                memories.append(kept)
                source.append(at)
                continue
        fresh = record(memory_id, entry)
        if fresh.has_context:
            if group_of is None:
                group_of = {key: number for number, key in enumerate(groups)}
            key = (fresh.ctx_project, fresh.ctx_task, fresh.ctx_topics)
            number = group_of.get(key)
            if number is None:
                if groups is old.ctx_groups:
                    groups = list(groups)
                number = group_of[key] = len(groups)
                groups.append(key)
            else:
                share_context(fresh, groups[number])
            fresh.ctx_group = number
        memories.append(fresh)
        source.append(-1)
    return memories, source, groups


def _appended_only(mapping: dict[str, Any], old_keys: list[str], old_at: dict[str, int], hint: set[str] | None) -> int:
    """How many first keys of ``mapping`` are ``old_keys``, unchanged by the write (``hint``
    names what it changed), when every other key comes after them; else 0."""
    count = len(old_keys)
    if hint is None or not count or len(mapping) < count or any(key in old_at for key in hint):
        return 0
    return count if list(islice(mapping, count)) == old_keys else 0


def _documents(
    old: BrainIndex,
    brain: Brain,
    change: BrainChange,
    memories: list[MemoryRecord],
    source: list[int] | None,
    positions: dict[str, int],
    moved: bool,
    search_changed: bool,
) -> tuple[int, list[str], list[DocTerms], list[float], dict[str, float], bool, Postings, list[float], float]:
    """(doc count, ids, term counts, lengths, df, statistics rebuilt, postings, norms, avgdl) for the new brain."""
    if not old.stats_rebuilt:
        stored = _parsed(brain, change, SEARCH_INDEX) if search_changed else None
        if not search_changed:
            if not moved or (old.doc_count == len(positions) and positions.keys() <= old.doc_positions.keys()):
                return _same_documents(old)
            raise _Rebuild  # the stored statistics stop being usable: recall rebuilds them from the files
        count = usable_count(stored, positions)
        if count is None:
            raise _Rebuild
        return _stored_documents(old, stored, count, change.documents)
    if search_changed and usable_count(_parsed(brain, change, SEARCH_INDEX), positions) is not None:
        raise _Rebuild  # statistics become usable: the build takes them
    return _rebuilt_documents(old, brain, change, memories, source)


def _same_documents(old: BrainIndex) -> Any:
    return (
        old.doc_count, old.doc_ids, old.doc_tfs, old.doc_lengths, old.df, old.stats_rebuilt, old.postings,
        old.doc_norms, old.avgdl,
    )


def _stored_documents(old: BrainIndex, stored: dict[str, Any], count: int, hint: set[str] | None) -> Any:
    """Documents of a usable stored search index, reusing ``old``'s unchanged ones."""
    old_docs, old_tfs, old_lengths = old.doc_positions, old.doc_tfs, old.doc_lengths
    doc_ids: list[str] = []
    doc_tfs: list[DocTerms] = []
    lengths: list[float] = []
    prefix = True  # documents so far are exactly old's first ones, unchanged
    ordered = js_object_order(stored["documents"])
    items: Any = enumerate(ordered.items())
    kept_count = _appended_only(ordered, old.doc_ids, old_docs, hint)
    if kept_count:
        # Only documents added after the unchanged ones: those are read, not every document.
        doc_ids, doc_tfs, lengths = list(old.doc_ids), list(old_tfs), list(old_lengths)
        items = islice(items, kept_count, None)
    for position, (memory_id, document) in items:
        at = old_docs.get(memory_id)
        if at is not None and hint is not None:
            same = memory_id not in hint
        elif at is not None:
            _, tf, length = stored_document(memory_id, document, intern_terms=False)
            same = old_tfs[at] == tf and old_lengths[at] == length
        else:
            same = False
        if same:
            tf, length = old_tfs[at], old_lengths[at]
            prefix = prefix and at == position
        else:
            _, tf, length = stored_document(memory_id, document)
            prefix = prefix and position >= len(old_tfs)
        doc_ids.append(memory_id)
        doc_tfs.append(tf)
        lengths.append(length)
    raw_df = stored.get("df")
    if hint is not None and isinstance(raw_df, dict):
        # Writes change the frequencies of their documents' terms only.
        df = dict(old.df)
        terms: set[str] = set()
        documents = stored["documents"]
        for memory_id in hint:
            at = old_docs.get(memory_id)
            if at is not None:
                terms.update(old_tfs[at][0])
            terms.update(stored_document(memory_id, documents.get(memory_id))[1][0])
        for term in terms:
            value = raw_df.get(term)
            if is_number(value):
                df[term] = float(value)
            else:
                df.pop(term, None)
    else:
        df = stored_df(raw_df)
    avgdl, norms = document_norms(lengths, count)
    return count, doc_ids, doc_tfs, lengths, df, False, _postings(old, doc_tfs, norms, prefix), norms, avgdl


def _rebuilt_documents(
    old: BrainIndex, brain: Brain, change: BrainChange, memories: list[MemoryRecord], source: list[int] | None
) -> Any:
    """Statistics rebuilt from the memory files (no usable stored index), reusing
    ``old``'s documents whose record and file did not change."""
    paths = change.paths
    old_tfs, old_lengths = old.doc_tfs, old.doc_lengths
    doc_ids: list[str] = []
    doc_tfs: list[DocTerms] = []
    lengths: list[float] = []
    df = dict(old.df)
    gone = set(range(len(old_tfs)))
    prefix = True
    for position, item in enumerate(memories):
        at = position if source is None else source[position]
        if at >= 0 and not (item.path is not None and item.path in paths):
            tf, length = old_tfs[at], old_lengths[at]
            gone.discard(at)
            prefix = prefix and at == position
        else:
            _, tf, length = memory_document(brain, item)
            for term in tf[0]:
                df[term] = df.get(term, 0.0) + 1
            prefix = prefix and position >= len(old_tfs)
        doc_ids.append(item.id)
        doc_tfs.append(tf)
        lengths.append(length)
    for at in gone:
        for term in old_tfs[at][0]:
            left = df[term] - 1
            if left:
                df[term] = left
            else:
                del df[term]
    count = len(memories)
    avgdl, norms = document_norms(lengths, count)
    return count, doc_ids, doc_tfs, lengths, df, True, _postings(old, doc_tfs, norms, prefix), norms, avgdl


def _postings(old: BrainIndex, doc_tfs: list[DocTerms], norms: list[float], prefix: bool) -> Postings:
    """Postings of the new documents: ``old``'s when nothing a query reads changed,
    extended when documents were only added (``prefix``: the first ones are ``old``'s,
    unchanged and in place), else built afresh."""
    before = len(old.doc_tfs)
    if prefix and len(doc_tfs) == before and norms == old.doc_norms:
        return old.postings
    if prefix and len(doc_tfs) >= before:
        return old.postings.extended(doc_tfs, before, norms)
    return Postings.build(doc_tfs, norms)


def _edges(
    old: BrainIndex, document: Any, hint: set[str] | None
) -> tuple[dict[str, list[tuple[str, float]]] | None, set[str] | None]:
    """(adjacency lists of the new graph, the nodes whose lists changed; None = all)."""
    raw = document.get("edges") if isinstance(document, dict) else None
    if not isinstance(raw, dict):
        return None, None
    before = old.edges
    if before is None or hint is None:
        return edge_lists(document), None
    edges: dict[str, list[tuple[str, float]]] = {}
    for node, neighbours in js_object_order(raw).items():
        if node not in hint and node in before:
            edges[node] = before[node]
        elif isinstance(neighbours, dict):
            edges[node] = neighbour_list(neighbours)
    return edges, set(hint)


def _carry_edge_maps(old: BrainIndex, new: BrainIndex, changed: set[str] | None) -> None:
    """Give ``new`` the reverse edge maps of ``old`` updated for the changed nodes
    (built on first spread otherwise: ~50 ms at 10,000 memories)."""
    maps, incoming = old._edge_maps, old._in_edges
    if maps is None or incoming is None:
        return
    if new.edges is old.edges:
        new._edge_maps, new._in_edges = maps, incoming
        return
    if changed is None or new.edges is None or old.edges is None:
        return  # rebuilt on first use
    maps, incoming = dict(maps), dict(incoming)
    for node in changed:
        before = old.edges.get(node, ())
        after = new.edges.get(node)
        for neighbour, _ in before:
            sources = incoming.get(neighbour)
            if sources is not None:
                kept = [source for source in sources if source != node]
                if kept:
                    incoming[neighbour] = kept
                else:
                    del incoming[neighbour]
        if after is None:
            maps.pop(node, None)
            continue
        maps[node] = neighbour_map(after)
        for neighbour, _ in after:
            incoming[neighbour] = [*incoming.get(neighbour, ()), node]
    new._edge_maps, new._in_edges = maps, incoming
