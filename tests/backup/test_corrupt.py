"""A corrupted or truncated backup is refused with a clear message and the target stays unchanged;
a non-empty target needs --force."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest
import zstandard

from tests.backup.support import KEY, archive, cli, registry, sealed_brain, tree


@pytest.fixture
def stores(tmp_path: Path) -> tuple[dict[str, str], dict[str, str], Path]:
    """A source store with a sealed brain and its backup, and a different, non-empty target store."""
    src = {"STORE_DATA_DIR": str(tmp_path / "src"), "STORE_ENCRYPTION_KEY": KEY}
    user, _ = registry(src).add("alice")
    sealed_brain(tmp_path / "src", KEY, user.id, archive({"a.md": b"one" * 5000}))
    sealed_brain(tmp_path / "src", KEY, user.id, archive({"b.md": b"two"}))
    backup = tmp_path / "good.backup"
    cli(src, "backup", "--to", str(backup))
    dst = {"STORE_DATA_DIR": str(tmp_path / "dst"), "STORE_ENCRYPTION_KEY": KEY}
    other, _ = registry(dst).add("carol")
    sealed_brain(tmp_path / "dst", KEY, other.id, archive({"c.md": b"carol"}))
    return src, dst, backup


def _rewrite(backup: Path, out: Path, change: dict[str, bytes]) -> None:
    """Copy the backup, replacing the content of some entries (the manifest is left as it was)."""
    data = zstandard.ZstdDecompressor().stream_reader(backup.read_bytes()).read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src, tarfile.open(fileobj=buf, mode="w:") as dst:
        for info in src.getmembers():
            body = change.get(info.name, src.extractfile(info).read())  # type: ignore[union-attr]
            info.size = len(body)
            dst.addfile(info, io.BytesIO(body))
    out.write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(buf.getvalue()))


def _corruptions(backup: Path, tmp: Path) -> dict[str, Path]:
    good = backup.read_bytes()
    cases: dict[str, bytes] = {
        "flipped byte": good[: len(good) // 2] + bytes([good[len(good) // 2] ^ 0x40]) + good[len(good) // 2 + 1 :],
        "truncated": good[: len(good) * 2 // 3],
        "cut before the manifest": good[:-40],
        "empty file": b"",
        "not a backup": b"hello world" * 10,
        "a brain archive": archive({"a.md": b"not a backup"}),
        "zstd of something else": zstandard.ZstdCompressor(write_checksum=True).compress(
            gzip.decompress(archive({"notes.md": b"hi"}))),  # a plain tar, not a backup
    }
    for offset in (0, 4, len(good) // 3, len(good) - 12, len(good) - 5):  # header, blocks, checksum
        cases[f"flipped byte at {offset}"] = good[:offset] + bytes([good[offset] ^ 0x01]) + good[offset + 1:]
    out = {}
    for name, data in cases.items():
        out[name] = tmp / (name.replace(" ", "-") + ".backup")
        out[name].write_bytes(data)
    wrong_sum = tmp / "wrong-manifest-sum.backup"
    _rewrite(backup, wrong_sum, {"manifest.sha256": b"0" * 64 + b"\n"})
    out["wrong manifest checksum"] = wrong_sum
    # an archive swapped for other bytes, with the manifest untouched
    with tarfile.open(fileobj=io.BytesIO(zstandard.ZstdDecompressor().stream_reader(good).read())) as tar:
        blob = next(m.name for m in tar.getmembers() if "/blobs/" in m.name)
    swapped = tmp / "swapped-archive.backup"
    _rewrite(backup, swapped, {blob: b"BSTSEAL\x00" + b"x" * 100})
    out["swapped archive"] = swapped
    return out


def test_corrupt_backups_are_refused_and_change_nothing(stores: tuple, tmp_path: Path) -> None:
    _, dst, backup = stores
    target = Path(dst["STORE_DATA_DIR"])
    before = tree(target)
    for name, path in _corruptions(backup, tmp_path).items():
        done = cli(dst, "restore", "--from", str(path), "--force", check=False)
        assert done.returncode != 0, name
        # one clear last line, no traceback
        assert done.stderr.strip().splitlines()[-1].startswith("Error: restore refused: "), (name, done.stderr)
        assert done.stderr.count("Error") == 1 and "Traceback" not in done.stderr, (name, done.stderr)
        assert tree(target) == before, name
    # a refused backup does not even create an empty target
    fresh = {**dst, "STORE_DATA_DIR": str(tmp_path / "fresh")}
    assert cli(fresh, "restore", "--from", str(tmp_path / "flipped-byte.backup"), check=False).returncode != 0
    assert not (tmp_path / "fresh").exists()
    # the untouched backup does go through
    cli(dst, "restore", "--from", str(backup), "--force")
    assert tree(target) != before


def test_non_empty_target_needs_force(stores: tuple) -> None:
    src, dst, backup = stores
    target = Path(dst["STORE_DATA_DIR"])
    before = tree(target)
    done = cli(dst, "restore", "--from", str(backup), check=False)
    assert done.returncode != 0 and "not empty" in done.stderr and "--force" in done.stderr
    assert tree(target) == before
    done = cli(dst, "restore", "--from", str(backup), "--force")
    assert "1 other brain(s) removed" in done.stderr
    # the target now equals the source: same users file, same brains and blobs
    source = tree(Path(src["STORE_DATA_DIR"]))
    restored = tree(target)
    assert restored["users.json"] == source["users.json"]
    assert {k for k in restored if "/blobs/" in k} == {k for k in source if "/blobs/" in k}


def test_flipped_byte_inside_a_large_archive_is_one_line(tmp_path: Path) -> None:
    """Issue 24 item 10: the damage is found while an archive's bytes are read (a zstd checksum or
    corruption error deep in the stream), still one line, nothing changed, no traceback."""
    import os

    src = {"STORE_DATA_DIR": str(tmp_path / "src"), "STORE_ENCRYPTION_KEY": KEY}
    user, _ = registry(src).add("alice")
    sealed_brain(tmp_path / "src", KEY, user.id, archive({"random.md": os.urandom(300_000).hex().encode()}))
    backup = tmp_path / "big.backup"
    cli(src, "backup", "--to", str(backup))
    good = backup.read_bytes()
    for offset in (len(good) - 3, len(good) - 1000, len(good) - 5000):
        damaged = tmp_path / f"flipped-{offset}.backup"
        damaged.write_bytes(good[:offset] + bytes([good[offset] ^ 0x01]) + good[offset + 1:])
        target = {**src, "STORE_DATA_DIR": str(tmp_path / f"dst-{offset}")}
        done = cli(target, "restore", "--from", str(damaged), check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("Error: restore refused: "), done.stderr
        assert not (tmp_path / f"dst-{offset}").exists()
