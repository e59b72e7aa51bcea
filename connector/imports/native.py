"""This app's own JSON export (``brain-store/memories`` version 1, docs/webapp.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.textsafety import has_lone_surrogate
from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import MemoryInput
from connector.i18n import Text
from connector.imports.errors import ImportRefused
from connector.imports.imported import Imported

FORMAT = "brain-store"
SCHEMA = "brain-store/memories"
VERSION = 1


def is_native(document: Any) -> bool:
    """Whether a parsed JSON document says it is our export (any version)."""
    return isinstance(document, Mapping) and document.get("format") == SCHEMA


def read(document: Any) -> Imported:
    """The memories of our export, each as it was written (the memorize fields at its top level)."""
    if not is_native(document) or document.get("version") != VERSION:
        raise ImportRefused([Text("The file is not a '%(format)s' version %(version)s export.",
                                  format=SCHEMA, version=VERSION)])
    items = document.get("memories")
    if not isinstance(items, list):
        raise ImportRefused([Text("The file has no 'memories' list.")])
    imported = Imported(FORMAT)
    problems: list[str] = []
    for position, item in enumerate(items, start=1):
        if not isinstance(item, Mapping):
            problems.append(Text("memory %(position)s: not an object", position=position))
            continue
        wrong = [name for name in ("title", "content") if item.get(name) is not None and not isinstance(item[name], str)]
        if wrong:
            problems.append(Text("memory %(position)s: '%(field)s' must be text", position=position, field=wrong[0]))
            continue
        try:
            memory = MemoryInput.from_mapping(item)
        except BrainError as exc:
            label = item.get("title") or item.get("id") or "?"
            problems.append(Text("memory %(position)s (%(title)s): %(reason)s", position=position, reason=str(exc),
                                 # A label holding a lone surrogate cannot be shown (or sent) either.
                                 title="?" if isinstance(label, str) and has_lone_surrogate(label) else label))
            continue
        imported.add(memory, item["id"] if isinstance(item.get("id"), str) else None)
    if problems:
        raise ImportRefused(problems)
    return imported
