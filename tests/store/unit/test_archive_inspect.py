"""The streaming archive inspector: real archives accepted, a hostile corpus refused."""

from __future__ import annotations

import gzip
import io
import os
import random
import shutil
import subprocess
import tarfile
import tracemalloc
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from store.archive.inspect import (
    _COMMON_NUMBERS,
    MAX_RATIO,
    RATIO_FLOOR,
    ArchiveInspector,
    ArchiveRejected,
    ArchiveSummary,
    STEP,
    InspectLimits,
    _checksum_ok,
    _TarParser,
    inspect_bytes,
)
from tests.store.unit.tarbuild import (
    BLOCK,
    END,
    gz,
    header,
    many_entries_gz,
    member,
    padded,
    pax,
    pax_record,
    tarfile_archive,
    zeros_gz,
)
from tests.support.fixtures import project_parity_dir

SIMPLE = member(b"a.md", b"hello\n") + member(b"dir/", typeflag=b"5") + member(b"dir/b.md", b"x" * 700)


def feed_all(chunks: Iterable[bytes], limits: InspectLimits | None = None, step: int = STEP) -> ArchiveSummary:
    inspector = ArchiveInspector(limits, step=step)
    for chunk in chunks:
        inspector.feed(chunk)
    return inspector.finish()


def rejected(data: bytes | Iterable[bytes], limits: InspectLimits | None = None, step: int = STEP) -> ArchiveRejected:
    chunks = [data] if isinstance(data, bytes) else data
    with pytest.raises(ArchiveRejected) as info:
        feed_all(chunks, limits, step)
    assert info.value.message and str(info.value) == info.value.message
    return info.value


# ---------------------------------------------------------------- accepted archives


def test_simple_archive_counts_regular_files_only() -> None:
    summary = inspect_bytes(gz(SIMPLE + END))
    assert summary == ArchiveSummary(file_count=2, inflated_bytes=len(SIMPLE) + len(END), entries=3)


def test_empty_tar_is_valid_with_zero_files() -> None:
    assert inspect_bytes(gz(END)).file_count == 0


def test_zero_padding_after_end_marker_is_fine() -> None:
    assert inspect_bytes(gz(SIMPLE + END + bytes(20 * BLOCK + 100))).file_count == 2


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_python_tarfile_all_formats(fmt: int) -> None:
    long_dir = "d" * 90 + "/" + "e" * 90  # > 100 chars: prefix field, GNU long name or pax path
    entries: list[tuple[str, bytes | None]] = [
        ("notes", None),
        ("notes/one.md", b"one"),
        (long_dir, None),
        (long_dir + "/deep.md", os.urandom(70_000)),
        ("index.json", b"{}\n"),
    ]
    if fmt != tarfile.USTAR_FORMAT:
        entries.append(("x" * 150 + ".md", b"long name without a slash"))
    if fmt == tarfile.PAX_FORMAT:
        entries.append(("notes/caf\u00e9 \u2603.md", b"unicode"))
    summary = inspect_bytes(tarfile_archive(entries, fmt))
    assert summary.file_count == sum(1 for _, data in entries if data is not None)
    assert summary.entries == len(entries)


def test_gnu_tar_binary_with_dot_prefix_and_directories(tmp_path: Path) -> None:
    tar = shutil.which("tar")
    if tar is None:
        pytest.skip("no tar binary")
    src = tmp_path / "brain"
    (src / "memories" / "2026").mkdir(parents=True)
    (src / "memories" / "2026" / "m1.md").write_text("---\ntitle: a\n---\nbody\n")
    (src / "memories" / "m2.md").write_bytes(os.urandom(200_000))
    (src / "index.json").write_text("{}\n")
    (src / "empty.md").write_bytes(b"")
    (src / ("long-" + "n" * 120 + ".md")).write_text("long name\n")
    for fmt in ("gnu", "oldgnu", "pax", "ustar", "v7"):
        if fmt in ("ustar", "v7"):
            (src / ("long-" + "n" * 120 + ".md")).unlink(missing_ok=True)
        out = tmp_path / f"{fmt}.tar.gz"
        subprocess.run([tar, "czf", str(out), f"--format={fmt}", "-C", str(src), "."], check=True)
        summary = inspect_bytes(out.read_bytes())
        expected_files = sum(1 for p in src.rglob("*") if p.is_file())
        expected_entries = expected_files + sum(1 for p in src.rglob("*") if p.is_dir()) + 1  # "./"
        assert (summary.file_count, summary.entries) == (expected_files, expected_entries), fmt


# Brains written by the reference command line: the full set in ../shared, else the subset in tests/.
FIXTURE_BRAINS = project_parity_dir() / "brains"


def test_engine_packer_archives_are_accepted() -> None:
    archive = pytest.importorskip("connector.engine.format.archive")
    brain_module = pytest.importorskip("connector.engine.format.brain")
    if not hasattr(archive, "pack_archive"):
        pytest.skip("engine packer not available yet")
    files = {"index.json": b"{}\n", "memories/a.md": b"---\ntitle: a\n---\nbody\n", "memories/sub/b.md": b"b"}
    data = archive.pack_archive(brain_module.Brain(dict(files)))
    assert inspect_bytes(data).file_count == len(files)
    brains = sorted(FIXTURE_BRAINS.iterdir())[:4] if FIXTURE_BRAINS.is_dir() else []
    for directory in brains:  # real brains written by the reference command line
        brain = archive.load_directory(directory)
        expected = sum(1 for p in directory.rglob("*") if p.is_file())
        assert inspect_bytes(archive.pack_archive(brain)).file_count == expected, directory.name


