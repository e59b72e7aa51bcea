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


# The same characters as one regular expression: a scan in C instead of a Python call per
# character (every title, tag and memory shown in a tool result passes through here; that
# was a tenth of a recall's CPU). Cc (U+0000-001F, U+007F-009F), Zl and Zp are fixed sets
# by Unicode's stability policy; tests compare it with `is_unsafe_char` on every code point.
_BIDI_CLASS = "".join(f"\\u{ord(char):04x}" for char in sorted(BIDI_CONTROLS))
_UNSAFE = re.compile(rf"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI_CLASS}]")
# Unsafe except newline and tab, which a body shown between delimiters keeps.
_UNSAFE_IN_BODY = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_BIDI_CLASS}]")
_SPACES = re.compile(r" {2,}")


def has_unsafe_chars(text: str) -> bool:
    """True when ``text`` holds a character `is_unsafe_char` refuses on one line."""
    return _UNSAFE.search(text) is not None


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (from a "\\ud800" escape in JSON): no UTF-8 text can carry it."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# What shows nothing on its own: controls, format characters (zero-width space and joiners,
# bidirectional marks, the byte order mark), separators. Whitespace is checked with str.isspace.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Zs"})


def is_blank(text: str) -> bool:
    """True when ``text`` shows nothing: only whitespace, controls (NUL included), format
    characters such as U+200B or U+202E, and separators. ``str.strip`` keeps those, so a text
    of a NUL or a zero-width space passed for written."""
    return all(char.isspace() or unicodedata.category(char) in _INVISIBLE_CATEGORIES for char in text)


def one_line(text: str) -> str:
    """``text`` with every run of unsafe characters (and the spaces around them) made one space, trimmed.

    A text without unsafe characters is returned unchanged (not even trimmed).
    """
    if not has_unsafe_chars(text):
        return text
    return _SPACES.sub(" ", _UNSAFE.sub(" ", text)).strip()


def escape_char(char: str) -> str:
    """A visible stand-in for one unsafe character (``\\n``, ``\\u202e``)."""
    simple = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    return simple or f"\\u{ord(char):04x}"


def _escaped(match: re.Match[str]) -> str:
    return escape_char(match.group())


def escape_one_line(text: str) -> str:
    """``text`` with each unsafe character shown as an escape, so it stays on its one line."""
    return _UNSAFE.sub(_escaped, text)


def escape_multiline(text: str) -> str:
    """Like `escape_one_line` but keeping newlines and tabs (for a body shown between delimiters)."""
    if not has_unsafe_chars(text):
        return text
    return _UNSAFE_IN_BODY.sub(_escaped, text.replace("\r\n", "\n"))
