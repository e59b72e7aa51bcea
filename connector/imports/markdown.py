"""Markdown notes: a folder or zip of ``.md`` files, with or without YAML front matter.

Obsidian vaults, Basic Memory notes and this app's own Markdown export (the web app's
"zip of Markdown files", whose front matter carries every field a memory has) all read
here. Front matter is parsed with PyYAML (``safe_load``); a note whose front matter is not
YAML refuses the whole import with the note's name, the line and the reason.

- Our own export (front matter with a memory ``id`` and one of our ``type`` values): every
  memorize field comes back as it was (title, type, tags, path, salience, origin, source,
  ...), so export then import gives the same memories under new ids. A brain folder itself
  (the ``brain`` command line's directory) keeps its titles in ``index.json``, not in the
  files: a note without a ``title`` takes the one the folder's index gives its path; its
  ``_archived/`` memories (forgotten) are passed over.
- Any other note: title from the front matter's ``title``, else the first ``# heading``,
  else the file name; tags from ``tags`` (a list or a comma/space-separated string, a
  leading ``#`` dropped); ``type`` when it is one of ours, else ``learning``; the note's
  folder in the vault becomes its folder in the brain; ``source`` names the file and the
  note; origin ``user`` (the person's own notes).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import PurePosixPath
from typing import Any

import yaml

from common.textsafety import is_blank
from connector.engine.format.frontmatter import FrontMatterLoader
from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import LIST_SEPARATORS, MemoryInput, connector_title
from connector.engine.format.rules import MEMORY_TYPES
from connector.i18n import Text
from connector.imports.errors import ImportRefused
from connector.imports.files import Upload, composed
from connector.imports.imported import Imported

FORMAT = "markdown"
SUFFIXES = (".md", ".markdown")
# The memorize fields our own export's front matter carries (the title is added by the export).
OWN_FIELDS = ("title", "type", "cognitive_type", "tags", "related", "salience", "confidence", "source",
              "encoding_context", "pinned", "pin_scope", "pin_priority", "stable", "origin", "valid_from",
              "valid_until", "supersedes")
_OWN_ID = re.compile(r"^mem_[A-Za-z0-9_]+$")
_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)
MAX_FRONT_MATTER_CHARS = 64 * 1024
_FENCE = re.compile(r"\A---[ \t]*\r?\n(.*?)(?:\r?\n)?^---[ \t]*$\r?\n?", re.DOTALL | re.MULTILINE)


def is_markdown_name(name: str) -> bool:
    """Whether an entry's name is a Markdown file."""
    return name.lower().endswith(SUFFIXES)


def read(upload: Upload) -> Imported:
    """Every Markdown note of the upload as a memory; anything else in it is passed over."""
    imported = Imported(FORMAT)
    problems: list[str] = []
    titles = index_titles(upload)
    archives = _archive_folders(upload)
    for name, data in upload.entries.items():
        if upload.archive and not is_markdown_name(name):  # one file given is read whatever its name
            imported.passed_over.append(Text("%(name)s: not a Markdown file", name=name))
            continue
        if name.startswith(archives):  # what the brain forgot is not brought back as live
            imported.passed_over.append(Text("%(name)s: an archived memory", name=name))
            continue
        try:
            note = _note(upload, name, data, titles.get(name))
        except ImportRefused as exc:
            problems += exc.reasons
            continue
        if note is None:
            imported.passed_over.append(Text("%(name)s: no text", name=name))
            continue
        imported.add(*note)
    if problems:
        raise ImportRefused(problems)
    if not imported.memories:
        raise ImportRefused([Text("%(name)s holds no Markdown note with text.", name=upload.name)])
    return imported