def test_multi_member_gzip_is_accepted() -> None:
    tar = SIMPLE + END
    data = gz(tar[:700]) + gz(b"") + gz(tar[700:])
    assert inspect_bytes(data).file_count == 2


def test_bgzip_style_blocks_are_accepted() -> None:
    tar = member(b"a.bin", os.urandom(3 << 20)) + member(b"b.md", b"b") + END
    blocks = b"".join(gz(tar[i : i + 65280]) for i in range(0, len(tar), 65280)) + gz(b"")  # EOF block
    assert inspect_bytes(blocks).file_count == 2


def test_many_tiny_gzip_members_are_refused_cheaply() -> None:
    # 200,000 empty members: each would cost a decompressor and a copy of the input.
    data = gz(END) + gz(b"") * 200_000
    error = rejected([data[i : i + 65536] for i in range(0, len(data), 65536)])
    assert error.reason == "gzip" and "members" in error.message
    one_byte_members = b"".join(gz(bytes([b])) for b in (SIMPLE + END))
    assert rejected(one_byte_members).reason == "gzip"


def test_zero_padding_after_gzip_stream_is_fine() -> None:
    assert inspect_bytes(gz(SIMPLE + END) + bytes(4096)).file_count == 2


def test_gzip_header_with_name_comment_and_extra_fields() -> None:
    body = zlib.compressobj(6, zlib.DEFLATED, -15)
    deflated = body.compress(SIMPLE + END) + body.flush()
    crc = zlib.crc32(SIMPLE + END).to_bytes(4, "little")
    isize = len(SIMPLE + END).to_bytes(4, "little")
    flags = 0x04 | 0x08 | 0x10  # FEXTRA | FNAME | FCOMMENT
    head = b"\x1f\x8b\x08" + bytes([flags]) + bytes(4) + b"\x00\x03"
    head += (6).to_bytes(2, "little") + b"AB\x02\x00xy" + b"brain.tar\x00" + b"a comment\x00"
    assert inspect_bytes(head + deflated + crc + isize).file_count == 2


def test_gzip_module_with_filename_is_accepted() -> None:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="brain.tar", mode="wb", fileobj=buffer) as stream:
        stream.write(SIMPLE + END)
    assert inspect_bytes(buffer.getvalue()).file_count == 2


def test_pax_size_override_and_global_comment() -> None:
    tar = (
        pax({b"comment": b"git commit 0123"}, typeflag=b"g")
        + pax({b"size": b"1000", b"mtime": b"1700000000.5"})
        + header(b"big.md", size=0)
        + padded(b"z" * 1000)
        + member(b"after.md", b"ok")
        + END
    )
    summary = inspect_bytes(gz(tar))
    assert (summary.file_count, summary.entries) == (2, 2)


def test_names_with_printable_unicode_are_accepted() -> None:
    names = ["caf\u00e9.md", "notes/\u00a0nbsp.md", "\u65e5\u672c/\u30e1\u30e2.md", "emoji-\U0001f9e0.md", "a b.md"]
    archive = tarfile_archive([(name, b"x") for name in names])
    assert inspect_bytes(archive).file_count == len(names)


def test_distinct_records_in_several_extended_headers_are_accepted() -> None:
    # one header names the entry, the next sizes it: nothing is said twice
    tar = pax({b"path": b"long.md", b"mtime": b"1"}) + pax({b"size": b"3", b"comment": b"c"}) + header(b"x.md") + padded(b"abc")
    assert inspect_bytes(gz(tar + END)) == ArchiveSummary(1, len(tar) + len(END), 1)


def test_base256_size_field_is_understood() -> None:
    size_field = b"\x80" + (600).to_bytes(11, "big")
    tar = header(b"b256.md", size_field=size_field) + padded(b"q" * 600) + member(b"next.md", b"n") + END
    assert inspect_bytes(gz(tar)).file_count == 2


def test_contiguous_file_type_counts_as_regular() -> None:
    assert inspect_bytes(gz(member(b"c.md", b"data", typeflag=b"7") + END)).file_count == 1


def test_old_style_directory_as_file_with_trailing_slash() -> None:
    tar = member(b"dir/", typeflag=b"\x00") + member(b"dir/a.md", b"a", typeflag=b"\x00") + END
    summary = inspect_bytes(gz(tar))
    assert (summary.file_count, summary.entries) == (1, 2)


def test_pax_path_wins_over_gnu_long_name_like_tarfile() -> None:
    tar = pax({b"path": b"from-pax.md"}) + member(b"././@LongLink", b"from-gnu.md\x00", typeflag=b"L") + member(b"x.md") + END
    assert inspect_bytes(gz(tar)).file_count == 1
    with tarfile.open(fileobj=io.BytesIO(gz(tar))) as archive:
        assert archive.getnames() == ["from-pax.md"]


def test_base256_numbers_in_other_fields() -> None:
    tar = _with(member(b"big-uid.md", b"u"), 108, b"\x80" + (1 << 30).to_bytes(7, "big")) + END
    assert inspect_bytes(gz(tar)).file_count == 1


def test_old_v7_header_without_magic() -> None:
    tar = member(b"v7.md", b"old", magic=bytes(8)) + END
    assert inspect_bytes(gz(tar)).file_count == 1


