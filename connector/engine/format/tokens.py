"""Counting text in tokens as a language model's tokenizer roughly would, and budgets of both.

The one counting function of the connector's content budgets (recall's ``max_tokens``, the
evidence of ``brain_reflect`` and ``brain_extract``): a Chinese or Japanese character (Han,
kana, Hangul, their full-width punctuation and forms) or an emoji is about one token, other
text about four characters a token. Counting every character as a quarter token let Chinese and
Japanese content run to about four times the budget asked for.

Tokens are counted in quarters, so sums and cuts are exact integers: a wide character costs
4 quarters, any other character 1. Pure logic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from connector.engine.format.graphemes import boundary_at_or_before

# Chinese, Japanese and Korean text as text matching reads it: kana (with the prolonged sound
# mark), CJK ideographs and their extensions and compatibility forms, and Hangul syllables.
CJK_CHARACTERS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"

# Characters a tokenizer gives about one token each (or more): the ones text matching reads
# as Chinese, Japanese or Korean (kana, ideographs, Hangul), CJK punctuation (U+3000-303F)
# and the full-width forms (U+FF00-FFEF); also the rest of what is written two columns wide:
# Hangul jamo, CJK radicals, bopomofo and enclosed or compatibility forms, the ideographs
# past the Basic Multilingual Plane (extension B on: 𠮷 of 𠮷野家), and emoji and pictographs
# (U+2600-27BF, U+1F000-1FAFF). Ten emoji counted as two and a half tokens let an answer of
# emoji run to several times its budget.
_OTHER_WIDE = ("\u1100-\u115f\u2600-\u27bf\u2e80-\u2fff\u3100-\u33ff\ua960-\ua97f\ufe30-\ufe4f"
               "\U0001f000-\U0001faff\U00020000-\U0003ffff")
_WIDE = re.compile(f"[\u3000-\u303f{CJK_CHARACTERS}\uff00-\uffef{_OTHER_WIDE}]+")
CHARS_PER_TOKEN = 4  # other text: about four characters a token
_WIDE_COST = CHARS_PER_TOKEN  # in quarters
# Less of a memory than this (in tokens: 40 English characters, 10 Chinese or Japanese ones) is
# left out rather than shown cut, in recall and in brain_reflect's evidence: "T" of 232
# characters told the model nothing, while ten Chinese characters are a phrase.
MIN_CUT_TOKENS = 10


def quarters(text: str) -> int:
    """The cost of ``text`` in quarter tokens (4 per wide character, 1 per other one)."""
    wide = sum(match.end() - match.start() for match in _WIDE.finditer(text))
    return len(text) + (_WIDE_COST - 1) * wide


def is_wide(char: str) -> bool:
    """Whether ``char`` is a Chinese or Japanese character (or their punctuation, full-width
    form): written without spaces between words, so text may be cut before or after it."""
    return _WIDE.fullmatch(char) is not None


def count_tokens(text: str) -> int:
    """About how many tokens ``text`` is (rounded up)."""
    return -(-quarters(text) // CHARS_PER_TOKEN)


def too_little_of(shown: str, whole: str) -> bool:
    """Whether ``shown``, the start of ``whole`` a budget left room for, is a cut keeping less
    than MIN_CUT_TOKENS of it (a whole text, however short, is never too little)."""
    return len(shown) < len(whole) and quarters(shown) < MIN_CUT_TOKENS * CHARS_PER_TOKEN


def prefix_within(text: str, allowed: int) -> int:
    """The length of the longest start of ``text`` that costs at most ``allowed`` quarters."""
    if allowed <= 0:
        return 0
    used = 0
    at = 0
    for match in _WIDE.finditer(text):
        narrow = match.start() - at
        if used + narrow >= allowed:
            return at + (allowed - used)
        used += narrow
        at = match.start()
        run = match.end() - match.start()
        if used + _WIDE_COST * run > allowed:
            return at + (allowed - used) // _WIDE_COST
        used += _WIDE_COST * run
        at = match.end()
    return min(len(text), at + (allowed - used))


@dataclass
class Budget:
    """What is left of a content budget: characters and tokens (None: not bounded that way).

    ``spend`` it on texts one after the other, best first; ``room`` says how much of the
    next one fits.
    """

    chars: int | None = None
    tokens: int | None = None
    _quarters: int | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._quarters = None if self.tokens is None else max(0, self.tokens) * CHARS_PER_TOKEN

    def fits(self, text: str) -> bool:
        """Whether all of ``text`` fits in what is left."""
        return self.room(text) == len(text)

    @property
    def empty(self) -> bool:
        """Whether nothing at all may be shown (a budget of 0 was asked for, or it is spent)."""
        return self.room(" ") == 0

    def room(self, text: str) -> int:
        """How many characters of the start of ``text`` fit in what is left."""
        fits = len(text) if self.chars is None else min(len(text), max(0, self.chars))
        if self._quarters is not None:
            fits = min(fits, prefix_within(text, self._quarters))
        return boundary_at_or_before(text, fits)  # never half of an emoji or a marked kana

    def spend(self, text: str) -> None:
        """Count ``text`` as shown."""
        if self.chars is not None:
            self.chars = max(0, self.chars - len(text))
        if self._quarters is not None:
            self._quarters = max(0, self._quarters - quarters(text))
            self.tokens = self._quarters // CHARS_PER_TOKEN
