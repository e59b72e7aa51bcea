"""The `brain` command line's export file (``.brain-export``, spec/session-and-export.md §2).

The whole brain directory as one JSON document, ``{"version": 1, "exportedAt": ..., "files":
{"<relative/path>": "<UTF-8 text>"}}``: its memory files are read as the brain folder they
were (`markdown.read`: titles from the export's ``index.json``, archived memories left out).
An export made with a passphrase is encrypted (AES-GCM, not JSON) and is refused with what
to do instead: the passphrase would have to be typed into a form, which this app does not ask.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.textsafety import has_lone_surrogate
from connector.i18n import Text
from connector.imports import markdown
from connector.imports.errors import ImportRefused
from connector.imports.files import Upload, outside_archive
from connector.imports.imported import Imported

FORMAT = "brain-export"
SUFFIX = ".brain-export"
VERSION = 1


def is_brain_export(document: Any) -> bool:
    """Whether a parsed JSON document is a ``.brain-export`` (any version)."""
    return isinstance(document, Mapping) and "exportedAt" in document and isinstance(document.get("files"), Mapping)


def refuse_if_encrypted(name: str, data: bytes) -> None:
    """Refuse a ``.brain-export`` that is not JSON: made with a passphrase, it is encrypted."""
    if name.lower().endswith(SUFFIX) and not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        raise ImportRefused([Text("%(name)s is encrypted (exported with a passphrase): export the brain again "
                                  "without one to import it here.", name=name)])


def read(document: Any, name: str) -> Imported:
    """The live memories of a ``.brain-export`` document named ``name``."""
    if not is_brain_export(document) or document.get("version") != VERSION:
        raise ImportRefused([Text("%(name)s is not a .brain-export file of version %(version)s.",
                                  name=name, version=VERSION)])
    entries: dict[str, bytes] = {}
    for path, text in document["files"].items():
        if isinstance(path, str) and has_lone_surrogate(path):
            raise ImportRefused([Text("%(name)s: a file name that is not text", name=name)])
        if not isinstance(path, str) or outside_archive(path):
            raise ImportRefused([Text("%(name)s: a path outside the archive", name=str(path)[:200])])
        if not isinstance(text, str) or has_lone_surrogate(text):  # a "\ud800" escape: no UTF-8 text holds it
            raise ImportRefused([Text("%(name)s: '%(path)s' is not text", name=name, path=path[:200])])
        entries[path] = text.encode("utf-8")
    found = markdown.read(Upload(name, entries, archive=True))
    found.format = FORMAT
    return found