@pytest.mark.parametrize("size", [1, 2, 7, 511, 512, 513, 4096, 65536])
@pytest.mark.parametrize("step", [STEP, 1 << 20, 1000])
def test_result_independent_of_chunking(size: int, step: int) -> None:
    """Neither the pieces fed nor the inflate step change the summary."""
    data = tarfile_archive([("d", None), ("d/a.md", os.urandom(3000)), ("b.md", b"b" * 100_000)], tarfile.GNU_FORMAT)
    summary = feed_all((data[i : i + size] for i in range(0, len(data), size)), step=step)
    assert summary == inspect_bytes(data)
    assert summary.file_count == 2


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (member(b"evil", typeflag=b"2"), "symbolic links"),
        (member(b"../up.md", b"x"), "'..'"),
        (member(b"/abs.md", b"x"), "absolute"),
        (pax({b"path": b"../pax.md"}) + member(b"ok.md", b"x"), "'..'"),
        (member(b"dir/", b"data", typeflag=b"5"), "carries data"),
    ],
)
@pytest.mark.parametrize("size", [1, 509, 4096, 1 << 22])
def test_a_bad_entry_after_many_common_ones_is_refused_alike(bad: bytes, words: str, size: int) -> None:
    """Common headers are taken in a fused loop; the first other one goes the general way,
    whatever the chunking, and is refused with the same message."""
    common = b"".join(
        member(b"notes/%d.md" % number, b"n" * (number * 37 % 1500)) + member(b"d%d/" % number, typeflag=b"5")
        for number in range(300)
    )
    data = gz(common + bad + member(b"after.md", b"x") + END)
    expected = rejected(data)
    assert words in expected.message
    for step in (STEP, 1000, 1 << 20):
        error = rejected((data[i : i + size] for i in range(0, len(data), size)), step=step)
        assert (error.message, error.reason) == (expected.message, expected.reason)


def test_large_incompressible_file_is_fine() -> None:
    payload = os.urandom(3 << 20)
    summary = inspect_bytes(tarfile_archive([("big.bin", payload)]))
    assert summary.file_count == 1 and summary.inflated_bytes > len(payload)


# ---------------------------------------------------------------- the hostile corpus


def _with(block_and_data: bytes, offset: int, value: bytes) -> bytes:
    """A member whose header has ``value`` at ``offset``, checksum fixed."""
    data = bytearray(block_and_data)
    data[offset : offset + len(value)] = value
    data[148:156] = b" " * 8
    data[148:156] = b"%06o\x00 " % sum(data[:BLOCK])
    return bytes(data)


def _signed_checksum_member(name: bytes) -> bytes:
    """A member whose checksum is the historic signed-char sum (differs for bytes >= 0x80)."""
    block = bytearray(header(name))
    block[148:156] = b" " * 8
    signed = sum(b - 256 if b >= 128 else b for b in block)
    block[148:156] = b"%06o\x00 " % signed
    return bytes(block)


