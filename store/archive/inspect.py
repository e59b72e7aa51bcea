"""Streaming validation of an uploaded brain archive (a gzip-compressed tar).

The store never unpacks an archive; it only has to be sure the upload *is* a
well-formed gzip-compressed tar of plain files and directories, and count its
regular files. This module does that while the body streams in, with memory
bounded by a few small buffers whatever the input:

* gzip is inflated incrementally (``decompressobj(wbits=31)`` of zlib-ng, zlib's
  API with an inflate that is about twice as fast on text) with a cap on
  the output of each step, so a gzip bomb never produces more than one small
  buffer at a time; several gzip members in a row are accepted, as gzip does.
* tar headers are parsed block by block (ustar, GNU and pax), checksums verified;
  file contents are skipped by counting, never stored.
* everything that could smuggle something past a client's unpacker, or that is
  simply not a complete archive, is refused with a message meant for the client.

Use::

    inspector = ArchiveInspector(InspectLimits())
    for chunk in body:
        inspector.feed(chunk)          # raises ArchiveRejected
    summary = inspector.finish()       # raises ArchiveRejected

Every :class:`ArchiveRejected` maps to HTTP 400 (the body is not an acceptable
gzip-compressed tar); ``exc.reason`` says which family of problem it was.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

# Inflating is most of what validating an upload costs: zlib-ng's inflate is ~2.3x
# zlib's on text archives (brains are Markdown and JSON), ~1.2x on incompressible data.
from zlib_ng import zlib_ng

__all__ = ["ArchiveInspector", "ArchiveRejected", "ArchiveSummary", "InspectLimits", "inspect_bytes"]

GIB = 1 << 30
BLOCK = 512
_ZERO_BLOCK = bytes(BLOCK)
# Compressed input is handed to zlib in slices of ``step`` bytes, and one inflate call
# produces at most ``step`` bytes (the whole decompression buffer budget). Each call
# releases and retakes the GIL, so steps should not be tiny; ``unconsumed_tail`` is a
# copy of the rest of the slice, which stays linear as long as the input slice is no
# larger than the output step. Archives held whole in memory take bigger steps.
STEP = 64 * 1024
# gzip members allowed before each must carry, on average, _MIN_MEMBER_CONTENT bytes.
_FREE_MEMBERS = 64
_MIN_MEMBER_CONTENT = 4096
# Metadata headers (pax ``x``, GNU ``L``/``K``) allowed in a row before a real entry.
_MAX_META_CHAIN = 8

_REGULAR = frozenset((b"0", b"\x00", b"7"))  # "7" (contiguous file) is a regular file to every unpacker
_REFUSED_TYPES = {
    b"1": "hard links are not allowed",
    b"2": "symbolic links are not allowed",
    b"3": "character devices are not allowed",
    b"4": "block devices are not allowed",
    b"6": "FIFOs are not allowed",
    b"S": "sparse files are not supported",
}
_V7_MAGIC = bytes(8)


# Inflation ratio (tar bytes per compressed byte) no brain of Markdown reaches. Measured:
# the recall-parity brains (13-500 files) 12-21x at gzip levels 1-9, small reference-store
# archives ~35x (mostly tar padding), 5,000 near-empty files 108-148x; one Markdown file of
# a single line repeated 400x; zeros ~1,000x (deflate's ceiling is ~1,032x).
MAX_RATIO = 200
# Below this many inflated bytes the ratio is not checked: a bomb that small harms nothing,
# and tiny archives are mostly tar padding (a 10 KiB tar of a few lines gzips to ~300 bytes).
RATIO_FLOOR = 16 << 20


@dataclass(frozen=True)
class InspectLimits:
    """Bounds on what one archive may make us do.

    ``max_inflated``: bytes of tar data after decompression; ``max_entries``: tar
    members (files and directories); ``max_header``: bytes of one pax extended
    header or GNU long-name record; ``max_ratio``: tar bytes per compressed byte
    received so far, checked once more than ``ratio_floor`` bytes are inflated
    (0: not checked).
    """

    max_inflated: int = GIB
    max_entries: int = 500_000
    max_header: int = 256 * 1024
    max_ratio: int = MAX_RATIO
    ratio_floor: int = RATIO_FLOOR

    def __post_init__(self) -> None:
        for name in ("max_inflated", "max_entries", "max_header"):
            if getattr(self, name) < 1:
                raise ValueError(f"InspectLimits.{name} must be at least 1")
        if self.max_ratio < 0 or self.ratio_floor < 0:
            raise ValueError("InspectLimits.max_ratio and ratio_floor must not be negative")


@dataclass(frozen=True)
class ArchiveSummary:
    """What the store learns from a valid archive.

    ``file_count`` counts regular-file entries exactly; ``entries`` counts every
    member (files and directories); ``inflated_bytes`` is the size of the tar stream.
    """

    file_count: int
    inflated_bytes: int
    entries: int


class ArchiveRejected(ValueError):
    """The upload is not an acceptable gzip-compressed tar (answer 400 with ``message``).

    ``reason`` is one of ``"not-gzip"``, ``"gzip"`` (corrupt or truncated gzip, or junk
    after it), ``"tar"`` (malformed or truncated tar), ``"entry"`` (an entry type or
    name we refuse) and ``"limit"`` (a bound of :class:`InspectLimits` was crossed).
    """

    def __init__(self, message: str, *, reason: str = "tar") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


def inspect_bytes(data: bytes, limits: InspectLimits | None = None) -> ArchiveSummary:
    """Validate a whole archive held in memory (tests, CLI tools)."""
    inspector = ArchiveInspector(limits)
    inspector.feed(data)
    return inspector.finish()


# States of the gzip layer.
_GZ_START, _GZ_MEMBER, _GZ_BETWEEN, _GZ_PADDING = range(4)


class ArchiveInspector:
    """Validate a gzip-compressed tar fed in chunks of any size; see the module doc.

    After the first rejection the inspector stays failed: every later call raises
    the same :class:`ArchiveRejected`.
    """

    def __init__(self, limits: InspectLimits | None = None, *, step: int = STEP) -> None:
        self._limits = limits or InspectLimits()
        self._step = step
        self._tar = _TarParser(self._limits)
        self._gz: zlib_ng._Decompress | None = None
        self._gz_state = _GZ_START
        self._held = b""  # at most one byte, while deciding what follows a gzip member
        self._compressed = 0
        self._members = 0
        self._inflated = 0
        self._failed: ArchiveRejected | None = None
        self._done = False

    @property
    def inflated_bytes(self) -> int:
        """Bytes of tar data inflated so far."""
        return self._inflated

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        """Inspect the next piece of the upload; raise :class:`ArchiveRejected` if it is unacceptable."""
        self._check_usable()
        try:
            view = memoryview(chunk).cast("B")
            self._compressed += len(view)
            step = self._step
            for start in range(0, len(view), step):
                self._feed_compressed(view[start : start + step])
        except ArchiveRejected as exc:
            self._failed = exc
            raise

    def finish(self) -> ArchiveSummary:
        """Declare the upload complete; return its summary or raise :class:`ArchiveRejected`."""
        self._check_usable()
        try:
            self._finish_gzip()
            self._tar.finish()
        except ArchiveRejected as exc:
            self._failed = exc
            raise
        self._done = True
        return ArchiveSummary(self._tar.file_count, self._inflated, self._tar.entries)

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._done:
            raise RuntimeError("ArchiveInspector already finished")

    # gzip layer

    def _feed_compressed(self, piece: bytes | memoryview) -> None:
        while len(piece):
            state = self._gz_state
            if state == _GZ_PADDING:
                if bytes(piece).strip(b"\x00"):
                    raise ArchiveRejected("unexpected data after the end of the gzip stream", reason="gzip")
                return
            if state != _GZ_MEMBER:
                piece = self._start_member(piece)
                continue
            piece = self._inflate(piece)

    def _start_member(self, piece: bytes | memoryview) -> bytes | memoryview:
        """Decide whether ``piece`` begins a gzip member (or, after one, zero padding)."""
        data = self._held + bytes(piece) if self._held else piece  # no copy in the usual case
        self._held = b""
        if self._gz_state == _GZ_BETWEEN and data[0] == 0:
            # gzip(1) itself ignores zero bytes after the last member (tape padding).
            self._gz_state = _GZ_PADDING
            return data
        if len(data) < 2:
            self._held = bytes(data)
            return b""
        if bytes(data[:2]) != b"\x1f\x8b":
            if self._gz_state == _GZ_START:
                raise ArchiveRejected("the upload is not gzip-compressed (expected a .tar.gz archive)", reason="not-gzip")
            raise ArchiveRejected("unexpected data after the end of the gzip stream", reason="gzip")
        # Each member costs a fresh decompressor and a copy of the rest of the input
        # slice: tiny members would multiply the work per uploaded byte. Real multi-member
        # files (bgzip, pigz --independent) carry tens of KiB per member.
        self._members += 1
        if self._members > _FREE_MEMBERS and self._members * _MIN_MEMBER_CONTENT > self._inflated:
            raise ArchiveRejected("the gzip stream has too many tiny members", reason="gzip")
        self._gz = zlib_ng.decompressobj(wbits=31)
        self._gz_state = _GZ_MEMBER
        return data

    def _inflate(self, piece: bytes | memoryview) -> bytes | memoryview:
        """Inflate ``piece`` in bounded steps; return what follows the member if it ended."""
        gz = self._gz
        assert gz is not None
        step = self._step
        while True:
            try:
                out = gz.decompress(piece, step)
            except zlib_ng.error as exc:
                raise ArchiveRejected(f"the gzip data is corrupt ({_zlib_reason(exc)})", reason="gzip") from None
            if out:
                self._inflated += len(out)
                limits = self._limits
                if self._inflated > limits.max_inflated:
                    raise ArchiveRejected(f"the archive inflates to more than {_human(limits.max_inflated)}", reason="limit")
                if limits.max_ratio and self._inflated > limits.ratio_floor and self._inflated > limits.max_ratio * self._compressed:
                    # Checked against what was received so far, so a bomb stops early.
                    raise ArchiveRejected(
                        f"the archive inflates to more than {limits.max_ratio} times its compressed size "
                        f"({_human(self._compressed, exact=False)} to over {_human(self._inflated, exact=False)}); "
                        "brains of text compress far less than that",
                        reason="limit",
                    )
                self._tar.feed(out)
            if gz.eof:
                self._gz_state = _GZ_BETWEEN
                self._gz = None
                return gz.unused_data
            piece = gz.unconsumed_tail
            # A full output step may leave output buffered inside zlib even when all
            # input was consumed: keep draining until a step comes back short.
            if not piece and len(out) < step:
                return b""

    def _finish_gzip(self) -> None:
        if self._gz_state == _GZ_START:
            if self._compressed == 0:
                raise ArchiveRejected("the upload is empty (expected a .tar.gz archive)", reason="not-gzip")
            raise ArchiveRejected("the upload is not gzip-compressed (expected a .tar.gz archive)", reason="not-gzip")
        if self._gz_state == _GZ_MEMBER:
            raise ArchiveRejected("the gzip stream is truncated", reason="gzip")
        if self._held:
            raise ArchiveRejected("unexpected data after the end of the gzip stream", reason="gzip")
        if self._inflated == 0:
            raise ArchiveRejected("the gzip stream is empty (no tar archive inside)", reason="tar")


# States of the tar layer.
_T_HEADER, _T_DATA, _T_ZERO1, _T_END = range(4)


class _TarParser:
    """Incremental tar parser: headers are checked, contents skipped by counting."""

    def __init__(self, limits: InspectLimits) -> None:
        self._limits = limits
        self._state = _T_HEADER
        self._block = bytearray()  # a header block split across feeds (< 512 bytes)
        self._skip_left = 0  # member content plus padding still to skip
        self._collect: bytearray | None = None  # content of a pax / GNU long-name record
        self._collect_left = 0
        self._collect_type = b""
        self._meta_chain = 0
        self._after_global = False  # a global header was the last header: an entry must follow
        self._next_path: bytes | None = None  # from pax "path" (wins, as in tarfile)
        self._next_long_name: bytes | None = None  # from GNU "L"
        self._next_size: int | None = None  # from pax "size"
        self._next_link = False  # a pax "linkpath" was given for the next entry
        self.file_count = 0
        self.entries = 0
        self._headers = 0

    def position(self) -> tuple[object, ...]:
        """Everything that decides how the parser reads what follows, its counters left out:
        two parsers at equal positions take equal bytes the same way."""
        collect = None if self._collect is None else bytes(self._collect)
        return (
            self._state, bytes(self._block), self._skip_left, collect, self._collect_left, self._collect_type,
            self._meta_chain, self._after_global, self._next_path, self._next_long_name, self._next_size,
            self._next_link,
        )

    @property
    def counters(self) -> tuple[int, int, int]:
        """(files, entries, headers) so far."""
        return self.file_count, self.entries, self._headers

    def resume(self, position: tuple[object, ...], counters: tuple[int, int, int]) -> None:
        """Stand at ``position`` (from `position`) with these ``counters``."""
        (state, block, self._skip_left, collect, self._collect_left, self._collect_type, self._meta_chain,
         self._after_global, self._next_path, self._next_long_name, self._next_size, self._next_link) = position
        self._state = state  # type: ignore[assignment]
        self._block = bytearray(block)  # type: ignore[arg-type]
        self._collect = None if collect is None else bytearray(collect)  # type: ignore[arg-type]
        self.file_count, self.entries, self._headers = counters

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        size = len(view)
        pos = 0
        while pos < size:
            state = self._state
            if state == _T_HEADER and not self._block and not self._meta_chain and type(data) is bytes:
                pos = self._common_headers(data, pos)
                if pos >= size or self._state != _T_HEADER:
                    continue
            if state == _T_DATA:
                # Member content and its padding: skipped, except metadata records.
                take = min(self._skip_left, size - pos)
                if self._collect is not None and self._collect_left:
                    keep = min(take, self._collect_left)
                    self._collect += view[pos : pos + keep]
                    self._collect_left -= keep
                pos += take
                self._skip_left -= take
                if self._skip_left == 0:
                    self._state = _T_HEADER
                    if self._collect is not None:
                        self._end_meta()
                continue
            if state == _T_END:
                # Zero padding after the end marker is normal (tar pads to its record size).
                if view[pos:].tobytes().strip(b"\x00"):
                    raise ArchiveRejected("unexpected data after the end of the tar archive", reason="tar")
                return
            # _T_HEADER or _T_ZERO1: assemble one 512-byte block.
            if self._block:
                need = BLOCK - len(self._block)
                self._block += view[pos : pos + need]
                pos += min(need, size - pos)
                if len(self._block) < BLOCK:
                    return
                block = bytes(self._block)
                self._block.clear()
            elif size - pos >= BLOCK:
                block = view[pos : pos + BLOCK].tobytes()
                pos += BLOCK
            else:
                self._block += view[pos:]
                return
            self._on_block(block)

    def _common_headers(self, data: bytes, pos: int) -> int:
        """Take the headers of the common shape from ``pos`` on, with the contents that follow
        them within ``data``; return where the general path takes over.

        The same steps as the general loop (``_on_block``, ``_on_header``, then skipping the
        content), fused: a brain has one such header per file and directory (10,332 at
        10,000 memories: their parsing went from 27 to 24 ms). The first header that is not
        of the common shape (a zero block, pax, GNU long names, any doubt) is left,
        unconsumed, to the general path.
        """
        size = len(data)
        common_numbers = _COMMON_NUMBERS.match
        while size - pos >= BLOCK:
            block = data[pos : pos + BLOCK]
            common = common_numbers(block, 100)
            if common is None or not self._common_entry(block, common):
                return pos
            pos += BLOCK
            skip = self._skip_left
            if skip:  # the content and its padding, when this chunk holds them all
                if skip > size - pos:
                    return pos
                pos += skip
                self._skip_left = 0
                self._state = _T_HEADER
        return pos

    def finish(self) -> None:
        if self._state == _T_END:
            return
        if self._state == _T_DATA or self._block:
            raise ArchiveRejected("the tar archive is truncated", reason="tar")
        if self._collect is not None or self._meta_chain or self._after_global:
            raise ArchiveRejected("the tar archive is truncated after an extended header", reason="tar")
        if self._state == _T_ZERO1:
            raise ArchiveRejected("the tar archive's end marker is incomplete (one zero block, not two)", reason="tar")
        raise ArchiveRejected("the tar archive has no end marker (truncated?)", reason="tar")

    def _on_block(self, block: bytes) -> None:
        if block == _ZERO_BLOCK:
            if self._state == _T_ZERO1:
                self._state = _T_END
                return
            # A global header too: tarfile reads the header after one as part of it, and refuses
            # the archive when none follows.
            if self._meta_chain or self._after_global:
                raise ArchiveRejected("an extended header is not followed by an entry", reason="tar")
            self._state = _T_ZERO1
            return
        if self._state == _T_ZERO1:
            raise ArchiveRejected("a lone zero block inside the tar archive (damaged or concatenated archive)", reason="tar")
        self._on_header(block)

    def _on_header(self, block: bytes) -> None:
        common = _COMMON_NUMBERS.match(block, 100)
        if common is None or self._meta_chain or not self._common_entry(block, common):
            self._on_any_header(block)

    def _common_entry(self, block: bytes, common: re.Match[bytes]) -> bool:
        """Take a header of the common shape in a few C-level steps; False leaves it to ``_on_any_header``.

        The shape (see ``_COMMON_NUMBERS``) is what tarfile, GNU tar and bsdtar write for a
        plain file or directory. Only headers that ``_on_any_header`` accepts with the same
        outcome are taken here; every doubt (odd magic, a ustar prefix, a name that needs a
        closer look, a bad checksum, a limit about to be crossed) goes the general way,
        which also words the error. Nothing changes before the decision.
        """
        if block[345] or block[257:265] not in _COMMON_MAGIC:
            return False
        if block[329:345] != _NO_DEVICES and _COMMON_DEVICES.match(block, 329) is None:
            return False
        size_field, checksum_field, typeflag = common.groups()
        name = block[:100].split(b"\x00", 1)[0]
        if not name or name[0] == 0x2F or name[1:2] == b":" or b".." in name:
            return False
        if len(name.translate(None, _ODD_BYTES)) < len(name):
            return False
        size = int(size_field.rstrip(b" \x00"), 8)
        if (size if typeflag == b"5" else name[-1] == 0x2F) or not _checksum_ok(
            block, int(checksum_field.rstrip(b" \x00"), 8)
        ):
            return False
        limits = self._limits
        if self.entries >= limits.max_entries or self._headers >= 2 * limits.max_entries + 64:
            return False
        self._headers += 1
        self.entries += 1
        self._after_global = False
        if typeflag == b"0":
            self.file_count += 1
        self._skip(size)
        return True

    def _on_any_header(self, block: bytes) -> None:
        """The general path: every header shape tar allows is understood, or refused with a reason."""
        first = self.entries == 0 and self._meta_chain == 0
        # Extended and global headers cost as much as entries but are not entries:
        # bound them too, so CPU per upload stays proportional to max_entries.
        self._headers += 1
        if self._headers > 2 * self._limits.max_entries + 64:
            raise ArchiveRejected("the archive has too many tar headers", reason="limit")
        stored = _octal(block[148:156])
        if stored < 0 or not _checksum_ok(block, stored):
            if first:
                raise ArchiveRejected("the gzip data is not a tar archive", reason="tar")
            raise ArchiveRejected(f"tar header checksum mismatch after entry {self.entries}", reason="tar")
        magic = block[257:265]
        if magic[:6] == b"ustar\x00":
            posix = True
        elif magic == b"ustar  \x00" or magic == _V7_MAGIC:  # GNU, or old V7 headers
            posix = False
        else:
            raise ArchiveRejected("unsupported tar header format", reason="tar")
        typeflag = block[156:157]
        size = _size_field(block[124:136])
        # Unpackers (tarfile, GNU tar) refuse a header whose other numbers do not parse.
        # Fast path: only octal digits, spaces and NULs, and no digits split by spaces;
        # anything else (base-256 numbers, odd padding) is checked field by field.
        numbers = block[100:124] + block[136:148] + block[329:345]
        if numbers.translate(None, b"01234567 \x00") or _SPACED_DIGITS.search(numbers):
            for start, end in _NUMERIC_FIELDS:
                if not _numeric_ok(block[start:end]):
                    raise ArchiveRejected(
                        f"a tar header has an invalid numeric field after entry {self.entries}", reason="tar"
                    )

        if typeflag in (b"x", b"g", b"L", b"K"):
            self._start_meta(typeflag, size)
            return

        raw_name = _nts(block[0:100])
        if typeflag == b"\x00" and raw_name.endswith(b"/"):
            typeflag = b"5"  # old V7 convention: a "regular file" named with a trailing slash is a directory
        # The header's own name (with the ustar prefix). GNU headers keep other data in
        # the prefix area, but some unpackers (Python's tarfile) read it as a prefix
        # anyway, so that reading must be safe too.
        prefix = _nts(block[345:500])
        header_name = prefix + b"/" + raw_name if prefix else raw_name
        name = self._next_path if self._next_path is not None else self._next_long_name
        if name is None:
            name = header_name if posix else raw_name
        if header_name != name:
            # Overridden (pax path, GNU long name) or GNU: an unpacker that ignores the
            # extension still sees the header's name, so it must be safe as well.
            _check_name(header_name, allow_empty=True)
        if self._next_size is not None:
            size = self._next_size
        self._next_path = None
        self._next_long_name = None
        self._next_size = None
        self._next_link = False
        self._meta_chain = 0
        self._after_global = False

        refused = _REFUSED_TYPES.get(typeflag)
        if refused is not None:
            raise ArchiveRejected(f"{refused} (entry {_show(name)})", reason="entry")
        if typeflag in _REGULAR:
            if name.endswith(b"/"):
                raise ArchiveRejected(f"a file entry's name ends with '/' (entry {_show(name)})", reason="entry")
            self.file_count += 1
        elif typeflag != b"5":
            raise ArchiveRejected(f"unsupported tar entry type {_show(typeflag)} (entry {_show(name)})", reason="entry")
        elif size:
            # Unpackers disagree on whether a directory's data is skipped (tarfile reads
            # it as the next headers): bytes hidden there could smuggle entries past us.
            raise ArchiveRejected(f"a directory entry carries data (entry {_show(name)})", reason="entry")
        _check_name(name)
        self.entries += 1
        if self.entries > self._limits.max_entries:
            raise ArchiveRejected(f"the archive has more than {self._limits.max_entries} entries", reason="limit")
        self._skip(size)

    def _skip(self, size: int) -> None:
        self._skip_left = size + (-size % BLOCK)
        self._state = _T_DATA if size else _T_HEADER

    def _start_meta(self, typeflag: bytes, size: int) -> None:
        if size > self._limits.max_header:
            raise ArchiveRejected(
                f"a tar extended header is larger than {_human(self._limits.max_header)}", reason="limit"
            )
        if typeflag != b"g":
            self._meta_chain += 1
            if self._meta_chain > _MAX_META_CHAIN:
                raise ArchiveRejected("too many extended headers in a row", reason="tar")
        else:
            self._after_global = True
        self._collect = bytearray()
        self._collect_left = size
        self._collect_type = typeflag
        self._skip(size)
        if size == 0:
            self._end_meta()

    def _end_meta(self) -> None:
        data = self._collect if self._collect is not None else bytearray()
        typeflag = self._collect_type
        self._collect = None
        if typeflag == b"L":
            # Unpackers disagree on which of several names wins: every one must be safe,
            # and one entry gets one long name (readers differ on which of two they keep).
            if self._next_long_name is not None:
                raise ArchiveRejected("an entry has two GNU long names", reason="tar")
            self._next_long_name = bytes(_nts(data))
            _check_name(self._next_long_name)
        elif typeflag == b"K":
            pass  # a long link target: only links use it, and links are refused anyway
        else:
            records = _parse_pax(data)
            if any(key.startswith(b"GNU.sparse.") for key in records):
                raise ArchiveRejected("sparse files are not supported", reason="entry")
            if typeflag == b"g":
                # A global header applies to every later entry; git and others only put
                # comments there. One that renames or resizes entries is refused.
                if records.keys() & {b"path", b"size", b"linkpath"}:
                    raise ArchiveRejected("a global tar header may not set path or size", reason="tar")
                return
            # Several extended headers before one entry: a reader that keeps the first value
            # and one that keeps the last must not see different entries.
            if (
                (b"path" in records and self._next_path is not None)
                or (b"size" in records and self._next_size is not None)
                or (b"linkpath" in records and self._next_link)
            ):
                raise ArchiveRejected("two tar extended headers set the same entry's path, size or link target", reason="tar")
            if b"path" in records:
                self._next_path = records[b"path"]
                _check_name(self._next_path)
            if b"size" in records:
                value = records[b"size"]
                # int() refuses over 4,300 digits (a ValueError, an upload's 500); no size needs 30.
                if not value.isdigit() or len(value) > _MAX_SIZE_DIGITS:
                    raise ArchiveRejected("a tar extended header has an invalid size", reason="tar")
                self._next_size = int(value)
            self._next_link = self._next_link or b"linkpath" in records


_PAX_KEYS = frozenset((b"path", b"size", b"linkpath"))
_MAX_SIZE_DIGITS = 30  # of a pax size: 10^30 bytes is beyond every limit already
_SPARSE = b"GNU.sparse."


def _parse_pax(data: bytes | bytearray) -> dict[bytes, bytes]:
    """Parse pax records (``"<len> <key>=<value>\\n"``); refuse anything malformed.

    Only the keys that matter here are kept (path, size, linkpath, and any
    ``GNU.sparse.*`` key, with an empty value): a large comment is never copied.
    A key given twice is refused: tar readers disagree on whether the first or the
    last value counts (``path=../evil`` then ``path=ok`` passes a check of the last
    one only), so two values would give one archive two meanings.
    """
    records: dict[bytes, bytes] = {}
    seen: set[bytes] = set()
    pos = 0
    end = len(data)
    while pos < end:
        if data[pos] == 0:
            if data[pos:].strip(b"\x00"):
                break  # fall through to the error below
            return records
        space = data.find(b" ", pos, min(end, pos + 24))
        length_text = bytes(data[pos:space]) if space > pos else b""
        if not length_text.isdigit():
            break
        length = int(length_text)
        stop = pos + length
        if length <= len(length_text) + 1 or stop > end or data[stop - 1] != 0x0A:
            break
        equals = data.find(b"=", space + 1, stop - 1)
        if equals <= space + 1:
            break
        key = bytes(data[space + 1 : equals])  # keys are short; a long one costs at most the header's size
        if key in seen:
            raise ArchiveRejected(f"a tar extended (pax) header sets {_show(key)} twice", reason="tar")
        seen.add(key)
        if len(key) <= 8 or key.startswith(_SPARSE):
            if key in _PAX_KEYS:
                records[key] = bytes(data[equals + 1 : stop - 1])
            elif key.startswith(_SPARSE):
                records[key] = b""
        pos = stop
    else:
        return records
    raise ArchiveRejected("a tar extended (pax) header is malformed", reason="tar")


def _check_name(name: bytes, *, allow_empty: bool = False) -> None:
    if not name and not allow_empty:
        raise ArchiveRejected("a tar entry has an empty name", reason="entry")
    if b"\x00" in name:
        raise ArchiveRejected(f"a tar entry name contains a NUL byte ({_show(name)})", reason="entry")
    if _CONTROL.search(name):
        # A newline or escape sequence in a name can forge lines in listings, logs and
        # tool output that show it.
        raise ArchiveRejected(f"a tar entry name contains a control character ({_show(name)})", reason="entry")
    # "C:..." is absolute (or drive-relative) where the archive may be unpacked: Windows.
    if name.startswith((b"/", b"\\")) or (len(name) > 1 and name[1:2] == b":" and name[:1].isalpha()):
        raise ArchiveRejected(f"absolute paths are not allowed (entry {_show(name)})", reason="entry")
    # Backslashes count as separators too: the archive may be unpacked on Windows.
    if b".." in name and b".." in name.replace(b"\\", b"/").split(b"/"):
        raise ArchiveRejected(f"'..' path components are not allowed (entry {_show(name)})", reason="entry")


def _nts(field: bytes) -> bytes:
    """A NUL-terminated string field's value."""
    end = field.find(b"\x00")
    return field if end < 0 else field[:end]


