"""Hand-made tar and gzip pieces for the archive inspector tests (hostile ones included)."""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from collections.abc import Iterable, Iterator

BLOCK = 512
END = bytes(2 * BLOCK)


def header(
    name: bytes = b"file.md",
    typeflag: bytes = b"0",
    size: int = 0,
    *,
    magic: bytes = b"ustar\x0000",
    size_field: bytes | None = None,
    prefix: bytes = b"",
    linkname: bytes = b"",
    checksum_delta: int = 0,
) -> bytes:
    """One 512-byte tar header with a correct checksum (unless ``checksum_delta``)."""
    block = bytearray(BLOCK)
    block[0 : len(name[:100])] = name[:100]
    block[100:108] = b"0000644\x00"
    block[108:116] = b"0001750\x00"
    block[116:124] = b"0001750\x00"
    block[124:136] = size_field if size_field is not None else b"%011o\x00" % size
    block[136:148] = b"14712345670\x00"
    block[156:157] = typeflag
    block[157 : 157 + len(linkname)] = linkname
    block[257:265] = magic
    block[345 : 345 + len(prefix)] = prefix
    block[148:156] = b" " * 8
    checksum = sum(block) + checksum_delta
    block[148:156] = b"%06o\x00 " % checksum
    return bytes(block)


def padded(data: bytes) -> bytes:
    """Tar member data padded to whole blocks."""
    return data + bytes(-len(data) % BLOCK)


def member(name: bytes, data: bytes = b"", typeflag: bytes = b"0", **kwargs: object) -> bytes:
    """Header plus padded data."""
    return header(name, typeflag, len(data), **kwargs) + padded(data)  # type: ignore[arg-type]


def pax_record(key: bytes, value: bytes) -> bytes:
    """One pax record ``"<len> key=value\\n"`` with its self-inclusive length."""
    body = b" " + key + b"=" + value + b"\n"
    length = len(body) + 1
    while len(str(length).encode()) + len(body) != length:
        length += 1
    return str(length).encode() + body


def pax(records: dict[bytes, bytes], typeflag: bytes = b"x") -> bytes:
    """A pax extended header member."""
    data = b"".join(pax_record(k, v) for k, v in records.items())
    return member(b"PaxHeader/x", data, typeflag)


def gz(tar: bytes, level: int = 6) -> bytes:
    """A single-member gzip of ``tar``."""
    return gzip.compress(tar, compresslevel=level, mtime=0)


def tarfile_archive(entries: Iterable[tuple[str, bytes | None]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar.gz made by Python's tarfile: ``(name, data)`` files, ``(name, None)`` directories."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=fmt) as archive:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def many_entries_gz(count: int, batch: int = 2000) -> Iterator[bytes]:
    """A streamed tar.gz of ``count`` empty files, generated without holding it in memory."""
    template = bytearray(header(b"f0000000"))
    template[148:156] = b" " * 8
    base = sum(template) - sum(b"f0000000")
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    for start in range(0, count, batch):
        parts = []
        for index in range(start, min(count, start + batch)):
            name = b"f%07d" % index
            template[0:8] = name
            template[148:156] = b"%06o\x00 " % (base + sum(name))
            parts.append(bytes(template))
        out = compressor.compress(b"".join(parts))
        if out:
            yield out
    yield compressor.compress(END)
    yield compressor.flush()


def zeros_gz(total: int, first: bytes = b"") -> Iterator[bytes]:
    """A streamed gzip of ``first`` then about ``total`` zero bytes: a gzip bomb (~1000:1).

    One MiB of zeros deflated and fully flushed gives the same bytes every time, so the
    bomb is that block repeated; the gzip trailer is correct for the content.
    """
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = raw.compress(first) + raw.flush(zlib.Z_FULL_FLUSH)
    mib = bytes(1 << 20)
    block = raw.compress(mib) + raw.flush(zlib.Z_FULL_FLUSH)
    tail = raw.flush()
    count = total >> 20
    crc = zlib.crc32(first)
    for _ in range(count):
        crc = zlib.crc32(mib, crc)
    size = len(first) + (count << 20)
    yield b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + head
    for _ in range(count):
        yield block
    yield tail + crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little")
