"""Export and import of memories (docs/webapp.md, "Export and import").

Export: every live memory as JSON in our schema (``brain-store/memories`` version 1:
the memorize fields, the content and every front-matter field), or as a zip of the
Markdown files at their paths (each with its title added to the front matter, so the
zip imports back to the same memories). Import (connector/imports, docs/import.md) reads
that JSON, Markdown notes, mem0 exports and conversations.
"""

from __future__ import annotations

import io
import json
import re
import unicodedata
import zipfile
from datetime import datetime
from typing import Any
from urllib.parse import quote

from connector.engine.format.brain import Brain
from connector.engine.format.frontmatter import yaml_string
from connector.engine.format.rules import iso_ms
from connector.engine.format.text import memory_body
from connector.engine.writes.memorize import slugify
from connector.engine.writes.restore import PIN_FIELDS, frontmatter_values
from connector.i18n import Text
from connector.imports.errors import ImportRefused
from connector.imports.native import SCHEMA as FORMAT
from connector.imports.native import VERSION

MAX_IMPORT_BYTES = 8 * 1024 * 1024
# A checked import waits for its confirmation as one sealed record, read back only up to 64 MB
# (connector/state/sealed.py): its JSON (CJK text as \u escapes, 6 bytes a character) grows by
# a third when sealed. A larger one was shown as ready and then always "expired" at confirmation.
MAX_HELD_IMPORT_CHARS = 40 * 1024 * 1024
# The memorize fields an exported memory carries at its top level (MemoryInput.from_mapping reads them).
INPUT_FIELDS = ("title", "type", "cognitive_type", "path", "tags", "related", "salience", "confidence",
                "source", "encoding_context", "pinned", "pin_scope", "pin_priority", "stable", "origin",
                "valid_from", "valid_until", "supersedes")
# How much of the brain's name an export's file name keeps.
EXPORT_NAME_CHARS = 40
# What a file name may not hold on some system (separators, quotes, controls, spaces, emoji...):
# anything but letters, digits, "_", "." and "-" becomes "-".
_NOT_FILENAME = re.compile(r"[^\w.-]+")


def check_holdable(operation: dict[str, Any]) -> None:
    """Refuse (`ImportRefused`) a checked import too large to be held until it is confirmed."""
    if len(json.dumps(operation, separators=(",", ":"))) > MAX_HELD_IMPORT_CHARS:
        raise ImportRefused([Text("The memories of this file take more than %(mb)s MB; split it.",
                                  mb=MAX_HELD_IMPORT_CHARS // 2**20)])


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


def export_disposition(brain_name: str | None, stamp: str, extension: str) -> str:
    """The Content-Disposition of an export: ``brain-<name>-<stamp>.<extension>``, so exports of
    several brains tell apart (all were ``brain-<stamp>``).

    ``filename`` is ASCII for every browser: the name slugged as memory files are (a Chinese or
    Japanese name transliterated, ``brain-<stamp>`` when nothing is left). A name with other
    letters also gets ``filename*`` (RFC 6266/5987, UTF-8), which browsers prefer: the name as
    written, only what a file name cannot hold replaced."""
    ascii_name = slugify(brain_name or "", length=EXPORT_NAME_CHARS, fallback="")
    header = f'attachment; filename="{"-".join(filter(None, ["brain", ascii_name, stamp]))}.{extension}"'
    name = _NOT_FILENAME.sub("-", unicodedata.normalize("NFC", brain_name or ""))[:EXPORT_NAME_CHARS].strip("-.")
    if name and not name.isascii():
        header += f"; filename*=UTF-8''{quote(f'brain-{name}-{stamp}.{extension}', safe='')}"
    return header


def export_zip(brain: Brain) -> bytes:
    """The live memories' Markdown files, at their paths in the brain.

    The title lives in the brain's index, not in the file: each exported copy gets a
    ``title:`` line at the top of its front matter, so the zip is a whole export."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for entry in _entries(brain).values():
            path = entry.get("path")
            data = brain.read(path) if isinstance(path, str) else None
            if data is None:
                continue
            title = entry.get("title")
            if isinstance(title, str) and data.startswith(b"---\n") and not data.startswith(b"---\ntitle:"):
                data = b"---\ntitle: " + yaml_string(title).encode("utf-8") + data[3:]
            archive.writestr(path, data)
    return buffer.getvalue()
