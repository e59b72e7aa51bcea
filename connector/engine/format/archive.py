"""Brain archives and directories: load hostile input safely, write deterministically.

An archive is a gzip-compressed tar of the brain tree. Loading treats it as
hostile: only regular files and directories are taken (links, devices, fifos and
sparse files are dropped), absolute paths and ``..`` are refused, and the
inflated size, entry count and path length are bounded while streaming, so a
bomb fails early. Nothing is ever extracted to disk; the result is a `Brain`.

Packing is deterministic: sorted entries (parent directories included, ``./``
prefix as GNU tar writes them), fixed owner, modes and mtimes, and a gzip header
without name or time, so an unchanged brain packs to identical bytes.
"""

from __future__ import annotations

import bisect
import errno
import functools
import gzip
import hashlib
import io
import operator
import os
import re
import secrets
import stat
import struct
import tarfile
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from zlib_ng import gzip_ng, zlib_ng

from connector.engine.format.brain import INDEX, Brain
from connector.engine.format.gcpause import gc_paused

# Device-local sync state: never part of a brain we load or push.
SKIPPED_TOP_DIRS = frozenset({".sync", ".cloud"})
FIXED_MTIME = 946_684_800  # 2000-01-01T00:00:00Z, for every packed entry
FILE_MODE = 0o644
DIR_MODE = 0o755
_READ_CHUNK = 1 << 16
_INFLATE_CHUNK = 1 << 22


class ArchiveError(ValueError):
    """The archive or directory is unsafe or unreadable (message says why)."""


class ArchiveTooLarge(ArchiveError):
    """The archive unpacks to more than the limit allows."""


@dataclass(frozen=True)
class ArchiveLimits:
    """Bounds applied while loading an archive or a directory."""

    max_inflated: int = 512 * 1024 * 1024  # total tar stream / file bytes
    max_entries: int = 200_000
    max_path: int = 1024  # bytes of UTF-8 per path


def safe_relative_path(name: str) -> str | None:
    """Normalise an entry name to a clean relative POSIX path.

    ``./`` prefixes and empty or ``.`` components go; returns None for the root
    itself. Absolute paths, ``..`` components, backslashes and NUL bytes raise.
    """
    if name.startswith("/"):
        raise ArchiveError(f"absolute path refused: {name[:200]!r}")
    if "\\" in name or "\x00" in name:
        raise ArchiveError(f"path with a backslash or NUL refused: {name[:200]!r}")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"path escaping the brain refused: {name[:200]!r}")
    return "/".join(parts) if parts else None


def _skipped(path: str) -> bool:
    return path.split("/", 1)[0] in SKIPPED_TOP_DIRS


class _InflatedStream:
    """The decompressed tar stream, read forward only, failing once more than ``limit`` bytes came out.

    tarfile reads it as a seekable file (headers with small reads, seeks forward
    past member data); only what has not been consumed yet is kept, so loading
    holds the brain's files plus about one inflate chunk, never the whole tar
    stream beside them, and a bomb fails as soon as it produces too much. Large
    inflate chunks keep the per-call overhead low: zlib-ng inflates a brain
    (Markdown and JSON) about three times as fast as zlib (37 instead of 105 ms
    for the 41 MB of a 10,000-memory brain).
    """

    def __init__(self, source: BinaryIO, limit: int) -> None:
        self._inflater = gzip_ng.GzipFile(fileobj=source, mode="rb")
        self._limit = limit
        self._produced = 0
        self._buf = b""
        self._start = 0  # stream offset of _buf[0]
        self._pos = 0

    def _more(self) -> bytes:
        chunk = self._inflater.read(_INFLATE_CHUNK)
        self._produced += len(chunk)
        if self._produced > self._limit:
            raise ArchiveTooLarge(f"archive inflates beyond {self._limit} bytes")
        return chunk

    def _fill(self, end: int) -> None:
        """Make the buffer reach stream offset ``end`` (or the end), dropping what lies before ``_pos``."""
        tail = self._start + len(self._buf)
        if tail >= end:
            return
        pieces = [self._buf[self._pos - self._start :]] if self._pos < tail else []
        skip = max(0, self._pos - tail)
        while tail < end:
            chunk = self._more()
            if not chunk:
                break
            tail += len(chunk)
            if skip:
                if skip >= len(chunk):
                    skip -= len(chunk)
                    continue
                chunk, skip = chunk[skip:], 0
            pieces.append(chunk)
        self._buf, self._start = b"".join(pieces), self._pos

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes from the current offset (tarfile always names a size)."""
        if size < 0:
            raise ArchiveError("unbounded read of an archive stream")
        self._fill(self._pos + size)
        offset = self._pos - self._start
        data = self._buf[offset : offset + size]
        self._pos += len(data)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Move forward (tarfile never goes back past what it read last)."""
        if whence == os.SEEK_CUR:
            offset += self._pos
        elif whence != os.SEEK_SET:
            raise ArchiveError("archive stream cannot seek from its end")
        if offset < self._start:
            raise ArchiveError("archive stream cannot go back")
        self._pos = offset
        return offset

    def tell(self) -> int:
        """The current offset in the tar stream."""
        return self._pos

    def drain(self) -> None:
        """Inflate what is left (still bounded), so gzip checks the stream's CRC and length."""
        self._buf, self._start = b"", self._pos
        while self._more():
            pass