def _octal(field: bytes) -> int:
    """An octal number field (NUL/space padded); -1 when it is not one."""
    end = field.find(b"\x00")
    text = (field if end < 0 else field[:end]).strip(b" ")
    # isdigit() first: int() alone would also accept signs, underscores and "0o".
    if not text.isdigit():
        return -1
    try:
        return int(text, 8)
    except ValueError:  # digits 8 and 9
        return -1


def _size_field(field: bytes) -> int:
    """An entry size: octal, or GNU base-256 (first byte 0x80) for large values."""
    if field[0] & 0x80:
        if field[0] != 0x80:
            raise ArchiveRejected("a tar header has a negative size", reason="tar")
        return int.from_bytes(field[1:], "big")
    if not field.strip(b"\x00 "):
        return 0
    value = _octal(field)
    if value < 0:
        raise ArchiveRejected("a tar header has an invalid size field", reason="tar")
    return value


_SPACED_DIGITS = re.compile(rb"[0-7] +[0-7]")
# Control characters: C0 and DEL as bytes, C1 (U+0080-U+009F) as UTF-8.
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]|\xc2[\x80-\x9f]")
# Bytes that send a name in a common header the general way: backslashes, control
# characters and 0xC2 (the lead byte of C1 controls in UTF-8, but also of NBSP, "\u00b0"...).
# One translate() finds them all (a regex search costs ~4x as much per header).
_ODD_BYTES = bytes(range(0x20)) + b"\x7f\\\xc2"


