"""Export and import of memories (docs/webapp.md, "Export and import").

Export: every live memory as JSON in our schema (``brain-store/memories`` version 1:
the memorize fields, the content and every front-matter field), or as a zip of the
Markdown files at their paths. Import: JSON in that schema, checked item by item,
then applied as one ``Memorize`` operation (the same write path as
``brain_memorize``: fresh ids, quarantine for low-trust origins) first to a copy of
the brain for the dry-run summary, then for real.
"""

from __future__ import annotations

import io
import json
import secrets
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from connector.engine.format.brain import Brain
from connector.engine.format.rules import iso_ms
from connector.engine.format.text import memory_body
from connector.engine.writes.credentials import credentials_in_memories
from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import MemoryInput
from connector.engine.writes.ops import Memorize
from connector.engine.writes.restore import PIN_FIELDS, frontmatter_values
from connector.i18n import Text

FORMAT = "brain-store/memories"
VERSION = 1
MAX_IMPORT_BYTES = 8 * 1024 * 1024
MAX_IMPORT_MEMORIES = 5000
# The memorize fields an exported memory carries at its top level (MemoryInput.from_mapping reads them).
INPUT_FIELDS = ("title", "type", "cognitive_type", "path", "tags", "related", "salience", "confidence",
                "source", "encoding_context", "pinned", "pin_scope", "pin_priority", "stable", "origin",
                "valid_from", "valid_until", "supersedes")


def _entries(brain: Brain) -> dict[str, Any]:
    index = brain.read_json("index.json")
    memories = index.get("memories") if isinstance(index, dict) else None
    return {key: value for key, value in memories.items() if isinstance(value, dict)} if isinstance(memories, dict) else {}


def export_memories(brain: Brain, *, brain_id: str | None, brain_name: str | None, now: datetime) -> dict[str, Any]:
    """Every live memory in our JSON schema, in index order."""
    memories = []
    for memory_id, entry in _entries(brain).items():
        path = entry.get("path")
        text = brain.read_text(path) if isinstance(path, str) else None
        front = frontmatter_values(text or "")
        if entry.get("pinned") is not True:
            # The index entry says whether it is pinned (as session start reads it), whatever an
            # older connector's restore left in the file.
            front = {key: value for key, value in front.items() if key not in PIN_FIELDS}
        fields = {**front, **entry}
        item: dict[str, Any] = {"id": memory_id}
        for key in INPUT_FIELDS:
            if fields.get(key) is not None:
                item[key] = fields[key]
        item["content"] = memory_body(text or "")
        # Everything else the file and the index know (created, strength, quarantine, ...), as read.
        item["frontmatter"] = {key: value for key, value in fields.items() if key not in INPUT_FIELDS}
        memories.append(item)
    return {"format": FORMAT, "version": VERSION, "exported_at": iso_ms(now),
            "brain": {"id": brain_id, "name": brain_name}, "memories": memories}


def export_zip(brain: Brain) -> bytes:
    """The live memories' Markdown files, at their paths in the brain."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for entry in _entries(brain).values():
            path = entry.get("path")
            data = brain.read(path) if isinstance(path, str) else None
            if data is not None:
                archive.writestr(path, data)
    return buffer.getvalue()


@dataclass
class ImportPlan:
    """A checked import: what would be written, what was refused, and why."""

    inputs: list[MemoryInput] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: int = 0

    def operation(self) -> Memorize:
        """The one write (a fresh copy each time: apply fills in ids and time)."""
        return Memorize(list(self.inputs), ids=list(self.ids))


@dataclass(frozen=True)
class ImportSummary:
    """The dry run's result: counts the person confirms before anything is written."""

    new: int
    pending_verification: int
    skipped: int
    errors: list[str]


def _fresh_id(now: datetime, taken: set[str]) -> str:
    while True:
        candidate = f"mem_{now.astimezone(UTC).strftime('%Y%m%d')}_{secrets.token_hex(3)}"
        if candidate not in taken:
            taken.add(candidate)
            return candidate


