"""RFC 9110 conditional request headers, as the store uses them (pure functions).

Entity tags are the archive checksum in double quotes. ``If-Match`` uses the strong
comparison (a weak tag ``W/"..."`` never matches); ``If-None-Match`` uses the weak
comparison. ``*`` means "any current representation".
"""

from __future__ import annotations

from dataclasses import dataclass

ANY = "*"


@dataclass(frozen=True)
class TagList:
    """A parsed ``If-Match``/``If-None-Match`` value: ``any`` for ``*``, else (weak, opaque) tags."""

    any: bool
    tags: tuple[tuple[bool, str], ...]

    def strong_match(self, current: str | None) -> bool:
        """If-Match semantics: true when ``current`` exists and is listed as a strong tag."""
        if current is None:
            return False
        if self.any:
            return True
        return any(not weak and tag == current for weak, tag in self.tags)

    def weak_match(self, current: str | None) -> bool:
        """If-None-Match semantics: true when ``current`` exists and is listed (weak or strong)."""
        if current is None:
            return False
        if self.any:
            return True
        return any(tag == current for _, tag in self.tags)


def parse_tag_list(value: str | None) -> TagList | None:
    """Parse a header value; None when absent. Unparseable members are kept as never-matching."""
    if value is None:
        return None
    text = value.strip()
    if text == ANY:
        return TagList(any=True, tags=())
    tags: list[tuple[bool, str]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t,":
            i += 1
        if i >= n:
            break
        weak = False
        if text.startswith("W/", i):
            weak = True
            i += 2
        if i < n and text[i] == '"':
            end = text.find('"', i + 1)
            if end < 0:
                tags.append((True, "\x00invalid"))
                break
            tags.append((weak, text[i + 1 : end]))
            i = end + 1
        else:
            # not a quoted tag: skip to the next comma; it can never match
            end = text.find(",", i)
            tags.append((True, "\x00invalid"))
            i = n if end < 0 else end + 1
    return TagList(any=False, tags=tuple(tags))


@dataclass(frozen=True)
class Preconditions:
    """The conditional headers of a write request."""

    if_match: TagList | None = None
    if_none_match: TagList | None = None

    @classmethod
    def from_headers(cls, if_match: str | None, if_none_match: str | None) -> Preconditions:
        """Build from raw header values."""
        return cls(parse_tag_list(if_match), parse_tag_list(if_none_match))

    def holds(self, current: str | None) -> bool:
        """True when a write may replace the archive whose checksum is ``current`` (None: none yet)."""
        if self.if_match is not None and not self.if_match.strong_match(current):
            return False
        if self.if_none_match is not None and self.if_none_match.weak_match(current):
            return False
        return True


def etag(checksum: str) -> str:
    """The entity tag for an archive checksum."""
    return f'"{checksum}"'