def _padded_octal(width: int) -> bytes:
    """Regex of a ``width``-byte number field: at least one octal digit, then NUL/space padding."""
    return b"(?:" + b"|".join(b"[0-7]{%d}[ \\x00]{%d}" % (k, width - k) for k in range(width - 1, 0, -1)) + b")"


# The common header shape, from offset 100: mode, uid, gid, (size), mtime, (checksum) as
# padded octal, then (typeflag) "0" or "5". Devices (offset 329) are padded octal or empty.
_COMMON_NUMBERS = re.compile(
    _padded_octal(8) * 3 + b"(" + _padded_octal(12) + b")" + _padded_octal(12) + b"(" + _padded_octal(8) + b")([05])"
)
_COMMON_DEVICES = re.compile(b"(?:\\x00{8}|" + _padded_octal(8) + b"){2}")
_NO_DEVICES = bytes(16)
_COMMON_MAGIC = (b"ustar\x0000", b"ustar  \x00")  # POSIX ustar (version "00"), GNU
# mode, uid, gid, mtime, devmajor, devminor
_NUMERIC_FIELDS = ((100, 108), (108, 116), (116, 124), (136, 148), (329, 337), (337, 345))


def _numeric_ok(field: bytes) -> bool:
    """Whether a numeric header field is octal (NUL/space padded, may be empty) or base-256."""
    if field[0] & 0x80:
        return field[0] in (0x80, 0xFF)
    end = field.find(b"\x00")
    text = (field if end < 0 else field[:end]).strip(b" ")
    return not text.translate(None, b"01234567")