def load_archive(data: bytes | BinaryIO, limits: ArchiveLimits = ArchiveLimits()) -> Brain:
    """Read a brain from a tar.gz (bytes or a binary stream), treating it as hostile."""
    with gc_paused():  # thousands of long-lived entries: collector passes are pure overhead
        return _load_archive(data, limits)


def _load_archive(data: bytes | BinaryIO, limits: ArchiveLimits) -> Brain:
    source: BinaryIO = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    files: dict[str, bytes] = {}
    entries = 0
    try:
        stream = _InflatedStream(source, limits.max_inflated)
        with tarfile.open(fileobj=stream, mode="r:") as archive:  # type: ignore[call-overload]
            for member in archive:
                entries += 1
                if entries > limits.max_entries:
                    raise ArchiveError(f"archive has more than {limits.max_entries} entries")
                if len(member.name.encode("utf-8", "surrogateescape")) > limits.max_path:
                    raise ArchiveError(f"path longer than {limits.max_path} bytes refused")
                path = safe_relative_path(member.name)
                if path is None or member.isdir() or _skipped(path):
                    continue
                if not member.isreg() or member.issparse():
                    continue  # links, devices, fifos, sparse files: dropped, never followed
                if member.size > limits.max_inflated:
                    raise ArchiveTooLarge(f"archive inflates beyond {limits.max_inflated} bytes")
                # The member's bytes sit right after its header(s) in the stream.
                stream.seek(member.offset_data)
                content = stream.read(member.size)
                if len(content) != member.size:
                    raise ArchiveError("archive is truncated")
                files[path] = content
            archive.members = []  # the headers are not needed any more
        stream.drain()
    except ArchiveError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, zlib_ng.error, gzip.BadGzipFile, OSError, UnicodeError):
        # in words, not Python's class name (people read it): what the archive's failing looks like
        raise ArchiveError("not a readable tar.gz archive (damaged or cut short)") from None
    _check_tree(files)
    return Brain(files)


def _check_tree(files: dict[str, bytes]) -> None:
    """Refuse a tree where a file is also used as a directory."""
    for path in files:
        cut = path.rfind("/")
        while cut > 0:
            if path[:cut] in files:
                raise ArchiveError(f"path is both a file and a directory: {path[:cut][:200]!r}")
            cut = path.rfind("/", 0, cut)


def _directories(paths: list[str]) -> set[str]:
    folders: set[str] = set()
    for path in paths:
        cut = path.rfind("/")
        while cut > 0:
            folder = path[:cut]
            if folder in folders:
                break
            folders.add(folder)
            cut = path.rfind("/", 0, cut)
    return folders


_Entry = tuple[str, bool]  # (path, is a directory): the brain's own path strings; "" is the root
_ROOT: _Entry = ("", True)
_Sums = tuple[bytes, int, int]  # SHA-256, CRC-32 and length of a segment


def pack_archive(brain: Brain) -> bytes:
    """The brain as a deterministic tar.gz: same files, same bytes.

    The tar stream is exactly what ``tarfile`` writes in GNU format (headers come
    from ``TarInfo.tobuf``). It is compressed in segments whose boundaries depend
    on content only (see `_parts`), each deflated on its own and joined into
    one ordinary gzip member (`_Deflated`): after a write most segments are
    unchanged and their compressed bytes come from a cache. What this pack computed
    is kept on the brain (`_PackMemo`, carried by `Brain.copy`): the next pack takes
    the sums of segments whose files are the very same bytes objects instead of
    hashing them again, and cuts a rewritten big file by comparing it with the
    version the memo holds (`_recut`), so packing after a write costs about what
    the write changed.
    """
    memo = brain.pack_memo if isinstance(brain.pack_memo, _PackMemo) else None
    keys, folders, entries = _entries(brain.files, memo)
    parts = list(_parts(brain.files, entries, memo))
    packed = _DEFLATED.gzip(parts)
    brain.pack_memo = _PackMemo.of(keys, folders, entries, parts)
    return packed