CORRUPT_MIDDLE = bytearray(gz(member(b"r.bin", os.urandom(50_000)) + END, level=1))
CORRUPT_MIDDLE[len(CORRUPT_MIDDLE) // 2] ^= 0xFF

BAD_CRC = bytearray(gz(SIMPLE + END))
BAD_CRC[-8] ^= 0x01


def _pax_twice(key: bytes, first: bytes, second: bytes, typeflag: bytes = b"x") -> bytes:
    """An archive whose one extended header gives ``key`` twice, before a plain entry."""
    return gz(member(b"PaxHeader", pax_record(key, first) + pax_record(key, second), typeflag) + member(b"x.md") + END)


HOSTILE: dict[str, tuple[bytes, str, str]] = {
    # name: (upload, reason, words the message must contain)
    "empty upload": (b"", "not-gzip", "empty"),
    "one byte": (b"\x1f", "not-gzip", "not gzip"),
    "plain text": (b"hello, I am not an archive\n", "not-gzip", "not gzip"),
    "uncompressed tar": (SIMPLE + END, "not-gzip", "not gzip"),
    "zip file": (b"PK\x03\x04" + bytes(100), "not-gzip", "not gzip"),
    "empty gzip stream": (gz(b""), "tar", "empty"),
    "gzip header only": (gz(SIMPLE + END)[:10], "gzip", "truncated"),
    "truncated gzip": (gz(SIMPLE + END)[:-9], "gzip", "truncated"),
    "corrupt deflate data": (bytes(CORRUPT_MIDDLE), "gzip", "corrupt"),
    "bad gzip crc": (bytes(BAD_CRC), "gzip", "corrupt"),
    "junk after gzip stream": (gz(SIMPLE + END) + b"JUNK", "gzip", "after the end of the gzip"),
    "zeros then junk after gzip": (gz(SIMPLE + END) + bytes(10) + b"x", "gzip", "after the end of the gzip"),
    "gzip of random bytes": (gz(os.urandom(4096)), "tar", "not a tar"),
    "gzip of text": (gz(b"just some text\n" * 100), "tar", "not a tar"),
    "tar without end marker": (gz(SIMPLE), "tar", "no end marker"),
    "tar with one zero block": (gz(SIMPLE + bytes(BLOCK)), "tar", "end marker"),
    "truncated tar data": (gz(SIMPLE[:-300]), "tar", "truncated"),
    "truncated tar header": (gz(SIMPLE + header(b"x.md")[:200]), "tar", "truncated"),
    "junk after end marker": (gz(SIMPLE + END + b"\x00" * 100 + b"junk"), "tar", "after the end of the tar"),
    "second archive after end marker": (gz(SIMPLE + END + SIMPLE + END), "tar", "after the end of the tar"),
    "lone zero block inside": (gz(member(b"a.md", b"a") + bytes(BLOCK) + member(b"b.md") + END), "tar", "zero block"),
    "header checksum mismatch": (gz(SIMPLE + header(b"bad.md", checksum_delta=1) + END), "tar", "checksum"),
    "first header checksum mismatch": (gz(header(b"bad.md", checksum_delta=-3) + END), "tar", "not a tar"),
    "signed-char header checksum": (
        gz(SIMPLE + _signed_checksum_member("caf\u00e9-\u2603.md".encode()) + END),
        "tar",
        "checksum",
    ),
    "unknown header magic": (gz(member(b"m.md", b"m", magic=b"xstar\x0000") + END), "tar", "format"),
    "symlink": (gz(member(b"link", typeflag=b"2", linkname=b"/etc/passwd") + END), "entry", "symbolic link"),
    "hard link": (gz(SIMPLE + member(b"h.md", typeflag=b"1", linkname=b"a.md") + END), "entry", "hard link"),
    "character device": (gz(member(b"tty", typeflag=b"3") + END), "entry", "device"),
    "block device": (gz(member(b"sda", typeflag=b"4") + END), "entry", "device"),
    "fifo": (gz(member(b"pipe", typeflag=b"6") + END), "entry", "FIFO"),
    "gnu sparse file": (gz(member(b"sparse", typeflag=b"S") + END), "entry", "sparse"),
    "pax sparse file": (gz(pax({b"GNU.sparse.major": b"1"}) + member(b"s.md", b"s") + END), "entry", "sparse"),
    "unknown entry type": (gz(member(b"weird", typeflag=b"Z") + END), "entry", "type"),
    "gnu volume label": (gz(member(b"label", typeflag=b"V") + END), "entry", "type"),
    "absolute path": (gz(member(b"/etc/cron.d/x", b"evil") + END), "entry", "absolute"),
    "windows drive path": (gz(member(b"C:/Windows/evil.dll", b"evil") + END), "entry", "absolute"),
    "windows drive-relative path": (gz(member(b"c:evil.md", b"evil") + END), "entry", "absolute"),
    "dot-dot component": (gz(member(b"notes/../../evil.md", b"evil") + END), "entry", ".."),
    "dot-dot alone": (gz(member(b"..", typeflag=b"5") + END), "entry", ".."),
    "dot-dot with backslash": (gz(member(b"..\\evil.md", b"evil") + END), "entry", ".."),
    "dot-dot in ustar prefix": (gz(member(b"evil.md", b"e", prefix=b"ok/../..") + END), "entry", ".."),
    "dot-dot in pax path": (gz(pax({b"path": b"../../evil.md"}) + member(b"fine.md", b"e") + END), "entry", ".."),
    "absolute pax path": (gz(pax({b"path": b"/root/.ssh/x"}) + member(b"fine.md", b"e") + END), "entry", "absolute"),
    "nul in pax path": (gz(pax({b"path": b"a\x00b"}) + member(b"fine.md") + END), "entry", "NUL"),
    "dot-dot in gnu long name": (
        gz(member(b"././@LongLink", b"../" * 40 + b"evil.md\x00", typeflag=b"L") + member(b"x.md") + END),
        "entry",
        "..",
    ),
    "dot-dot in pax path behind a gnu long name": (
        gz(pax({b"path": b"../../evil.md"}) + member(b"././@LongLink", b"safe.md\x00", typeflag=b"L") + member(b"x.md") + END),
        "entry",
        "..",
    ),
    "dot-dot in gnu long name behind a pax path": (
        gz(member(b"././@LongLink", b"../evil.md\x00", typeflag=b"L") + pax({b"path": b"safe.md"}) + member(b"x.md") + END),
        "entry",
        "..",
    ),
    "dot-dot in the header name behind a pax path": (
        gz(pax({b"path": b"safe.md"}) + member(b"../../evil.md", b"x") + END),
        "entry",
        "..",
    ),
    "directory carrying a hidden symlink as data": (
        gz(header(b"dir/", b"5", size=BLOCK) + member(b"evil", typeflag=b"2", linkname=b"/etc") + END),
        "entry",
        "directory entry carries data",
    ),
    "old-style directory carrying data": (
        gz(header(b"dir/", b"\x00", size=BLOCK) + member(b"x.md", b"x") + END),
        "entry",
        "directory entry carries data",
    ),
    "pax size on a directory": (
        gz(pax({b"size": b"512"}) + member(b"d/", typeflag=b"5") + member(b"x.md", b"x") + END),
        "entry",
        "directory entry carries data",
    ),
    "empty name": (gz(member(b"", b"data") + END), "entry", "empty name"),
    "malformed pax record": (gz(member(b"PaxHeader", b"garbage without length\n", typeflag=b"x") + member(b"a") + END), "tar", "pax"),
    "pax record length lies": (gz(member(b"PaxHeader", b"99 path=a\n", typeflag=b"x") + member(b"a") + END), "tar", "pax"),
    "pax size not a number": (gz(pax({b"size": b"-5"}) + member(b"a.md") + END), "tar", "size"),
    "global header renames entries": (gz(pax({b"path": b"x"}, typeflag=b"g") + member(b"a.md") + END), "tar", "global"),
    "extended header without entry": (gz(pax({b"mtime": b"1"}) + END), "tar", "not followed"),
    "extended header at end of stream": (gz(pax({b"mtime": b"1"})), "tar", "truncated"),
    "too many extended headers in a row": (gz(pax({b"mtime": b"1"}) * 9 + member(b"a.md") + END), "tar", "in a row"),
    "invalid size field": (gz(header(b"a.md", size_field=b"12z4\x00" + bytes(7)) + END), "tar", "size"),
    "negative base-256 size": (gz(header(b"a.md", size_field=b"\xff" * 12) + END), "tar", "negative"),
    "invalid mode field": (gz(SIMPLE + _with(member(b"m.md", b"m"), 100, b"0x644\x00") + END), "tar", "numeric"),
    "invalid mtime field": (gz(_with(member(b"m.md", b"m"), 136, b"yesterday") + END), "tar", "numeric"),
    "regular file named like a directory": (gz(member(b"notes/", b"data") + END), "entry", "ends with '/'"),
    "absolute name through a gnu prefix": (
        gz(member(b"passwd", b"x", magic=b"ustar  \x00", prefix=b"/etc") + END),
        "entry",
        "absolute",
    ),
    "duplicate pax path, bad one first": (_pax_twice(b"path", b"../evil.md", b"ok.md"), "tar", "'path' twice"),
    "duplicate pax path, both safe": (_pax_twice(b"path", b"a.md", b"b.md"), "tar", "'path' twice"),
    "duplicate pax size": (_pax_twice(b"size", b"0", b"512"), "tar", "'size' twice"),
    "duplicate pax linkpath": (_pax_twice(b"linkpath", b"a", b"b"), "tar", "'linkpath' twice"),
    "duplicate pax mtime": (_pax_twice(b"mtime", b"1", b"2"), "tar", "'mtime' twice"),
    "duplicate key in a global header": (_pax_twice(b"comment", b"a", b"b", typeflag=b"g"), "tar", "twice"),
    "pax path in two extended headers": (
        gz(pax({b"path": b"evil.md"}) + pax({b"path": b"ok.md"}) + member(b"x.md") + END),
        "tar",
        "two tar extended headers",
    ),
    "pax size in two extended headers": (
        gz(pax({b"size": b"0"}) + pax({b"size": b"512"}) + header(b"x.md") + padded(b"y") + END),
        "tar",
        "two tar extended headers",
    ),
    "pax linkpath in two extended headers": (
        gz(pax({b"linkpath": b"a"}) + pax({b"linkpath": b"b"}) + member(b"x.md") + END),
        "tar",
        "two tar extended headers",
    ),
    "two gnu long names for one entry": (
        gz(member(b"././@LongLink", b"a.md\x00", typeflag=b"L") + member(b"././@LongLink", b"b.md\x00", typeflag=b"L")
           + member(b"x.md") + END),
        "tar",
        "two GNU long names",
    ),
    "newline in a name": (gz(member(b"notes/a\n1. forged.md", b"x") + END), "entry", "control character"),
    "escape sequence in a name": (gz(member(b"\x1b[2J.md", b"x") + END), "entry", "control character"),
    "tab in a directory name": (gz(member(b"d\tx/", typeflag=b"5") + END), "entry", "control character"),
    "DEL in a name": (gz(member(b"a\x7f.md", b"x") + END), "entry", "control character"),
    "C1 control in a name": (gz(member("a\u009bb.md".encode(), b"x") + END), "entry", "control character"),
    "control character in a pax path": (gz(pax({b"path": b"a\rb.md"}) + member(b"fine.md") + END), "entry", "control"),
    "control character in a gnu long name": (
        gz(member(b"././@LongLink", b"a\nb.md\x00", typeflag=b"L") + member(b"x.md") + END),
        "entry",
        "control",
    ),
    "control character in a ustar prefix": (gz(member(b"a.md", b"e", prefix=b"d\x08") + END), "entry", "control"),
    "huge pax header": (gz(header(b"PaxHeader", b"x", size=64 << 20) + END), "limit", "extended header"),
    "huge gnu long name": (gz(header(b"././@LongLink", b"L", size=1 << 30) + END), "limit", "extended header"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_corpus_is_refused(name: str) -> None:
    upload, reason, words = HOSTILE[name]
    error = rejected(upload)
    assert error.reason == reason, error.message
    assert words.lower() in error.message.lower(), error.message


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_corpus_refused_when_fed_in_small_pieces(name: str) -> None:
    upload, reason, _ = HOSTILE[name]
    error = rejected([upload[i : i + 97] for i in range(0, len(upload), 97)])
    assert error.reason == reason, error.message


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_corpus_refused_alike_with_big_inflate_steps(name: str) -> None:
    """Archives held in memory are inflated in 1 MiB steps: same verdict, same message."""
    upload, _, _ = HOSTILE[name]
    small, big = rejected(upload), rejected(upload, step=1 << 20)
    assert (big.reason, big.message) == (small.reason, small.message)


def test_corpus_is_large_enough() -> None:
    assert len(HOSTILE) >= 25


def test_gzip_bomb_stops_at_the_default_inflate_limit() -> None:
    # ~2 GiB of zeros in ~2 MiB of gzip, behind a tar header claiming a 2 GiB file; the
    # ratio check (which would stop it far earlier) is off to test the inflate limit alone.
    bomb = zeros_gz(2 << 30, first=header(b"bomb.bin", size=(2 << 30) - BLOCK))
    inspector = ArchiveInspector(InspectLimits(max_ratio=0))
    with pytest.raises(ArchiveRejected) as info:
        for chunk in bomb:
            inspector.feed(chunk)
        inspector.finish()
    assert info.value.reason == "limit" and "1 GiB" in info.value.message
    assert (1 << 30) < inspector.inflated_bytes <= (1 << 30) + (64 << 10)


def test_inflation_ratio_no_brain_has_is_refused_early() -> None:
    # The archive: ~250 KiB inflating to 250 MiB of zeros (~1000x).
    bomb = list(zeros_gz(250 << 20, first=header(b"memories/zeros.md", size=(250 << 20) - BLOCK)))
    assert sum(map(len, bomb)) < 300 << 10
    inspector = ArchiveInspector(InspectLimits())
    with pytest.raises(ArchiveRejected) as info:
        for chunk in bomb:
            inspector.feed(chunk)
        inspector.finish()
    assert info.value.reason == "limit" and "200 times its compressed size" in info.value.message
    # stopped just past the floor, long before the 1 GiB inflate limit
    assert RATIO_FLOOR < inspector.inflated_bytes <= RATIO_FLOOR + STEP
    # with the check off (STORE_INSPECT_MAX_RATIO=0) it inflates to its end (and misses its end marker)
    error = rejected(bomb, InspectLimits(max_ratio=0))
    assert error.reason == "tar" and "end marker" in error.message


def test_ratio_is_not_checked_below_the_floor() -> None:
    # 8 MiB of zeros (~1000x) in a brain is harmless: accepted.
    small = feed_all([gz(header(b"zeros.md", size=8 << 20) + bytes(8 << 20) + END, level=9)])
    assert small.file_count == 1 and small.inflated_bytes > 8 << 20
    # the same with a floor below it is refused
    error = rejected(gz(header(b"zeros.md", size=8 << 20) + bytes(8 << 20) + END, level=9), InspectLimits(ratio_floor=1 << 20))
    assert error.reason == "limit" and "times its compressed size" in error.message


def test_real_brains_are_far_below_the_ratio_limit() -> None:
    """The recall-parity brains (made by the reference command line), tarred at gzip levels 1 and 9."""
    brains = sorted(FIXTURE_BRAINS.glob("*"))
    assert brains
    worst = 0.0
    for brain in brains:
        for level in (1, 9):
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=level) as archive:
                archive.add(brain, arcname=".")
            data = buffer.getvalue()
            # a floor of 0: the ratio is checked from the first byte
            summary = feed_all([data], InspectLimits(ratio_floor=0))
            worst = max(worst, summary.inflated_bytes / len(data))
    assert worst < MAX_RATIO / 5, worst


def test_large_text_brain_above_the_floor_is_accepted() -> None:
    rng = random.Random(3)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    files = [(f"memories/m{i}.md", b" ".join(rng.choice(words) for _ in range(1200))) for i in range(2500)]
    data = tarfile_archive(files)
    summary = feed_all([data])
    assert summary.inflated_bytes > RATIO_FLOOR and summary.file_count == 2500


def test_gzip_bomb_memory_stays_flat() -> None:
    bomb = list(zeros_gz(512 << 20, first=header(b"bomb.bin", size=(512 << 20) - BLOCK)))
    inspector = ArchiveInspector(InspectLimits(max_inflated=256 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(ArchiveRejected) as info:
            for chunk in bomb:
                inspector.feed(chunk)
            inspector.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.reason == "limit"
    assert peak < 1 << 20, f"peak traced allocation {peak} bytes"


def test_gzip_bomb_of_zero_blocks_after_end_marker() -> None:
    # A valid archive followed by an endless zero padding is bounded by the inflate limit too.
    bomb = zeros_gz(64 << 20, first=SIMPLE + END)
    error = rejected(bomb, InspectLimits(max_inflated=16 << 20))
    assert error.reason == "limit"


def test_600000_entries_are_refused() -> None:
    error = rejected(many_entries_gz(600_000))
    assert error.reason == "limit" and "500000" in error.message


def test_entry_limit_is_exact() -> None:
    assert feed_all(many_entries_gz(1000), InspectLimits(max_entries=1000)).file_count == 1000
    assert rejected(many_entries_gz(1001), InspectLimits(max_entries=1000)).reason == "limit"


def test_global_headers_are_bounded_too() -> None:
    limits = InspectLimits(max_entries=10)
    many = pax({b"comment": b"c"}, typeflag=b"g") * 100 + member(b"a.md") + END
    assert rejected(gz(many), limits).reason == "limit"
    few = pax({b"comment": b"c"}, typeflag=b"g") * 20 + member(b"a.md") + END
    assert inspect_bytes(gz(few), limits).file_count == 1


def test_header_limit_is_inclusive() -> None:
    records = {b"path": b"p" * 900, b"comment": b"c" * 3000}
    tar = pax(records) + member(b"ignored.md", b"x") + END
    size = len(b"".join(pax_record(k, v) for k, v in records.items()))
    assert inspect_bytes(gz(tar), InspectLimits(max_header=size)).file_count == 1
    assert rejected(gz(tar), InspectLimits(max_header=size - 1)).reason == "limit"


def test_huge_pax_header_does_not_allocate() -> None:
    # 200 MiB of pax "comment" claimed and sent: refused at the header, nothing buffered.
    first = header(b"PaxHeader", b"x", size=200 << 20)
    chunks = list(zeros_gz(200 << 20, first=first))
    tracemalloc.start()
    try:
        error = rejected(chunks)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.reason == "limit"
    assert peak < 1 << 20


def test_largest_allowed_pax_header_is_not_copied_around() -> None:
    limits = InspectLimits()
    comment = b"c" * (limits.max_header - 200)
    data = gz(pax({b"comment": comment, b"path": b"kept.md"}) + member(b"x.md", b"x") + END)
    tracemalloc.start()
    try:
        summary = inspect_bytes(data, limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary.file_count == 1
    assert peak < 2 * limits.max_header + len(data), peak


def test_inflate_limit_counts_tar_bytes() -> None:
    tar = member(b"a.bin", bytes(10_000)) + END
    assert inspect_bytes(gz(tar), InspectLimits(max_inflated=len(tar))).file_count == 1
    assert rejected(gz(tar), InspectLimits(max_inflated=len(tar) - 1)).reason == "limit"


@pytest.mark.parametrize("field", ["max_inflated", "max_entries", "max_header"])
def test_limits_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        InspectLimits(**{field: 0})


def test_failure_is_sticky_and_finish_only_once() -> None:
    inspector = ArchiveInspector()
    with pytest.raises(ArchiveRejected):
        inspector.feed(b"nope")
    with pytest.raises(ArchiveRejected):
        inspector.feed(gz(SIMPLE + END))
    with pytest.raises(ArchiveRejected):
        inspector.finish()
    ok = ArchiveInspector()
    ok.feed(gz(END))
    ok.finish()
    with pytest.raises(RuntimeError):
        ok.finish()


def test_rejection_happens_early_for_not_gzip() -> None:
    inspector = ArchiveInspector()
    with pytest.raises(ArchiveRejected):
        inspector.feed(b"<html>")


# ---------------------------------------------------------------- property: tarfile archives


_segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.\u00e9", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)


@st.composite
def _trees(draw: st.DrawFn) -> list[tuple[str, bytes | None]]:
    paths = draw(st.lists(st.lists(_segment, min_size=1, max_size=4).map("/".join), min_size=0, max_size=25, unique=True))
    entries: list[tuple[str, bytes | None]] = []
    for path in paths:
        if draw(st.booleans()):
            entries.append((path, None))
        else:
            entries.append((path, draw(st.binary(max_size=2000))))
    return entries


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=_trees(),
    fmt=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    piece=st.integers(min_value=1, max_value=5000),
)
def test_random_tarfile_archives_are_accepted(entries: list[tuple[str, bytes | None]], fmt: int, piece: int) -> None:
    data = tarfile_archive(entries, fmt)
    summary = feed_all(data[i : i + piece] for i in range(0, len(data), piece))
    assert summary.file_count == sum(1 for _, content in entries if content is not None)
    assert summary.entries == len(entries)


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=0, max_size=3000))
def test_random_bytes_never_crash(data: bytes) -> None:
    for upload in (data, gz(data)):
        try:
            inspect_bytes(upload)
        except ArchiveRejected:
            pass


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=255))
def test_single_byte_corruption_never_crashes(position: int, value: int) -> None:
    data = bytearray(tarfile_archive([("a", None), ("a/b.md", b"hello" * 100), ("c.md", b"c")]))
    data[position % len(data)] = value
    try:
        inspect_bytes(bytes(data))
    except ArchiveRejected:
        pass