def _checksum_ok(block: bytes, stored: int) -> bool:
    """Whether ``stored`` is the header's checksum (sum of its bytes, checksum field as spaces).

    ``sum(block)`` costs a Python-level loop over 512 bytes for every header; instead the
    sum comes from C: Adler-32's low half is ``1 + sum mod 65521``, and 256 bytes sum to
    at most 65,280, below the modulus, so each half's sum is exact.

    The historic signed-char sum is not accepted: Python's tarfile takes it but other
    unpackers (node-tar) skip such a header and read its data as headers instead.
    """
    total = (zlib.adler32(block[:256]) & 0xFFFF) + (zlib.adler32(block[256:]) & 0xFFFF) - 2
    field = (zlib.adler32(block[148:156]) & 0xFFFF) - 1
    return total - field + 8 * 0x20 == stored


def _show(name: bytes) -> str:
    text = name.decode("utf-8", "replace")
    if len(text) > 120:
        text = text[:117] + "..."
    return repr(text)


def _human(size: int, *, exact: bool = True) -> str:
    """``size`` in the largest unit that divides it (``exact``) or that it reaches (rounded down)."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and (size % factor == 0 or not exact):
            return f"{size // factor} {unit}"
    return f"{size} bytes"


def _zlib_reason(exc: zlib_ng.error) -> str:
    text = str(exc)
    # zlib messages look like "Error -3 while decompressing data: invalid block type".
    return text.split(": ", 1)[-1] if ": " in text else text
