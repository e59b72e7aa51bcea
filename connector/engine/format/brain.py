"""The in-memory brain: a map of relative POSIX paths to file bytes.

Every engine module works on this one type. Reading and writing archives or
directories lives in `archive.py`; the brain itself knows nothing about I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# The brain's fixed files (brain-format.md).
INDEX = "index.json"
ASSOCIATIONS = "associations.json"
SEARCH_INDEX = "search-index.json"
PINNED = "pinned.json"
ARCHIVE_INDEX = "_archived/index.json"
REVIEW_QUEUE = "review-queue.json"
CONFIG = "config.json"
# What to do about an index.json that is no brain index (recall and writes refuse such a brain).
DAMAGED_INDEX_ADVICE = ("An earlier version of the brain can be put back on the web app's History page "
                        "(the store keeps snapshots).")


def index_damage(index: Any) -> str | None:
    """Why a parsed index.json is no brain index (recall and writes refuse such a brain), else None.
    A missing or null "memories" map is no memories yet: writes fill it in."""
    if not isinstance(index, dict):
        return "index.json is not a valid brain index (damaged)"
    memories = index.get("memories")
    if memories is not None and not isinstance(memories, dict):
        return "index.json has no usable 'memories' map (damaged)"
    return None


def dump_json(value: Any) -> bytes:
    """Serialise JSON the way the `brain` command line does.

    Two-space indentation, key order kept, non-ASCII as UTF-8, trailing newline,
    and integral floats written as integers (JavaScript prints ``1``, not ``1.0``).
    """
    return (json.dumps(_js_numbers(value), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _js_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _js_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_js_numbers(item) for item in value]
    return value


@dataclass
class Brain:
    """A brain's files, keyed by relative POSIX path (``"index.json"``, ``"a/b.md"``).

    Only regular files are stored; directories are implied by the paths.
    ``journal``, when a list, collects what each write committed (a
    `connector.engine.format.change.BrainChange` per write) for indexes to follow; it is
    None unless a caller asks for it, and never copied. ``pack_memo`` is copied:
    it is never changed, only replaced, and checks each file by identity.
    """

    files: dict[str, bytes] = field(default_factory=dict)
    journal: list[Any] | None = field(default=None, compare=False, repr=False)
    # What the last pack of these files computed (`connector.engine.format.archive`), for the
    # next pack to reuse for files whose bytes are the very same objects. Opaque here.
    pack_memo: Any = field(default=None, compare=False, repr=False)

    def __contains__(self, path: str) -> bool:
        return path in self.files

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def read(self, path: str) -> bytes | None:
        """The bytes at ``path``, or None."""
        return self.files.get(path)

    def read_text(self, path: str) -> str | None:
        """The file at ``path`` decoded as UTF-8 (invalid bytes replaced), or None."""
        data = self.files.get(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_json(self, path: str) -> Any | None:
        """The parsed JSON at ``path``; None when missing or not valid JSON."""
        data = self.files.get(path)
        if data is None:
            return None
        try:
            return json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the parser's depth: not usable
            return None

    def write(self, path: str, data: bytes) -> None:
        """Store ``data`` at ``path`` (replacing any file there)."""
        self.files[path] = data

    def write_json(self, path: str, value: Any) -> None:
        """Store ``value`` as JSON in the command line's layout."""
        self.files[path] = dump_json(value)

    def remove(self, path: str) -> None:
        """Delete ``path`` if present."""
        self.files.pop(path, None)

    def copy(self) -> Brain:
        """An independent copy (file bytes are immutable, so the map is enough)."""
        return Brain(dict(self.files), pack_memo=self.pack_memo)