# ---------------------------------------------------------------- differential: we are never laxer than tarfile


def _fix_checksum(tar: bytearray, block_start: int) -> None:
    block = tar[block_start : block_start + BLOCK]
    block[148:156] = b" " * 8
    tar[block_start + 148 : block_start + 156] = b"%06o\x00 " % sum(block)


def _header_offsets(tar: bytes) -> list[int]:
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
        return [member.offset for member in archive.getmembers()]


def _altered_header(
    entries: list[tuple[str, bytes | None]], fmt: int, where: int, field_offset: int, value: bytes
) -> bytearray:
    """The uncompressed tar of ``entries`` with ``value`` written into one header (the ``where``-th,
    cyclically) at ``field_offset``, and that header's checksum made valid again: structure, not
    just bytes, changes."""
    tar = bytearray(gzip.decompress(tarfile_archive(entries, fmt)))
    offsets = _header_offsets(bytes(tar))
    if offsets:
        start = offsets[where % len(offsets)]
        for index, byte in enumerate(value):
            tar[start + field_offset + index] = byte  # within the 512-byte header
        _fix_checksum(tar, start)
    return tar


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=_trees(),
    fmt=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    where=st.integers(min_value=0),
    field_offset=st.sampled_from([0, 99, 124, 130, 135, 156, 157, 257, 263, 345, 400]),
    value=st.binary(min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(min_value=0)),
)
# The last entry turned into a global header (alone, or after others): tarfile refuses an archive
# whose global header no entry follows.
@example(entries=[("0", None)], fmt=tarfile.USTAR_FORMAT, where=0, field_offset=156, value=b"g", cut=None)
@example(entries=[("0", b""), ("1", None), ("0/0", None)], fmt=tarfile.USTAR_FORMAT, where=2, field_offset=156,
         value=b"g", cut=None)
