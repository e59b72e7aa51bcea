"""Packing with the last pack's memo never reuses a stale segment.

`pack_archive` keeps what it computed on the brain (`Brain.pack_memo`, carried by
`copy`) and takes the sums of segments whose files are the very same bytes objects.
Random changes (files written with other bytes of the same length, added in new and
old folders, removed, grown past the big-file size and shrunk below it, big files
edited) are packed with the carried memo and compared with a cold pack of the same
files (no memo, empty segment cache), bit for bit, and with tarfile's own stream.
A rewritten big file is cut by comparing it with the version the memo holds
(`_recut`): its cuts must be those of a cold pass, and a piece is reused only when
its bytes and what decided its end are unchanged.
"""

from __future__ import annotations

import gzip
import hashlib
import random
from typing import Any

import pytest

from connector.engine.format import archive
from connector.engine.format.archive import load_archive, pack_archive
from connector.engine.format.brain import Brain
from tests.engine.test_archive import _tarfile_written
from tests.engine.test_archive_segments import big_brain, with_new_memory


def cold_pack(files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch) -> bytes:
    """The pack of ``files`` with nothing remembered: no memo, an empty segment cache."""
    with monkeypatch.context() as patch:
        patch.setattr(archive, "_DEFLATED", archive._Deflated())
        return pack_archive(Brain(dict(files)))


