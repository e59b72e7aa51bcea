"""The one rule for a brain's name, shared by the store (which keeps names) and every client
that looks a brain up by name (the connector's `brain_use` and brain URLs, the store's CLI).

A name is kept as typed, except that surrounding whitespace is dropped and it is stored in
Unicode NFC: "café" typed on macOS (NFD, "e" + U+0301) and in a browser (NFC, "é") look the
same to a person and must be the same name, or a brain shows in every list under a name that
brain_use cannot find, and two brains show under one name without being refused as ambiguous.
Names already stored another way (before this rule) are matched by the same key.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from common.textsafety import has_unsafe_chars, is_blank

MAX_BRAIN_NAME_CHARS = 100


def checked_brain_name(name: Any) -> str | None:
    """``name`` as a brain is named by it (NFC, surrounding whitespace dropped), or None when it
    cannot name one: not text, blank or invisible, over 100 characters, a slash or backslash, a
    control, line-separator or bidirectional character."""
    # Checked before the spaces are dropped: str.strip takes a line or paragraph separator off too,
    # and a name sent with one is refused, not kept without it.
    if not isinstance(name, str) or has_unsafe_chars(name):
        return None
    name = unicodedata.normalize("NFC", name.strip())
    if not name or len(name) > MAX_BRAIN_NAME_CHARS or is_blank(name) or "/" in name or "\\" in name:
        return None
    return name


def brain_name_key(name: str, *, ignore_case: bool = False) -> str:
    """What two brain names are compared by: NFC without surrounding whitespace, case-folded
    with ``ignore_case``."""
    key = unicodedata.normalize("NFC", name.strip())
    return key.casefold() if ignore_case else key
