"""Read a large JSON object one member at a time, as if it had been parsed whole.

Parsing index.json or search-index.json whole creates every entry's objects at
once (tens of MB at 10,000 memories) and frees most of them right after: what the
index keeps is scattered among them, so the freed memory mostly stays with the
process. Decoding member by member keeps one member's objects alive at a time.

The values are those `connector.engine.recall.index.read_json` gives for the whole
document: msgspec first, the json module for what msgspec refuses but JavaScript
accepts (numbers beyond float64, read as infinity), and the document is invalid
when a member is invalid for both. Documents msgspec cannot even scan (lone
surrogate escapes, other encodings) are left to the whole-document parse.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_VALUE = msgspec.json.Decoder()


class InvalidJson(ValueError):
    """A member neither parser reads: the whole document is invalid."""


def members(data: bytes | msgspec.Raw) -> dict[str, msgspec.Raw] | None:
    """The members of the JSON object ``data``, each still unparsed (key order and
    duplicate keys as a whole parse keeps them); None when ``data`` is not an object
    msgspec can scan."""
    try:
        return _MEMBERS.decode(data)
    except msgspec.DecodeError:  # ValidationError (not an object) included
        return None


def value(raw: msgspec.Raw) -> tuple[Any, bool]:
    """(the parsed member, whether msgspec parsed it); raises `InvalidJson`."""
    try:
        return _VALUE.decode(raw), True
    except msgspec.DecodeError:
        pass
    try:
        return json.loads(bytes(raw), parse_constant=reject_constant), False
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidJson("not JSON") from None


def reject_constant(name: str) -> Any:
    """For json.loads: NaN and Infinity are not JSON (JavaScript refuses them too)."""
    raise ValueError(f"{name} is not JSON")
