"""Serialise a large JSON document again after a few entries changed, from the last serialisation.

A memorize changes a handful of entries of index.json's ``memories``,
associations.json's ``edges`` and search-index.json's ``documents`` and ``df``, yet
the three documents weigh 26 MB at 10,000 memories and encoding them whole took
~40 ms of every memorize. `Pieces` keeps, for chosen top-level maps of a document,
where each entry's text lies in the document's last serialisation (the bytes
themselves, never a copy of them); `serialise` re-encodes only the entries named as
changed and copies the rest from there: a write that replaces entries in place and
appends new ones (a memorize) splices the changed texts between whole stretches of
the old bytes, one copy of the document; any other change joins the entries one
by one in the document's order.

The output is byte for byte what ``msgspec.json.format(encode(doc), indent=2) + "\\n"``
gives (the layout `connector.engine.writes.txn.fast_dump_json` writes for documents whose
floats are plain): every entry of a top-level map sits on lines of its own, indented
by four spaces, separated by ``,\\n``; no JSON string holds a raw newline, so the text
of one entry never contains the separator ``,\\n    "``.

Correctness rests on the caller naming every entry it changed (added, replaced,
mutated in place or removed) since the pieces were made; `serialise` checks what it
cheaply can (entry counts, every key present) and returns None when they disagree,
and the caller then serialises in full.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

_ENCODER = msgspec.json.Encoder()
_ENTRY_SEPARATOR = b',\n    "'  # between two entries of a top-level map: the next one's opening quote included
_SEPARATOR_LENGTH = len(_ENTRY_SEPARATOR)
_MAP_OPEN = b'{\n    "'
_MAP_CLOSE = b"\n  }"


@dataclass
class KeptMap:
    """Where the entries of one top-level map lie in `Pieces.source`.

    Entry ``keys[i]`` (``position[keys[i]] == i``) is ``source[starts[i]:ends[i]]``:
    from just after its key's opening quote to the end of its value (no separator).
    """

    keys: list[str]
    position: dict[str, int]
    starts: np.ndarray  # int64
    ends: np.ndarray  # int64

    @classmethod
    def of(cls, keys: list[str], first: int, lengths: np.ndarray, position: dict[str, int] | None = None) -> KeptMap:
        """The entries ``keys`` (``position``: their index, when known) with ``lengths``, one
        separator apart, the first at offset ``first``."""
        starts = np.empty(len(keys), dtype=np.int64)
        if len(keys):
            starts[0] = first
            np.cumsum(lengths[:-1] + _SEPARATOR_LENGTH, out=starts[1:])
            starts[1:] += first
        if position is None:
            position = dict(zip(keys, range(len(keys))))
        return cls(keys, position, starts, starts + lengths)


@dataclass
class Pieces:
    """Where the entries of some top-level maps of a document lie in its last serialisation.

    Changed in place by `serialise`: owned by one document's chain of writes.
    """

    source: bytes = b""  # the document's last serialisation
    maps: dict[str, KeptMap] = field(default_factory=dict)


def _format(value: Any) -> bytes:
    return msgspec.json.format(_ENCODER.encode(value), indent=2)


def entry_text(key: str, value: Any) -> bytes:
    """The text of one entry of a top-level map (see `Pieces`): key and value, indented for depth 2."""
    return _ENCODER.encode(key)[1:] + b": " + _format(value).replace(b"\n", b"\n    ")


def split(data: bytes, doc: Mapping[str, Any], names: Iterable[str]) -> Pieces | None:
    """The pieces of ``data``, the formatted serialisation of ``doc``, for its top-level maps ``names``.

    Maps that are missing or not objects are left out (a later write serialises them
    in full); None when ``data`` does not have the expected layout.
    """
    pieces = Pieces(data)
    for name in names:
        value = doc.get(name)
        if not isinstance(value, dict):
            continue
        if not value:
            pieces.maps[name] = KeptMap.of([], 0, np.empty(0, dtype=np.int64))
            continue
        opener = b"\n  " + _ENCODER.encode(name) + b": " + _MAP_OPEN
        start = data.find(opener)
        if start < 0:
            return None
        start += len(opener)
        end = data.find(_MAP_CLOSE, start)
        if end < 0:
            return None
        texts = data[start:end].split(_ENTRY_SEPARATOR)
        if len(texts) != len(value):
            return None
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        pieces.maps[name] = KeptMap.of(list(value), start, lengths)
    return pieces


def serialise(doc: Mapping[str, Any], pieces: Pieces, changed: Mapping[str, Collection[str] | None]) -> bytes | None:
    """``doc`` serialised, its kept maps from ``pieces`` with the changed entries encoded again;
    ``pieces`` then describe the result.

    ``changed[name]`` names every entry of the kept map ``name`` that changed since
    ``pieces`` were made (None or absent: not known). Returns None, leaving ``pieces``
    unusable, when a kept map cannot be joined from them: the caller serialises in full.
    Raises what msgspec raises for values JSON cannot hold.
    """
    # One list of parts joined once: the old text is copied once, in stretches as long
    # as the changes leave them.
    source = memoryview(pieces.source)
    parts: list[bytes | memoryview] = []
    size = 0  # bytes in ``parts``
    # name -> (keys, their positions or None, first entry's offset, lengths): the maps as written
    followed: dict[str, tuple[list[str], dict[str, int] | None, int, np.ndarray]] = {}
    for name, value in doc.items():
        head = (b",\n  " if parts else b"{\n  ") + _ENCODER.encode(name) + b": "
        parts.append(head)
        size += len(head)
        kept = pieces.maps.get(name)
        if kept is not None and not isinstance(value, dict):
            del pieces.maps[name]  # no longer a map: serialised in full from now on
            kept = None
        if kept is None:
            text = _format(value).replace(b"\n", b"\n  ")
            parts.append(text)
            size += len(text)
            continue
        keys = changed.get(name)
        if keys is None:
            return None
        if not value:
            if len(kept.keys) != sum(1 for key in keys if key in kept.position):
                return None  # an entry went without being named
            parts.append(b"{}")
            size += 2
            followed[name] = ([], None, 0, np.empty(0, dtype=np.int64))
            continue
        joined = _joined(value, kept, keys, source)
        if joined is None:
            return None
        entries, order, position, lengths = joined
        parts.append(_MAP_OPEN)
        first = size + len(_MAP_OPEN)
        parts += entries
        parts.append(_MAP_CLOSE)
        size = first + int(lengths.sum()) + _SEPARATOR_LENGTH * (len(order) - 1) + len(_MAP_CLOSE)
        followed[name] = (order, position, first, lengths)
    parts.append(b"\n}\n" if parts else b"{}\n")
    data = b"".join(parts)
    pieces.source = data
    for name, (order, position, first, lengths) in followed.items():
        pieces.maps[name] = KeptMap.of(order, first, lengths, position)
    return data


_Joined = tuple[list[bytes | memoryview], list[str], dict[str, int] | None, np.ndarray]


def _joined(value: dict[str, Any], kept: KeptMap, keys: Collection[str], source: memoryview) -> _Joined | None:
    """(the map's entries as parts to join, its keys in order, their positions when kept at hand,
    each entry's length), or None when ``value`` holds an entry ``kept`` does not and ``keys`` did not name, or lacks one
    ``keys`` did not name."""
    texts: dict[str, bytes] = {}
    removed = 0
    for key in keys:
        if key in value:
            texts[key] = entry_text(key, value[key])
        elif key in kept.position:
            removed += 1
    added = [key for key in texts if key not in kept.position]
    count = len(kept.keys)
    if count - removed + len(added) != len(value):
        return None  # an entry came or went without being named
    order = list(value)
    if not removed and count and order[:count] == kept.keys:
        # Entries replaced in place and new ones appended (a memorize): the old text in long stretches.
        tail = order[count:]
        if all(key in texts for key in tail):
            entries, lengths = _spliced(kept, texts, tail, source), _lengths(kept, texts, tail)
            position = kept.position  # owned by this chain of writes: extended, not copied
            position.update(zip(tail, range(count, len(order))))
            return entries, order, position, lengths
    return _one_by_one(order, kept, texts, source)


def _spliced(kept: KeptMap, texts: dict[str, bytes], tail: list[str], source: memoryview) -> list[bytes | memoryview]:
    parts: list[bytes | memoryview] = []
    cursor = int(kept.starts[0])
    position = kept.position
    for at in sorted(position[key] for key in texts if key in position):
        parts += (source[cursor : int(kept.starts[at])], texts[kept.keys[at]])
        cursor = int(kept.ends[at])
    parts.append(source[cursor : int(kept.ends[-1])])
    for key in tail:
        parts += (_ENTRY_SEPARATOR, texts[key])
    return parts


def _lengths(kept: KeptMap, texts: dict[str, bytes], tail: list[str]) -> np.ndarray:
    lengths = np.empty(len(kept.keys) + len(tail), dtype=np.int64)
    count = len(kept.keys)
    np.subtract(kept.ends, kept.starts, out=lengths[:count])
    position = kept.position
    for key, text in texts.items():
        at = position.get(key)
        if at is not None:
            lengths[at] = len(text)
    for offset, key in enumerate(tail):
        lengths[count + offset] = len(texts[key])
    return lengths


def _one_by_one(order: list[str], kept: KeptMap, texts: dict[str, bytes], source: memoryview) -> _Joined | None:
    """The entries in ``order``, each from ``texts`` or from its old place (entries moved or removed)."""
    starts, ends = kept.starts.tolist(), kept.ends.tolist()
    position = kept.position
    entries: list[bytes | memoryview] = []
    lengths = np.empty(len(order), dtype=np.int64)
    for number, key in enumerate(order):
        text = texts.get(key)
        if text is None:
            at = position.get(key)
            if at is None:
                return None
            text = source[starts[at] : ends[at]]
        if number:
            entries.append(_ENTRY_SEPARATOR)
        entries.append(text)
        lengths[number] = len(text)
    return entries, order, None, lengths