def test_whatever_we_accept_tarfile_reads_identically(
    entries: list[tuple[str, bytes | None]], fmt: int, where: int, field_offset: int, value: bytes, cut: int | None
) -> None:
    tar = _altered_header(entries, fmt, where, field_offset, value)
    if cut is not None:
        tar = tar[: cut % (len(tar) + 1)]
    upload = gz(bytes(tar))
    try:
        ours = inspect_bytes(upload)
    except ArchiveRejected:
        return
    with tarfile.open(fileobj=io.BytesIO(upload), mode="r:gz") as archive:
        members = archive.getmembers()
    assert ours.file_count == sum(1 for m in members if m.isreg())
    assert ours.entries == len(members)
    for m in members:
        assert m.isreg() or m.isdir(), m
        assert not m.name.startswith("/") and ".." not in m.name.split("/"), m.name


@pytest.mark.skipif(shutil.which("tar") is None, reason="no tar binary")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=_trees(),
    fmt=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    where=st.integers(min_value=0),
    field_offset=st.sampled_from([0, 124, 135, 156, 257, 345]),
    value=st.binary(min_size=1, max_size=2),
)
# A contiguous file (type "7"): we take it as the regular file every unpacker extracts it as.
@example(entries=[("a.md", b"hello")], fmt=tarfile.USTAR_FORMAT, where=0, field_offset=156, value=b"7")
def test_whatever_we_accept_gnu_tar_lists_identically(
    entries: list[tuple[str, bytes | None]], fmt: int, where: int, field_offset: int, value: bytes
) -> None:
    tar = _altered_header(entries, fmt, where, field_offset, value)
    upload = gz(bytes(tar))
    try:
        ours = inspect_bytes(upload)
    except ArchiveRejected:
        return
    listing = subprocess.run(
        ["tar", "-tvzf", "-"], input=upload, capture_output=True, timeout=30, env={**os.environ, "LC_ALL": "C"}
    )
    assert listing.returncode == 0, listing.stderr
    lines = [line for line in listing.stdout.decode("utf-8", "replace").splitlines() if line]
    assert ours.entries == len(lines)
    # GNU tar lists a contiguous file with "C" and extracts it as a regular file.
    assert ours.file_count == sum(1 for line in lines if line.startswith(("-", "C")))


