"""How many bytes live objects hold: the memory benchmark's breakdown and its regression test.

`deep_size` counts every object reachable from a root once (sys.getsizeof, numpy
arrays with the data they own), skipping what ``seen`` already holds: pass the same
set to measure several roots without counting shared objects twice (the brain's file
bytes first, then the index, and its parts in order). Allocator overhead and
fragmentation are not counted: resident memory is larger (bench/README.md).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

# The index's fields, grouped as bench/README.md's breakdown names them.
INDEX_PARTS: dict[str, tuple[str, ...]] = {
    "memories (records, packed entries)": ("memories", "positions", "ctx_groups"),
    "documents (terms per document, lengths)": ("doc_tfs", "doc_ids", "doc_positions", "doc_lengths", "doc_norms",
                                                "doc_memory", "doc_memory_array"),
    "vocabulary and df": ("df",),
    "postings": ("postings",),
    "columns (numpy)": ("columns",),
    "edges and edge maps": ("edges", "_edge_maps", "_in_edges"),
    "query caches": ("_idf_cache", "_term_cache", "_contrib_cache"),
}


def deep_size(root: Any, seen: set[int] | None = None) -> int:
    """Bytes of ``root`` and everything it reaches that ``seen`` does not hold (``seen`` is updated)."""
    seen = set() if seen is None else seen
    total = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, type(sys))):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)  # an array owning its data includes it; a view does not
        if isinstance(obj, np.ndarray):
            if obj.base is not None:
                stack.append(obj.base)
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        else:
            for cls in type(obj).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    if hasattr(obj, slot):
                        stack.append(getattr(obj, slot))
            if hasattr(obj, "__dict__"):
                stack.append(obj.__dict__)
    return total


def index_footprint(index: Any, brain: Any = None) -> dict[str, int]:
    """Bytes per part of a `BrainIndex` (`INDEX_PARTS`), not counting ``brain``'s files
    (which a record may share) nor what an earlier part already counted."""
    seen: set[int] = set()
    if brain is not None:
        deep_size(brain.files, seen)
    parts = {name: sum(deep_size(getattr(index, field), seen) for field in fields) for name, fields in INDEX_PARTS.items()}
    parts["other"] = deep_size(index, seen)
    return parts