def plan_import(payload: bytes, brain: Brain | None, now: datetime) -> ImportPlan:
    """Parse and check an upload; memories already in the brain (same title and content) are skipped.

    Each memory gets a new id; ``related`` and ``supersedes`` naming other memories of
    the same file are rewritten to their new ids, so links survive the round trip.
    """
    plan = ImportPlan()
    if len(payload) > MAX_IMPORT_BYTES:
        plan.errors.append(Text("The file is larger than %(mb)s MB.", mb=MAX_IMPORT_BYTES // (1024 * 1024)))
        return plan
    try:
        document = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        plan.errors.append(Text("The file is not JSON."))
        return plan
    if not isinstance(document, Mapping) or document.get("format") != FORMAT or document.get("version") != VERSION:
        plan.errors.append(Text("The file is not a '%(format)s' version %(version)s export.", format=FORMAT, version=VERSION))
        return plan
    items = document.get("memories")
    if not isinstance(items, list):
        plan.errors.append(Text("The file has no 'memories' list."))
        return plan
    if len(items) > MAX_IMPORT_MEMORIES:
        plan.errors.append(Text("The file has more than %(count)s memories; split it.", count=MAX_IMPORT_MEMORIES))
        return plan
    present = set()
    if brain is not None:
        for entry in _entries(brain).values():
            path = entry.get("path")
            text = brain.read_text(path) if isinstance(path, str) else None
            present.add((entry.get("title"), memory_body(text or "")))
    taken: set[str] = set(_entries(brain)) if brain is not None else set()
    renamed: dict[str, str] = {}
    accepted: list[tuple[dict[str, Any], str]] = []
    for position, item in enumerate(items, start=1):
        if not isinstance(item, Mapping):
            plan.errors.append(Text("memory %(position)s: not an object", position=position))
            continue
        wrong = [name for name in ("title", "content") if item.get(name) is not None and not isinstance(item[name], str)]
        if wrong:
            plan.errors.append(Text("memory %(position)s: '%(field)s' must be text", position=position, field=wrong[0]))
            continue
        key = (item.get("title"), item.get("content"))
        if key in present:
            plan.skipped += 1
            continue
        new_id = _fresh_id(now, taken)
        if isinstance(item.get("id"), str):
            renamed[item["id"]] = new_id
        accepted.append((dict(item), new_id))
    for item, new_id in accepted:
        for link in ("related", "supersedes"):
            if isinstance(item.get(link), list):
                item[link] = [renamed.get(other, other) if isinstance(other, str) else other for other in item[link]]
        try:
            memory = MemoryInput.from_mapping(item)
        except BrainError as exc:
            plan.errors.append(f"{item.get('title') or item.get('id') or 'a memory'}: {exc}")
            continue
        kinds = credentials_in_memories([memory])  # the same check as every other write
        if kinds:
            plan.errors.append(Text("%(title)s: looks like it contains a credential (%(kinds)s); not imported",
                                    title=memory.title, kinds=", ".join(kinds)))
            continue
        plan.inputs.append(memory)
        plan.ids.append(new_id)
    return plan


def dry_run(plan: ImportPlan, brain: Brain | None, now: datetime) -> ImportSummary:
    """Apply the import to a copy of the brain: exactly what the real write would do, nothing kept."""
    if not plan.inputs:
        return ImportSummary(0, 0, plan.skipped, list(plan.errors))
    scratch = brain.copy() if brain is not None else Brain()
    try:
        result = plan.operation().apply(scratch, now)
    except BrainError as exc:
        return ImportSummary(0, 0, plan.skipped, [*plan.errors, str(exc)])
    stored = result["stored"]
    pending = sum(1 for item in stored if item.get("quarantine_pending"))
    return ImportSummary(len(stored), pending, plan.skipped, list(plan.errors))