def _entries(
    files: dict[str, bytes], memo: _PackMemo | None
) -> tuple[frozenset[str], frozenset[str], list[_Entry]]:
    """(every path, the directories, the sorted tar entries) of ``files``, checked.

    Taken from the last pack's when files were only added since (a memorize adds
    one), else computed in full. Raises when a path is unsafe.
    """
    keys = frozenset(files)
    if memo is not None and keys == memo.keys:
        return memo.keys, memo.folders, memo.entries
    if memo is not None and memo.keys <= keys and len(keys) - len(memo.keys) <= _FEW_ADDED:
        added = sorted(path for path in keys - memo.keys if not _skipped(path))
        _check_clean(added)
        folders = set(memo.folders)
        entries = list(memo.entries)
        for folder in _directories(added) - folders:
            bisect.insort(entries, (folder, True), key=_tar_order)
            folders.add(folder)
        for path in added:
            bisect.insort(entries, (path, False), key=_tar_order)
        return keys, frozenset(folders), entries
    paths = [path for path in files if not _skipped(path)]
    _check_clean(paths)
    folders = _directories(paths)
    entries = sorted([(path, False) for path in paths] + [(folder, True) for folder in folders], key=_tar_order)
    return keys, frozenset(folders), [_ROOT, *entries]


def _tar_order(entry: _Entry) -> tuple[str, bool]:
    """Sort key of an entry: by path components (as tuples of them compare), files first.

    Clean paths hold no NUL, so with "/" read as NUL, comparing whole paths compares
    their components one by one ("a/b" before "a-b"), without keeping tuples of them.
    """
    return entry[0].replace("/", "\x00"), entry[1]


def _check_clean(paths: Iterable[str]) -> None:
    for path in paths:
        if not _clean_path(path):
            raise ArchiveError(f"brain holds an unsafe path: {path[:200]!r}")


_FEW_ADDED = 64  # more files added than this since the last pack: entries sorted afresh


# Files at least this large are cut into several segments (the big JSON indexes).
_BIG_FILE = 256 * 1024
# A segment of small files ends after a file whose path hash has these bits clear (~1 in 32).
_SMALL_SEGMENT_MASK = 31
# Cut points inside a big file: before a top-level entry of a JSON map (two levels deep,
# as dump_json indents) keyed by a memory id whose last two hex digits fall in 1/32 of
# the values. They depend only on nearby content, so an insertion moves no other cut.
_BIG_CUT = re.compile(rb'\n    "mem_[0-9]{8}_[0-9a-f]{4}0[0-7]"')
# The first piece ends before the first line two levels deep when there is one in its first
# _MIN_PIECE bytes: the top of index.json and search-index.json (their counts) changes with
# every memorize, and the tar header is hashed with it anyway.
_HEAD_CUT = b'\n    "'
_MIN_PIECE = 8 * 1024
_MAX_PIECE = 1024 * 1024


def _cuts(content: bytes) -> list[int]:
    """Offsets that cut a big file into pieces: content-defined, at least _MIN_PIECE apart.

    Each cut is the first cut point at least _MIN_PIECE after the previous cut; a
    stretch without any within _MAX_PIECE is cut at the first newline after half of
    it (or at _MAX_PIECE), so no piece grows without bound. The first piece may be
    shorter (`_HEAD_CUT`).
    """
    cuts = [0]
    while (cut := _next_cut(content, cuts[-1])) is not None:
        cuts.append(cut)
    return cuts


def _next_cut(content: bytes, after: int) -> int | None:
    """The cut that follows the cut at ``after`` (None: the rest is the last piece).

    It depends only on ``content[after : after + _MAX_PIECE + _KEY]``: that is what
    lets `_recut` take whole pieces of an older version of the file unexamined.
    """
    if after == 0 and (head := content.find(_HEAD_CUT, 0, _MIN_PIECE)) >= 0:
        return head + 1
    match = _BIG_CUT.search(content, after + _MIN_PIECE - 1)
    if match is not None and match.start() + 1 - after <= _MAX_PIECE:
        return match.start() + 1  # after the newline
    if len(content) - after > _MAX_PIECE:
        return _forced_cut(content, after)
    return None


# Bytes of a cut point after its newline: 4 spaces, the quoted id (which names the piece it starts).
_KEY = len(b'    "mem_20260101_abcdef"')


