"""Memory content (Markdown written by agents and devices) to HTML that is safe to show.

Two well-kept libraries, two layers: markdown-it-py renders CommonMark with raw
HTML disabled (a ``<script>`` in the text stays text), then nh3 (the Ammonia
sanitiser) keeps only harmless tags and http(s)/mailto links. Images are never
loaded: remote ones would tell a third party who reads the memory and when, so
they become a plain link to their address instead.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

ALLOWED_TAGS = frozenset({
    "a", "p", "br", "hr", "em", "strong", "del", "s", "code", "pre", "blockquote", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
})
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"align"}, "td": {"align"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})


def _image_as_link(_renderer: Any, tokens: Any, idx: int, _options: Any, _env: Any) -> str:
    """An image becomes a link naming it (never an <img> the browser would fetch)."""
    token = tokens[idx]
    src = token.attrGet("src") or ""
    alt = token.content or "image"
    return f'<a href="{escapeHtml(src)}">[image: {escapeHtml(alt)}]</a>'


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    parser = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    parser.enable("table").enable("strikethrough")
    parser.add_render_rule("image", _image_as_link)
    return parser


# Texts up to this long are remembered by `render_markdown_in` (~1 ms of CPU each to render;
# at most _MEMO_ENTRIES x _MEMO_CHARS characters of source kept, a few MB).
_MEMO_CHARS = 8192
_MEMO_ENTRIES = 1024


def render_markdown_in(scope: str, text: str) -> str:
    """`render_markdown`, remembered per ``scope`` and text: pages that show the same memories
    again (the Review page's 20 pairs, 40 texts) do not render them again. ``scope`` must
    be the brain the text comes from, so that a text rendered for one brain is never found
    by a request about another (a hit is faster than a miss: one user must not be able to
    time whether another user's brain holds a text)."""
    if len(text) > _MEMO_CHARS:
        return render_markdown(text)
    return _remembered(scope, text)


@lru_cache(maxsize=_MEMO_ENTRIES)
def _remembered(scope: str, text: str) -> str:
    return render_markdown(text)


def render_markdown(text: str) -> str:
    """Sanitised HTML for ``text`` (no raw HTML, no script URLs, no images, no attributes but links)."""
    html = _parser().render(text)
    return nh3.clean(
        html,
        tags=set(ALLOWED_TAGS),
        attributes={tag: set(names) for tag, names in ALLOWED_ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )
