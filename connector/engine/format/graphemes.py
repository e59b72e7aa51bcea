"""Where text may be cut without splitting a character as people see it (a grapheme cluster).

A cut by code points can split what shows as one character: an emoji joined with ZWJ
(👨‍👩‍👧‍👦 is seven code points; cut after three it shows a man and a woman), a flag (two regional
indicators; one alone shows a boxed letter), an emoji's skin tone or variation selector, a
kana with a combining (semi-)voiced sound mark as macOS writes file names (か + ゛), or a
half-width katakana's sound mark (ｶ + ﾞ). Unicode's extended grapheme clusters (UAX #29) say
where such characters begin; the `regex` module's ``\\X`` finds them. Pure logic.
"""

from __future__ import annotations

import unicodedata

import regex

_CLUSTER = regex.compile(r"\X")


def boundary_at_or_before(text: str, at: int) -> int:
    """The last position at most ``at`` where ``text`` may be cut (0 when there is none)."""
    at = max(0, min(at, len(text)))
    if at in (0, len(text)):
        return at
    if text[at - 1].isascii() and text[at].isascii() and text[at - 1:at + 1] != "\r\n":
        # Between two ASCII characters UAX #29 joins only CR LF: a cluster goes on past a cut
        # only into a mark, a joiner or a selector, none of them ASCII. Saves walking the
        # clusters from the start (100 tags of 1,000 characters cut to 300 took 35 ms).
        return at
    start = 0
    for cluster in _CLUSTER.finditer(text):
        if cluster.end() > at:
            return cluster.start()
        start = cluster.end()
    return start


def shortened(text: str, length: int) -> str:
    """``text`` if it is at most ``length`` characters, else its start cut at a boundary and
    an ellipsis, ``length`` characters or fewer in all."""
    if len(text) <= length:
        return text
    return text[: boundary_at_or_before(text, length - 1)].rstrip() + "\u2026"


def columns(cluster: str) -> int:
    """How many columns a character as shown (a grapheme cluster) takes: 2 for a Chinese or
    Japanese character, an emoji or a full-width form (its first code point East Asian Wide or
    Fullwidth), else 1."""
    return 2 if cluster and unicodedata.east_asian_width(cluster[0]) in ("W", "F") else 1


def shortened_to_columns(text: str, width: int) -> str:
    """``text`` if it takes at most ``width`` columns (`columns`), else its start cut at a
    boundary and an ellipsis, ``width`` columns or fewer in all: a Chinese or Japanese title
    shown where 26 Latin letters fit takes 12 of its characters, not 26."""
    if _fitting(text, width) == len(text):
        return text
    return text[: _fitting(text, width - 1)].rstrip() + "\u2026"


def padded_to_columns(text: str, width: int) -> str:
    """``text`` with spaces after it up to ``width`` columns (`columns`), as a terminal table's cell:
    Python's ``f"{text:20}"`` counts code points, so a Chinese or Japanese name pushed the next
    columns right by one per character. Text wider than ``width`` is left whole."""
    used = sum(columns(cluster.group()) for cluster in _CLUSTER.finditer(text))
    return text + " " * max(0, width - used)


def _fitting(text: str, width: int) -> int:
    """How much of the start of ``text`` (in code points, whole clusters) takes at most ``width`` columns."""
    used = 0
    for cluster in _CLUSTER.finditer(text):
        used += columns(cluster.group())
        if used > width:
            return cluster.start()
    return len(text)