def _recut(content: bytes, old: _BigRun) -> list[tuple[int, int, _Sums | None]]:
    """The pieces of ``content`` (bounds exactly `_cuts`'s), with the sums of those that are
    pieces of ``old`` unchanged (None: to be hashed).

    After each cut, the old piece starting with the same cut point (the same memory
    id) is compared, plus the cut point that ended it: when the bytes are equal, the
    next cut is where it was (`_next_cut` sees nothing else) and the piece's bytes, so
    its sums, are the same; else the next cut is searched for. A memorize rewrites a
    few entries of 26 MB of JSON: most pieces are compared (memcmp), not hashed.
    The first and last pieces (tar header, padding) are always hashed.
    """
    previous = old.content
    pieces = old.pieces
    starting = {previous[start : start + _KEY]: number for number, (start, _, _) in enumerate(pieces) if start}
    out: list[tuple[int, int, _Sums | None]] = []
    view = memoryview(previous)
    cut = 0
    number: int | None = None  # the old piece that may start at ``cut``
    while True:
        if number is not None and number < len(pieces):
            start, end, sums = pieces[number]
            length = end - start
            # Its bytes and the cut point that ended it (a normal cut, not a forced one).
            if (
                end < len(previous)
                and _BIG_CUT.match(previous, end - 1) is not None
                and content.startswith(view[start : end + _KEY], cut)
            ):
                out.append((cut, cut + length, sums))
                cut += length
                number += 1
                continue
        following = _next_cut(content, cut)
        out.append((cut, len(content) if following is None else following, None))
        if following is None:
            return out
        cut = following
        number = starting.get(content[cut : cut + _KEY])


