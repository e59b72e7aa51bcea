"""Text rules shared by recall and writes: tokenizer, stemmer, document text.

These reproduce the reference command line's rules (recall.md section 2), so
term statistics we compute match the ones it stores in ``search-index.json``.
"""

from __future__ import annotations

import re
import unicodedata

# JavaScript's `\s` set. Python's own `\s` differs (it includes U+001C..U+001F and
# U+0085 and lacks U+FEFF), and token boundaries must match the reference exactly.
JS_WHITESPACE = (
    " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_WS_CLASS = "".join(f"\\u{ord(ch):04x}" for ch in JS_WHITESPACE)
_NOT_TOKEN_CHAR = re.compile(f"[^a-z0-9_\\-{_WS_CLASS}]")
_WS_RUN = re.compile(f"[{_WS_CLASS}]+")

STOPWORDS = frozenset(
    """a an the and or but in on at to for of with by from is was are were be
    been being have has had do does did will would could should may might shall can
    need must it its this that these those i me my we our you your he him his she her
    they them their what which who whom when where why how all each every both few
    more most other some such no not only own same so than too very just about above
    after again also any because before between during if into then there up out over
    under here as like use used using""".split()
)

# Pass 1: the first suffix the word ends with whose removal leaves >= 3 characters.
_SUFFIXES_PASS1 = (
    "izations", "ational", "fulness", "ousness", "iveness", "ization", "isation",
    "tional", "ations", "ments", "ation", "ness", "ment", "ence", "ance", "ible",
    "able", "ally", "ious", "eous", "ings", "ions", "ity", "ful", "ous", "ive",
    "ize", "ise", "ion", "ing", "ies",
)
# Pass 2 endings, tried in order, only on words longer than 4 characters.
_SUFFIXES_PASS2 = ("ed", "er", "ly", "al", "es")


def stem(word: str) -> str:
    """Reduce ``word`` with the reference's two-pass suffix stripper."""
    if len(word) <= 3:
        return word
    for suffix in _SUFFIXES_PASS1:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    if len(word) > 4:
        for suffix in _SUFFIXES_PASS2:
            if word.endswith(suffix):
                return word[: -len(suffix)]
        if word.endswith("s") and not word.endswith(("ss", "us", "is")):
            return word[:-1]
    return word


# word -> its token ("" when dropped). Vocabularies are small next to the text they
# come from, so this makes rebuilding a large brain's statistics several times faster.
_TOKEN_MEMO: dict[str, str] = {}
_TOKEN_MEMO_LIMIT = 200_000


def _token_of(word: str) -> str:
    token = "" if len(word) < 2 or word in STOPWORDS else stem(word)
    if len(_TOKEN_MEMO) >= _TOKEN_MEMO_LIMIT:
        _TOKEN_MEMO.clear()
    _TOKEN_MEMO[word] = token
    return token


def tokenize(text: str) -> list[str]:
    """Lower-case, clean, split, drop short words and stopwords, then stem."""
    memo = _TOKEN_MEMO
    tokens = []
    for word in _WS_RUN.split(_NOT_TOKEN_CHAR.sub(" ", text.lower())):
        token = memo.get(word)
        if token is None:
            token = _token_of(word)
        if token:
            tokens.append(token)
    return tokens


# The full-width forms of ASCII (U+FF01-FF5E) and the ideographic space, as a Chinese or Japanese
# keyboard types them in full-width mode (ＲＥＤＩＳ, ３時間, Ｑ＆Ａ): the same words.
_FULL_WIDTH_TO_ASCII = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def ascii_width(text: str) -> str:
    """``text`` with full-width ASCII letters, digits and signs (and the ideographic space) as ASCII."""
    return text.translate(_FULL_WIDTH_TO_ASCII)


def js_trim(text: str) -> str:
    """``String.prototype.trim``: strip JavaScript whitespace and line terminators."""
    return text.strip(JS_WHITESPACE)


def memory_body(file_text: str) -> str:
    """The searchable body of a memory file: the text after the second ``---``.

    The count starts at the first ``---`` anywhere in the file (not only at line
    starts), as the reference does. Fewer than two markers give an empty body.
    """
    first = file_text.find("---")
    if first < 0:
        return ""
    second = file_text.find("---", first + 3)
    if second < 0:
        return ""
    return js_trim(file_text[second + 3 :])


def document_text(title: str | None, tags: list[str] | str | None, body: str | None) -> str:
    """A memory's indexed text: title three times, tags twice, then the body."""
    if isinstance(tags, list):
        tag_text = " ".join(str(tag) for tag in tags)
    else:
        tag_text = tags or ""
    parts = [title or "", title or "", title or "", tag_text, tag_text, body or ""]
    return " ".join(part for part in parts if part)


def _is_array_index(key: str) -> bool:
    return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0") and int(key) < 2**32 - 1


def js_key_order(mapping: dict[str, int]) -> dict[str, int]:
    """Re-order keys the way a JavaScript object holds them.

    Integer-like keys ("30", "1000", but not "07") come first in numeric order,
    then the others in insertion order; the reference's JSON shows this order.
    """
    numeric = sorted((key for key in mapping if _is_array_index(key)), key=int)
    if not numeric:
        return mapping
    ordered = {key: mapping[key] for key in numeric}
    for key, value in mapping.items():
        if key not in ordered:
            ordered[key] = value
    return ordered


def term_counts(text: str) -> tuple[dict[str, int], int]:
    """Term frequencies and the token count of ``text``.

    Keys are in JavaScript object order (see `js_key_order`) so a document
    written to ``search-index.json`` reads exactly like the reference's.
    """
    counts: dict[str, int] = {}
    tokens = tokenize(text)
    for token in tokens:
        counts[token] = counts.get(token, 0) + 1
    return js_key_order(counts), len(tokens)


_SPACES = re.compile(r"\s+")


def normalised_content(text: str) -> str:
    """Content as compared for exact duplicates: NFKC, case-folded, whitespace collapsed."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
