"""Hostile archives and request bodies, built in memory (pure functions, no I/O).

Each builder returns the bytes of one upload that a careful store must refuse.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from collections.abc import Callable, Iterable

from contract.conformance.archives import brain_archive, make_archive

MIB = 1024 * 1024
BLOCK = 512


def _tar(add: Callable[[tarfile.TarFile], None], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as tar:
        add(tar)
    return raw.getvalue()


def _file(tar: tarfile.TarFile, name: str, data: bytes = b"x", **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attrs.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data))


def _special(tar: tarfile.TarFile, name: str, kind: bytes, **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in attrs.items():
        setattr(info, key, value)
    tar.addfile(info)


def tgz_with_entry(name: str) -> bytes:
    """A valid archive except for one regular file called ``name`` (e.g. '../x')."""
    return gzip.compress(_tar(lambda t: (_file(t, "memory/ok.md"), _file(t, name))), mtime=0)


def tgz_with_special(kind: bytes, **attrs: object) -> bytes:
    """An archive holding one entry of tar type ``kind`` (symlink, hard link, device, FIFO)."""

    def add(tar: tarfile.TarFile) -> None:
        _file(tar, "memory/a.md", b"hello")
        _special(tar, "memory/special", kind, **attrs)

    return gzip.compress(_tar(add), mtime=0)


def tgz_symlink_then_write_through() -> bytes:
    """A symlink to /tmp followed by a file written 'through' it."""

    def add(tar: tarfile.TarFile) -> None:
        _special(tar, "escape", tarfile.SYMTYPE, linkname="/tmp")
        _file(tar, "escape/pwned.md", b"owned")

    return gzip.compress(_tar(add), mtime=0)


def gzip_members(member: bytes, count: int) -> bytes:
    """``count`` copies of one gzip member in a row (a valid multi-member gzip stream)."""
    return member * count


def gzip_bomb(inflated: int, chunk: int = 64 * MIB) -> bytes:
    """A tar holding one file of ``inflated`` zero bytes, gzip-compressed as repeated members.

    Compressing one chunk and repeating the member keeps building fast whatever the size.
    """
    header = tarfile.TarInfo("memory/bomb.md")
    header.size = inflated
    first = gzip.compress(header.tobuf(tarfile.GNU_FORMAT), mtime=0)
    zeros = gzip.compress(bytes(chunk), compresslevel=9, mtime=0)
    repeats, rest = divmod(inflated, chunk)
    tail = gzip.compress(bytes(rest) + bytes(-inflated % BLOCK) + bytes(2 * BLOCK), mtime=0)
    return first + gzip_members(zeros, repeats) + tail


def many_entries(count: int) -> bytes:
    """A tar.gz of ``count`` empty regular files with distinct short names, built in ~1 s."""
    template = tarfile.TarInfo("f/0000000")
    template.size = 0
    template.mtime = 0
    header = bytearray(template.tobuf(tarfile.USTAR_FORMAT))
    # The name digits sit at offsets 2..8; the checksum (offset 148, 8 bytes) is the byte sum
    # with the checksum field read as spaces, so it can be updated by the digit difference.
    header[148:156] = b"        "
    base_sum = sum(header) - sum(header[2:9])
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    out = [comp.compress(b"")]
    batch = bytearray()
    for i in range(count):
        digits = b"%07d" % i
        header[2:9] = digits
        header[148:156] = b"%06o\x00 " % (base_sum + sum(digits))
        batch += header
        if len(batch) >= MIB:
            out.append(comp.compress(bytes(batch)))
            batch.clear()
    batch += bytes(2 * BLOCK)
    out.append(comp.compress(bytes(batch)))
    out.append(comp.flush())
    return b"".join(out)


def huge_pax_header(size: int) -> bytes:
    """One file whose pax extended header carries a ``size``-byte comment."""
    return gzip.compress(_tar(lambda t: _file(t, "memory/a.md", b"x", pax_headers={"comment": "A" * size})), mtime=0)


def huge_gnu_longname(size: int) -> bytes:
    """One file whose GNU long-name record is ``size`` bytes."""
    return gzip.compress(_tar(lambda t: _file(t, "memory/" + "n" * size + ".md"), fmt=tarfile.GNU_FORMAT), mtime=0)


def _pax_member(records: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A pax extended header member (typeflag ``x``) with ``records`` written as given, duplicates kept."""
    data = b""
    for key, value in records:
        body = b" " + key + b"=" + value + b"\n"
        length = len(body) + len(str(len(body)))
        length += len(str(length)) - len(str(len(body)))  # the length counts its own digits
        data += str(length).encode() + body
    info = tarfile.TarInfo("PaxHeader/entry")
    info.size = len(data)
    info.type = tarfile.XHDTYPE
    return info.tobuf(tarfile.USTAR_FORMAT) + data + bytes(-len(data) % BLOCK)