def _forced_cut(content: bytes, after: int) -> int:
    newline = content.find(b"\n", after + _MAX_PIECE // 2, after + _MAX_PIECE)
    return newline + 1 if newline >= 0 else after + _MAX_PIECE


@dataclass(frozen=True)
class _SmallRun:
    """A segment of small files and directories: which entries, which file objects, why it ended."""

    entries: list[_Entry]
    paths: tuple[str, ...]  # its files, in order
    contents: tuple[bytes, ...]  # their bytes objects then
    before_big: bool  # ended because a big file follows (else: its last file ends segments)
    sums: _Sums
    exact: bool  # every file is exactly ``bytes`` (immutable): may be remembered

    def data(self) -> bytes:
        """The segment's bytes, built again from the entries and the objects it holds."""
        contents = iter(self.contents)
        return _join_small(
            ("./" + path if path else ".", None if is_dir else next(contents)) for path, is_dir in self.entries
        )


@dataclass(frozen=True)
class _BigRun:
    """A big file's segments: its bytes object then and each piece's bounds and sums."""

    entry: _Entry
    content: bytes
    pieces: list[tuple[int, int, _Sums]]


class _Part:
    """One segment of the tar stream: its SHA-256, CRC-32 and length, and its bytes when needed.

    A segment reused from the memo builds its bytes only if a neighbour must be
    deflated (the dictionary is its end) or the deflate cache lost it. ``run`` is
    what it is part of, for the next memo (None for the end of the archive).
    """

    __slots__ = ("_build", "_data", "crc", "digest", "length", "run")

    def __init__(
        self,
        data: bytes | memoryview | None = None,
        *,
        sums: _Sums | None = None,
        build: Callable[[], bytes | memoryview] | None = None,
        run: _SmallRun | _BigRun | None = None,
    ) -> None:
        self._data, self._build, self.run = data, build, run
        if sums is None:
            assert data is not None
            sums = hashlib.sha256(data).digest(), zlib_ng.crc32(data), len(data)
        self.digest, self.crc, self.length = sums

    @property
    def known(self) -> bool:
        """Whether the bytes are at hand (built, not only summed)."""
        return self._data is not None

    def data(self) -> bytes | memoryview:
        """The segment's bytes (built on first use when they came from the memo)."""
        if self._data is None:
            assert self._build is not None
            self._data = self._build()
        return self._data

    @property
    def sums(self) -> _Sums:
        return self.digest, self.crc, self.length


def _parts(files: dict[str, bytes], entries: list[_Entry], memo: _PackMemo | None) -> Iterator[_Part]:
    """The tar stream in content-defined segments (their concatenation is the whole stream).

    ``entries`` are sorted, the root first. Small files are grouped, a group ending
    after a file whose path hash says so (`_ends_segment`) or before a big file; a
    big file is cut at content-defined points (`_cuts`). Where a run of the memo
    starts at the same entry and holds the same entries and the very same file
    objects, its segments are taken as they were (a few C-level comparisons per
    segment, not per file); a big file written since is cut by `_recut`; elsewhere
    segments are built and hashed.
    """
    runs = memo.runs if memo is not None else []
    starts = memo.starts if memo is not None else {}
    count = len(entries)
    position = 0
    emitted = 0
    expected: int | None = 0  # index of the memo run that would start at ``position``
    tail: list[tuple[str, bytes | None]] = []
    while position < count:
        run = runs[expected] if expected is not None and expected < len(runs) else None
        if isinstance(run, _SmallRun) and _same_small(run, files, entries, position):
            yield _Part(sums=run.sums, build=run.data, run=run)
            emitted += run.sums[2]
            position += len(run.entries)
            expected += 1  # type: ignore[operator]
            continue
        if isinstance(run, _BigRun) and entries[position] == run.entry and files.get(run.entry[0]) is run.content:
            name = run.entry[0]
            for start, end, sums in run.pieces:
                yield _Part(sums=sums, build=functools.partial(_big_piece, name, run.content, start, end), run=run)
                emitted += sums[2]
            position += 1
            expected += 1  # type: ignore[operator]
            continue
        entry = entries[position]
        content = None if entry[1] else files[entry[0]]
        if content is not None and len(content) >= _BIG_FILE:
            # Written since: cut again, comparing with the version the memo holds.
            held = starts.get(entry)
            old = runs[held] if held is not None else None
            built = _big_parts(entry, entry[0], content, old if isinstance(old, _BigRun) else None)
            position += 1
            tail = []
        else:
            built, position, tail = _build_run(files, entries, position)
        for part in built:
            emitted += part.length
            yield part
        expected = starts.get(entries[position]) if position < count else None
    # End of archive: the files no segment ended, two zero blocks, then zeros up to a
    # whole record (as tarfile does).
    last = _join_small(tail)
    size = emitted + len(last) + 2 * tarfile.BLOCKSIZE
    yield _Part(last + bytes(2 * tarfile.BLOCKSIZE + (-size) % tarfile.RECORDSIZE))


def _same_small(run: _SmallRun, files: dict[str, bytes], entries: list[_Entry], position: int) -> bool:
    """Whether ``run`` is, unchanged, the segment starting at ``position``."""
    stop = position + len(run.entries)
    if entries[position:stop] != run.entries:
        return False
    try:
        if not all(map(operator.is_, map(files.__getitem__, run.paths), run.contents)):
            return False  # a file was written: same grouping, but the bytes must be built
    except KeyError:
        return False
    if run.before_big:  # it ended because a big file came next: still so?
        if stop >= len(entries) or entries[stop][1]:
            return False
        following = files.get(entries[stop][0])
        return following is not None and len(following) >= _BIG_FILE
    return True


def _build_run(
    files: dict[str, bytes], entries: list[_Entry], position: int
) -> tuple[list[_Part], int, list[tuple[str, bytes | None]]]:
    """The segments of the run starting at ``position``, built and hashed: (segments, where
    the next run starts, the entries left over at the end of the archive)."""
    first = position
    items: list[tuple[str, bytes | None]] = []
    paths: list[str] = []
    while position < len(entries):
        entry = entries[position]
        name, is_dir = entry
        if is_dir:
            items.append(("./" + name if name else ".", None))
            position += 1
            continue
        content = files[name]
        if len(content) >= _BIG_FILE:
            if items:  # the small entries before it make one segment
                return [_small_part(entries[first:position], items, paths, True)], position, []
            return _big_parts(entry, name, content, None), position + 1, []
        items.append(("./" + name, content))
        paths.append(name)
        position += 1
        if _ends_segment(name):
            return [_small_part(entries[first:position], items, paths, False)], position, []
    return [], position, items


def _big_parts(entry: _Entry, name: str, content: bytes, old: _BigRun | None) -> list[_Part]:
    """The segments of a big file: cut afresh, or from an older version of it (`_recut`)."""
    if old is None or type(content) is not bytes:
        bounds = [*_cuts(content), len(content)]
        plan: list[tuple[int, int, _Sums | None]] = [(start, end, None) for start, end in zip(bounds, bounds[1:])]
    else:
        plan = _recut(content, old)
    built = [
        _Part(_big_piece(name, content, start, end)) if sums is None
        else _Part(sums=sums, build=functools.partial(_big_piece, name, content, start, end))
        for start, end, sums in plan
    ]
    run = _BigRun(entry, content, [(start, end, part.sums) for (start, end, _), part in zip(plan, built)])
    for part in built:
        part.run = run
    return built


def _small_part(entries: list[_Entry], items: list[tuple[str, bytes | None]], paths: list[str], before_big: bool) -> _Part:
    part = _Part(_join_small(items))
    contents = tuple(content for _, content in items if content is not None)
    exact = all(type(content) is bytes for content in contents)
    part.run = _SmallRun(entries, tuple(paths), contents, before_big, part.sums, exact)
    return part


def _join_small(items: Iterable[tuple[str, bytes | None]]) -> bytes:
    """The tar entries of directories (content None) and small files, one after the other."""
    out: list[bytes] = []
    for name, content in items:
        if content is None:
            out.append(_header(name, 0, True))
        else:
            out += (_header(name, len(content), False), content, _PADDING[len(content) % tarfile.BLOCKSIZE])
    return b"".join(out)


def _big_piece(name: str, content: bytes, start: int, end: int) -> bytes | memoryview:
    """Bytes ``start:end`` of a big file's entry: its header before the first, padding after the last.

    A view, not a copy, when it is neither (copying 26 MB of JSON cost ~8 ms a pack)."""
    if start and end != len(content):
        return memoryview(content)[start:end]
    piece = content[start:end]
    if start == 0:
        piece = _header("./" + name, len(content), False) + piece
    if end == len(content):
        piece += _PADDING[len(content) % tarfile.BLOCKSIZE]
    return piece


def _segments(files: dict[str, bytes], entries: list[tuple[tuple[str, ...], bool]]) -> Iterator[bytes | memoryview]:
    """The tar stream's segments as bytes, computed afresh, for ``entries`` (path components,
    is a directory) sorted as tar entries are, the root left out."""
    for part in _parts(files, [_ROOT, *(("/".join(parts), is_dir) for parts, is_dir in entries)], None):
        yield part.data()


@dataclass(frozen=True)
class _PackMemo:
    """What one pack computed, for the next pack of the same brain or its copies.

    Never changed after it is made. Reuse is by identity: a run's entries must be
    equal and each of its files the very bytes object packed then (the memo holds
    them, so no other object can take their id); bytes are immutable, so the
    segment's bytes, hence its sums, are the same. Only exact ``bytes`` are memoised.
    """

    keys: frozenset[str]  # every path of the brain then
    folders: frozenset[str]
    entries: list[_Entry]  # sorted, the root first; never mutated (copied before an insertion)
    runs: list[_SmallRun | _BigRun]  # in stream order, the end of the archive left out
    starts: dict[_Entry, int]  # the first entry of each run -> its index in ``runs``

    @classmethod
    def of(
        cls, keys: frozenset[str], folders: frozenset[str], entries: list[_Entry], parts: list[_Part]
    ) -> _PackMemo | None:
        """The memo of a pack's segments; None when a file is not exactly ``bytes`` (could change in place)."""
        runs: list[_SmallRun | _BigRun] = []
        starts: dict[_Entry, int] = {}
        for part in parts:
            run = part.run
            if run is None or (runs and runs[-1] is run):
                continue  # the end of the archive; a big file's further pieces
            if not (run.exact if isinstance(run, _SmallRun) else type(run.content) is bytes):
                return None
            starts[run.entries[0] if isinstance(run, _SmallRun) else run.entry] = len(runs)
            runs.append(run)
        return cls(keys, folders, entries, runs, starts)


@functools.lru_cache(maxsize=1 << 17)
def _clean_path(path: str) -> bool:
    """Whether ``path`` is already a clean relative path (memoised: a brain's paths
    barely change from one pack to the next)."""
    try:
        return safe_relative_path(path) == path
    except ArchiveError:
        return False


@functools.lru_cache(maxsize=1 << 17)
def _ends_segment(name: str) -> bool:
    """Whether a segment of small files ends after the file ``name`` (~1 in 32, by path hash)."""
    return zlib_ng.crc32(name.encode("utf-8", "surrogateescape")) & _SMALL_SEGMENT_MASK == 0


# Padding after a file's bytes to the next 512-byte block, by remainder.
_PADDING = [bytes((tarfile.BLOCKSIZE - rest) % tarfile.BLOCKSIZE) for rest in range(tarfile.BLOCKSIZE)]
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"  # no name, mtime 0, Unix (as gzip.compress(mtime=0))
# zlib-ng at level 4 deflates a brain's JSON and Markdown ~3x as fast as zlib at 6,
# within 4% of its size (10,000 memories: 4.91 instead of 4.73 MB); a write's changed
# segments (~1.2 MB at 10,000 memories) take ~15 ms instead of ~50.
_GZIP_LEVEL = 4


class _Deflated:
    """Deflates segments independently and joins them into one gzip member, with a cache.

    Each segment is compressed by a fresh compressor primed with the end of the
    previous segment and ended with a sync flush (byte-aligned, not final), so the
    pieces concatenate into one valid deflate stream that any gunzip reads (pigz
    works the same way); one empty final block and the gzip trailer (CRC-32 and
    length of the whole tar stream) close it. The compressed bytes of a segment
    depend only on its bytes and its predecessor's, so they are cached by their
    SHA-256 digests, bounded by total compressed size (least recently used first
    out). Thread-safe: packs run in worker threads.
    """

    def __init__(self, max_bytes: int = 96 * 1024 * 1024) -> None:
        self._max = max_bytes
        self._cache: OrderedDict[bytes, bytes] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        finisher = zlib_ng.compressobj(_GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._final_block = finisher.flush(zlib.Z_FINISH)

    def gzip(self, parts: Iterable[_Part]) -> bytes:
        """One gzip member holding the concatenated segments ``parts``."""
        out = [_GZIP_HEADER]
        crc = 0
        length = 0
        previous: _Part | None = None
        for part in parts:
            if part.known:
                crc = zlib_ng.crc32(part.data(), crc)  # several times zlib's speed
            else:
                crc = zlib_ng.crc32_combine(crc, part.crc, part.length)  # its bytes are not even built
            length += part.length
            out.append(self._deflate(part, previous))
            previous = part
        out.append(self._final_block)
        out.append(struct.pack("<II", crc, length & 0xFFFFFFFF))
        return b"".join(out)

    def _deflate(self, part: _Part, previous: _Part | None) -> bytes:
        """``part`` deflated with the end of ``previous`` as its dictionary (cached).

        The dictionary is what a decoder has in its window at that point, so matches
        may reach back into the previous segment as in one continuous stream: the
        price of cutting the stream is almost nothing. The output depends on both
        segments, hence the key.
        """
        key = (previous.digest if previous is not None else b"") + part.digest
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        if previous is not None:
            window = previous.data()[-_WINDOW:]
            compressor = zlib_ng.compressobj(_GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zdict=window)
        else:
            compressor = zlib_ng.compressobj(_GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        deflated = compressor.compress(part.data()) + compressor.flush(zlib.Z_SYNC_FLUSH)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = deflated
                self._held += len(deflated)
                while self._held > self._max and self._cache:
                    _, dropped = self._cache.popitem(last=False)
                    self._held -= len(dropped)
        return deflated


_WINDOW = 1 << zlib.MAX_WBITS  # 32 KiB: how far back a deflate match may reach
_DEFLATED = _Deflated()


@functools.lru_cache(maxsize=65536)
def _header(name: str, size: int, is_dir: bool) -> bytes:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = DIR_MODE if is_dir else FILE_MODE
    info.size = size
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


def _walk(root: Path, limits: ArchiveLimits) -> Iterator[tuple[str, str]]:
    """(relative path, absolute path) of every regular file, never following symlinks."""
    stack = [("", str(root))]
    entries = 0
    while stack:
        prefix, folder = stack.pop()
        with os.scandir(folder) as listing:
            for item in sorted(listing, key=lambda entry: entry.name):
                entries += 1
                if entries > limits.max_entries:
                    raise ArchiveError(f"directory has more than {limits.max_entries} entries")
                relative = prefix + item.name
                if len(relative.encode("utf-8", "surrogateescape")) > limits.max_path:
                    raise ArchiveError(f"path longer than {limits.max_path} bytes refused")
                if not prefix and item.name in SKIPPED_TOP_DIRS:
                    continue
                if item.is_symlink():
                    continue
                if item.is_dir(follow_symlinks=False):
                    stack.append((relative + "/", item.path))
                elif item.is_file(follow_symlinks=False):
                    yield relative, item.path


def _read_nofollow(path: str, budget: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ArchiveError("not a regular file")
        chunks = []
        total = 0
        while chunk := os.read(fd, _READ_CHUNK):
            total += len(chunk)
            if total > budget:
                raise ArchiveError("directory holds more bytes than allowed")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_directory(path: str | os.PathLike[str], limits: ArchiveLimits = ArchiveLimits()) -> Brain:
    """Read a brain directory: regular files only, symlinks neither followed nor taken."""
    root = Path(path)
    if not root.is_dir():
        raise ArchiveError(f"not a directory: {root}")
    files: dict[str, bytes] = {}
    used = 0
    for relative, absolute in _walk(root, limits):
        if "\\" in relative:
            continue  # cannot round-trip through an archive safely
        try:
            content = _read_nofollow(absolute, limits.max_inflated - used)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                continue  # swapped for a symlink or a fifo while we looked
            raise
        used += len(content)
        files[relative] = content
    return Brain(files)


def save_directory(brain: Brain, path: str | os.PathLike[str], *, remove_missing: bool = True) -> None:
    """Write ``brain`` into directory ``path`` (created if needed), never outside it.

    All or nothing as far as a file system allows: every changed file is first written to a
    temporary file beside it, and only when all are written are they renamed into place, the
    brain's ``index.json`` (what makes a memory part of the brain) last. A write that fails
    (a full disk, a directory where a memory's file goes) removes the temporary files and
    leaves the brain as it was, never an index naming files that were not written. Files are
    written only when their bytes changed; directories on the way are
    opened without following symlinks, so a planted link cannot redirect a write. With
    ``remove_missing``, regular files under ``path`` that the brain no longer holds are
    deleted (forget moves files), except device sync state (``.sync/``, ``.cloud/``).
    """
    root = Path(path)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    for relative in brain.files:
        if safe_relative_path(relative) != relative or _skipped(relative):
            raise ArchiveError(f"brain holds an unsafe path: {relative[:200]!r}")
    _check_tree(brain.files)
    existing = {relative: absolute for relative, absolute in _walk(root, ArchiveLimits(max_entries=10**9))}
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    staged: list[tuple[str, str]] = []  # (relative path, its temporary file's name)
    renamed = 0
    try:
        for relative, content in sorted(brain.files.items(), key=lambda item: item[0] == INDEX):
            absolute = existing.get(relative)
            if absolute is not None:
                try:
                    if _read_nofollow(absolute, len(content) + 1) == content:
                        continue
                except (OSError, ArchiveError):
                    pass
            staged.append((relative, _stage_file(root_fd, relative, content)))
        for relative, temporary in staged:
            _rename_into_place(root_fd, relative, temporary)
            renamed += 1
        if remove_missing:
            for relative in existing.keys() - brain.files.keys():
                _remove_file(root_fd, relative)
    finally:
        for relative, temporary in staged[renamed:]:
            _discard_staged(root_fd, relative, temporary)
        os.close(root_fd)


def _open_parent(root_fd: int, relative: str, *, create: bool) -> tuple[int, str]:
    """A descriptor of the file's directory, reached component by component."""
    *folders, leaf = relative.split("/")
    fd = os.dup(root_fd)
    try:
        for folder in folders:
            if create:
                try:
                    os.mkdir(folder, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                next_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise ArchiveError(
                    f"cannot write below {relative[:200]!r}: a path component is not a directory"
                ) from exc
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd, leaf


def _stage_file(root_fd: int, relative: str, content: bytes) -> str:
    """Write ``content`` to a new temporary file beside ``relative``; its name. Refuses (ArchiveError)
    a path a directory already holds, which the rename into place could not replace."""
    fd, leaf = _open_parent(root_fd, relative, create=True)
    try:
        try:
            taken = stat.S_ISDIR(os.stat(leaf, dir_fd=fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            taken = False
        if taken:
            raise ArchiveError(f"cannot write {relative[:200]!r}: a directory of that name is in the way")
        temporary = f".{leaf[:100]}.{secrets.token_hex(6)}.tmp"
        out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(out, view) :]
        except BaseException:
            os.close(out)
            os.unlink(temporary, dir_fd=fd)
            raise
        os.close(out)
        return temporary
    finally:
        os.close(fd)


def _rename_into_place(root_fd: int, relative: str, temporary: str) -> None:
    fd, leaf = _open_parent(root_fd, relative, create=False)
    try:
        # rename replaces a planted symlink itself, never its target
        os.replace(temporary, leaf, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


def _discard_staged(root_fd: int, relative: str, temporary: str) -> None:
    """Remove a temporary file `_stage_file` wrote that was not renamed into place."""
    try:
        fd, _ = _open_parent(root_fd, relative, create=False)
    except ArchiveError:
        return
    try:
        os.unlink(temporary, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def _remove_file(root_fd: int, relative: str) -> None:
    try:
        fd, leaf = _open_parent(root_fd, relative, create=False)
    except ArchiveError:
        return
    try:
        if stat.S_ISREG(os.stat(leaf, dir_fd=fd, follow_symlinks=False).st_mode):
            os.unlink(leaf, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)