# The common-header shortcut (_TarParser._common_entry) must never decide differently from
# the general path (_on_any_header): same verdict, same message, same counters and state.

_NAMES = [
    b"notes/a.md", b"dir/", b"dir", b"a..b.md", b"../up.md", b"x/../y", b"/abs.md", b"\\\\server\\x",
    b"C:evil", b"c:/evil", b"1:ok", b"w\\x.md", b"", b".", b"n" * 100, b"d/" * 50, b"caf\xc3\xa9.md",
    b"a\nb.md", b"\x1b[2J", b"t\tab/", b"x\x7f", b"c1\xc2\x85.md", b"ok\xc2\xa0nbsp.md",
]
_OCTALS_8 = [b"0000644\x00", b"000644 \x00", b"0000644 ", b"644\x00\x00\x00\x00\x00", b"\x00" * 8, b" " * 8,
             b" 000644\x00", b"00 00644", b"0000648\x00", b"0000644\x00"[::-1], b"\x80" + bytes(7), b"0000-44\x00"]
_SIZES = [b"%011o\x00", b"%011o ", b"%o\x00", b"%o ", b" %010o", b"%012o"]


def _variant(rng: random.Random) -> bytes:
    """A header block: half of them of the common shape with a varied name, type and size, half anything."""
    plain = rng.random() < 0.5
    typeflag = rng.choice([b"0", b"5"] if plain else [b"0", b"5", b"\x00", b"7", b"1", b"x", b"g"])
    size = 0 if plain and typeflag == b"5" else rng.choice([0, 0, 1, 511, 512, 1234, 8 << 30])
    size_field = rng.choice(_SIZES[:2] if plain else _SIZES) % size
    if not plain and rng.random() < 0.1:
        size_field = rng.choice(_OCTALS_8)
    block = bytearray(
        header(
            rng.choice(_NAMES[:3] if plain and rng.random() < 0.6 else _NAMES),
            typeflag,
            magic=rng.choice([b"ustar\x0000", b"ustar  \x00"] + ([] if plain else [b"ustar\x00xx", bytes(8), b"ustar   "])),
            size_field=size_field[:12].ljust(12, b"\x00"),
            prefix=b"" if plain else rng.choice([b"", b"pre", b"\x00x"]),
        )
    )
    for start in rng.sample([100, 108, 116, 136, 329, 337], 0 if plain else rng.randint(0, 3)):
        block[start : start + 8] = rng.choice(_OCTALS_8)
    checksum = sum(block[:148]) + 8 * 0x20 + sum(block[156:]) + rng.choice([0] * 6 + [1, -1, 65521])
    field = rng.choice([b"%06o\x00 ", b"%07o\x00", b"%07o ", b"%o\x00"]) % max(checksum, 0)
    block[148:156] = field[:8].ljust(8, b"\x00")
    return bytes(block)


