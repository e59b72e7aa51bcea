"""Titles as people read them: Markdown marks taken out (``**blue flowerpot**`` reads
"blue flowerpot"), parsed by markdown-it-py (the app's Markdown library), not by patterns.

Only inline Markdown and heading marks count: a title is one line, and a line such as
``1. Install`` or ``> quote`` keeps its text as written. Raw HTML stays as text.
"""

from __future__ import annotations

from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

# Characters without which a line holds no Markdown this module takes out (the fast path).
_MARKS = frozenset("*_`[]#<>!~\\&")
_BLOCKS_KEPT_AS_TEXT = ["list", "blockquote", "code", "fence", "hr", "table", "html_block", "reference", "lheading"]


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False}).disable(_BLOCKS_KEPT_AS_TEXT, ignoreInvalid=True)


def _text_of(tokens: list[Token]) -> str:
    parts: list[str] = []
    for token in tokens:
        if token.type in ("text", "code_inline"):
            parts.append(token.content)
        elif token.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif token.children:
            parts.append(_text_of(token.children))  # an image: its alternative text
    return "".join(parts)


@lru_cache(maxsize=4096)
def plain_title(title: str) -> str:
    """``title`` without its Markdown marks (emphasis, code, links, images, heading marks),
    whitespace runs made single; the title itself when nothing is left."""
    if not isinstance(title, str) or not _MARKS.intersection(title):
        return title
    if any(ord(char) < 32 or char in "\u2028\u2029\x85" for char in title):
        # Not one line: left as it is, so that where it is shown its line breaks are shown
        # escaped (a forged "\n2. Fake result" must stay visible as such).
        return title
    text = " ".join(_text_of(token.children or []) for token in _parser().parse(title) if token.type == "inline")
    text = " ".join(text.split())
    return text or title
