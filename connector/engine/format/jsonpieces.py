"""Serialise a large JSON document again after a few entries changed, from kept pieces.

A memorize changes a handful of entries of index.json's ``memories``,
associations.json's ``edges`` and search-index.json's ``documents`` and ``df``, yet
the three documents weigh 26 MB at 10,000 memories and encoding them whole took
~40 ms of every memorize. `Pieces` keeps, for chosen top-level maps of a document,
the text of each entry as it stands in the document's last serialisation;
`serialise` re-encodes only the entries named as changed and joins the others.

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

_ENCODER = msgspec.json.Encoder()
_ENTRY_SEPARATOR = b',\n    "'  # between two entries of a top-level map: the next one's opening quote included


@dataclass
class Pieces:
    """The text of each entry of some top-level maps of a document, as last serialised.

    ``maps[name][key]`` is the entry ``key`` of the map at top-level key ``name``,
    from just after its key's opening quote to the end of its value (no separator).
    Changed in place by `serialise`: owned by one document's chain of writes.
    """

    maps: dict[str, dict[str, bytes]] = field(default_factory=dict)


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
    pieces = Pieces()
    for name in names:
        value = doc.get(name)
        if not isinstance(value, dict):
            continue
        if not value:
            pieces.maps[name] = {}
            continue
        opener = b"\n  " + _ENCODER.encode(name) + b': {\n    "'
        start = data.find(opener)
        if start < 0:
            return None
        start += len(opener)
        end = data.find(b"\n  }", start)
        if end < 0:
            return None
        texts = data[start:end].split(_ENTRY_SEPARATOR)
        if len(texts) != len(value):
            return None
        pieces.maps[name] = dict(zip(value, texts, strict=True))
    return pieces


def serialise(doc: Mapping[str, Any], pieces: Pieces, changed: Mapping[str, Collection[str] | None]) -> bytes | None:
    """``doc`` serialised, with the pieces of its kept maps brought up to date first.

    ``changed[name]`` names every entry of the kept map ``name`` that changed since
    ``pieces`` were made (None or absent: not known). Returns None, leaving ``pieces``
    unusable, when a kept map cannot be joined from them: the caller serialises in full.
    Raises what msgspec raises for values JSON cannot hold.
    """
    # One list of parts joined once: the large maps' text is copied twice (their
    # entries joined, then the whole), not once more per level.
    parts: list[bytes] = []
    for name, value in doc.items():
        parts += (b",\n  " if parts else b"{\n  ", _ENCODER.encode(name), b": ")
        kept = pieces.maps.get(name)
        if kept is not None and not isinstance(value, dict):
            del pieces.maps[name]  # no longer a map: serialised in full from now on
            kept = None
        if kept is None:
            parts.append(_format(value).replace(b"\n", b"\n  "))
            continue
        keys = changed.get(name)
        if keys is None:
            return None
        for key in keys:
            if key in value:
                kept[key] = entry_text(key, value[key])
            else:
                kept.pop(key, None)
        if len(kept) != len(value):
            return None  # an entry came or went without being named
        if not value:
            parts.append(b"{}")
            continue
        try:
            body = _ENTRY_SEPARATOR.join(map(kept.__getitem__, value))
        except KeyError:
            return None
        parts += (b'{\n    "', body, b"\n  }")
    if not parts:
        return b"{}\n"
    parts.append(b"\n}\n")
    return b"".join(parts)
