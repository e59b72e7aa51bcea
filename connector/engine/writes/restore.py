"""Restore: bring an archived (forgotten or rejected) memory back, under the same id.

The inverse of `archive_memory` (ops.py) as far as the brain still knows it: the
file moves from ``_archived/`` back to its old path (a free name when that is
taken), the index entry is rebuilt from the file's front matter with the archive
record's fields as fallback, and the memory is searchable again. What forgetting
dropped for good stays dropped: associations and the pin (the file loses it too). An
edit that is restored supersedes its predecessor again (unless something newer did
meanwhile); an old version comes back superseded by its successor while that one is live.
Directory ``_meta.json`` counts are left alone, as forgetting leaves them.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, ClassVar

from connector.engine.format.brain import ARCHIVE_INDEX, Brain
from connector.engine.format.frontmatter import frontmatter_text
from connector.engine.format.rules import token_estimate
from connector.engine.format.text import memory_body
from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import _free_file_path, apply_supersession
from connector.engine.writes.ops import IdOperation, register_kind
from connector.engine.writes.txn import WriteTxn

# Front-matter keys copied back into the index entry, in the entry's key order.
_ENTRY_KEYS = (
    "type", "cognitive_type", "created", "last_accessed", "access_count", "strength", "decay_rate",
    "origin", "salience", "confidence", "tags", "related", "encoding_context",
)
PIN_FIELDS = ("pinned", "pin_scope", "pin_priority")
_OPTIONAL_KEYS = ("stable", "quarantined", "quarantine_reasons", "quarantine_flagged", "supersedes",
                  "valid_from", "valid_until")


def frontmatter_values(text: str) -> dict[str, Any]:
    """The top-level ``key: value`` pairs of a memory file's front matter.

    Values are read as JSON, which every value this project writes is (see
    `yaml_scalar`); a plain word (``type: fact``) is kept as text; one level of
    indented ``key: value`` lines under an empty key (``encoding_context``) becomes
    a mapping. Values in other YAML spellings are left out: the caller falls back
    to what else it knows.
    """
    block = frontmatter_text(text)
    values: dict[str, Any] = {}
    if block is None:
        return values
    nested: dict[str, Any] | None = None  # the mapping an indented line belongs to (encoding_context)
    for line in block.split("\n"):
        if not line or line.lstrip().startswith("#") or ":" not in line:
            continue
        indented = line[0] in " \t"
        key, _, raw = line.strip().partition(":")
        raw = raw.strip()
        if indented:
            if nested is not None and raw:
                value = _scalar(raw)
                if value is not None:
                    nested[key] = value
            continue
        nested = None
        if not raw:
            nested = values[key] = {}
            continue
        value = _scalar(raw)
        if value is not None:
            values[key] = value
    return values


def _scalar(raw: str) -> Any:
    """A front-matter value written as JSON, or a plain word; None for anything else."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw if raw.replace("-", "").replace("_", "").isalnum() else None


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _successor(txn: WriteTxn, fields: dict[str, Any], entry: dict[str, Any]) -> tuple[str, ...]:
    """An old version (its file names a ``superseded_by``) comes back as an old version while
    its successor is live, so a restore never makes two versions current; with the successor
    gone it is current again, as forgetting the successor would have made it (the keys its
    file must lose are returned)."""
    newer = fields.get("superseded_by")
    if not isinstance(newer, str) or not newer:
        return ()
    if txn.entry(newer) is not None:
        entry["superseded_by"] = newer
        if fields.get("valid_until_auto") is True:
            entry["valid_until_auto"] = True
        return ()
    if fields.get("valid_until_auto") is True:
        entry.pop("valid_until", None)
        return ("superseded_by", "valid_until", "valid_until_auto")
    return ("superseded_by",)


class Restore(IdOperation):
    """Move an archived memory back into the brain (same id)."""

    kind: ClassVar[str] = "restore"

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        txn = WriteTxn(brain, now)
        if not isinstance(self.id, str) or not self.id:
            raise BrainError("a memory id is required")
        if txn.read("index.json") is not None and txn.entry(self.id) is not None:
            # Already live (e.g. a replay after a lost acknowledgement): nothing to do.
            return {"id": self.id, "restored": True, "already_present": True}
        archive = txn.archive_index()
        record = archive["memories"].get(self.id)
        if not isinstance(record, dict):
            raise BrainError(f"{self.id} is not in the archive")
        archived_path = record.get("archived_path")
        data = txn.read(archived_path) if isinstance(archived_path, str) and archived_path else None
        if data is None:
            raise BrainError(f"the archived file of {self.id} is missing; it cannot be restored")
        old_path = record.get("path")
        if not isinstance(old_path, str) or not old_path.endswith(".md") or old_path.startswith("_archived/"):
            raise BrainError(f"{self.id} has no usable original path; it cannot be restored")
        text = data.decode("utf-8", errors="replace")
        fields = frontmatter_values(text)
        body = memory_body(text)
        path = _free_file_path(txn, old_path)

        entry: dict[str, Any] = {"title": record.get("title"), "path": path}
        for key in _ENTRY_KEYS:
            value = fields.get(key, record.get(key))
            if value is not None:
                entry[key] = value
        entry.setdefault("tags", [])
        entry["token_estimate"] = token_estimate(body)
        for key in _OPTIONAL_KEYS:
            if fields.get(key) is not None:
                entry[key] = fields[key]
        txn.index(create=True)
        stale = _successor(txn, fields, entry)
        txn.write(path, data)
        txn.remove(archived_path)
        txn.add_entry(self.id, entry)
        # Forgetting dropped the pin (pinned.json, the entry): the file must not say otherwise.
        txn.edit_memory_file(self.id, remove=PIN_FIELDS + stale)
        tags = [tag for tag in entry["tags"] if isinstance(tag, str)] if isinstance(entry["tags"], list) else []
        txn.index_document(self.id, str(entry.get("title") or ""), tags, body)
        # What it superseded (an edit) is superseded again, unless something newer took over meanwhile;
        # a memory still waiting for verification supersedes nothing yet, as when it was written.
        targets = [target for target in _strings(entry.get("supersedes"))
                   if (other := txn.entry(target)) is not None and not other.get("superseded_by")]
        superseded = []
        if targets and not entry.get("quarantined"):
            boundary = entry.get("valid_from") or entry.get("created") or txn.now_iso
            superseded = apply_supersession(txn, self.id, targets, boundary)
        elif targets:
            txn.update_entry(self.id, {"supersede_pending": targets})
        del archive["memories"][self.id]
        archive["archived_count"] = len(archive["memories"])
        txn.mark(ARCHIVE_INDEX)
        txn.commit()
        result: dict[str, Any] = {"id": self.id, "title": entry.get("title"), "path": path, "restored": True}
        if superseded:
            result["superseded"] = superseded
        return result


register_kind(Restore.kind, lambda value: Restore(value["id"]))