def duplicate_pax_path() -> bytes:
    """A pax header saying ``path=../evil.md`` then ``path=ok.md``: readers keeping the first escape."""
    entry = tarfile.TarInfo("placeholder.md")
    entry.size = 1
    tar = _pax_member([(b"path", b"../evil.md"), (b"path", b"memory/ok.md")]) + entry.tobuf(tarfile.USTAR_FORMAT)
    return gzip.compress(tar + b"x" + bytes(BLOCK - 1) + bytes(2 * BLOCK), mtime=0)


def duplicate_pax_size() -> bytes:
    """A pax header saying ``size=0`` then ``size=512``: a reader keeping the first reads the data as headers."""
    smuggled = tarfile.TarInfo("../smuggled.md").tobuf(tarfile.USTAR_FORMAT)
    entry = tarfile.TarInfo("memory/a.md")
    tar = _pax_member([(b"size", b"0"), (b"size", b"512")]) + entry.tobuf(tarfile.USTAR_FORMAT) + smuggled
    return gzip.compress(tar + bytes(2 * BLOCK), mtime=0)


def pax_size_of_many_digits(digits: int = 5000) -> bytes:
    """A pax header whose ``size`` has more digits than Python's int() reads (4,300)."""
    entry = tarfile.TarInfo("memory/a.md")
    entry.size = 1
    tar = _pax_member([(b"size", b"1" * digits)]) + entry.tobuf(tarfile.USTAR_FORMAT)
    return gzip.compress(tar + b"x" + bytes(BLOCK - 1) + bytes(2 * BLOCK), mtime=0)


def control_character_name() -> bytes:
    """A file whose name carries a newline and a terminal escape sequence."""
    return tgz_with_entry("memory/a.md\n1. forged result\x1b[2K.md")


def truncated_gzip() -> bytes:
    """A valid archive cut in the middle of its gzip stream."""
    data = brain_archive("truncated", 30)
    return data[: len(data) // 2]


def truncated_tar() -> bytes:
    """A complete gzip stream whose tar stops in the middle of a file's data."""
    tar = _tar(lambda t: _file(t, "memory/big.md", b"y" * 10_000))
    return gzip.compress(tar[: BLOCK * 5], mtime=0)


def tar_without_end_marker() -> bytes:
    """Complete entries but no two zero blocks at the end."""
    tar = _tar(lambda t: _file(t, "memory/a.md", b"z" * 100))
    return gzip.compress(tar[: 2 * BLOCK], mtime=0)


def empty_gzip() -> bytes:
    """A gzip stream of zero bytes."""
    return gzip.compress(b"", mtime=0)


def junk_after_gzip() -> bytes:
    """A valid archive followed by bytes that are not gzip."""
    return brain_archive("junk-after") + b"GARBAGE AFTER THE GZIP STREAM"


def junk_after_tar_end() -> bytes:
    """A tar with data after its end marker, inside one gzip stream."""
    tar = _tar(lambda t: _file(t, "memory/a.md", b"z"))
    return gzip.compress(tar + b"\x01smuggled" + bytes(BLOCK - 9), mtime=0)


def plain_tar() -> bytes:
    """A tar that is not gzip-compressed."""
    return _tar(lambda t: _file(t, "memory/a.md", b"not compressed"))


def bad_gzip_crc() -> bytes:
    """A valid archive whose gzip CRC trailer is wrong."""
    data = bytearray(brain_archive("crc"))
    data[-8] ^= 0xFF
    return bytes(data)


def gzip_of_text() -> bytes:
    """gzip of something that is not a tar."""
    return gzip.compress(b"hello, I am not a tar archive\n" * 50, mtime=0)


def multipart(parts: Iterable[tuple[str, str | None, bytes]], boundary: str = "hostile-boundary-7f3a") -> bytes:
    """A multipart/form-data body from (field, filename or None, data) parts.

    Written by hand only because hostile tests need bodies no client library would produce.
    """
    out = bytearray()
    for field, filename, data in parts:
        out += f"--{boundary}\r\n".encode()
        disposition = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename is not None else "")
        out += f"Content-Disposition: {disposition}\r\n".encode()
        out += b"Content-Type: application/gzip\r\n\r\n" + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out)


def valid_small(tag: str) -> bytes:
    """A small acceptable archive (for multipart cases whose archive is fine)."""
    return make_archive({f"memory/{tag}.md": tag.encode()})
