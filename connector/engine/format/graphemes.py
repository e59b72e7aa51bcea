"""Where text may be cut without splitting a character as people see it (a grapheme cluster).

A cut by code points can split what shows as one character: an emoji joined with ZWJ
(👨‍👩‍👧‍👦 is seven code points; cut after three it shows a man and a woman), a flag (two regional
indicators; one alone shows a boxed letter), an emoji's skin tone or variation selector, a
kana with a combining (semi-)voiced sound mark as macOS writes file names (か + ゛), or a
half-width katakana's sound mark (ｶ + ﾞ). This is the part of Unicode's extended grapheme
cluster rules (UAX #29) that such text needs, with the standard library only. Pure logic.
"""

from __future__ import annotations

import unicodedata

_ZWJ = "\u200d"
_REGIONAL_INDICATORS = range(0x1F1E6, 0x1F200)
# Code points that attach to the one before them besides the marks (categories Mn, Me, Mc):
# ZWJ, the emoji skin tones (category Sk), the tag characters of subdivision flags (Cf), the
# half-width katakana sound marks ﾞ ﾟ (Lm, Other_Grapheme_Extend) and Hangul vowel and final
# jamo (which join the jamo before them into one syllable).
_ATTACHING = frozenset(range(0x1F3FB, 0x1F400)) | frozenset(range(0xE0020, 0xE0080)) \
    | frozenset(range(0x1160, 0x1200)) | {0x200D, 0xFF9E, 0xFF9F}
_MARKS = frozenset({"Mn", "Me", "Mc"})


def _attaches(char: str) -> bool:
    return ord(char) in _ATTACHING or unicodedata.category(char) in _MARKS


def is_boundary(text: str, at: int) -> bool:
    """Whether ``text`` may be cut before position ``at`` (its ends always may)."""
    if at <= 0 or at >= len(text):
        return True
    char, before = text[at], text[at - 1]
    if _attaches(char) or before == _ZWJ or (before == "\r" and char == "\n"):
        return False
    if ord(char) in _REGIONAL_INDICATORS and ord(before) in _REGIONAL_INDICATORS:
        # Flags pair indicators from the start of their run: cut only after an even count.
        run = 0
        while at - run - 1 >= 0 and ord(text[at - run - 1]) in _REGIONAL_INDICATORS:
            run += 1
        return run % 2 == 0
    return True


def boundary_at_or_before(text: str, at: int) -> int:
    """The last position at most ``at`` where ``text`` may be cut (0 when there is none)."""
    at = max(0, min(at, len(text)))
    while not is_boundary(text, at):
        at -= 1
    return at


def shortened(text: str, length: int) -> str:
    """``text`` if it is at most ``length`` characters, else its start cut at a boundary and
    an ellipsis, ``length`` characters or fewer in all."""
    if len(text) <= length:
        return text
    return text[: boundary_at_or_before(text, length - 1)].rstrip() + "\u2026"


def columns(char: str) -> int:
    """How many columns ``char`` takes where text is shown: 2 for a Chinese or Japanese
    character, an emoji or a full-width form (East Asian Wide or Fullwidth), 0 for what attaches
    to the character before it, else 1."""
    if _attaches(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def shortened_to_columns(text: str, width: int) -> str:
    """``text`` if it takes at most ``width`` columns (`columns`), else its start cut at a
    boundary and an ellipsis, ``width`` columns or fewer in all: a Chinese or Japanese title
    shown where 26 Latin letters fit takes 12 of its characters, not 26."""
    if _fitting(text, width) == len(text):
        return text
    return text[: boundary_at_or_before(text, _fitting(text, width - 1))].rstrip() + "\u2026"


def _fitting(text: str, width: int) -> int:
    """How many characters of the start of ``text`` take at most ``width`` columns."""
    used = 0
    for at, char in enumerate(text):
        used += columns(char)
        if used > width:
            return at
    return len(text)