def _outcome(take: Callable[[bytes], None], parser: Any, block: bytes) -> tuple[Any, ...]:
    try:
        take(block)
        error = None
    except ArchiveRejected as exc:
        error = (exc.reason, exc.message)
    return (error, parser.entries, parser.file_count, parser._headers, parser._skip_left, parser._state)


@pytest.mark.parametrize("max_entries", [1, 2, 500_000])
def test_common_header_shortcut_agrees_with_the_general_path(max_entries: int) -> None:
    rng = random.Random(max_entries)
    shortcut = 0
    for _ in range(4000):
        block = _variant(rng)
        before = rng.randint(0, 2)  # entries already seen, to meet the limits from both sides
        fast, general = _TarParser(InspectLimits(max_entries=max_entries)), _TarParser(InspectLimits(max_entries=max_entries))
        for parser in (fast, general):
            parser.entries = parser._headers = before
        common = _COMMON_NUMBERS.match(block, 100)
        shortcut += bool(common and _TarParser(InspectLimits())._common_entry(block, common))
        assert _outcome(fast._on_header, fast, block) == _outcome(general._on_any_header, general, block), block
    assert shortcut > 500  # the shortcut itself was exercised, not only the way around it


def test_headers_written_by_tar_tools_take_the_shortcut() -> None:
    for fmt in (tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT):
        data = gzip.decompress(tarfile_archive([("memories/a.md", b"x" * 700), ("memories", None)], fmt))
        for offset in (0, BLOCK * 3):
            block = data[offset : offset + BLOCK]
            common = _COMMON_NUMBERS.match(block, 100)
            assert common is not None and _TarParser(InspectLimits())._common_entry(block, common), (fmt, offset)


def test_header_checksum_is_the_exact_byte_sum() -> None:
    rng = random.Random(7)
    for fill in (0x00, 0x7F, 0xFF, None):
        for _ in range(200):
            block = bytes(rng.randrange(256) if fill is None else fill for _ in range(BLOCK))
            true_sum = sum(block[:148]) + 8 * 0x20 + sum(block[156:])
            assert _checksum_ok(block, true_sum)
            for wrong in (true_sum + 1, true_sum - 1, true_sum + 65521, true_sum - 65521, true_sum + 255):
                assert not _checksum_ok(block, wrong)