def mutate(brain: Brain, rnd: random.Random, step: int) -> None:
    files = brain.files
    small = [path for path, data in files.items() if len(data) < archive._BIG_FILE]
    action = rnd.choice(["rewrite", "rewrite", "add", "add_folder", "remove", "grow", "shrink", "edit_big", "sync", "none"])
    if action == "rewrite":  # same path, same length, other bytes: only identity tells them apart
        path = rnd.choice(small)
        old = files[path]
        files[path] = bytes(old[:-1]) + bytes([(old[-1] + 1) % 256]) if old else b"x"
    elif action == "add":
        folder = rnd.choice(small).rpartition("/")[0]
        files[f"{folder}/added-{step}.md".lstrip("/")] = f"added {step}\n".encode() * rnd.randint(1, 40)
    elif action == "add_folder":
        files[f"new{step}/deeper/x-{step}.md"] = b"in a new folder\n"
    elif action == "remove":
        del files[rnd.choice(small)]
    elif action == "grow":  # a small file becomes big: the grouping around it changes
        files[rnd.choice(small)] = b"grown line\n" * (archive._BIG_FILE // 10)
    elif action in ("shrink", "edit_big"):
        big = [path for path, data in files.items() if len(data) >= archive._BIG_FILE]
        if not big:
            return
        path = rnd.choice(big)
        if action == "shrink":
            files[path] = b"small again\n"
            return
        data = bytearray(files[path])
        at = rnd.randrange(len(data))
        data[at:at] = b'\n    "mem_20260101_abcd01": 1,'  # a new cut point, maybe
        files[path] = bytes(data)
    elif action == "sync":
        files[f".sync/state-{step}"] = b"device state, never packed"


@pytest.mark.parametrize("seed", range(4))
def test_packs_with_the_memo_equal_cold_packs(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(seed)
    brain = big_brain(memories=1200, seed=seed)
    brain.files["big-notes.md"] = b"a big note\n" * (archive._BIG_FILE // 8)
    pack_archive(brain)
    for step in range(25):
        working = brain.copy()  # carries the memo, as a write's copy does
        assert working.pack_memo is brain.pack_memo is not None
        for _ in range(rnd.randint(0, 3)):
            mutate(working, rnd, step)
        warm = pack_archive(working)
        assert warm == cold_pack(working.files, monkeypatch), step
        if step % 8 == 0:
            packed = {path: data for path, data in working.files.items() if not path.startswith(".sync/")}
            assert gzip.decompress(warm) == _tarfile_written(Brain(packed))
            assert load_archive(warm).files == packed
        brain = working


def test_two_copies_sharing_a_memo_each_pack_their_own_files(monkeypatch: pytest.MonkeyPatch) -> None:
    brain = big_brain(memories=800)
    pack_archive(brain)
    first, second = brain.copy(), brain.copy()
    path = sorted(p for p in brain.files if p.endswith(".md"))[100]
    first.files[path] = b"first copy's bytes\n"
    second.files[path] = b"second copy bytes\n"  # same length, other bytes
    assert pack_archive(first) == cold_pack(first.files, monkeypatch)
    assert pack_archive(second) == cold_pack(second.files, monkeypatch)
    assert load_archive(pack_archive(second)).files[path] == b"second copy bytes\n"


def test_a_write_hashes_only_what_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    brain = big_brain()
    pack_archive(brain)
    hashed: list[int] = []

    class Counting:
        @staticmethod
        def sha256(data: Any) -> Any:
            hashed.append(len(data))
            return hashlib.sha256(data)

    changed = with_new_memory(brain, "abc123")
    changed.files["area1/topic1/note-1.md"] = b"rewritten\n"
    monkeypatch.setattr(archive, "hashlib", Counting)
    warm = pack_archive(changed)
    total = len(gzip.decompress(warm))
    big = sum(len(data) for data in changed.files.values() if len(data) >= archive._BIG_FILE)
    # The two rewritten JSON files (whole) and the few small segments holding a change.
    assert sum(hashed) < big + 0.1 * (total - big)
    monkeypatch.setattr(archive, "hashlib", hashlib)
    assert warm == cold_pack(changed.files, monkeypatch)


def test_files_that_could_change_in_place_are_not_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    brain = big_brain(memories=800)
    path = sorted(p for p in brain.files if p.endswith(".md"))[10]
    content = bytearray(brain.files[path])
    brain.files[path] = content  # type: ignore[assignment]
    first = pack_archive(brain)
    assert brain.pack_memo is None
    content[0:1] = b"#"
    again = pack_archive(brain)
    assert again != first and load_archive(again).files[path] == bytes(content)


def reference_cuts(content: bytes) -> list[int]:
    """The cuts as first written (one pass over every cut point): `_cuts` and `_recut` must agree."""
    cuts = [0]
    head = content.find(b'\n    "', 0, archive._MIN_PIECE)
    if head >= 0:
        cuts.append(head + 1)
    for match in archive._BIG_CUT.finditer(content, cuts[-1]):
        start = match.start() + 1
        while start - cuts[-1] > archive._MAX_PIECE:
            cuts.append(archive._forced_cut(content, cuts[-1]))
        if start - cuts[-1] >= archive._MIN_PIECE:
            cuts.append(start)
    while len(content) - cuts[-1] > archive._MAX_PIECE:
        cuts.append(archive._forced_cut(content, cuts[-1]))
    return cuts


def json_like(rnd: random.Random, entries: int) -> list[bytes]:
    """Entries of a map two levels deep, as dump_json writes index.json (a cut point every ~32)."""
    return [
        f'    "mem_2026{rnd.randint(1, 12):02d}{rnd.randint(1, 28):02d}_{rnd.getrandbits(24):06x}": {{\n'
        f'      "title": "{"x" * rnd.randint(0, 400)}",\n      "n": {rnd.randint(0, 9)}\n    }}'.encode()
        for _ in range(entries)
    ]


def edit(rnd: random.Random, lines: list[bytes]) -> None:
    action = rnd.choice(["replace", "insert", "delete", "append", "touch_key", "blob", "same_length"])
    at = rnd.randrange(len(lines))
    if action == "replace":
        lines[at] = json_like(rnd, 1)[0]
    elif action == "insert":
        lines[at:at] = json_like(rnd, rnd.randint(1, 40))
    elif action == "delete":
        del lines[at : at + rnd.randint(1, 40)]
    elif action == "append":
        lines += json_like(rnd, rnd.randint(1, 3))
    elif action == "touch_key":  # the bytes right after a cut point: its id
        lines[at] = lines[at][:12] + bytes([lines[at][12] ^ 1]) + lines[at][13:]
    elif action == "blob":  # a long stretch without cut points: forced cuts
        lines.insert(at, b"    " + b"y" * rnd.randint(1, 3 * archive._MAX_PIECE))
    else:
        line = bytearray(lines[at])
        line[rnd.randrange(len(line))] = ord("z")
        lines[at] = bytes(line)


@pytest.mark.parametrize("seed", range(6))
def test_recut_finds_the_cuts_of_a_cold_pass_and_only_unchanged_pieces(seed: int) -> None:
    rnd = random.Random(seed)
    lines = json_like(rnd, 3000)
    content = b"{\n  \"memories\": {\n" + b",\n".join(lines) + b"\n  }\n}\n"
    bounds = [*archive._cuts(content), len(content)]
    assert archive._cuts(content) == reference_cuts(content)
    run = archive._BigRun(archive._ROOT, content, [
        (start, end, archive._Part(content[start:end]).sums) for start, end in zip(bounds, bounds[1:])
    ])
    reused = 0
    for _ in range(12):
        for _ in range(rnd.randint(1, 4)):
            edit(rnd, lines)
        content = b"{\n  \"memories\": {\n" + b",\n".join(lines) + b"\n  }\n}\n"
        plan = archive._recut(content, run)
        expected = reference_cuts(content)
        assert [start for start, _, _ in plan] == expected
        assert plan[-1][1] == len(content)
        for start, end, sums in plan:
            if sums is not None:
                reused += 1
                assert sums == archive._Part(content[start:end]).sums
        run = archive._BigRun(archive._ROOT, content, [
            (start, end, sums or archive._Part(content[start:end]).sums) for start, end, sums in plan
        ])
    assert reused > 200


def test_a_piece_that_ended_at_a_forced_cut_is_not_taken_when_a_cut_point_appears_after_it() -> None:
    """A forced cut depends on what lies beyond it (no cut point up to _MAX_PIECE): a piece
    ending there is not reusable on its own bytes alone."""
    rnd = random.Random(7)
    head = b",\n".join(json_like(rnd, 400)) + b",\n" + b"    " + b"w" * archive._MIN_PIECE + b",\n"
    marker = b'    "mem_20260101_aaaa00": 1,\n'  # a cut point (its id ends in 00)
    half = archive._MAX_PIECE // 2
    stretch = b"    " + b"y" * (half + 1000) + b"\n" + b"z" * archive._MAX_PIECE + b"\n"
    old = head + marker + stretch + marker.replace(b"aaaa00", b"bbbb00")
    bounds = [*archive._cuts(old), len(old)]
    cut_at_marker = old.index(marker)
    assert cut_at_marker in bounds
    forced = bounds[bounds.index(cut_at_marker) + 1]
    assert old[forced - 1 : forced] == b"\n" and forced < cut_at_marker + archive._MAX_PIECE
    run = archive._BigRun(archive._ROOT, old, [
        (start, end, archive._Part(old[start:end]).sums) for start, end in zip(bounds, bounds[1:])
    ])
    # Same length, same bytes up to well past the forced cut; then a cut point before _MAX_PIECE.
    at = cut_at_marker + half + 1000 + 200_000
    new = old[:at] + b'\n    "mem_20260101_cccc00"' + old[at + 26 :]
    assert len(new) == len(old) and reference_cuts(new) != bounds[:-1]
    assert [start for start, _, _ in archive._recut(new, run)] == reference_cuts(new)


def test_entries_are_in_tar_order_when_built_and_when_files_are_added() -> None:
    """Entries sort as tuples of path components ("a/b" before "a-b"), also when the
    memo's entries get new files inserted."""
    names = ["a/b.md", "a-b.md", "a.md", "a/b/c.md", "a b/x.md", "é/x.md", "a0/x.md", "A/x.md", "a/b-c.md", "a/b/c-d/e.md"]
    brain = Brain({name: name.encode() for name in names[::2]})
    assert gzip.decompress(pack_archive(brain)) == _tarfile_written(brain)
    for name in names[1::2] + ["a-b/c.md", "a/b/c/d.md", "a.b/x.md", "b/a.md"]:
        brain = brain.copy()
        brain.files[name] = name.encode()
        assert gzip.decompress(pack_archive(brain)) == _tarfile_written(brain), name



@pytest.mark.parametrize("seed", range(4))
def test_the_top_of_a_big_file_is_a_piece_of_its_own(seed: int) -> None:
    """A memorize changes index.json's and search-index.json's counts at their top: the first
    piece ends before the first entry, so the entries after it keep their pieces."""
    rnd = random.Random(seed)
    memories = json_like(rnd, 800)

    def text() -> bytes:
        return (b'{\n  "version": 1,\n  "memory_count": ' + str(len(memories)).encode() + b',\n  "memories": {\n'
                + b",\n".join(memories) + b'\n  }\n}\n')

    content = text()
    bounds = [*archive._cuts(content), len(content)]
    assert bounds == [*reference_cuts(content), len(content)]
    assert bounds[1] == content.index(b'\n    "mem_') + 1
    run = archive._BigRun(archive._ROOT, content, [
        (start, end, archive._Part(content[start:end]).sums) for start, end in zip(bounds, bounds[1:])
    ])
    memories.append(json_like(rnd, 1)[0])
    content = text()
    plan = archive._recut(content, run)
    assert [start for start, _, _ in plan] == reference_cuts(content)
    rehashed = [(start, end) for start, end, sums in plan if sums is None]
    assert rehashed[0] == (0, bounds[1]) and all(start > len(content) // 2 for start, _ in rehashed[1:])
    assert sum(end - start for start, end in rehashed) < 0.1 * len(content)
