"""A mem0 / OpenMemory export: what mem0's ``get_all`` returns, saved as JSON.

Both shapes mem0 documents are read: ``{"results": [...]}`` (v1.1 and later, and the
platform's export) and a plain list. Each item has ``memory`` (the text) and may have
``id``, ``hash``, ``metadata``, ``categories``, ``created_at``, ``updated_at``,
``user_id``, ``agent_id``, ``run_id``, ``app_id``. Here:

- ``memory`` is the content; the title is its first line (as brain_memorize makes one);
- ``user_id``, ``agent_id`` and ``run_id`` become tags ``user:ID``, ``agent:ID``, ``run:ID``;
  ``categories`` and ``metadata`` values that are short text (``key:value``) become tags too;
- ``agent_id`` (else ``app_id``) becomes the memory's project;
- ``updated_at`` (else ``created_at``) becomes ``valid_from``, and both times go into ``source``
  with the mem0 id, so where and when each memory came from stays with it;
- origin ``agent-inferred`` (mem0's model wrote them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import MemoryInput, connector_title
from connector.engine.format.rules import iso_ms, parse_iso
from connector.i18n import Text
from connector.imports.errors import ImportRefused
from connector.imports.imported import Imported

FORMAT = "mem0"
MAX_TAG_CHARS = 80


def items_of(document: Any) -> list[Any] | None:
    """The list of memories of a mem0 export, or None when the document is not one."""
    items = document.get("results") if isinstance(document, Mapping) else document
    if not isinstance(items, list) or not items:
        return None
    if not all(isinstance(item, Mapping) and "memory" in item for item in items[:20]):
        return None
    return items


def read(document: Any, name: str) -> Imported:
    """The memories of a parsed mem0 export (``name``: the file's name, for ``source``)."""
    items = items_of(document)
    if items is None:
        raise ImportRefused([Text("%(name)s is not a mem0 export: no list of objects with a 'memory' field.",
                                  name=name)])
    imported = Imported(FORMAT)
    problems: list[str] = []
    for position, item in enumerate(items, start=1):
        try:
            memory, original = _memory(item, name)
        except BrainError as exc:
            problems.append(Text("memory %(position)s: %(reason)s", position=position, reason=str(exc)))
            continue
        imported.add(memory, original)
    if problems:
        raise ImportRefused(problems)
    return imported


def _text(item: Mapping[str, Any], key: str) -> str | None:
    value = item.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise BrainError(f"'{key}' must be text")
    return str(value).strip() or None


def _time(item: Mapping[str, Any], key: str) -> str | None:
    value = _text(item, key)
    if value is None:
        return None
    parsed = parse_iso(value)
    if parsed is None:
        raise BrainError(f"'{key}' is not an ISO 8601 time: {value[:40]!r}")
    return iso_ms(parsed)


def _memory(item: Any, name: str) -> tuple[MemoryInput, str | None]:
    if not isinstance(item, Mapping):
        raise BrainError("not an object")
    content = item.get("memory")
    if not isinstance(content, str) or not content.strip():
        raise BrainError("'memory' must be non-empty text")
    original = _text(item, "id")
    created, updated = _time(item, "created_at"), _time(item, "updated_at")
    tags: list[str] = []
    for key, prefix in (("user_id", "user"), ("agent_id", "agent"), ("run_id", "run")):
        value = _text(item, key)
        if value is not None:
            tags.append(f"{prefix}:{value}")
    categories = item.get("categories")
    if isinstance(categories, list):
        tags += [str(category).strip() for category in categories if isinstance(category, str) and category.strip()]
    metadata = item.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise BrainError("'metadata' must be an object")
    for key, value in (metadata or {}).items():
        if isinstance(value, str | int | float) and not isinstance(value, bool) and str(value).strip():
            tags.append(f"{key}:{value}".strip())
    tags = list(dict.fromkeys(tag for tag in tags if len(tag) <= MAX_TAG_CHARS))
    project = _text(item, "agent_id") or _text(item, "app_id") or ""
    where = [f"imported from {name} (mem0"]
    if original:
        where.append(f" id {original}")
    if created:
        where.append(f", created {created}")
    if updated and updated != created:
        where.append(f", updated {updated}")
    memory = MemoryInput(
        title=connector_title(content.strip(), None),
        type="learning",
        content=content.strip(),
        path="mem0/",
        tags=tuple(tags),
        source="".join(where) + ")",
        encoding_context={"project": project, "topics": tags, "task_type": "importing", "agent": "mem0"},
        origin="agent-inferred",
        valid_from=updated or created,
    )
    return memory, original

