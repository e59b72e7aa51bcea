"""Which format a file is in, and its memories: the one entry point of the web app and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from connector.i18n import Text
from connector.imports import brainexport, conversations, markdown, mem0, native
from connector.imports.errors import ImportRefused
from connector.imports.files import Upload, parse_json
from connector.imports.imported import Imported
from connector.thinking.source import ModelSource

# The names `--from` and the web app's format menu take ("auto" or none: detect).
FORMATS = (native.FORMAT, markdown.FORMAT, brainexport.FORMAT, mem0.FORMAT, conversations.CHATGPT, conversations.CLAUDE)


def _json_entry(upload: Upload) -> tuple[str, bytes] | None:
    """The JSON file an upload is about: the one file given, or a conversations.json in an export's zip."""
    if not upload.archive:
        name, data = next(iter(upload.entries.items()))
        return (name, data) if not markdown.is_markdown_name(name) else None
    inside = [name for name in upload.entries if PurePosixPath(name).name == conversations.FILE_NAME]
    return (inside[0], upload.entries[inside[0]]) if len(inside) == 1 else None


def detect(upload: Upload) -> tuple[str, Any]:
    """(format, parsed JSON document or None) of an upload; refuses one no reader knows."""
    entry = _json_entry(upload)
    if entry is None:
        return markdown.FORMAT, None
    name, data = entry
    brainexport.refuse_if_encrypted(name, data)
    looks_json = name.lower().endswith((".json", brainexport.SUFFIX)) or data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith((b"{", b"["))
    if not looks_json and not upload.archive:
        return markdown.FORMAT, None  # a single note without the .md suffix
    document = parse_json(data, name)
    if native.is_native(document):
        return native.FORMAT, document
    if brainexport.is_brain_export(document):
        return brainexport.FORMAT, document
    kind = conversations.kind_of(document)
    if kind is not None:
        return kind, document
    if mem0.items_of(document) is not None:
        return mem0.FORMAT, document
    raise ImportRefused([Text("%(name)s is in no format this app imports (its JSON export, Markdown notes, "
                              "a .brain-export, a mem0 export, a ChatGPT or Claude conversations.json).", name=name)])


@dataclass(frozen=True)
class Conversations:
    """Conversations read from an export, waiting for the model's extraction."""

    kind: str
    name: str
    items: list[conversations.Conversation]


def read_upload(upload: Upload, chosen: str | None) -> Imported | Conversations:
    """Everything of an import that needs no model (CPU only: run it off an event loop).

    ``chosen`` None or "auto" detects the format. Raises `ImportRefused` with the reasons
    for a file that cannot be imported."""
    detected, document = detect(upload) if chosen in (None, "auto") else (chosen, None)
    if detected not in FORMATS:
        raise ImportRefused([Text("Unknown format %(format)s: choose one of %(formats)s.", format=detected,
                                  formats=", ".join(FORMATS))])
    if detected == markdown.FORMAT:
        return markdown.read(upload)
    if document is None:
        entry = _json_entry(upload)
        if entry is None:
            raise ImportRefused([Text("%(name)s has no JSON file to read as %(format)s.", name=upload.name,
                                      format=detected)])
        brainexport.refuse_if_encrypted(*entry)
        document = parse_json(entry[1], entry[0])
    if detected == native.FORMAT:
        return native.read(document)
    if detected == brainexport.FORMAT:
        return brainexport.read(document, upload.name)
    if detected == mem0.FORMAT:
        return mem0.read(document, upload.name)
    # A bad file says so, model or not.
    return Conversations(detected, upload.name, conversations.read(document, detected, upload.name))


async def extracted(found: Imported | Conversations, model: ModelSource | None, now: datetime) -> Imported:
    """The memories of what `read_upload` found: conversations through ``model`` (refused with
    what is needed when None), anything else as it is."""
    if isinstance(found, Imported):
        return found
    return await conversations.extract(found.items, found.kind, found.name, model, now)


async def load(upload: Upload, chosen: str | None, model: ModelSource | None, now: datetime) -> Imported:
    """`read_upload` then `extracted`: the memories of an upload in format ``chosen``."""
    return await extracted(read_upload(upload, chosen), model, now)
