"""The files of an upload: one file, a zip archive, or (the command line) a folder.

Bounded before anything is parsed: the size of what is read, the number of entries, and a
zip's uncompressed total (a small archive may expand to gigabytes).
"""

from __future__ import annotations

import io
import json
import os
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from connector.i18n import Text
from connector.imports.errors import ImportRefused

MAX_FILES = 20_000  # entries of an archive or a folder, Markdown or not
MAX_EXPANDED_BYTES = 256 * 1024 * 1024  # what an archive or a folder may hold in all
ZIP_MAGIC = b"PK\x03\x04"
# A zip of no entries is only its end record (zipfile writes one for an empty vault's export).
EMPTY_ZIP_MAGIC = b"PK\x05\x06"
# General purpose flag bit 11: the entry's name is UTF-8 (else zipfile reads it as CP437).
ZIP_UTF8_FLAG = 0x800
# How Windows' own zip (and older tools) write names without that flag on a Japanese or a
# Chinese system: the system's code page. UTF-8 comes first (macOS, Linux tools leave the flag out).
ZIP_NAME_ENCODINGS = ("utf-8", "cp932", "gbk")
_HALFWIDTH_KATAKANA = range(0xFF61, 0xFFA0)


@dataclass(frozen=True)
class Upload:
    """What was given: the file's name (for ``source`` and messages) and its entries.

    ``entries`` maps a relative path (``/`` separators) to its bytes; one file is one
    entry under its own name.
    """

    name: str
    entries: dict[str, bytes]
    archive: bool  # a zip or a folder (several entries), not one file

    @classmethod
    def of_bytes(cls, name: str, data: bytes) -> Upload:
        """A single uploaded file; a zip archive is opened into its entries."""
        if data.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)):
            return cls(name, _zip_entries(data), archive=True)
        return cls(name, {PurePosixPath(name).name or "upload": data}, archive=False)

    @classmethod
    def of_path(cls, path: Path) -> Upload:
        """A file or a folder on disk (the command line); hidden folders (``.obsidian``, ``.git``) are left out."""
        if not path.is_dir():
            data = _read_at_most(path, MAX_EXPANDED_BYTES)
            if data is None:
                raise ImportRefused([Text("The file is larger than %(mb)s MB.", mb=MAX_EXPANDED_BYTES // 2**20)])
            return cls.of_bytes(path.name, data)
        entries: dict[str, bytes] = {}
        total = 0
        for item in sorted(path.rglob("*")):
            relative = item.relative_to(path)
            if any(part.startswith(".") for part in relative.parts) or not item.is_file():
                continue
            if len(entries) >= MAX_FILES:
                raise ImportRefused([Text("The folder holds more than %(count)s files.", count=MAX_FILES)])
            data = _read_at_most(item, MAX_EXPANDED_BYTES - total)
            if data is None:
                raise ImportRefused([Text("The folder holds more than %(mb)s MB.", mb=MAX_EXPANDED_BYTES // 2**20)])
            total += len(data)
            name = composed(relative.as_posix())
            if name in entries:  # the same name composed and decomposed: which one is meant is a guess
                raise ImportRefused([Text("%(name)s: twice in the folder", name=name)])
            entries[name] = data
        return cls(path.name, entries, archive=True)


def composed(name: str) -> str:
    """A file name with its characters composed (NFC). macOS writes names decomposed (NFD: データ
    as テ + ゛ + ータ), in its zips and on HFS+ disks: read as they are, a note's title and folder
    were not the text typed elsewhere (a folder split in two beside the same name written on
    another system, a title searched by equality missed), and its file name lost its sound marks."""
    return unicodedata.normalize("NFC", name)


def _read_at_most(path: Path, limit: int) -> bytes | None:
    """The bytes of the file at ``path``, or None when it holds more than ``limit``: never more is
    read, so a huge file (or /dev/zero, which never ends) cannot fill the memory first."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            return None
        data = handle.read(size + 1)  # a read of the size asked for allocates that much at once
        if len(data) > size:  # more than its size says: a device, or a file still growing
            data += handle.read(limit - size)
    return data if len(data) <= limit else None


def _zip_entries(data: bytes) -> dict[str, bytes]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = [info for info in archive.infolist() if not info.is_dir()]
    except (zipfile.BadZipFile, OSError, ValueError):
        raise ImportRefused([Text("The zip archive cannot be read.")]) from None
    if len(infos) > MAX_FILES:
        raise ImportRefused([Text("The archive holds more than %(count)s files.", count=MAX_FILES)])
    if sum(info.file_size for info in infos) > MAX_EXPANDED_BYTES:
        raise ImportRefused([Text("The archive expands to more than %(mb)s MB.", mb=MAX_EXPANDED_BYTES // 2**20)])
    entries: dict[str, bytes] = {}
    names = _entry_names(infos)
    for info in infos:
        name = composed(names[info.filename])
        parts = PurePosixPath(name).parts
        # Checked before hidden folders are passed over: ".." starts with a dot too.
        if outside_archive(name):
            raise ImportRefused([Text("%(name)s: a path outside the archive", name=name)])
        # Hidden folders (an Obsidian vault's .obsidian, macOS's __MACOSX) hold no notes.
        if any(part.startswith(".") or part == "__MACOSX" for part in parts):
            continue
        if name in entries:  # unpackers keep one or the other: which note would be read is anyone's guess
            raise ImportRefused([Text("%(name)s: twice in the archive", name=name)])
        try:
            entries[name] = archive.read(info)
        except (zipfile.BadZipFile, OSError, ValueError, RuntimeError, NotImplementedError, EOFError, zlib.error):
            # Damaged, encrypted, or compressed in a way Python does not read.
            raise ImportRefused([Text("%(name)s: cannot be read from the archive", name=name)]) from None
    return entries


def outside_archive(name: str) -> bool:
    """Whether an entry's name would point out of the folder it is unpacked into (absolute, a
    ``..`` part, a Windows separator) or is empty."""
    parts = PurePosixPath(name).parts
    return not parts or name.startswith("/") or ".." in parts or "\\" in name


def _entry_names(infos: list[zipfile.ZipInfo]) -> dict[str, str]:
    """The name of each entry (by zipfile's reading of it), in the encoding it was written in.

    Names without the UTF-8 flag are bytes in whatever encoding the writer's system used;
    zipfile reads them as CP437, which turned a Japanese or Chinese note's name into
    mojibake (its title), and a Shift_JIS name whose second byte is 0x5C (予, 表, ソ) read
    as a backslash, refused as a path outside the archive. One archive comes from one
    system: the first of `ZIP_NAME_ENCODINGS` that reads all of them is used (Shift_JIS
    only when it reads no half-width katakana, which GBK's common characters become in it)."""
    raw = {info.filename: info.filename.encode("cp437") for info in infos
           if not info.flag_bits & ZIP_UTF8_FLAG and not info.filename.isascii()}
    names = {info.filename: info.filename for info in infos}
    for encoding in ZIP_NAME_ENCODINGS:
        try:
            decoded = {name: data.decode(encoding) for name, data in raw.items()}
        except UnicodeDecodeError:
            continue
        if encoding == "cp932" and any(ord(char) in _HALFWIDTH_KATAKANA for text in decoded.values() for char in text):
            continue
        names.update(decoded)
        break
    return names


def parse_json(data: bytes, name: str) -> Any:
    """The JSON of a file, or a refusal naming the line and the reason."""
    try:
        return json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ImportRefused([Text("%(name)s, line %(line)s: not UTF-8 text", name=name, line=line)]) from None
    except json.JSONDecodeError as exc:
        raise ImportRefused([Text("%(name)s, line %(line)s: not JSON (%(reason)s)", name=name, line=exc.lineno,
                                  reason=exc.msg)]) from None
    except (ValueError, RecursionError):
        raise ImportRefused([Text("%(name)s: not JSON", name=name)]) from None
