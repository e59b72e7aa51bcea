"""Characters that let a short text field pretend to be more than one field.

A title, tag, id or name is shown on one line among other lines (tool results, the
sign-in page, logs). A newline in it can print fake result lines; a bidirectional
override can make it read differently from what it is. These helpers find such
characters, normalise them away when a value is written, and make them visible when
a value written elsewhere is shown.
"""

from __future__ import annotations

import re
import unicodedata

# Bidirectional embedding, override and isolate controls, and the implicit marks.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Unicode categories that break or hide a line: controls (C0, DEL, C1 with U+0085),
# line and paragraph separators.
_LINE_BREAKING_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


def is_unsafe_char(char: str) -> bool:
    """True for a control, line/paragraph separator or bidirectional control character."""
    return char in BIDI_CONTROLS or unicodedata.category(char) in _LINE_BREAKING_CATEGORIES


def has_unsafe_chars(text: str) -> bool:
    """True when ``text`` holds a character `is_unsafe_char` refuses on one line."""
    return any(is_unsafe_char(char) for char in text)


def one_line(text: str) -> str:
    """``text`` with every run of unsafe characters (and the spaces around them) made one space, trimmed.

    A text without unsafe characters is returned unchanged (not even trimmed).
    """
    if not has_unsafe_chars(text):
        return text
    cleaned = "".join(" " if is_unsafe_char(char) else char for char in text)
    return re.sub(r" {2,}", " ", cleaned).strip()


def escape_char(char: str) -> str:
    """A visible stand-in for one unsafe character (``\\n``, ``\\u202e``)."""
    simple = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    return simple or f"\\u{ord(char):04x}"


def escape_one_line(text: str) -> str:
    """``text`` with each unsafe character shown as an escape, so it stays on its one line."""
    if not has_unsafe_chars(text):
        return text
    return "".join(escape_char(char) if is_unsafe_char(char) else char for char in text)


def escape_multiline(text: str) -> str:
    """Like `escape_one_line` but keeping newlines and tabs (for a body shown between delimiters)."""
    if not has_unsafe_chars(text):
        return text
    return "".join(
        escape_char(char) if is_unsafe_char(char) and char not in "\n\t" else char
        for char in text.replace("\r\n", "\n")
    )