def split_front_matter(name: str, text: str) -> tuple[dict[str, Any], str]:
    """(front matter as a mapping, body). No front matter is an empty mapping; front matter
    that is not a YAML mapping refuses the note with its line and the reason."""
    match = _FENCE.match(text)
    if match is None:
        return {}, text
    if len(match.group(1)) > MAX_FRONT_MATTER_CHARS:
        raise ImportRefused([Text("%(name)s, line 2: the front matter is longer than %(count)s characters",
                                  name=name, count=MAX_FRONT_MATTER_CHARS)])
    try:
        values = yaml.load(match.group(1), Loader=FrontMatterLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 1  # +1 for the opening ---, +1 from 0-based
        reason = getattr(exc, "problem", None) or "not YAML"
        raise ImportRefused([Text("%(name)s, line %(line)s: the front matter is not YAML (%(reason)s)",
                                  name=name, line=line, reason=reason)]) from None
    except (ValueError, RecursionError) as exc:
        # PyYAML's constructors raise these past YAMLError, with Python's own words and no
        # line: an integer of over 4,300 digits, collections nested thousands deep.
        raise ImportRefused([_unreadable_value(name, match.group(1), nested=isinstance(exc, RecursionError))]) from None
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise ImportRefused([Text("%(name)s, line 2: the front matter is not a list of 'key: value' lines", name=name)])
    return {str(key): _plain(value) for key, value in values.items()}, text[match.end():]


def _unreadable_value(name: str, raw: str, *, nested: bool) -> Text:
    """Why front matter ``raw`` of note ``name`` cannot be read when PyYAML's constructors gave
    up on a value (too deeply nested when ``nested``, else an integer too long to convert):
    the field and line holding it, found by walking the parser's events (iterative, so it
    reaches where the recursive constructors could not)."""
    field, line = _field_holding(raw, nested)
    if nested:
        return Text("%(name)s, line %(line)s: the front matter's '%(field)s' is nested too deeply",
                    name=name, line=line, field=field)
    return Text("%(name)s, line %(line)s: the front matter's '%(field)s' is a number of more than %(count)s digits",
                name=name, line=line, field=field, count=sys.get_int_max_str_digits())


def _field_holding(raw: str, nested: bool) -> tuple[str, int]:
    """(top-level key, note line) of the deepest collection (``nested``) or of the first integer
    longer than Python converts; ``("?", 2)`` when the events do not show one."""
    loader = FrontMatterLoader(raw)
    limit = sys.get_int_max_str_digits()
    depth, items, deepest = 0, 0, 0
    key, found = "?", ("?", 2)
    try:
        while loader.check_event():
            event = loader.get_event()
            if depth == 1 and isinstance(event, yaml.NodeEvent):  # a key or a value of the top mapping
                if items % 2 == 0:
                    key = event.value if isinstance(event, yaml.ScalarEvent) else "?"
                items += 1
            line = event.start_mark.line + 2  # +1 for the opening ---, +1 from 0-based
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if nested and depth > deepest:
                    deepest, found = depth, (key, line)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif not nested and isinstance(event, yaml.ScalarEvent) and _too_long_integer(loader, event, limit):
                return key, line
    except yaml.YAMLError:
        pass
    finally:
        loader.dispose()
    return found


def _too_long_integer(loader: FrontMatterLoader, event: yaml.ScalarEvent, limit: int) -> bool:
    """Whether a scalar reads as a decimal integer of more than ``limit`` digits (0: no limit)."""
    if limit <= 0 or loader.resolve(yaml.ScalarNode, event.value, event.implicit) != "tag:yaml.org,2002:int":
        return False
    digits = event.value.lstrip("+-").replace("_", "")
    return digits.isdigit() and len(digits) > limit


def _plain(value: Any) -> Any:
    """YAML's dates and times as ISO text (our fields are text), everything else as read."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def _brain_folders(upload: Upload) -> dict[PurePosixPath, bytes]:
    """The brain folders of an upload (where an ``index.json`` is, outside ``_archived/``), each
    with its index's bytes."""
    return {PurePosixPath(name).parent: data for name, data in upload.entries.items()
            if PurePosixPath(name).name == "index.json" and "_archived" not in PurePosixPath(name).parts}


def index_titles(upload: Upload) -> dict[str, str]:
    """The title a brain folder's ``index.json`` gives each memory file, by entry name.

    The ``brain`` command line keeps titles in the index only: without it a memory titled
    東京オフィスの会議室予約 came back as its file's transliterated name. An index that cannot
    be read gives none (it is passed over as any file that is not a note)."""
    titles: dict[str, str] = {}
    for folder, data in _brain_folders(upload).items():
        try:
            memories = json.loads(data.decode("utf-8-sig")).get("memories")
        except (ValueError, AttributeError, RecursionError):
            continue
        for entry in memories.values() if isinstance(memories, Mapping) else ():
            path, title = (entry.get("path"), entry.get("title")) if isinstance(entry, Mapping) else (None, None)
            if isinstance(path, str) and isinstance(title, str) and title.strip():
                # Composed as the upload's names are (`composed`): one of them may be written decomposed.
                titles.setdefault(composed(str(folder / path) if str(folder) != "." else path), title.strip())
    return titles


def _archive_folders(upload: Upload) -> tuple[str, ...]:
    """The ``_archived/`` folders of the brain folders in an upload."""
    folders = sorted(str(folder) for folder in _brain_folders(upload))
    return tuple("_archived/" if folder == "." else f"{folder}/_archived/" for folder in folders)


def _note(upload: Upload, name: str, data: bytes, index_title: str | None = None) -> tuple[MemoryInput, str | None] | None:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ImportRefused([Text("%(name)s, line %(line)s: not UTF-8 text", name=name, line=line)]) from None
    text = text.replace("\r\n", "\n")
    front, body = split_front_matter(name, text)
    body = body.strip()
    if is_blank(body):  # nothing to read (a NUL or a zero-width space is no note either)
        return None
    where = f"{upload.name}/{name}" if upload.archive and upload.name != name else name
    try:
        if _is_own(front):
            return _own(front if index_title is None else {"title": index_title, **front}, body, name), str(front["id"])
        return _foreign(front, body, name, where), None
    except BrainError as exc:
        raise ImportRefused([Text("%(name)s: %(reason)s", name=name, reason=str(exc))]) from None


def _is_own(front: Mapping[str, Any]) -> bool:
    """A memory file of this app (our export): a memory id and one of our types."""
    kind = front.get("type")  # a list or an object there cannot be looked up among our types
    return isinstance(front.get("id"), str) and bool(_OWN_ID.match(front["id"])) and isinstance(kind, str) \
        and kind in MEMORY_TYPES


def _own(front: Mapping[str, Any], body: str, name: str) -> MemoryInput:
    fields = {key: front[key] for key in OWN_FIELDS if front.get(key) is not None}
    fields.setdefault("title", _title(front, body, name))
    return MemoryInput.from_mapping({**fields, "content": body, "path": name})


def _foreign(front: Mapping[str, Any], body: str, name: str, where: str) -> MemoryInput:
    kind = front.get("type")
    folder = str(PurePosixPath(name).parent)
    return MemoryInput(
        title=connector_title(body, _title(front, body, name)),  # cut as brain_memorize cuts a long one
        type=kind if isinstance(kind, str) and kind in MEMORY_TYPES else "learning",
        content=body,
        path="notes/" if folder in ("", ".") else f"{folder}/",
        tags=tuple(_tags(front.get("tags"))),
        source=f"imported from {where}",
        origin="user",
    )


def _title(front: Mapping[str, Any], body: str, name: str) -> str:
    title = front.get("title")
    if isinstance(title, str | int | float) and not isinstance(title, bool) and str(title).strip():
        return str(title).strip()
    heading = _HEADING.search(body)
    if heading:
        return heading.group(1)
    return PurePosixPath(name).stem


def _tags(value: Any) -> list[str]:
    """Obsidian and Basic Memory spell tags as a list or as one string of them. A mapping gives
    its keys (``tags: {work, home}`` is YAML's set of the two; ``{a: 1}`` was read as the tags
    ``{'a':`` and ``1}``); a value that is neither text, a number, a list nor a mapping (true)
    gives none, as such an item of a list does."""
    if isinstance(value, Mapping):
        items = list(value)
    elif isinstance(value, list):
        items = value
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        items = re.split(rf"(?:{LIST_SEPARATORS.pattern}|\s)+", str(value))
    else:
        return []
    tags = []
    for item in items:
        if isinstance(item, str | int | float) and not isinstance(item, bool):
            tag = str(item).strip().lstrip("#").strip()
            if tag and tag not in tags:
                tags.append(tag)
    return tags
