"""Validation of an archive against the memo of one validated before (store/archive/resume.py).

The archives are packed as the connector packs brains: the tar stream cut into segments,
each deflated with the end of the previous one as its dictionary and ended by a sync
flush, so an unchanged segment after an unchanged one keeps its compressed bytes. Every
verdict is compared with the whole-archive inspector's; the hostile cases are built so
that all but a few compressed bytes equal those of an archive the memo vouches for, and
the same change made harmless is shown to be taken mostly from the memo, so a shortcut
that trusted more than equal bytes and states would let them through.
"""

from __future__ import annotations

import random
import struct
import zlib

import pytest

from store.archive import resume
from store.archive.inspect import ArchiveRejected, InspectLimits, inspect_bytes
from store.archive.resume import MIN_MEMO_INFLATED, ValidationMemos, inspect_against
from tests.store.unit.tarbuild import END, header, member

WORDS = "alpha beta gamma delta postgres cache index query brain memory note fact river stone".split()
LIMITS = InspectLimits()


def text(rng: random.Random, size: int) -> bytes:
    return " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(size // 8)).encode()[:size]


def members(count: int = 3200, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [member(b"./notes/n%05d.md" % i, text(rng, rng.randrange(800, 2200))) for i in range(count)]


def segments_of(entries: list[bytes], per: int = 40) -> list[bytes]:
    return [b"".join(entries[i : i + per]) for i in range(0, len(entries), per)]


def deflated(segments: list[bytes]) -> list[bytes]:
    """Each segment deflated with the previous one's end as dictionary, ended by a sync flush."""
    out = []
    previous = b""
    for segment in segments:
        compressor = zlib.compressobj(4, zlib.DEFLATED, -15, zdict=previous[-32768:]) if previous else zlib.compressobj(
            4, zlib.DEFLATED, -15)
        out.append(compressor.compress(segment) + compressor.flush(zlib.Z_SYNC_FLUSH))
        previous = segment
    return out


def gzip_of(pieces: list[bytes], tar: bytes | None = None) -> bytes:
    """One gzip member of the deflated ``pieces``; the trailer from ``tar`` or what they really inflate to."""
    raw = b"".join(pieces) + b"\x03\x00"  # an empty final block
    tar = zlib.decompress(raw, -15) if tar is None else tar
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + raw + struct.pack("<II", zlib.crc32(tar), len(tar) & 0xFFFFFFFF)


def packed(segments: list[bytes]) -> bytes:
    return gzip_of(deflated(segments))


def verdict(data: bytes) -> object:
    try:
        return inspect_bytes(data, LIMITS)
    except ArchiveRejected as exc:
        return exc.reason


@pytest.fixture(scope="module")
def base() -> tuple[list[bytes], bytes]:
    segments = segments_of(members()) + [END]
    archive = packed(segments)
    assert sum(map(len, segments)) >= MIN_MEMO_INFLATED
    return segments, archive


def memo_of(archive: bytes):  # type: ignore[no-untyped-def]
    done = inspect_against(archive, LIMITS)
    assert done is not None and done.memo is not None
    return done.memo


def test_a_whole_archive_validates_as_the_inspector_says(base: tuple[list[bytes], bytes]) -> None:
    _, archive = base
    done = inspect_against(archive, LIMITS)
    assert done is not None and done.reused == 0
    assert done.summary == inspect_bytes(archive, LIMITS)
    assert done.memo is not None and len(done.memo.checkpoints) > 10


def test_unchanged_parts_come_from_the_memo(base: tuple[list[bytes], bytes]) -> None:
    segments, archive = base
    memo = memo_of(archive)
    changed = list(segments)
    changed[30] = changed[30].replace(b"postgres", b"mariadb!", 3)  # an edit, same sizes
    changed[60] = changed[60] + member(b"./notes/new.md", b"a new memory")  # a file added
    new = packed(changed)
    done = inspect_against(new, LIMITS, memo)
    assert done is not None
    assert done.summary == inspect_bytes(new, LIMITS)
    assert done.reused > 0.8 * len(new)
    # and the memo it leaves serves the next archive the same way
    again = list(changed)
    again[45] = again[45].replace(b"cache", b"CACHE", 2)
    newer = packed(again)
    done = inspect_against(newer, LIMITS, done.memo)
    assert done is not None and done.summary == inspect_bytes(newer, LIMITS) and done.reused > 0.8 * len(newer)


HOSTILE_MEMBERS = {
    "symlink": member(b"./notes/link.md", typeflag=b"2", linkname=b"/etc/passwd"),
    "hard link": member(b"./notes/hard.md", typeflag=b"1", linkname=b"notes/n00001.md"),
    "parent path": member(b"./notes/../../evil.md", b"x"),
    "absolute path": member(b"/etc/cron.d/evil", b"x"),
    "control character": member(b"./notes/a\x1b[2J.md", b"x"),
    "device": member(b"./notes/dev", typeflag=b"3"),
    "bad checksum": header(b"./notes/bad.md", size=0, checksum_delta=1),
}


@pytest.mark.parametrize("where", [0, 40, 79])  # first, a middle and the last segment of files
@pytest.mark.parametrize("kind", sorted(HOSTILE_MEMBERS))
def test_a_hostile_member_in_an_otherwise_unchanged_archive_is_refused(
    base: tuple[list[bytes], bytes], kind: str, where: int
) -> None:
    segments, archive = base
    memo = memo_of(archive)
    harmless, hostile = list(segments), list(segments)
    harmless[where] = harmless[where] + member(b"./notes/fine.md", b"x")
    hostile[where] = hostile[where] + HOSTILE_MEMBERS[kind]
    fine = packed(harmless)
    taken = inspect_against(fine, LIMITS, memo)
    assert taken is not None and taken.reused > 0.8 * len(fine)  # the shortcut is in play here
    bad = packed(hostile)
    assert isinstance(verdict(bad), str)  # the whole-archive inspector refuses it
    assert inspect_against(bad, LIMITS, memo) is None  # and so does the shortcut (the caller then words it)


@pytest.mark.parametrize("gap", [None, 1])  # checkpoints as kept, and at every boundary
def test_a_file_made_shorter_cannot_turn_its_data_into_entries(
    base: tuple[list[bytes], bytes], monkeypatch: pytest.MonkeyPatch, gap: int | None
) -> None:
    """A big file whose data holds a tar header of a hostile entry: an archive that only shrinks
    the file's size field would make that header an entry, with all later compressed bytes
    unchanged. The shortcut skips inside a file's data only where it is data in both."""
    if gap is not None:
        monkeypatch.setattr(resume, "CHECKPOINT_GAP", gap)
    segments, archive = base
    rng = random.Random(5)
    smuggled = member(b"./notes/link.md", typeflag=b"2", linkname=b"/etc/passwd")
    before, after = text(rng, 300_000), text(rng, 700_000)
    content = before + bytes(-len(before) % 512) + smuggled + after
    big = member(b"./big.md", content)
    head, body = big[:512], big[512:]
    cut = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    original = segments[:40] + [head] + cut + segments[40:]
    memo = memo_of(packed(original))
    # the size field now ends the file right before the smuggled header
    shrunk_size = len(before) + (-len(before) % 512)
    forged = list(original)
    forged[40] = header(b"./big.md", size=shrunk_size)
    bad = packed(forged)
    assert isinstance(verdict(bad), str)
    assert inspect_against(bad, LIMITS, memo) is None
    # a big file shrunk by an edit inside it (its size field saying so) is taken from the memo
    edited = original[:40] + [header(b"./big.md", size=len(content) - 8192)] + cut[:3] + [cut[3][8192:]] + cut[4:] + segments[40:]
    good = packed(edited)
    done = inspect_against(good, LIMITS, memo)
    assert done is not None and done.summary == inspect_bytes(good, LIMITS)
    assert done.reused > 0.7 * len(good)


def test_compressed_bytes_reused_after_a_changed_window_are_not_trusted(
    base: tuple[list[bytes], bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment's compressed bytes kept while the segment before it changed decode differently
    (their matches reach into the changed window): the verdict is still the inspector's. A
    checkpoint at every boundary, so one stands right where the stale bytes begin."""
    monkeypatch.setattr(resume, "CHECKPOINT_GAP", 1)
    segments, archive = base
    memo = memo_of(archive)
    pieces = deflated(segments)
    entries = members()
    refused = 0
    for number in range(1, 78, 3):
        changed = list(segments)
        # the same files with another mtime: the next segment's headers copy their fields from here
        changed[number] = b"".join(other_mtime(entry) for entry in entries[number * 40 : number * 40 + 40])
        forged = list(pieces)
        forged[number] = deflated([segments[number - 1], changed[number]])[1]
        # forged[number + 1] is still primed with the old segment's end; the trailer either
        # fits what the bytes inflate to, or what they would if they were what they seem
        for data in (gzip_of(forged), gzip_of(forged, b"".join(changed))):
            expected = verdict(data)
            refused += isinstance(expected, str)
            done = inspect_against(data, LIMITS, memo)
            if done is not None:  # (None: the caller inspects it whole)
                assert done.summary == expected
    assert refused  # some of them decode to broken tar headers


def other_mtime(entry: bytes) -> bytes:
    """A tar member with another mtime (and the checksum that goes with it)."""
    block = bytearray(entry[:512])
    block[136:148] = b"14712345671\x00"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\x00 " % sum(block)
    return bytes(block) + entry[512:]


def test_limits_hold_for_the_whole_archive(base: tuple[list[bytes], bytes]) -> None:
    segments, archive = base
    summary = inspect_bytes(archive, LIMITS)
    changed = list(segments)
    changed[50] = changed[50] + member(b"./notes/one-more.md", b"x")
    new = packed(changed)
    for limits in (
        InspectLimits(max_entries=summary.entries),  # one entry too many
        InspectLimits(max_inflated=summary.inflated_bytes),  # the new file's bytes too many
    ):
        memo = inspect_against(archive, limits)
        assert memo is not None and memo.memo is not None
        assert isinstance(verdict_with(new, limits), str)
        assert inspect_against(new, limits, memo.memo) is None


def verdict_with(data: bytes, limits: InspectLimits) -> object:
    try:
        return inspect_bytes(data, limits)
    except ArchiveRejected as exc:
        return exc.reason


def test_a_memo_made_under_other_limits_is_not_used(base: tuple[list[bytes], bytes]) -> None:
    segments, archive = base
    memo = inspect_against(archive, InspectLimits(max_entries=400_000))
    assert memo is not None and memo.memo is not None
    done = inspect_against(packed(segments[:-1] + [member(b"./x.md", b"x") + END]), LIMITS, memo.memo)
    assert done is not None and done.reused == 0


@pytest.mark.parametrize("shape", ["two members", "file name in header", "zero padding", "truncated", "junk after"])
def test_other_shapes_are_left_to_the_inspector(base: tuple[list[bytes], bytes], shape: str) -> None:
    _, archive = base
    memo = memo_of(archive)
    data = {
        "two members": archive + archive,
        "file name in header": archive[:3] + b"\x08" + archive[4:10] + b"brain.tar\x00" + archive[10:],
        "zero padding": archive + bytes(512),
        "truncated": archive[:-3],
        "junk after": archive + b"junk",
    }[shape]
    assert inspect_against(data, LIMITS, memo) is None


def test_memos_are_bounded_by_their_size(base: tuple[list[bytes], bytes]) -> None:
    _, archive = base
    memo = memo_of(archive)
    memos = ValidationMemos(int(memo.held_bytes * 2.5))
    for brain in ("a", "b", "c"):
        memos.put("u", brain, memo)
    assert memos.get("u", "a") is None and memos.get("u", "b") is memo and memos.get("u", "c") is memo
    assert memos.get("v", "b") is None  # per user and brain
    assert not ValidationMemos(0).enabled
