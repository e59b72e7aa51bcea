"""Archive and directory I/O: hostile input, determinism, round trips."""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from connector.engine.format.archive import (
    ArchiveError,
    ArchiveLimits,
    load_archive,
    load_directory,
    pack_archive,
    save_directory,
)
from connector.engine.format.brain import Brain
from tests.engine.conftest import fixture_brains


def make_tar(members: list[tuple[tarfile.TarInfo, bytes | None]], fmt: int = tarfile.GNU_FORMAT) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as archive:
        for info, content in members:
            archive.addfile(info, io.BytesIO(content) if content is not None else None)
    return gzip.compress(raw.getvalue())


def file_entry(name: str, content: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    return info, content


def special_entry(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


INDEX = file_entry("./index.json", b'{"version": 2, "memories": {}}\n')


def test_regular_files_and_prefixes() -> None:
    directory = tarfile.TarInfo("./personal")
    directory.type = tarfile.DIRTYPE
    brain = load_archive(
        make_tar([INDEX, (directory, None), file_entry("./personal/a.md", b"hello"), file_entry("b//./c.md", b"c")])
    )
    assert brain.files == {"index.json": INDEX[1], "personal/a.md": b"hello", "b/c.md": b"c"}


@pytest.mark.parametrize(
    "entry",
    [
        special_entry("./link.md", tarfile.SYMTYPE, "/etc/passwd"),
        special_entry("./hard.md", tarfile.LNKTYPE, "index.json"),
        special_entry("./dev", tarfile.CHRTYPE),
        special_entry("./blk", tarfile.BLKTYPE),
        special_entry("./fifo", tarfile.FIFOTYPE),
    ],
    ids=["symlink", "hardlink", "char-device", "block-device", "fifo"],
)
def test_special_entries_are_dropped(entry: tuple[tarfile.TarInfo, None]) -> None:
    brain = load_archive(make_tar([INDEX, entry]))
    assert set(brain.files) == {"index.json"}


@pytest.mark.parametrize(
    "name", ["/etc/passwd", "../escape.md", "./a/../../escape.md", "a/..", "a\\b.md"], ids=["absolute", "dotdot", "nested-dotdot", "trailing-dotdot", "backslash"]
)
def test_unsafe_names_are_refused(name: str) -> None:
    with pytest.raises(ArchiveError):
        load_archive(make_tar([INDEX, file_entry(name)]))


def test_symlink_then_file_through_it_never_escapes(tmp_path: Path) -> None:
    # Classic attack: a link to outside, then a file "through" it. We drop the link
    # and keep the file as an ordinary in-brain path; nothing touches the disk.
    data = make_tar([special_entry("./evil", tarfile.SYMTYPE, str(tmp_path)), file_entry("./evil/owned.md")])
    brain = load_archive(data)
    assert brain.files == {"evil/owned.md": b"x"}
    assert not (tmp_path / "owned.md").exists()


def test_too_many_entries() -> None:
    data = make_tar([file_entry(f"./m{i}.md") for i in range(30)])
    with pytest.raises(ArchiveError, match="entries"):
        load_archive(data, ArchiveLimits(max_entries=20))
    assert len(load_archive(data, ArchiveLimits(max_entries=30)).files) == 30


def test_inflate_bound_stops_a_bomb() -> None:
    bomb = make_tar([file_entry("./zeros.bin", bytes(8 * 1024 * 1024))])
    assert len(bomb) < 100_000
    with pytest.raises(ArchiveError, match="inflates"):
        load_archive(bomb, ArchiveLimits(max_inflated=1024 * 1024))


def test_declared_size_beyond_bound_is_refused_early() -> None:
    info = tarfile.TarInfo("./big.bin")
    info.size = 10 * 1024 * 1024
    raw = io.BytesIO()
    raw.write(info.tobuf(format=tarfile.GNU_FORMAT))
    with pytest.raises(ArchiveError):
        load_archive(gzip.compress(raw.getvalue()), ArchiveLimits(max_inflated=1024 * 1024))


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["gnu", "pax"])
def test_long_paths_are_refused(fmt: int) -> None:
    long_name = "./" + "/".join(["d" * 100] * 12) + "/x.md"
    with pytest.raises(ArchiveError, match="longer"):
        load_archive(make_tar([INDEX, file_entry(long_name)], fmt=fmt))


def test_sync_state_is_skipped() -> None:
    brain = load_archive(make_tar([INDEX, file_entry("./.sync/state.json"), file_entry(".cloud/x"), file_entry("./a/.sync/kept")]))
    assert set(brain.files) == {"index.json", "a/.sync/kept"}


@pytest.mark.parametrize(
    "data",
    [b"", b"not gzip at all", gzip.compress(b"not a tar" * 100), make_tar([INDEX, file_entry("./a.md", b"abc" * 1000)])[:-200]],
    ids=["empty", "garbage", "gzip-not-tar", "truncated"],
)
def test_garbage_is_a_clear_error(data: bytes) -> None:
    """People read the reason (the web app's and the tools' "could not be read safely (...)"): it
    said Python's class name, "(ReadError)", "(BadGzipFile)", "(EOFError)"."""
    with pytest.raises(ArchiveError) as refused:
        load_archive(data)
    said = str(refused.value)
    assert "archive" in said and not re.search(r"[a-z][A-Z]|EOF", said), said


def test_file_and_directory_conflict_is_refused() -> None:
    with pytest.raises(ArchiveError, match="both"):
        load_archive(make_tar([file_entry("./a"), file_entry("./a/b.md")]))


def test_stream_input() -> None:
    data = make_tar([INDEX])
    assert load_archive(io.BytesIO(data)).files == {"index.json": INDEX[1]}


def test_pack_is_deterministic_and_gnu_shaped() -> None:
    brain = Brain({"index.json": b"{}\n", "b/z.md": b"z", "a/b/c.md": b"c", "a/a.md": b"a", ".sync/x": b"s"})
    first = pack_archive(brain)
    assert pack_archive(brain.copy()) == first
    assert pack_archive(Brain(dict(reversed(list(brain.files.items()))))) == first
    with tarfile.open(fileobj=io.BytesIO(first), mode="r:gz") as archive:
        members = archive.getmembers()
    assert [m.name for m in members] == [".", "./a", "./a/a.md", "./a/b", "./a/b/c.md", "./b", "./b/z.md", "./index.json"]
    for member in members:
        assert (member.uid, member.gid, member.uname, member.gname) == (0, 0, "", "")
        assert member.mode == (0o755 if member.isdir() else 0o644)
        assert member.mtime == members[0].mtime
    assert first[4:8] == b"\0\0\0\0", "gzip header mtime is zero"
    assert load_archive(first).files == {k: v for k, v in brain.files.items() if not k.startswith(".sync/")}


def test_pack_refuses_unsafe_paths() -> None:
    with pytest.raises(ArchiveError):
        pack_archive(Brain({"../x": b"x"}))


@pytest.mark.parametrize("brain_dir", fixture_brains(), ids=lambda p: p.name)
def test_fixture_brain_round_trip(brain_dir: Path, tmp_path: Path) -> None:
    brain = load_directory(brain_dir)
    on_disk = {str(p.relative_to(brain_dir)): p.read_bytes() for p in brain_dir.rglob("*") if p.is_file()}
    assert brain.files == on_disk
    packed = pack_archive(brain)
    assert pack_archive(brain) == packed
    assert load_archive(packed).files == on_disk
    save_directory(load_archive(packed), tmp_path / "copy")
    assert load_directory(tmp_path / "copy").files == on_disk


def test_load_directory_ignores_links_and_sync(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    brain_dir = tmp_path / "brain"
    (brain_dir / "personal").mkdir(parents=True)
    (brain_dir / "index.json").write_text("{}")
    (brain_dir / "personal" / "a.md").write_text("a")
    (brain_dir / ".sync").mkdir()
    (brain_dir / ".sync" / "state").write_text("s")
    os.symlink(outside, brain_dir / "linked-dir")
    os.symlink(outside / "secret.md", brain_dir / "personal" / "linked.md")
    os.mkfifo(brain_dir / "pipe")
    assert load_directory(brain_dir).files == {"index.json": b"{}", "personal/a.md": b"a"}


def test_load_directory_bounds(tmp_path: Path) -> None:
    for i in range(10):
        (tmp_path / f"f{i}").write_bytes(b"x" * 100)
    with pytest.raises(ArchiveError):
        load_directory(tmp_path, ArchiveLimits(max_entries=5))
    with pytest.raises(ArchiveError):
        load_directory(tmp_path, ArchiveLimits(max_inflated=500))


def test_save_directory_never_writes_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.md").write_text("original")
    target = tmp_path / "brain"
    target.mkdir()
    os.symlink(outside, target / "personal")  # planted directory link
    os.symlink(outside / "victim.md", target / "index.json")  # planted file link
    with pytest.raises(ArchiveError):
        save_directory(Brain({"personal/victim.md": b"owned"}), target)
    save_directory(Brain({"index.json": b"{}"}), target)
    assert (outside / "victim.md").read_text() == "original"
    assert not (target / "index.json").is_symlink()
    assert (target / "index.json").read_bytes() == b"{}"
    for unsafe in ("../escape.md", "/abs.md", "a/../../escape.md"):
        with pytest.raises(ArchiveError):
            save_directory(Brain({unsafe: b"x"}), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["brain", "outside"]
    assert sorted(p.name for p in outside.iterdir()) == ["victim.md"]


def test_save_directory_replaces_and_removes(tmp_path: Path) -> None:
    target = tmp_path / "brain"
    save_directory(Brain({"index.json": b"1", "a/old.md": b"old"}), target)
    (target / ".sync").mkdir()
    (target / ".sync" / "state").write_text("keep")
    save_directory(Brain({"index.json": b"2", "_archived/a/old.md": b"old"}), target)
    assert load_directory(target).files == {"index.json": b"2", "_archived/a/old.md": b"old"}
    assert (target / ".sync" / "state").read_text() == "keep"
    assert oct((target / "index.json").stat().st_mode & 0o777) == oct(0o600)
    assert not [p for p in target.rglob("*.tmp")]


def _tarfile_written(brain: Brain) -> bytes:
    """The same entries written by tarfile itself (what pack_archive must equal)."""
    folders = {"/".join(p.split("/")[:i]) for p in brain.files for i in range(1, p.count("/") + 1)}
    entries = sorted([(tuple(p.split("/")), False) for p in brain.files] + [(tuple(d.split("/")), True) for d in folders])
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8") as archive:
        for name, is_dir in [(".", True)] + [("./" + "/".join(parts), is_dir) for parts, is_dir in entries]:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
            info.mode = 0o755 if is_dir else 0o644
            info.mtime = 946_684_800
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            content = b"" if is_dir else brain.files[name[2:]]
            info.size = len(content)
            archive.addfile(info, None if is_dir else io.BytesIO(content))
    return raw.getvalue()


def test_pack_equals_tarfile_output() -> None:
    brain = Brain({"a/" + "é" * 120 + "/x.md": b"x" * 513, "b.md": b"", "c.md": b"y" * 512, "d/e/f.md": b"f"})
    assert gzip.decompress(pack_archive(brain)) == _tarfile_written(brain)
    for brain_dir in fixture_brains()[:3]:
        loaded = load_directory(brain_dir)
        assert gzip.decompress(pack_archive(loaded)) == _tarfile_written(loaded)


@pytest.mark.skipif(shutil.which("tar") is None, reason="no system tar")
def test_reads_what_gnu_tar_writes(tmp_path: Path) -> None:
    """The command line pushes `tar -czf - -C brain .`: we read exactly its files."""
    brains = fixture_brains()
    if not brains:
        pytest.skip("no fixtures")
    archive = tmp_path / "brain.tar.gz"
    subprocess.run(["tar", "-czf", str(archive), "-C", str(brains[1]), "."], check=True, timeout=60)
    on_disk = {str(p.relative_to(brains[1])): p.read_bytes() for p in brains[1].rglob("*") if p.is_file()}
    assert load_archive(archive.read_bytes()).files == on_disk
